//! Record and replay (docs/src/ci.md "Record and replay") as [`ModelApi`] wrappers. `--record DIR` keeps
//! every exchange of a run as cassettes, `DIR/<step>/<hash>.json`, keyed by the step and a hash of
//! the request; `--replay DIR` answers from them with no network and no key. A cassette is plain,
//! pretty JSON: the request (as hashed) and the replies, in the order they came, for a reviewer to
//! read and diff.
//!
//! The order lives beside them, in `DIR/<step>/index.json`: for each conversation of the step
//! (the step's own, and each subagent's by its id), which cassette and reply answered its first
//! request, its second, and so on. A replay answers request N of a conversation with entry N and
//! checks the request against the recorded one: a difference (a timing in a test's output) is
//! still answered and reported as drift (`replay_drift`), or refused with `--replay-strict`.
//! Cassettes recorded before the index existed are still found by their hash.
//!
//! A request is hashed, written and compared redacted (every secret of the run hidden, see
//! [`crate::secrets`]): a cassette, meant to be committed, never holds a secret, and a replay
//! compares what it would send, redacted, with what was recorded, redacted. Cassettes are
//! written through the confined writer ([`crate::out::OutDir`]): no link is followed.
//!
//! What changes between two runs of the same pipeline without changing what is asked is taken
//! out before hashing: the step's directory (a worktree's path holds the run id), today's date,
//! and the seconds in a subagent's facts line. The directory and run id are taken out of
//! recorded replies too (a real model quotes its working directory), and put back as this run's
//! when replayed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use camino::{Utf8Path, Utf8PathBuf};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::error::ProviderError;
use super::format::body::{Body, Wire};
use super::message::{ChatRequest, ChatResponse};
use super::{Exchange, ModelApi, Outgoing};
use crate::event::{Emitter, EventKind};

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

/// The order a step's requests were recorded in: `index.json` beside its cassettes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Index {
    /// By conversation: [`STEP_CONVERSATION`] for the step's own, a subagent's id for its.
    conversations: BTreeMap<String, Vec<Entry>>,
}

/// Which reply of which cassette answered one request.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    cassette: String,
    reply: usize,
}

/// The index's name for the step's own conversation (subagent ids always hold a `#`).
const STEP_CONVERSATION: &str = "step";
const INDEX_FILE: &str = "index.json";

/// Characters of each side a drift report shows around the first difference.
const DRIFT_CONTEXT: usize = 40;

/// The cassettes of a run, shared by every step.
#[derive(Debug)]
pub struct Tapes {
    mode: Mode,
    dir: Utf8PathBuf,
    /// The run's id, which branch names and state paths in requests hold.
    run_id: String,
    /// `--replay-strict`: a request that differs from its recording fails its step.
    strict: bool,
    /// Where cassettes are written (`--record`), opened through no link.
    out: Option<crate::out::OutDir>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Loaded or written cassettes, by file, and how many replies each has given (replay by
    /// hash, for cassettes without an index).
    open: BTreeMap<Utf8PathBuf, (Cassette, usize)>,
    /// Each step folder's index: read once when replaying (`None`: it has none), built up when
    /// recording.
    indexes: BTreeMap<String, Option<Index>>,
    /// Requests each conversation has sent so far, by step folder and conversation.
    sent: BTreeMap<(String, String), usize>,
}

impl Tapes {
    pub fn new(mode: Mode, dir: Utf8PathBuf, run_id: &str) -> Self {
        Self {
            mode,
            dir,
            run_id: run_id.to_owned(),
            strict: false,
            out: None,
            state: Mutex::new(State::default()),
        }
    }

    /// Where `--record` writes: the cassette folder, opened by the confined writer.
    pub fn writing_to(mut self, out: crate::out::OutDir) -> Self {
        self.out = Some(out);
        self
    }

    /// Makes drift an error (`--replay-strict`).
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Where the cassettes are: tools do not see it, so a run reads the same tree whether
    /// it records or replays.
    pub fn dir(&self) -> &Utf8Path {
        &self.dir
    }

    pub fn replaying(&self) -> bool {
        self.mode == Mode::Replay
    }

    /// The API of one conversation: a step's own, or one of its subagents' (`events` says
    /// which, and hears of drift), working in `roots`. `wire` is the provider's, so a replayed
    /// request is written (and digested) as the recorded one was.
    pub fn wrap(
        self: &Arc<Self>,
        inner: Option<Arc<dyn ModelApi>>,
        provider: Option<&super::ProviderSpec>,
        events: &Emitter,
        roots: Vec<String>,
    ) -> Arc<dyn ModelApi> {
        Arc::new(Taped {
            tapes: self.clone(),
            inner,
            wire: provider.map_or(Wire::Anthropic, super::ProviderSpec::wire),
            step: events.step().to_owned(),
            conversation: events.agent().unwrap_or(STEP_CONVERSATION).to_owned(),
            events: events.clone(),
            roots,
        })
    }

    /// What `--record` wrote so far: cassettes, the requests they answer, and the steps they
    /// are of (all zero when replaying).
    pub fn written(&self) -> (usize, usize, usize) {
        if self.mode != Mode::Record {
            return (0, 0, 0);
        }
        let state = self.lock();
        let requests = state.open.values().map(|(c, _)| c.replies.len()).sum();
        (state.open.len(), requests, state.indexes.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct Taped {
    tapes: Arc<Tapes>,
    /// The real API (none when replaying).
    inner: Option<Arc<dyn ModelApi>>,
    wire: Wire,
    step: String,
    /// [`STEP_CONVERSATION`], or the subagent's id.
    conversation: String,
    events: Emitter,
    /// The step's directories, as they appear in requests; the first is where it works.
    roots: Vec<String>,
}

/// The request, redacted, with what differs between equal runs replaced by placeholders.
pub fn normalize(request: &ChatRequest, roots: &[String], run_id: &str) -> Value {
    let text = crate::secrets::redact_owned(serde_json::to_string(request).unwrap_or_default());
    let mut text = placeholders(text, roots, run_id);
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

/// The directory and run id of this run in `text`, as placeholders; longest root first, so a
/// worktree inside the working directory is replaced whole.
fn placeholders(mut text: String, roots: &[String], run_id: &str) -> String {
    // A worktree step's branch (`runner/<run id>/<step>`) reaches the prompts after it; the
    // run id is new every run.
    if !run_id.is_empty() {
        text = text
            .replace(&format!("runner/{run_id}/"), "runner/<run>/")
            .replace(&format!("runs/{run_id}"), "runs/<run>");
    }
    let mut roots: Vec<&String> = roots.iter().filter(|r| r.len() > 1).collect();
    roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
    for root in roots {
        text = text.replace(root.as_str(), "<workdir>");
    }
    text
}

/// A recorded reply with this run's directory and run id in place of the placeholders.
fn restored<T: Serialize + serde::de::DeserializeOwned>(
    value: &T,
    root: &str,
    run_id: &str,
) -> Option<T> {
    let text = serde_json::to_string(value).ok()?;
    if !text.contains("<workdir>") && !text.contains("<run>") {
        return None;
    }
    // Inside JSON strings: the root is escaped as JSON would write it.
    let root = serde_json::to_string(root).ok()?;
    let root = &root[1..root.len() - 1];
    let text = text
        .replace("<workdir>", root)
        .replace("runner/<run>/", &format!("runner/{run_id}/"))
        .replace("runs/<run>", &format!("runs/{run_id}"));
    serde_json::from_str(&text).ok()
}

/// A recorded reply with the directory and run id taken out.
fn generalized<T: Serialize + serde::de::DeserializeOwned>(
    value: &T,
    roots: &[String],
    run_id: &str,
) -> Option<T> {
    let text = serde_json::to_string(value).ok()?;
    // Roots as JSON writes them inside a string (a Windows-style backslash would be doubled).
    let escaped: Vec<String> = roots
        .iter()
        .filter_map(|r| serde_json::to_string(r).ok())
        .map(|r| r[1..r.len() - 1].to_owned())
        .collect();
    serde_json::from_str(&placeholders(text, &escaped, run_id)).ok()
}

/// Where two requests first differ, with a little of each side: what a drift line shows.
pub fn first_difference(recorded: &Value, sent: &Value) -> String {
    let recorded = serde_json::to_string(recorded).unwrap_or_default();
    let sent = serde_json::to_string(sent).unwrap_or_default();
    let at = recorded
        .char_indices()
        .zip(sent.chars())
        .find(|((_, a), b)| a != b)
        .map_or(recorded.len().min(sent.len()), |((i, _), _)| i);
    let around = |text: &str| {
        let mut start = at.saturating_sub(DRIFT_CONTEXT / 2);
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let shown: String = text[start.min(text.len())..]
            .chars()
            .take(DRIFT_CONTEXT)
            .collect();
        let more = if start + shown.len() < text.len() {
            "…"
        } else {
            ""
        };
        let less = if start > 0 { "…" } else { "" };
        format!("`{less}{}{more}`", crate::terminal::clean(&shown))
    };
    format!(
        "first difference at character {at}: recorded {}, sent {}",
        around(&recorded),
        around(&sent)
    )
}

impl Taped {
    fn folder(&self) -> String {
        safe(&self.step)
    }

    fn cassette_path(&self, normalized: &Value) -> Utf8PathBuf {
        let digest = Sha256::digest(serde_json::to_vec(normalized).unwrap_or_default());
        let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        self.tapes
            .dir
            .join(self.folder())
            .join(format!("{hash}.json"))
    }

    fn tape_error(message: String) -> ProviderError {
        ProviderError::Tape { message }
    }

    fn load<'s>(
        &self,
        state: &'s mut State,
        path: &Utf8Path,
    ) -> Result<&'s mut (Cassette, usize), ProviderError> {
        if !state.open.contains_key(path) {
            let cassette = read(&self.tapes.dir, path).map_err(|why| {
                Self::tape_error(format!(
                    "step `{}` sent a request that was not recorded: {why} (its cassettes are in `{}`); the prompt, a tool result or the model changed since `--record`",
                    self.step,
                    self.tapes.dir.join(self.folder())
                ))
            })?;
            state.open.insert(path.to_owned(), (cassette, 0));
        }
        state
            .open
            .get_mut(path)
            .ok_or_else(|| Self::tape_error(format!("cassette `{path}` went missing")))
    }

    fn replay(&self, normalized: &Value) -> Result<Exchange, ProviderError> {
        let folder = self.folder();
        let mut state = self.tapes.lock();
        let state = &mut *state;
        let index = state
            .indexes
            .entry(folder.clone())
            .or_insert_with(|| {
                read_index(
                    &self.tapes.dir,
                    &self.tapes.dir.join(&folder).join(INDEX_FILE),
                )
            })
            .clone();
        let number = {
            let sent = state
                .sent
                .entry((folder.clone(), self.conversation.clone()))
                .or_insert(0);
            *sent += 1;
            *sent
        };
        let reply = match index {
            Some(index) => self.replay_in_order(state, &index, number, normalized)?,
            None => self.replay_by_hash(state, normalized)?,
        };
        let root = self.roots.first().map_or("", String::as_str);
        let run_id = &self.tapes.run_id;
        Ok(Exchange {
            response: restored(&reply.response, root, run_id).unwrap_or(reply.response),
            raw: restored(&reply.raw, root, run_id)
                .unwrap_or(reply.raw)
                .into(),
        })
    }

    /// Request `number` (from 1) of this conversation, answered by its entry in the index.
    fn replay_in_order(
        &self,
        state: &mut State,
        index: &Index,
        number: usize,
        normalized: &Value,
    ) -> Result<Reply, ProviderError> {
        let folder = self.tapes.dir.join(self.folder());
        let recorded = index
            .conversations
            .get(&self.conversation)
            .map_or(&[][..], Vec::as_slice);
        let Some(entry) = recorded.get(number - 1) else {
            let whose = if self.conversation == STEP_CONVERSATION {
                String::new()
            } else {
                format!(" (subagent `{}`)", self.conversation)
            };
            return Err(Self::tape_error(format!(
                "step `{}`{whose} sent request {number}, but only {} were recorded (its cassettes are in `{folder}`); the step went further than when it was recorded",
                self.step,
                recorded.len()
            )));
        };
        let path = folder.join(&entry.cassette);
        let (cassette, _) = self.load(state, &path)?;
        let reply = cassette.replies.get(entry.reply).cloned().ok_or_else(|| {
            Self::tape_error(format!(
                "cassette `{path}` has no reply {} (the index `{folder}/{INDEX_FILE}` names it)",
                entry.reply + 1
            ))
        })?;
        if &cassette.request != normalized {
            let difference = first_difference(&cassette.request, normalized);
            if self.tapes.strict {
                return Err(Self::tape_error(format!(
                    "step `{}` request {number} differs from its recording (`--replay-strict`): {difference}",
                    self.step
                )));
            }
            self.events.emit(EventKind::ReplayDrift {
                step: self.step.clone(),
                request: number as u32,
                difference,
            });
        }
        Ok(reply)
    }

    /// Cassettes recorded before the index: the reply of the cassette with the request's hash.
    fn replay_by_hash(
        &self,
        state: &mut State,
        normalized: &Value,
    ) -> Result<Reply, ProviderError> {
        let path = self.cassette_path(normalized);
        let (cassette, used) = self.load(state, &path)?;
        // Asked more often than recorded: the last reply again.
        let reply = cassette
            .replies
            .get(*used)
            .or_else(|| cassette.replies.last())
            .cloned()
            .ok_or_else(|| Self::tape_error(format!("cassette `{path}` has no replies")))?;
        *used += 1;
        Ok(reply)
    }

    fn record(&self, normalized: Value, exchange: &Exchange) -> Result<(), ProviderError> {
        let path = self.cassette_path(&normalized);
        let folder = self.folder();
        let run_id = &self.tapes.run_id;
        let response = generalized(&exchange.response, &self.roots, run_id)
            .unwrap_or_else(|| exchange.response.clone());
        let raw = exchange.raw.to_value();
        let raw = generalized(&raw, &self.roots, run_id).unwrap_or(raw);
        let mut state = self.tapes.lock();
        let state = &mut *state;
        let (cassette, _) = state.open.entry(path.clone()).or_insert_with(|| {
            (
                Cassette {
                    step: self.step.clone(),
                    request: normalized,
                    replies: Vec::new(),
                },
                0,
            )
        });
        cassette.replies.push(Reply { response, raw });
        let entry = Entry {
            cassette: path.file_name().unwrap_or_default().to_owned(),
            reply: cassette.replies.len() - 1,
        };
        let out =
            self.tapes.out.as_ref().ok_or_else(|| {
                Self::tape_error("the cassette folder is not open to write".into())
            })?;
        write(out, &folder, &entry.cassette, cassette)
            .map_err(|err| Self::tape_error(format!("cannot write a cassette: {err}")))?;
        let index = state
            .indexes
            .entry(folder.clone())
            .or_insert_with(|| Some(Index::default()))
            .get_or_insert_with(Index::default);
        index
            .conversations
            .entry(self.conversation.clone())
            .or_default()
            .push(entry);
        write(out, &folder, INDEX_FILE, index)
            .map_err(|err| Self::tape_error(format!("cannot write the cassettes' index: {err}")))
    }
}

/// A file of the cassette directory `dir`, read through the confined opener the tools use: a
/// cassette that is a link out of the directory (to `/proc/self/environ`, a file of the user's)
/// is refused (docs/src/security.md: one way in).
fn read_in(dir: &Utf8Path, path: &Utf8Path) -> Result<String, String> {
    let relative = path
        .strip_prefix(dir)
        .map_err(|_| format!("`{path}` is outside `{dir}`"))?;
    let ws = crate::tools::confine::Workspace::new(dir).map_err(|err| err.to_string())?;
    ws.read_text(relative.as_str(), crate::limits::MAX_RESPONSE_BYTES as u64)
}

/// A step folder's index; `None` when it has none (cassettes recorded before the index).
fn read_index(dir: &Utf8Path, path: &Utf8Path) -> Option<Index> {
    serde_json::from_str(&read_in(dir, path).ok()?).ok()
}

fn read(dir: &Utf8Path, path: &Utf8Path) -> Result<Cassette, String> {
    let text = read_in(dir, path).map_err(|err| format!("no cassette `{path}` ({err})"))?;
    serde_json::from_str(&text).map_err(|err| format!("cassette `{path}` is not valid: {err}"))
}

/// Written whole and renamed into place (the confined writer), so an interrupted run leaves
/// no half cassette; a link planted where a cassette goes is replaced, never followed, and a
/// step's folder that is a link is refused.
fn write(
    out: &crate::out::OutDir,
    folder: &str,
    name: &str,
    value: &impl Serialize,
) -> Result<(), crate::out::OutError> {
    use std::io::Write as _;
    let dir = out.sub(folder)?;
    let mut file = dir.create(name)?;
    let failed = |err: std::io::Error| crate::out::OutError::Io {
        path: file_path(&dir, name),
        reason: err.to_string(),
    };
    serde_json::to_writer_pretty(&mut file, value)
        .map_err(std::io::Error::other)
        .and_then(|()| file.write_all(b"\n"))
        .map_err(failed)?;
    file.commit()
}

fn file_path(dir: &crate::out::OutDir, name: &str) -> String {
    dir.path().join(name).to_string()
}

impl ModelApi for Taped {
    fn endpoint(&self) -> String {
        match (&self.tapes.mode, &self.inner) {
            (Mode::Replay, _) | (_, None) => format!("replay from {}", self.tapes.dir),
            (Mode::Record, Some(inner)) => inner.endpoint(),
        }
    }

    fn encode(&self, request: &ChatRequest) -> Body {
        match &self.inner {
            Some(inner) => inner.encode(request),
            None => Body::of(self.wire, request),
        }
    }

    fn min_cacheable(&self, model: &str) -> Option<u64> {
        match (&self.inner, self.wire) {
            (Some(inner), _) => inner.min_cacheable(model),
            (None, Wire::Anthropic) => Some(super::known::anthropic_min_cacheable(model)),
            (None, _) => None,
        }
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
            no_tool_calls: false,
            shared_until: None,
            answer_schema: None,
            effort: None,
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

    #[test]
    fn drift_names_the_first_difference_with_both_sides() {
        let recorded = serde_json::json!({"text": "Ran 3 tests in 0.011s\nOK"});
        let sent = serde_json::json!({"text": "Ran 3 tests in 0.013s\nOK"});
        let said = first_difference(&recorded, &sent);
        assert!(
            said.starts_with("first difference at character 28:"),
            "{said}"
        );
        assert!(
            said.contains("recorded `") && said.contains("0.011s"),
            "{said}"
        );
        assert!(said.contains("sent `") && said.contains("0.013s"), "{said}");
        // One side longer than the other: the difference is where the shorter ends.
        let said = first_difference(&serde_json::json!("ab"), &serde_json::json!("abc"));
        assert!(
            said.starts_with("first difference at character 3:"),
            "{said}"
        );
    }

    #[test]
    fn replies_keep_placeholders_and_get_this_runs_directory_back() {
        let reply = serde_json::json!({"path": "/tmp/rec/.runner/worktrees/r1/s/notes.txt", "branch": "runner/r1/s"});
        let roots = vec![
            "/tmp/rec/.runner/worktrees/r1/s".to_owned(),
            "/tmp/rec".to_owned(),
        ];
        let kept = generalized(&reply, &roots, "r1").unwrap();
        assert_eq!(
            kept,
            serde_json::json!({"path": "<workdir>/notes.txt", "branch": "runner/<run>/s"})
        );
        let back = restored(&kept, "/srv/other/wt", "r2").unwrap();
        assert_eq!(
            back,
            serde_json::json!({"path": "/srv/other/wt/notes.txt", "branch": "runner/r2/s"})
        );
        // Nothing to put back: left alone.
        assert!(restored(&serde_json::json!({"a": 1}), "/x", "r").is_none());
    }
}
