//! GitHub Actions (docs/src/ci.md "GitHub Actions and the event stream"), on when `GITHUB_ACTIONS=true`:
//! each step's log lines in a `::group::` (printed whole when the step ends, so steps running at
//! once do not interleave), `::error`/`::warning` annotations for failed and skipped steps, and a
//! Markdown table appended to `$GITHUB_STEP_SUMMARY`. Workflow commands go to stderr, which GitHub
//! reads as it reads stdout, so `--format json` output stays clean.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;

use camino::{Utf8Path, Utf8PathBuf};

use super::progress::{finish_line, subagent_finish_line};
use super::{seconds, tokens, total_tokens, usd};
use crate::event::{Event, EventKind, Sink};
use crate::plan::Plan;
use crate::record::{RunRecord, RunStatus, StepRecord, StepStatus};
use crate::terminal;

/// Whether runner runs inside a GitHub Actions job.
pub fn detected() -> bool {
    std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true")
}

/// The token of `::stop-commands::` while a [`LogGuard`] holds the log.
static STOP_TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// In a GitHub Actions job, text from models, tools, MCP servers and files must never run as a
/// workflow command (`::add-mask::`, `::stop-commands::`, a forged `::error`). While the guard
/// lives, GitHub processes no command at all (`::stop-commands::<random token>`); runner's own
/// commands are let through one block at a time ([`commands`]), and dropping the guard resumes
/// processing for whatever the job runs next.
pub struct LogGuard(Option<String>);

impl LogGuard {
    pub fn start() -> Self {
        if !detected() {
            return LogGuard(None);
        }
        let token = format!("{:032x}", rand::random::<u128>());
        let token = STOP_TOKEN.get_or_init(|| token).clone();
        let _ = writeln!(crate::out::stderr(), "::stop-commands::{token}");
        LogGuard(Some(token))
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some(token) = &self.0 {
            let _ = writeln!(crate::out::stderr(), "::{token}::");
        }
    }
}

/// `block` (runner's own workflow commands, built from escaped text only) let through the guard:
/// processing resumes for it and stops again after it.
fn commands(block: &str) -> String {
    match STOP_TOKEN.get() {
        Some(token) => format!("::{token}::\n{block}::stop-commands::{token}\n"),
        None => block.to_owned(),
    }
}

pub struct GithubSink {
    workflow: String,
    /// Steps in plan order, with their agents.
    steps: Vec<(String, String)>,
    /// Whether to print grouped log lines (not with `--no-progress`).
    groups: bool,
    summary: Option<Utf8PathBuf>,
    /// Each running step's lines, printed in its group when it ends.
    lines: BTreeMap<String, Vec<String>>,
    /// Steps this run left to other jobs (`--only`): no annotation, no summary row.
    unselected: std::collections::BTreeSet<String>,
    /// With groups: a running step's heartbeat, printed as it comes (its group waits for its
    /// end), so the job's log does not go quiet.
    beats: Option<super::heartbeat::Heartbeats>,
}

impl GithubSink {
    /// With `--only`: a job of an exported pipeline reports the steps (and instances) it runs,
    /// nothing of the others, which are other jobs' to report.
    pub fn only(mut self, only: &std::collections::BTreeSet<String>) -> Self {
        if !only.is_empty() {
            let selected = |id: &str| {
                only.contains(id)
                    || only.iter().any(|o| {
                        crate::plan::verified::split_instance(o).is_some_and(|(s, _)| s == id)
                    })
            };
            self.unselected = self
                .steps
                .iter()
                .map(|(id, _)| id.clone())
                .filter(|id| !selected(id))
                .collect();
        }
        self
    }

    pub fn new(plan: &Plan, groups: bool) -> Self {
        Self {
            workflow: plan.name.clone(),
            steps: plan
                .steps()
                .iter()
                .map(|s| (s.id.clone(), s.agent.clone()))
                .collect(),
            groups,
            summary: std::env::var("GITHUB_STEP_SUMMARY")
                .ok()
                .filter(|p| !p.is_empty())
                .map(Utf8PathBuf::from),
            lines: BTreeMap::new(),
            unselected: Default::default(),
            beats: groups.then(|| super::heartbeat::Heartbeats::new(super::heartbeat::HEARTBEAT)),
        }
    }

    /// The heartbeat every `every` instead of 30 s (tests set a short one).
    pub fn every(mut self, every: std::time::Duration) -> Self {
        if self.beats.is_some() {
            self.beats = Some(super::heartbeat::Heartbeats::new(every));
        }
        self
    }

    fn agent(&self, step: &str) -> &str {
        self.steps
            .iter()
            .find(|(id, _)| id == crate::plan::verified::step_of(step))
            .map_or("?", |(_, agent)| agent.as_str())
    }

    fn note(&mut self, step: &str, line: String) {
        self.lines.entry(step.to_owned()).or_default().push(line);
    }

    fn step_finished(&mut self, step: &str, record: &StepRecord) {
        let agent = self.agent(step).to_owned();
        let lines = self.lines.remove(step).unwrap_or_default();
        let mut out = String::new();
        if self.groups {
            out.push_str(&commands(&format!(
                "::group::{}\n",
                escape_data(&finish_line(&agent, step, record))
            )));
            // The step's own lines: data, with command processing stopped.
            for line in lines {
                let _ = writeln!(out, "{}", terminal::clean(&line));
            }
            out.push_str(&commands("::endgroup::\n"));
        }
        let reason = || {
            record
                .error
                .as_deref()
                .unwrap_or("no reason was recorded")
                .to_owned()
        };
        let annotation = match record.status {
            StepStatus::Failed => Some(format!(
                "::error title={}::{}\n",
                escape_property(&format!("step {step} failed")),
                escape_data(&terminal::clean(&reason()))
            )),
            StepStatus::Skipped => Some(format!(
                "::warning title={}::{}\n",
                escape_property(&format!("step {step} skipped")),
                escape_data(&terminal::clean(&reason()))
            )),
            _ => None,
        };
        if let Some(annotation) = annotation {
            out.push_str(&commands(&annotation));
        }
        // Log output is best effort, like progress.
        let _ = crate::out::stderr().write_all(out.as_bytes());
    }

    // Over 80 lines: the job summary's sections in order, one block each.
    /// The Markdown appended to the job summary.
    fn summary_markdown(&self, record: &RunRecord, run_dir: &Utf8Path) -> String {
        let mark = |s: StepStatus| match s {
            StepStatus::Succeeded => "✅",
            StepStatus::Failed => "❌",
            StepStatus::Skipped => "⏭️",
            StepStatus::Cancelled => "🚫",
            StepStatus::Pending | StepStatus::Running => "…",
        };
        let (status, duration_ms) = (record.status, record.duration_ms);
        let mut out = format!(
            "### runner: {} {}\n\n| Step | Status | Tokens | Cost | Time | Branch |\n|---|---|---|---|---|---|\n",
            cell(&self.workflow),
            match status {
                RunStatus::Succeeded => format!("succeeded in {}", seconds(duration_ms)),
                other => format!("{} after {}", other.as_str(), seconds(duration_ms)),
            }
        );
        let mut failures = Vec::new();
        let total = crate::units::sum(record.done_here().map(total_tokens));
        for (id, _) in &self.steps {
            let Some(r) = record
                .steps
                .get(id)
                .filter(|_| !self.unselected.contains(id))
            else {
                continue;
            };
            let status = match &r.reused_from {
                Some(run) => format!(
                    "{} {} (reused from {run})",
                    mark(r.status),
                    r.status.as_str()
                ),
                None => format!("{} {}", mark(r.status), r.status.as_str()),
            };
            let status = match r.checks.iter().map(|c| c.round).max() {
                Some(rounds) => {
                    let word = if r.checks.iter().all(|c| c.round < rounds || c.passed) {
                        "passed"
                    } else {
                        "failed"
                    };
                    format!("{status} · checks {word} in round {rounds}")
                }
                None => status,
            };
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} | {} |",
                cell(id),
                status,
                tokens(total_tokens(r)),
                r.cost_usd.map_or_else(|| "-".to_owned(), usd),
                seconds(r.duration_ms),
                r.branch
                    .as_deref()
                    .map_or_else(String::new, |b| format!("`{}`", cell(b)))
            );
            // A fan-out's instances, each on a row of its own (the first hundred).
            for instance in r.instances.iter().take(100) {
                let _ = writeln!(
                    out,
                    "| ↳ `{}` | {} {} | {} | {} | {} | {} |",
                    cell(instance.instance.as_deref().unwrap_or_default()),
                    mark(instance.status),
                    instance.status.as_str(),
                    tokens(total_tokens(instance)),
                    instance.cost_usd.map_or_else(|| "-".to_owned(), usd),
                    seconds(instance.duration_ms),
                    instance
                        .branch
                        .as_deref()
                        .map_or_else(String::new, |b| format!("`{}`", cell(b)))
                );
            }
            if r.status == StepStatus::Failed {
                let reason = r.error.as_deref().unwrap_or("no reason was recorded");
                // Redacted before it is cut: half a secret is one the redactor no longer knows.
                let reason = crate::secrets::redact(reason);
                let first = terminal::clean(&reason);
                let first = first.lines().next().unwrap_or_default();
                failures.push(format!(
                    "- `{}`: {}",
                    cell(id),
                    cell(&crate::limits::preview(first, MAX_REASON_CHARS))
                ));
            }
        }
        let _ = writeln!(
            out,
            "| **total** | | {} | {} | {} | |",
            tokens(total),
            record.cost_usd.map_or_else(|| "-".to_owned(), usd),
            seconds(duration_ms)
        );
        let _ = writeln!(
            out,
            "\nRun `{}`: record and transcripts in `{}`.",
            cell(&record.run_id),
            cell(run_dir.as_str())
        );
        if !failures.is_empty() {
            out.push_str("\n**Failures**\n\n");
            for failure in failures {
                out.push_str(&failure);
                out.push('\n');
            }
        }
        out.push('\n');
        // GitHub drops a step's summary past 1 MiB: the table is cut well before, saying so.
        if out.len() > MAX_SUMMARY_BYTES {
            let mut cut = MAX_SUMMARY_BYTES;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(out[..cut].rfind('\n').map_or(cut, |n| n + 1));
            let _ = writeln!(
                out,
                "\n… the rest is cut: GitHub takes at most 1 MiB of summary; `run.json` has everything.\n"
            );
        }
        out
    }
}

/// Characters of a failure's first line in the job summary.
const MAX_REASON_CHARS: usize = 500;
/// Bytes of the job summary runner appends, at most (GitHub's limit is 1 MiB per step).
const MAX_SUMMARY_BYTES: usize = 512 * 1024;

/// Text that is safe in a Markdown table cell of the job summary, which renders HTML: no tag,
/// entity or table syntax survives.
fn cell(text: &str) -> String {
    // Redacted first: a secret's form after these replacements is known to no one.
    crate::secrets::redact(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
        .replace('`', "'")
}

/// The message part of a workflow command. `##[` would start a legacy command anywhere in a
/// line, so it is broken up.
fn escape_data(text: &str) -> String {
    // Redacted first, as in `cell`.
    crate::secrets::redact(text)
        .replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
        .replace("##[", "#%23[")
}

/// A property (`title=`) of a workflow command.
fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

impl Sink for GithubSink {
    // Over 80 lines: one arm per event kind this sink shows.
    fn handle(&mut self, event: &Event) -> Result<(), String> {
        if let Some(beats) = &mut self.beats {
            beats.count(event);
        }
        let who = |event: &Event| {
            event
                .agent
                .as_deref()
                .map_or_else(String::new, |a| format!("{a}: "))
        };
        match &event.kind {
            EventKind::StepStarted { step, agent, model } => {
                let _ = writeln!(crate::out::stderr(), "[{agent}] {step} started ({model})");
            }
            EventKind::ToolFinished {
                step,
                name,
                is_error,
                duration_ms,
                ..
            } => {
                let line = format!(
                    "{}{name}{} ({})",
                    who(event),
                    if *is_error { " failed" } else { "" },
                    seconds(*duration_ms)
                );
                self.note(step, line);
            }
            EventKind::Retrying {
                step,
                attempt,
                error,
                ..
            } => {
                let line = format!("{}retrying (attempt {attempt}): {error}", who(event));
                self.note(step, line);
            }
            EventKind::ContextCompacted {
                step,
                turn,
                tokens_before,
                tokens_after,
            } => {
                let line = format!(
                    "{}compacted its conversation at turn {turn} ({tokens_before} to {tokens_after} tokens)",
                    who(event)
                );
                self.note(step, line);
            }
            EventKind::RepeatsRefused {
                step,
                turn,
                name,
                refusals,
            } => {
                let line = format!(
                    "{}`{name}` refused {refusals} times in a row: turn {turn} is its last, with no tool calls allowed, asking for the final answer",
                    who(event)
                );
                self.note(step, line);
            }
            EventKind::OutOfTurns { step, turn } => {
                let line = format!(
                    "{}out of turns: turn {turn} is its last, with no tools, asking for the final answer",
                    who(event)
                );
                self.note(step, line);
            }
            EventKind::ReplayDrift {
                step,
                request,
                difference,
            } => {
                let line = format!(
                    "{}replay drift in request {request}: {difference}",
                    who(event)
                );
                self.note(step, line);
            }
            EventKind::SubagentStarted {
                step,
                id,
                description,
                ..
            } => {
                let line = format!("{}started subagent {id}: {description}", who(event));
                self.note(step, line);
            }
            EventKind::SubagentFinished { step, record } => {
                let label = format!("[{}] {step}", self.agent(step));
                self.note(step, subagent_finish_line(&label, record));
            }
            // A job of an exported pipeline runs one step (`--only`); the others are other
            // jobs' to report.
            EventKind::StepFinished { step, .. }
                if self
                    .unselected
                    .contains(crate::plan::verified::step_of(step)) => {}
            EventKind::StepFinished { step, record, .. } => self.step_finished(step, record),
            EventKind::RunFinished { record, run_dir } => {
                let Some(path) = &self.summary else {
                    return Ok(());
                };
                let markdown = self.summary_markdown(record, run_dir);
                // Appended, never truncated: other steps of the job write there too. Through
                // the confined writer: a link there is refused, not followed.
                crate::out::append_file(path)
                    .map_err(|err| format!("GITHUB_STEP_SUMMARY: {err}"))
                    .and_then(|mut file| {
                        file.write_all(markdown.as_bytes())
                            .and_then(|()| file.finish())
                            .map_err(|err| {
                                format!("cannot append to GITHUB_STEP_SUMMARY `{path}`: {err}")
                            })
                    })?;
            }
            _ => {}
        }
        Ok(())
    }

    fn deadline(&self) -> Option<std::time::Instant> {
        self.beats
            .as_ref()
            .and_then(super::heartbeat::Heartbeats::deadline)
    }

    /// Each due heartbeat, outside any group: the step's group is printed when it ends.
    fn tick(&mut self) -> Result<(), String> {
        let due = self.beats.as_mut().map(super::heartbeat::Heartbeats::due);
        for (step, line) in due.unwrap_or_default() {
            let line = format!("[{}] {step} {line}", self.agent(&step));
            // Data, never a workflow command; best effort, like progress.
            let _ = writeln!(
                crate::out::stderr(),
                "{}",
                escape_data(&terminal::clean(&line))
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workflow_commands_escape_what_would_end_them() {
        assert_eq!(escape_data("50% done\nnext"), "50%25 done%0Anext");
        assert_eq!(escape_property("step a: x, y"), "step a%3A x%2C y");
        assert_eq!(cell("a|b\nc `d`"), "a\\|b c 'd'");
        assert_eq!(
            cell("<img src=x onerror=alert(1)> &amp;"),
            "&lt;img src=x onerror=alert(1)&gt; &amp;amp;"
        );
    }
}
