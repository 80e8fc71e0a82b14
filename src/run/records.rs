//! Reading run records back (docs/src/runs.md "Resume"): every `run.json` runner reads
//! (`runs`, `show`, `report`, `diff`, `--resume`, `--run-id`) comes through here, bounded.
//!
//! A record is a regular file (no link followed, no FIFO waited on) of at most
//! [`MAX_RUN_JSON_BYTES`] holding at most [`MAX_RUN_JSON_VALUES`] JSON values: the values are
//! counted first, streaming, so a record shaped to grow in memory (a list of millions of
//! numbers is 2 bytes each on disk and 32 in memory) is refused before anything is built from
//! it. Its seal is checked as it is read ([`super::seal::Opened`]), and the ids in it are
//! checked as ids ([`RunRecord::check_ids`]) before anything takes one for a path or a branch.
//! Listing runs opens only the newest [`MAX_RUNS_READ`] (by when their `run.json` was written)
//! and keeps only what the list shows of each, so memory grows with what is shown.

use std::fs::File;
use std::io::{BufReader, Read, Seek};

use camino::{Utf8Path, Utf8PathBuf};
use serde::Deserialize;
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::seal::Opened;
use crate::limits::{
    MAX_RUN_JSON_BYTES, MAX_RUN_JSON_VALUES, MAX_RUN_RECORD_BYTES, MAX_RUNS_READ, bytes,
};
use crate::record::{RunRecord, RunStatus, is_run_id};

/// Run folders looked at, at most, when listing (names only).
const MAX_ENTRIES: usize = 100_000;
/// Characters of a workflow name or start time a listing keeps.
const SHOWN_CHARS: usize = 200;

/// Opens `rel` below `base`: `base` as named, then every folder of `rel` and its file without
/// following a link (a checkout may ship `runs/<id> -> ~/somewhere` or `transcript.jsonl ->
/// ~/.ssh/…`); it must be a regular file within `limit`. Every file of a run runner reads back
/// is opened here.
fn open_below(base: &Utf8Path, rel: &[&str], limit: u64) -> Result<(File, Utf8PathBuf), String> {
    use nix::fcntl::{AT_FDCWD, OFlag, openat};
    use nix::sys::stat::Mode;
    use std::os::fd::AsFd as _;
    let path = rel.iter().fold(base.to_owned(), |p, part| p.join(part));
    let failed = |err: nix::errno::Errno| match err {
        nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => {
            format!("`{path}` is reached through a link, not a file runner wrote")
        }
        err => format!("cannot read `{path}`: {}", err.desc()),
    };
    let (last, folders) = rel
        .split_last()
        .ok_or_else(|| format!("`{path}` names no file"))?;
    if rel
        .iter()
        .any(|p| p.is_empty() || p.contains('/') || *p == "." || *p == "..")
    {
        return Err(format!(
            "`{path}` is not a path runner reads a run's files by"
        ));
    }
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let base = if base.as_str().is_empty() {
        Utf8Path::new(".")
    } else {
        base
    };
    let mut dir = openat(AT_FDCWD, base.as_str(), dir_flags, Mode::empty()).map_err(failed)?;
    for folder in folders {
        dir = openat(
            dir.as_fd(),
            *folder,
            dir_flags | OFlag::O_NOFOLLOW,
            Mode::empty(),
        )
        .map_err(failed)?;
    }
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let file = File::from(openat(dir.as_fd(), *last, flags, Mode::empty()).map_err(failed)?);
    let meta = file
        .metadata()
        .map_err(|err| format!("cannot read `{path}`: {err}"))?;
    if !meta.is_file() {
        return Err(format!("`{path}` is not a regular file"));
    }
    if meta.len() > limit {
        return Err(format!(
            "`{path}` is {}, larger than the {} runner reads of a record",
            size(meta.len()),
            bytes(limit)
        ));
    }
    Ok((file, path))
}

/// A file of run `id` in `state_dir` by its path in the run's folder (a transcript, for `runner
/// show STEP`, `runner report` and `--continue`): no link on the way, at most
/// [`MAX_RUN_RECORD_BYTES`].
pub fn read_run_file(state_dir: &Utf8Path, id: &str, rel: &Utf8Path) -> Result<String, String> {
    let mut parts = vec!["runs", id];
    parts.extend(rel.as_str().split('/'));
    let (file, path) = open_below(state_dir, &parts, MAX_RUN_RECORD_BYTES)?;
    let mut text = String::new();
    file.take(MAX_RUN_RECORD_BYTES)
        .read_to_string(&mut text)
        .map_err(|err| format!("cannot read `{path}`: {err}"))?;
    Ok(text)
}

/// `240.0 MiB`.
fn size(n: u64) -> String {
    format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
}

/// The record of run `id` in `state_dir`, whole: bounded, its seal checked, its ids checked, and
/// naming that same id.
pub fn read(state_dir: &Utf8Path, id: &str) -> Result<RunRecord, String> {
    if !is_run_id(id) {
        return Err(format!("`{id}` is not a run id"));
    }
    let (file, path) = open_below(state_dir, &["runs", id, "run.json"], MAX_RUN_JSON_BYTES)?;
    let record = read_opened(file, &path)?;
    if record.run_id != id {
        return Err(format!(
            "`{path}` belongs to run `{}`, not `{id}`",
            crate::terminal::clean(&record.run_id)
        ));
    }
    Ok(record)
}

/// What to tell someone about to use `record`, read as named, when this user did not record it.
pub fn not_yours(record: &RunRecord) -> Option<String> {
    (!record.recorded_here).then(|| {
        let why = match super::seal::key_problem() {
            Some(why) => format!("its seal cannot be checked: {why}"),
            None => "it does not carry your seal: it was made elsewhere (a checkout may ship runs), or changed since".to_owned(),
        };
        format!("run {} is not one you recorded here ({why}); using it as named", record.run_id)
    })
}

/// A `run.json` anywhere (`runner diff FILE`, `report --baseline FILE`), bounded as [`read`]
/// reads one. Its ids are not checked: a record compared is only data, whose ids name no
/// folder or branch (what is printed is cleaned for the terminal).
pub fn read_file(path: &Utf8Path) -> Result<RunRecord, String> {
    let name = path
        .file_name()
        .ok_or_else(|| format!("`{path}` names no file"))?;
    let (file, path) = open_below(
        path.parent().unwrap_or(Utf8Path::new(".")),
        &[name],
        MAX_RUN_JSON_BYTES,
    )?;
    let (mut record, ours): (RunRecord, bool) = parse(file, &path)?;
    record.recorded_here = ours;
    Ok(record)
}

/// A record of the state directory: its seal noted, its ids checked.
fn read_opened(file: File, path: &Utf8Path) -> Result<RunRecord, String> {
    let (mut record, ours): (RunRecord, bool) = parse(file, path)?;
    record.recorded_here = ours;
    record
        .check_ids()
        .map_err(|why| format!("`{path}` is not a record runner wrote: {why}"))?;
    Ok(record)
}

/// A JSON file of run `id` by its path in the run's folder (a step's `record.json`), opened and
/// bounded as a record is.
pub fn read_json<T: DeserializeOwned>(
    state_dir: &Utf8Path,
    id: &str,
    rel: &[&str],
) -> Result<T, String> {
    let mut parts = vec!["runs", id];
    parts.extend_from_slice(rel);
    let (file, path) = open_below(state_dir, &parts, MAX_RUN_JSON_BYTES)?;
    parse(file, &path).map(|(value, _)| value)
}

/// Counts the values of `path`'s JSON, then reads it, checking its seal on the way: the seal
/// is checked over the very bytes the value is built from.
fn parse<T: DeserializeOwned>(mut file: File, path: &Utf8Path) -> Result<(T, bool), String> {
    let not_json = |err: serde_json::Error| format!("`{path}` is not a run record: {err}");
    // One descriptor for both passes: a record renamed over this one meanwhile is not read.
    let mut left = MAX_RUN_JSON_VALUES;
    let mut counting = serde_json::Deserializer::from_reader(BufReader::new(
        file.by_ref().take(MAX_RUN_JSON_BYTES),
    ));
    let counted = Counted { left: &mut left }
        .deserialize(&mut counting)
        .and_then(|()| counting.end());
    if left == 0 {
        return Err(format!(
            "`{path}` holds more than {MAX_RUN_JSON_VALUES} JSON values, more than runner reads of a record"
        ));
    }
    counted.map_err(not_json)?;
    file.rewind()
        .map_err(|err| format!("cannot read `{path}`: {err}"))?;
    let mut opened = BufReader::new(
        Opened::new(file.take(MAX_RUN_JSON_BYTES))
            .map_err(|err| format!("cannot read `{path}`: {err}"))?,
    );
    // `from_reader` reads to the end (trailing whitespace only), so the seal saw every byte.
    let value = serde_json::from_reader(&mut opened).map_err(not_json)?;
    Ok((value, opened.into_inner().ours()))
}

/// Counts a JSON document's values (keys included) down from `left`, failing at none left.
struct Counted<'a> {
    left: &'a mut u64,
}

impl Counted<'_> {
    fn tick<E: serde::de::Error>(&mut self) -> Result<(), E> {
        if *self.left == 0 {
            return Err(E::custom("too many values"));
        }
        *self.left -= 1;
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Counted<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counted<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E: serde::de::Error>(mut self, _: bool) -> Result<(), E> {
        self.tick()
    }
    fn visit_i64<E: serde::de::Error>(mut self, _: i64) -> Result<(), E> {
        self.tick()
    }
    fn visit_u64<E: serde::de::Error>(mut self, _: u64) -> Result<(), E> {
        self.tick()
    }
    fn visit_f64<E: serde::de::Error>(mut self, _: f64) -> Result<(), E> {
        self.tick()
    }
    fn visit_str<E: serde::de::Error>(mut self, _: &str) -> Result<(), E> {
        self.tick()
    }
    fn visit_unit<E: serde::de::Error>(mut self) -> Result<(), E> {
        self.tick()
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.tick()?;
        while seq
            .next_element_seed(Counted {
                left: &mut *self.left,
            })?
            .is_some()
        {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.tick()?;
        while map
            .next_key_seed(Counted {
                left: &mut *self.left,
            })?
            .is_some()
        {
            map.next_value_seed(Counted {
                left: &mut *self.left,
            })?;
        }
        Ok(())
    }
}

/// What `runs` shows of a run, and whether this user recorded it.
#[derive(Debug, Clone)]
pub struct Summary {
    pub run_id: String,
    pub workflow: String,
    pub status: RunStatus,
    pub started_at: String,
    pub duration_ms: u64,
    pub cost_usd: Option<f64>,
    pub steps: usize,
    pub ours: bool,
}

/// A record's head as a listing reads it: everything else is passed over as it streams by.
#[derive(Deserialize)]
struct Head {
    run_id: Cut,
    #[serde(default)]
    workflow: Cut,
    status: RunStatus,
    started_at: Cut,
    duration_ms: u64,
    #[serde(default)]
    cost_usd: Option<f64>,
    steps: Entries,
}

/// A string kept to [`SHOWN_CHARS`] characters.
#[derive(Default)]
struct Cut(String);

impl<'de> Deserialize<'de> for Cut {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Cut(text.chars().take(SHOWN_CHARS).collect()))
    }
}

/// How many entries a JSON object has, its values passed over.
struct Entries(usize);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Count;
        impl<'de> Visitor<'de> for Count {
            type Value = usize;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
                let mut n = 0;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(n)
            }
        }
        d.deserialize_map(Count).map(Entries)
    }
}

/// What [`list`] found.
#[derive(Debug, Default)]
pub struct Listing {
    /// Newest first by start time (then id; a start that is not a time last).
    pub runs: Vec<Summary>,
    /// Runs not opened: older (by when their record was written) than the newest
    /// [`MAX_RUNS_READ`].
    pub not_read: usize,
    /// Runs opened and refused (too large, not a record, reached through a link), each with why.
    pub refused: Vec<String>,
}

/// The runs recorded in `state_dir` that runner could have written, as `runs` and `--resume
/// latest` see them: the newest [`MAX_RUNS_READ`] by when their `run.json` was written (one
/// dated in the future last), each read only for what a listing shows.
pub fn list(state_dir: &Utf8Path) -> Listing {
    let runs = state_dir.join("runs");
    let soon = std::time::SystemTime::now() + std::time::Duration::from_secs(300);
    let mut found: Vec<(bool, std::time::SystemTime, String)> = runs
        .read_dir_utf8()
        .into_iter()
        .flatten()
        .take(MAX_ENTRIES)
        .flatten()
        .filter(|entry| is_run_id(entry.file_name()) && entry.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|entry| {
            let meta = entry.path().join("run.json").symlink_metadata().ok()?;
            let written = meta.modified().ok()?;
            meta.is_file()
                .then(|| (written <= soon, written, entry.file_name().to_owned()))
        })
        .collect();
    found.sort_by(|a, b| b.cmp(a));
    let not_read = found.len().saturating_sub(MAX_RUNS_READ);
    let mut refused = Vec::new();
    let mut listed: Vec<Summary> = found
        .into_iter()
        .take(MAX_RUNS_READ)
        .filter_map(|(_, _, id)| summary(&runs, &id).map_err(|why| refused.push(why)).ok())
        .collect();
    // By time, not by text: `12:00:00Z` is later than `11:59:59.5Z`.
    listed.sort_by_cached_key(|run| {
        std::cmp::Reverse((
            run.started_at.parse::<jiff::Timestamp>().ok(),
            run.run_id.clone(),
        ))
    });
    Listing {
        runs: listed,
        not_read,
        refused,
    }
}

/// What a listing shows of run `id`, streaming through its record (seal checked on the way).
fn summary(runs: &Utf8Path, id: &str) -> Result<Summary, String> {
    let (file, path) = open_below(runs, &[id, "run.json"], MAX_RUN_JSON_BYTES)?;
    let mut opened = BufReader::new(
        Opened::new(file.take(MAX_RUN_JSON_BYTES))
            .map_err(|err| format!("cannot read `{path}`: {err}"))?,
    );
    let mut de = serde_json::Deserializer::from_reader(&mut opened);
    let head = Head::deserialize(&mut de)
        .and_then(|head| de.end().map(|()| head))
        .map_err(|err| format!("`{path}` is not a run record: {err}"))?;
    if head.run_id.0 != id {
        return Err(format!("`{path}` belongs to another run"));
    }
    Ok(Summary {
        run_id: head.run_id.0,
        workflow: head.workflow.0,
        status: head.status,
        started_at: head.started_at.0,
        duration_ms: head.duration_ms,
        cost_usd: head.cost_usd,
        steps: head.steps.0,
        ours: opened.into_inner().ours(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_listed_by_time_not_by_text() {
        let dir = tempfile::tempdir().unwrap();
        let state = Utf8Path::from_path(dir.path()).unwrap();
        // As text, `...:00Z` sorts after `...:00.5Z`; as times it is half a second earlier.
        for (id, started) in [
            ("r-whole", "2026-12-06T12:00:00Z"),
            ("r-half", "2026-12-06T12:00:00.5Z"),
            ("r-bad", "not a time"),
        ] {
            let record = serde_json::json!({
                "run_id": id, "workflow": "w", "status": "succeeded",
                "started_at": started, "duration_ms": 0, "steps": {},
            });
            std::fs::create_dir_all(state.join("runs").join(id)).unwrap();
            std::fs::write(
                state.join("runs").join(id).join("run.json"),
                record.to_string(),
            )
            .unwrap();
        }
        let ids: Vec<String> = list(state).runs.into_iter().map(|r| r.run_id).collect();
        assert_eq!(ids, ["r-half", "r-whole", "r-bad"]);
    }

    #[test]
    fn a_record_of_too_many_values_is_refused_before_it_is_built() {
        let dir = tempfile::tempdir().unwrap();
        let path = Utf8Path::from_path(dir.path()).unwrap().join("run.json");
        let many = vec!["0"; MAX_RUN_JSON_VALUES as usize].join(",");
        std::fs::write(&path, format!("{{\"steps\": [{many}]}}")).unwrap();
        let err = read_file(&path).unwrap_err();
        assert!(err.contains("more than 2000000 JSON values"), "{err}");
    }
}
