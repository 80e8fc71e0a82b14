//! One transcript read for findings: refused calls (the `refused` runner records with a tool's
//! result), sandbox refusals and deletions in `bash` calls, repeated identical calls, retries,
//! replies from another model than the one asked, secrets a tool printed.

use std::collections::BTreeMap;

use camino::Utf8Path;
use serde_json::Value;

use super::{Audit, Evidence, Finding, Kind, Severity, seen, signs};
use crate::record::planned::Planned;
use crate::tools::Refusal;

/// The same call (tool and input) this many times in a row is a finding: the count at which
/// runner itself stops running it (`session::MAX_SAME_CALLS`).
pub const REPEATS_IN_A_ROW: u32 = crate::session::MAX_SAME_CALLS;
/// The same call this many times in one transcript, in a row or not.
pub const REPEATS_IN_ALL: u32 = 5;
/// Retries of model requests in one transcript at which it is a storm.
pub const RETRY_STORM: u64 = 5;

/// Where a transcript belongs.
pub struct Scan<'a> {
    pub step: &'a str,
    pub subagent: Option<&'a str>,
    /// In the run's folder.
    pub path: &'a Utf8Path,
    pub planned: Option<&'a Planned>,
}

/// A call as its `tool_started` line had it.
struct Call {
    name: String,
    input: Value,
    turn: u64,
}

/// The newest run of identical calls: the call, how many in a row, where the run began.
struct Streak {
    key: String,
    count: u32,
    first: (u64, String),
    name: String,
}

impl Scan<'_> {
    fn finding(
        &self,
        kind: Kind,
        severity: Severity,
        message: String,
        turn: Option<u64>,
        call_id: Option<&str>,
        what: &str,
    ) -> Finding {
        Finding {
            kind,
            severity,
            step: Some(self.step.to_owned()),
            subagent: self.subagent.map(str::to_owned),
            message,
            evidence: Evidence {
                transcript: Some(self.path.to_owned()),
                turn,
                call_id: call_id.map(str::to_owned),
                seen: seen(what),
            },
        }
    }

    /// Reads `text`'s lines into `audit`; returns the retries it saw.
    pub fn run(&self, text: &str, audit: &mut Audit) -> u64 {
        let mut calls: BTreeMap<String, Call> = BTreeMap::new();
        let mut streak: Option<Streak> = None;
        // Calls already found in a row are not found again in all.
        let mut found: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        let mut in_all: BTreeMap<String, (u32, u64, String)> = BTreeMap::new();
        let mut asked: Option<String> = None;
        let mut other_model: Option<(u64, String, u32)> = None;
        let mut retries: Vec<(u64, String)> = Vec::new();
        for line in text.lines() {
            // A transcript cut short by a crash ends in half a line.
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let turn = event["turn"].as_u64().unwrap_or(0);
            match event["event"].as_str().unwrap_or_default() {
                "session_started" => asked = event["model"].as_str().map(str::to_owned),
                "retrying" => {
                    retries.push((turn, event["error"].as_str().unwrap_or_default().to_owned()))
                }
                "turn_finished" => {
                    if let (Some(asked), Some(answered)) = (&asked, event["body"]["model"].as_str())
                        && !signs::same_model(asked, answered)
                    {
                        let seen = other_model.get_or_insert((turn, answered.to_owned(), 0));
                        seen.2 += 1;
                    }
                }
                "tool_started" => {
                    let id = event["id"].as_str().unwrap_or_default().to_owned();
                    let name = event["name"].as_str().unwrap_or_default().to_owned();
                    let input = event["input"].clone();
                    let key = format!("{name}\u{0}{input}");
                    let entry = in_all.entry(key.clone()).or_insert((0, turn, id.clone()));
                    entry.0 += 1;
                    match &mut streak {
                        Some(s) if s.key == key => s.count += 1,
                        _ => {
                            found.extend(self.end_streak(streak.take(), audit));
                            streak = Some(Streak {
                                key,
                                count: 1,
                                first: (turn, id.clone()),
                                name: name.clone(),
                            });
                        }
                    }
                    calls.insert(id, Call { name, input, turn });
                }
                "tool_finished" => self.finished(&event, &calls, audit),
                _ => {}
            }
        }
        found.extend(self.end_streak(streak, audit));
        for (key, (count, turn, id)) in in_all {
            if count >= REPEATS_IN_ALL && !found.contains(&key) {
                let (name, input) = key.split_once('\u{0}').unwrap_or((&key, ""));
                audit.add(self.finding(
                    Kind::RepeatedCalls,
                    Severity::Low,
                    format!("called `{name}` with the same input {count} times"),
                    Some(turn),
                    Some(&id),
                    input,
                ));
            }
        }
        if let Some((turn, model, replies)) = other_model {
            audit.add(self.finding(
                Kind::ModelDiffers,
                Severity::Medium,
                format!(
                    "asked `{}`, but {replies} repl{} came from `{model}`",
                    asked.unwrap_or_default(),
                    if replies == 1 { "y" } else { "ies" }
                ),
                Some(turn),
                None,
                &format!("model {model}"),
            ));
        }
        let count = retries.len() as u64;
        if count >= RETRY_STORM {
            let (turn, error) = retries.first().cloned().unwrap_or_default();
            audit.add(self.finding(
                Kind::RetryStorm,
                Severity::Medium,
                format!("its model requests were retried {count} times"),
                Some(turn),
                None,
                &error,
            ));
        }
        count
    }

    /// A run of identical calls that has ended: a finding from [`REPEATS_IN_A_ROW`]; medium
    /// once runner had to end the step for it (its refusals in a row ran out).
    /// Returns the call found.
    fn end_streak(&self, streak: Option<Streak>, audit: &mut Audit) -> Option<String> {
        let s = streak.filter(|s| s.count >= REPEATS_IN_A_ROW)?;
        let wrapped_up =
            s.count >= crate::session::MAX_SAME_CALLS + crate::session::MAX_REFUSED_REPEATS - 1;
        let input = s.key.split_once('\u{0}').map_or("", |(_, i)| i);
        audit.add(self.finding(
            Kind::RepeatedCalls,
            if wrapped_up {
                Severity::Medium
            } else {
                Severity::Low
            },
            format!(
                "called `{}` with the same input {} times in a row{}",
                s.name,
                s.count,
                if wrapped_up {
                    " (runner sent it to its last turn)"
                } else {
                    ""
                }
            ),
            Some(s.first.0),
            Some(&s.first.1),
            input,
        ));
        Some(s.key)
    }

    /// A call's result: runner's refusal, a refusal of the sandbox, a deletion, a secret.
    fn finished(&self, event: &Value, calls: &BTreeMap<String, Call>, audit: &mut Audit) {
        let id = event["id"].as_str().unwrap_or_default();
        let name = event["name"].as_str().unwrap_or_default();
        let output = event["output"].as_str().unwrap_or_default();
        let call = calls.get(id);
        let turn = call.map(|c| c.turn).or(event["turn"].as_u64());
        let input = call.map(|c| c.input.to_string()).unwrap_or_default();
        let refused = serde_json::from_value::<Refusal>(event["refused"].clone()).ok();
        let found = |kind, severity, message: String, what: &str| {
            self.finding(kind, severity, message, turn, Some(id), what)
        };
        match refused {
            Some(Refusal::NotGranted | Refusal::DontAsk) => audit.add(found(
                Kind::ToolNotGranted,
                Severity::High,
                format!("called `{name}`, which it was not given: refused"),
                &input,
            )),
            Some(Refusal::UnknownTool) => audit.add(found(
                Kind::ToolUnknown,
                Severity::Low,
                format!("called `{name}`, a tool that does not exist: refused"),
                &input,
            )),
            Some(Refusal::Path) => audit.add(found(
                Kind::PathRefused,
                Severity::High,
                format!("`{name}` was refused a path: {}", seen(output)),
                &input,
            )),
            None => {}
        }
        if output.contains(crate::secrets::HIDDEN) {
            audit.add(found(
                Kind::SecretInOutput,
                Severity::Medium,
                format!("`{name}` printed a secret runner knows (hidden in the record and from the model)"),
                signs::line_with(output, crate::secrets::HIDDEN).unwrap_or(output),
            ));
        }
        let Some(call) = call.filter(|c| c.name == "bash") else {
            return;
        };
        let command = call.input["command"].as_str().unwrap_or_default();
        if let Some(recursive) = signs::deletes(command) {
            audit.add(found(
                Kind::FileDeleted,
                if recursive {
                    Severity::Medium
                } else {
                    Severity::Low
                },
                "deleted files with bash".into(),
                command,
            ));
        }
        if event["is_error"] != true {
            return;
        }
        let sandboxed = self.planned.is_none_or(|p| p.sandbox != "off");
        let no_network = self.planned.is_some_and(|p| !p.network);
        if let Some(line) = signs::network_refused(output).filter(|_| sandboxed && no_network) {
            audit.add(found(
                Kind::NetworkRefused,
                Severity::High,
                "bash tried the network, which this step does not have: the sandbox refused it"
                    .into(),
                line,
            ));
        } else if let Some(line) = signs::sandbox_refused(output).filter(|_| sandboxed) {
            audit.add(found(
                Kind::SandboxRefused,
                Severity::Medium,
                "bash was refused by the sandbox (a write outside what the step may write, a protected path, or a read it may not make)".into(),
                line,
            ));
        }
    }
}
