//! Record and replay (README "Record and replay") as [`ModelApi`] wrappers. `--record DIR` keeps
//! every exchange of a run as cassettes, `DIR/<step>/<hash>.json`, keyed by the step and a hash of
//! the request; `--replay DIR` answers from them with no network and no key. A cassette is plain,
//! pretty JSON: the request (as hashed) and the replies, in the order they came, for a reviewer to
//! read and diff.
//!
//! What changes between two runs of the same pipeline without changing what is asked is taken
//! out before hashing: the step's directory (a worktree's path holds the run id), today's date,
//! and the seconds in a subagent's facts line.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use camino::{Utf8Path, Utf8PathBuf};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::error::ProviderError;
use super::format::body::Wire;
use super::message::{ChatRequest, ChatResponse};
use super::{Exchange, ModelApi, Outgoing};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Record,
    Replay,
}

/// One request and what came back for it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Cassette {
    step: String,
    /// The request as hashed: paths and dates replaced by placeholders.
    request: Value,
    /// Replies in order: the same request asked again in the step gets the next one.
    replies: Vec<Reply>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reply {
    response: ChatResponse,
    /// The body as the API sent it (what transcripts show).
    raw: Value,
}

/// The cassettes of a run, shared by every step.
#[derive(Debug)]
pub struct Tapes {
    mode: Mode,
    dir: Utf8PathBuf,
    /// The run's id, which branch names and state paths in requests hold.
    run_id: String,
    /// Loaded or written cassettes, by file, and how many replies each has given (replay).
    open: Mutex<BTreeMap<Utf8PathBuf, (Cassette, usize)>>,
}

impl Tapes {
    pub fn new(mode: Mode, dir: Utf8PathBuf, run_id: &str) -> Self {
        Self {
            mode,
            dir,
            run_id: run_id.to_owned(),
            open: Mutex::new(BTreeMap::new()),
        }
    }

    /// Where the cassettes are: tools do not see it, so a run reads the same tree whether
    /// it records or replays.
    pub fn dir(&self) -> &Utf8Path {
        &self.dir
    }

    pub fn replaying(&self) -> bool {
        self.mode == Mode::Replay
    }

    /// The API of one step (and its subagents), working in `roots`.
    /// `wire` is the provider's, so a replayed request is written (and digested) as the
    /// recorded one was.
    pub fn wrap(
        self: &Arc<Self>,
        inner: Option<Arc<dyn ModelApi>>,
        wire: Wire,
        step: &str,
        roots: Vec<String>,
    ) -> Arc<dyn ModelApi> {
        Arc::new(Taped {
            tapes: self.clone(),
            inner,
            wire,
            step: step.to_owned(),
            roots,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Utf8PathBuf, (Cassette, usize)>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct Taped {
    tapes: Arc<Tapes>,
    /// The real API (none when replaying).
    inner: Option<Arc<dyn ModelApi>>,
    wire: Wire,
    step: String,
    /// The step's directories, as they appear in requests.
    roots: Vec<String>,
}

/// The request with what differs between equal runs replaced by placeholders.
pub fn normalize(request: &ChatRequest, roots: &[String], run_id: &str) -> Value {
    let mut text = serde_json::to_string(request).unwrap_or_default();
    // A worktree step's branch (`runner/<run id>/<step>`) reaches the prompts after it; the
    // run id is new every run.
    if !run_id.is_empty() {
        text = text
            .replace(&format!("runner/{run_id}/"), "runner/<run>/")
            .replace(&format!("runs/{run_id}"), "runs/<run>");
    }
    // Longest first, so a worktree inside the working directory is replaced whole.
    let mut roots: Vec<&String> = roots.iter().filter(|r| r.len() > 1).collect();
    roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
    for root in roots {
        text = text.replace(root.as_str(), "<workdir>");
    }
    text = replace_after(&text, "Today's date: ", 10, "<date>");
    text = facts_time(&text);
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// Replaces the `len` characters after each `marker` with `placeholder`.
fn replace_after(text: &str, marker: &str, len: usize, placeholder: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        let (before, after) = rest.split_at(at + marker.len());
        out.push_str(before);
        let cut = after
            .char_indices()
            .nth(len)
            .map_or(after.len(), |(i, _)| i);
        out.push_str(placeholder);
        rest = &after[cut..];
    }
    out.push_str(rest);
    out
}

/// `[agent explore#2 · 3 tool calls · 1.2s · 4.1k tokens]` without its seconds.
fn facts_time(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("[agent ") {
        let (before, after) = rest.split_at(at);
        out.push_str(before);
        let end = after.find(']').map_or(after.len(), |e| e + 1);
        let facts: Vec<String> = after[..end]
            .split(" · ")
            .map(|part| {
                let seconds = part.strip_suffix('s').is_some_and(|n| {
                    !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.')
                });
                if seconds {
                    "<time>".to_owned()
                } else {
                    part.to_owned()
                }
            })
            .collect();
        out.push_str(&facts.join(" · "));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// A step id as a directory name: ids are plain already, this keeps it so.
fn safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl Taped {
    fn cassette_path(&self, normalized: &Value) -> Utf8PathBuf {
        let digest = Sha256::digest(serde_json::to_vec(normalized).unwrap_or_default());
        let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        self.tapes
            .dir
            .join(safe(&self.step))
            .join(format!("{hash}.json"))
    }

    fn replay(&self, normalized: &Value) -> Result<Exchange, ProviderError> {
        let path = self.cassette_path(normalized);
        let mut open = self.tapes.lock();
        if !open.contains_key(&path) {
            let cassette = read(&path).map_err(|why| ProviderError::Tape {
                message: format!(
                    "step `{}` sent a request that was not recorded: {why} (its cassettes are in `{}`); the prompt, a tool result or the model changed since `--record`",
                    self.step,
                    self.tapes.dir.join(safe(&self.step))
                ),
            })?;
            open.insert(path.clone(), (cassette, 0));
        }
        let Some((cassette, used)) = open.get_mut(&path) else {
            return Err(ProviderError::Tape {
                message: format!("cassette `{path}` went missing"),
            });
        };
        // Asked more often than recorded: the last reply again.
        let reply = cassette
            .replies
            .get(*used)
            .or_else(|| cassette.replies.last())
            .cloned()
            .ok_or_else(|| ProviderError::Tape {
                message: format!("cassette `{path}` has no replies"),
            })?;
        *used += 1;
        Ok(Exchange {
            response: reply.response,
            raw: reply.raw.into(),
        })
    }

    fn record(&self, normalized: Value, exchange: &Exchange) -> Result<(), ProviderError> {
        let path = self.cassette_path(&normalized);
        let mut open = self.tapes.lock();
        let (cassette, _) = open.entry(path.clone()).or_insert_with(|| {
            (
                Cassette {
                    step: self.step.clone(),
                    request: normalized,
                    replies: Vec::new(),
                },
                0,
            )
        });
        cassette.replies.push(Reply {
            response: exchange.response.clone(),
            raw: exchange.raw.to_value(),
        });
        write(&path, cassette).map_err(|err| ProviderError::Tape {
            message: format!("cannot write cassette `{path}`: {err}"),
        })
    }
}

fn read(path: &Utf8Path) -> Result<Cassette, String> {
    let text = crate::limits::read_text(path, crate::limits::MAX_RESPONSE_BYTES as u64)
        .map_err(|err| format!("no cassette `{path}` ({err})"))?;
    serde_json::from_str(&text).map_err(|err| format!("cassette `{path}` is not valid: {err}"))
}

/// Written whole and renamed into place, so an interrupted run leaves no half cassette. The
/// temporary file is made new in the cassette's own folder (`O_EXCL`, a fresh random name), so a
/// link planted where a cassette or its temporary file would go is replaced, never followed; a
/// step's folder that is a link is refused.
fn write(path: &Utf8Path, cassette: &Cassette) -> std::io::Result<()> {
    use std::io::Write as _;
    let parent = path.parent().unwrap_or(Utf8Path::new("."));
    std::fs::create_dir_all(parent)?;
    if parent.symlink_metadata()?.file_type().is_symlink() {
        return Err(std::io::Error::other(format!(
            "`{parent}` is a symbolic link; cassettes are only written into real folders"
        )));
    }
    let text = crate::secrets::redact_owned(
        serde_json::to_string_pretty(cassette).map_err(std::io::Error::other)?,
    );
    let mut tmp = tempfile::Builder::new()
        .prefix(".cassette-")
        .suffix(".tmp")
        .tempfile_in(parent)?;
    tmp.write_all(text.as_bytes())?;
    tmp.write_all(b"\n")?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

impl ModelApi for Taped {
    fn endpoint(&self) -> String {
        match (&self.tapes.mode, &self.inner) {
            (Mode::Replay, _) | (_, None) => format!("replay from {}", self.tapes.dir),
            (Mode::Record, Some(inner)) => inner.endpoint(),
        }
    }

    fn wire(&self) -> Wire {
        self.inner.as_ref().map_or(self.wire, |inner| inner.wire())
    }

    fn send<'a>(&'a self, request: Outgoing<'a>) -> BoxFuture<'a, Result<Exchange, ProviderError>> {
        Box::pin(async move {
            let normalized = normalize(request.request, &self.roots, &self.tapes.run_id);
            match (&self.tapes.mode, &self.inner) {
                (Mode::Record, Some(inner)) => {
                    let exchange = inner.send_streaming(request, &|_| {}).await?;
                    self.record(normalized, &exchange)?;
                    Ok(exchange)
                }
                _ => self.replay(&normalized),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::message::Message;

    fn request(text: &str) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            system: "s".into(),
            messages: vec![Message::user_text(text)],
            tools: Vec::new(),
            max_tokens: 10,
        }
    }

    #[test]
    fn what_differs_between_equal_runs_is_not_hashed() {
        let a = normalize(
            &request(
                "Working directory: /tmp/a/wt\nToday's date: 2026-12-02\n[agent explore#1 · 2 tool calls · 1.3s · 190 tokens]\nbranch runner/20261202T101010000-ab12/implement",
            ),
            &["/tmp/a".into(), "/tmp/a/wt".into()],
            "20261202T101010000-ab12",
        );
        let b = normalize(
            &request(
                "Working directory: /srv/b/wt\nToday's date: 2027-01-09\n[agent explore#1 · 2 tool calls · 12.0s · 190 tokens]\nbranch runner/20270109T090909999-ffff/implement",
            ),
            &["/srv/b/wt".into()],
            "20270109T090909999-ffff",
        );
        assert_eq!(a, b);
        let text = a["messages"][0]["content"][0]["text"].as_str().unwrap();
        assert_eq!(
            text,
            "Working directory: <workdir>\nToday's date: <date>\n[agent explore#1 · 2 tool calls · <time> · 190 tokens]\nbranch runner/<run>/implement"
        );
        let c = normalize(
            &request("Working directory: /tmp/a/wt\nsomething else"),
            &[],
            "",
        );
        assert_ne!(a, c);
    }
}
