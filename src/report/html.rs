//! `runner report`: one self-contained HTML file of a recorded run (docs/src/runs.md, "The
//! report"). It reads `run.json` and the transcripts and recomputes nothing the run recorded;
//! what it adds is layout: the graph's layers, where each bar goes on the time axis, and which
//! chain of steps decided when the run ended (the critical path).
//!
//! Why inline SVG drawn here and no script: the page must open from disk with no network, and
//! what it shows (transcripts, tool outputs, diffs) is text a model or a repository wrote. The
//! layout is simple (a layered graph, bars on one axis), so runner computes it once and writes
//! plain SVG: it draws before any script could run, prints, is searchable text, costs nothing per
//! open (a 1,000-instance run is drawn, not laid out in the browser), and lets the page carry a
//! Content-Security-Policy that allows no script at all, so even a mistake in escaping could not
//! run anything. Folding is `<details>`; navigation is anchors. Escaping is minijinja's HTML
//! auto-escaping of every value.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::provider::message::Usage;
use crate::record::{RunRecord, StepRecord, StepStatus};
use crate::units::{seconds, tokens, usd};

/// Tool outputs in the report are cut to this many characters (`runner show` has the whole).
const OUTPUT_SHOWN: usize = 2_000;
/// A reply's text in the report is cut to this many characters: a page stays a size a browser
/// opens, whatever a model wrote.
const REPLY_SHOWN: usize = 20_000;
/// Lines of a step's diff shown at most; the rest are counted.
const DIFF_LINES: usize = 2_000;

/// The drawing's sizes, in CSS pixels.
const NODE_W: f64 = 190.0;
const NODE_H: f64 = 46.0;
const GAP_X: f64 = 70.0;
const GAP_Y: f64 = 18.0;
const LABEL_W: f64 = 230.0;
const AXIS_W: f64 = 900.0;
const ROW_H: f64 = 20.0;

/// What the page needs besides the run: each step's transcript, by step or instance id.
pub struct Sources<'a> {
    pub transcript: &'a dyn Fn(&str) -> Option<String>,
    pub baseline: Option<&'a RunRecord>,
}

/// The report of `record` as one HTML document.
pub fn render(record: &RunRecord, sources: &Sources<'_>) -> Result<String, String> {
    let times = Times::of(record);
    let chain = critical_path(record, &times);
    let critical: BTreeSet<&str> = chain.iter().copied().collect();
    let anchors: BTreeMap<&str, String> = record
        .steps
        .keys()
        .enumerate()
        .map(|(i, id)| (id.as_str(), format!("step-{i}")))
        .collect();
    let context = json!({
        "run": run_facts(record),
        "dag": dag(record, &critical, &anchors),
        "timeline": timeline(record, &times, &critical, &anchors),
        "answers": answers(record),
        "steps": record.in_plan_order().into_iter().map(|(id, step)| {
            step_facts(id, step, &anchors[id.as_str()], critical.contains(id.as_str()), sources)
        }).collect::<Vec<_>>(),
        "critical": chain,
        "baseline": sources.baseline.map(|base| baseline(base, record)),
    });
    let mut env = minijinja::Environment::new();
    // Named `.html`, so every value is HTML-escaped where it is written.
    env.add_template("report.html", include_str!("report.html"))
        .map_err(|err| format!("the report template: {err}"))?;
    env.get_template("report.html")
        .and_then(|t| t.render(minijinja::value::Serde(&context)))
        .map_err(|err| format!("cannot draw the report: {err}"))
}

/// What the run found: the answer of each step no other step needs (docs/src/runs.md "The
/// answer"), at the top of the page.
fn answers(record: &RunRecord) -> Vec<Value> {
    let mut found = Vec::new();
    for (id, step) in record.leaves() {
        let parts: Vec<(&str, &StepRecord)> = if step.instances.is_empty() {
            vec![(id.as_str(), step)]
        } else {
            step.instances
                .iter()
                .map(|i| (i.instance.as_deref().unwrap_or(id), i))
                .collect()
        };
        for (id, step) in parts {
            if step.status != StepStatus::Succeeded {
                continue;
            }
            let text = if step.output.is_null() {
                step.summary.trim_end().to_owned()
            } else {
                serde_json::to_string_pretty(&step.output).unwrap_or_default()
            };
            if !text.is_empty() {
                found
                    .push(json!({"id": id, "text": crate::report::turns::cut(&text, REPLY_SHOWN)}));
            }
        }
    }
    found
}

/// The run's header and totals.
fn run_facts(record: &RunRecord) -> Value {
    let here: Vec<&StepRecord> = record.done_here().collect();
    let usage = record.usage_here();
    json!({
        "id": record.run_id,
        "workflow": record.workflow,
        "status": record.status.as_str(),
        "started_at": crate::units::when(&record.started_at),
        "duration": seconds(record.duration_ms),
        "cost": record.cost_usd.map(usd),
        "runner_version": record.runner_version,
        "inputs": record.inputs,
        "steps": record.steps.len(),
        "turns": here.iter().map(|s| u64::from(s.turns)).sum::<u64>(),
        "tool_calls": here.iter().map(|s| u64::from(s.tool_calls)).sum::<u64>(),
        "input_tokens": tokens(usage.total_input()),
        "output_tokens": tokens(usage.output_tokens),
        "cache_share": cache_share(&usage),
        // As the record computed them when the run settled (`record::QueueWaits`).
        "queue_waits": record.queue_waits.as_ref().map(|w| {
            w.lines().into_iter().map(|(kind, p)| json!({
                "kind": kind,
                "count": p.count,
                "p50": seconds(p.p50_ms),
                "p90": seconds(p.p90_ms),
                "p99": seconds(p.p99_ms),
            })).collect::<Vec<_>>()
        }),
    })
}

/// The share of input tokens served from the prompt cache, as a percentage.
fn cache_share(usage: &Usage) -> Option<String> {
    let all = usage.total_input();
    (all > 0).then(|| {
        format!(
            "{:.0}%",
            usage.cache_read_input_tokens as f64 * 100.0 / all as f64
        )
    })
}

/// When each step and instance waited, started and ended, in milliseconds from the run's start.
struct Times {
    spans: BTreeMap<String, Span>,
}

#[derive(Clone, Copy)]
struct Span {
    queued: i64,
    start: i64,
    end: i64,
}

impl Times {
    fn of(record: &RunRecord) -> Self {
        let origin = parse(&record.started_at);
        let mut spans = BTreeMap::new();
        let mut add = |id: &str, step: &StepRecord| {
            // A step reused from an earlier run did not run in this one, nor did a skipped one:
            // no bar.
            if step.reused_from.is_some()
                || matches!(step.status, StepStatus::Skipped | StepStatus::Pending)
            {
                return;
            }
            if let (Some(origin), Some(start)) =
                (origin, step.started_at.as_deref().and_then(parse))
            {
                let start = start - origin;
                let queued = start - step.queue_ms.unwrap_or(0) as i64;
                spans.insert(
                    id.to_owned(),
                    Span {
                        queued,
                        start,
                        end: start + step.duration_ms as i64,
                    },
                );
            }
        };
        for (id, step) in &record.steps {
            add(id, step);
            for instance in &step.instances {
                add(instance.instance.as_deref().unwrap_or(id), instance);
            }
        }
        Times { spans }
    }

    fn end(&self) -> i64 {
        self.spans.values().map(|s| s.end).max().unwrap_or(0).max(1)
    }
}

/// Milliseconds since the epoch of an RFC 3339 time.
fn parse(text: &str) -> Option<i64> {
    text.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// The chain of steps that decided when the run ended: from the step that ended last, back
/// through the step it needed that ended last, to a step that needed none; first step first.
fn critical_path<'a>(record: &'a RunRecord, times: &Times) -> Vec<&'a str> {
    let end = |id: &str| times.spans.get(id).map(|s| s.end);
    let mut path = Vec::new();
    let mut current = record
        .steps
        .keys()
        .filter_map(|id| end(id).map(|e| (e, id.as_str())))
        .max();
    while let Some((_, id)) = current {
        if path.contains(&id) {
            break;
        }
        path.push(id);
        current = record
            .needs
            .get(id)
            .into_iter()
            .flatten()
            .filter_map(|need| {
                let (key, _) = record.steps.get_key_value(need)?;
                end(need).map(|e| (e, key.as_str()))
            })
            .max();
    }
    path.reverse();
    path
}

/// The graph drawn left to right: a step's column is the longest chain of needs before it; in a
/// column, steps are ordered by where the steps they need are (one pass of the barycentre rule,
/// enough to keep edges from crossing in the shapes workflows have).
fn dag(record: &RunRecord, critical: &BTreeSet<&str>, anchors: &BTreeMap<&str, String>) -> Value {
    let needs = |id: &str| -> Vec<&str> {
        record
            .needs
            .get(id)
            .into_iter()
            .flatten()
            .map(String::as_str)
            .filter(|n| record.steps.contains_key(*n))
            .collect()
    };
    // Columns by longest path; the record's needs were checked acyclic by the plan, and a
    // hand-edited record with a cycle stops at the number of steps.
    let mut column: BTreeMap<&str, usize> = record.steps.keys().map(|k| (k.as_str(), 0)).collect();
    for _ in 0..record.steps.len() {
        let mut changed = false;
        for id in record.steps.keys() {
            let want = needs(id)
                .iter()
                .map(|n| column[n] + 1)
                .max()
                .unwrap_or(0)
                .min(record.steps.len());
            if column[id.as_str()] != want {
                column.insert(id, want);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let columns = column.values().max().map_or(0, |m| m + 1);
    let mut row: BTreeMap<&str, f64> = BTreeMap::new();
    let mut tallest = 0usize;
    for c in 0..columns {
        let mut here: Vec<(f64, &str)> = column
            .iter()
            .filter(|(_, col)| **col == c)
            .map(|(id, _)| {
                let rows: Vec<f64> = needs(id)
                    .iter()
                    .filter_map(|n| row.get(n))
                    .copied()
                    .collect();
                let centre = if rows.is_empty() {
                    f64::MAX
                } else {
                    rows.iter().sum::<f64>() / rows.len() as f64
                };
                (centre, *id)
            })
            .collect();
        here.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
        tallest = tallest.max(here.len());
        for (i, (_, id)) in here.into_iter().enumerate() {
            row.insert(id, i as f64);
        }
    }
    let at = |id: &str| {
        (
            12.0 + column[id] as f64 * (NODE_W + GAP_X),
            12.0 + row[id] * (NODE_H + GAP_Y),
        )
    };
    let nodes: Vec<Value> = record
        .steps
        .iter()
        .map(|(id, step)| {
            let (x, y) = at(id);
            json!({
                "id": id,
                "label": short(id, 24),
                "line": node_line(step),
                "status": step.status.as_str(),
                "critical": critical.contains(id.as_str()),
                "anchor": anchors[id.as_str()],
                "x": x, "y": y, "w": NODE_W, "h": NODE_H,
            })
        })
        .collect();
    let mut edges = Vec::new();
    for id in record.steps.keys() {
        for need in needs(id) {
            let (x1, y1) = at(need);
            let (x2, y2) = at(id);
            let (x1, y1, y2) = (x1 + NODE_W, y1 + NODE_H / 2.0, y2 + NODE_H / 2.0);
            let mid = (x1 + x2) / 2.0;
            edges.push(json!({
                "d": format!("M{x1:.1},{y1:.1} C{mid:.1},{y1:.1} {mid:.1},{y2:.1} {x2:.1},{y2:.1}"),
                "critical": critical.contains(id.as_str()) && critical.contains(need),
            }));
        }
    }
    json!({
        "width": 24.0 + columns as f64 * (NODE_W + GAP_X) - GAP_X,
        "height": 24.0 + tallest as f64 * (NODE_H + GAP_Y) - GAP_Y,
        "nodes": nodes,
        "edges": edges,
    })
}

/// The second line of a graph node.
fn node_line(step: &StepRecord) -> String {
    if !step.instances.is_empty() {
        return short(&step.summary, 30);
    }
    if step.reused_from.is_some() {
        return format!("{} (reused)", step.status.as_str());
    }
    let mut parts = vec![step.status.as_str().to_owned()];
    if step.turns > 0 {
        parts.push(crate::units::count(step.turns.into(), "turn", "turns"));
    }
    if let Some(cost) = step.cost_usd {
        parts.push(usd(cost));
    }
    parts.join(" · ")
}

/// `text` cut to `n` characters with `…`, redacted before it is cut (a cut secret is no longer
/// one the redactor knows).
fn short(text: &str, n: usize) -> String {
    let text = crate::secrets::redact(text);
    if text.chars().count() <= n {
        return text.into_owned();
    }
    let kept: String = text.chars().take(n - 1).collect();
    format!("{kept}…")
}

/// Steps and instances as bars on one time axis: the wait for a slot, the run, and its checks.
fn timeline(
    record: &RunRecord,
    times: &Times,
    critical: &BTreeSet<&str>,
    anchors: &BTreeMap<&str, String>,
) -> Value {
    let total = times.end();
    let x = |ms: i64| LABEL_W + (ms.max(0) as f64) * AXIS_W / total as f64;
    // Steps in plan order, as everywhere else, each followed by its instances.
    let mut rows = Vec::new();
    for (id, step) in record.in_plan_order() {
        let anchor = &anchors[id.as_str()];
        rows.push(bar(
            id,
            step,
            times.spans.get(id.as_str()),
            false,
            critical.contains(id.as_str()),
            anchor,
            &x,
        ));
        for (k, instance) in step.instances.iter().enumerate() {
            let iid = instance.instance.as_deref().unwrap_or(id);
            // Into the instance's body, so that following it unfolds the instance.
            let to = format!("{anchor}-{k}-body");
            let span = times.spans.get(iid);
            rows.push(bar(iid, instance, span, true, false, &to, &x));
        }
    }
    let rows: Vec<Value> = rows
        .into_iter()
        .enumerate()
        .map(|(i, mut row)| {
            row["y"] = json!(30.0 + i as f64 * ROW_H);
            row
        })
        .collect();
    let tick = nice_tick(total);
    let ticks: Vec<Value> = (0..)
        .map(|i| i * tick)
        .take_while(|ms| *ms <= total)
        .map(|ms| json!({"x": x(ms), "label": tick_label(ms, tick)}))
        .collect();
    json!({
        "width": LABEL_W + AXIS_W + 20.0,
        "height": 40.0 + rows.len() as f64 * ROW_H,
        "rows": rows,
        "ticks": ticks,
        "total": seconds(total as u64),
    })
}

/// One row of the timeline.
fn bar(
    id: &str,
    step: &StepRecord,
    span: Option<&Span>,
    instance: bool,
    critical: bool,
    anchor: &str,
    x: &dyn Fn(i64) -> f64,
) -> Value {
    let width = |a: i64, b: i64| (x(b) - x(a)).max(1.0);
    let mut row = json!({
        "id": id,
        "label": short(id, 30),
        "status": step.status.as_str(),
        "instance": instance,
        "critical": critical,
        "anchor": anchor,
        "reused": step.reused_from.is_some(),
    });
    let Some(span) = span else {
        return row;
    };
    row["title"] = json!(format!(
        "{id}: {}, waited {}, ran {} from {}",
        step.status.as_str(),
        seconds((span.start - span.queued) as u64),
        seconds(step.duration_ms),
        seconds(span.start.max(0) as u64),
    ));
    if span.start > span.queued {
        row["queue"] = json!({"x": x(span.queued), "w": width(span.queued, span.start)});
    }
    row["run"] = json!({"x": x(span.start), "w": width(span.start, span.end)});
    let origin = span.start
        - step
            .started_at
            .as_deref()
            .and_then(parse)
            .unwrap_or_default();
    row["checks"] = step
        .checks
        .iter()
        .filter_map(|check| {
            let at = check.started_at.as_deref().and_then(parse)? + origin;
            Some(json!({
                "x": x(at),
                "w": width(at, at + check.duration_ms as i64),
                "passed": check.passed,
                "title": format!("check `{}` (round {}): {}, {}", check.command, check.round,
                    if check.passed { "passed" } else { "failed" }, seconds(check.duration_ms)),
            }))
        })
        .collect();
    row
}

/// A tick's label, as precise as the interval between ticks.
fn tick_label(ms: i64, tick: i64) -> String {
    if tick < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 || tick < 10_000 {
        format!("{}s", ms / 1_000)
    } else {
        format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1_000)
    }
}

/// A tick interval of 1, 2 or 5 times a power of ten giving about eight ticks.
fn nice_tick(total_ms: i64) -> i64 {
    let rough = (total_ms / 8).max(1);
    let mut unit = 1;
    while unit * 10 <= rough {
        unit *= 10;
    }
    [1, 2, 5, 10]
        .into_iter()
        .map(|m| m * unit)
        .find(|t| *t >= rough)
        .unwrap_or(unit * 10)
}

/// Everything shown for one step (or instance) under its heading.
fn step_facts(
    id: &str,
    step: &StepRecord,
    anchor: &str,
    critical: bool,
    sources: &Sources<'_>,
) -> Value {
    let mut facts = facts_of(id, step, sources);
    facts["anchor"] = json!(anchor);
    facts["critical"] = json!(critical);
    let instances: Vec<Value> = step
        .instances
        .iter()
        .enumerate()
        .map(|(k, instance)| {
            let iid = instance.instance.as_deref().unwrap_or(id);
            let mut f = facts_of(iid, instance, sources);
            f["anchor"] = json!(format!("{anchor}-{k}"));
            f["item"] = json!(instance.item.as_ref().map(|i| short(&i.to_string(), 120)));
            f
        })
        .collect();
    // Among many instances, the ones that failed are named first, each a link (the browser
    // unfolds the instance it leads to).
    facts["failed_instances"] = instances
        .iter()
        .filter(|f| f["failed"] == true)
        .map(|f| json!({"id": f["id"], "anchor": f["anchor"]}))
        .collect();
    facts["instances"] = json!(instances);
    facts
}

fn facts_of(id: &str, step: &StepRecord, sources: &Sources<'_>) -> Value {
    let usage = step.usage();
    let transcript = (sources.transcript)(id)
        .map(|text| {
            let story = crate::report::turns::read(&text, OUTPUT_SHOWN);
            let turns: Vec<Value> = story
                .turns
                .iter()
                .map(|turn| {
                    let n = |key: &str| turn.usage[key].as_u64().unwrap_or(0);
                    json!({
                        "turn": turn.turn,
                        "text": crate::report::turns::cut(turn.text.trim(), REPLY_SHOWN),
                        "usage": format!("in {} (cache read {}, written {}), out {}",
                            tokens(n("input_tokens")), tokens(n("cache_read_input_tokens")),
                            tokens(n("cache_creation_input_tokens")), tokens(n("output_tokens"))),
                        "cost": turn.cost_usd.map(usd),
                        "compaction": turn.compaction,
                        // Checks and context events where they happened.
                        "notes": turn.notes.iter().filter_map(|i| story.notes.get(*i))
                            .map(crate::report::turns::note_line).collect::<Vec<_>>(),
                        "calls": turn.tool_calls.iter().map(|call| json!({
                            "name": call["name"],
                            "input": crate::report::turns::cut(&call["input"].to_string(), 300),
                            "output": call["output"],
                            "error": call["is_error"] == true,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            // What happened before the first turn; the rest are under their turns.
            let placed: BTreeSet<usize> = story
                .turns
                .iter()
                .flat_map(|t| t.notes.iter().copied())
                .collect();
            let notes: Vec<String> = story
                .notes
                .iter()
                .enumerate()
                .filter(|(i, _)| !placed.contains(i))
                .map(|(_, note)| crate::report::turns::note_line(note))
                .collect();
            json!({"turns": turns, "notes": notes, "events": story.notes.len()})
        })
        .filter(|t| {
            t["turns"].as_array().is_some_and(|a| !a.is_empty())
                || t["events"].as_u64().is_some_and(|n| n > 0)
        });
    let diff = step.diff.as_deref().map(|diff| {
        let mut lines: Vec<Value> = diff
            .lines()
            .take(DIFF_LINES)
            .map(|line| {
                let kind = if line.starts_with("+++") || line.starts_with("---") {
                    "file"
                } else if line.starts_with('+') {
                    "add"
                } else if line.starts_with('-') {
                    "del"
                } else if line.starts_with("@@") {
                    "hunk"
                } else {
                    ""
                };
                json!({"kind": kind, "text": line})
            })
            .collect();
        let all = diff.lines().count();
        if all > DIFF_LINES {
            lines.push(
                json!({"kind": "hunk", "text": format!("… {} more lines", all - DIFF_LINES)}),
            );
        }
        lines
    });
    json!({
        "id": id,
        "status": step.status.as_str(),
        "model": step.model,
        "summary": step.summary,
        "error": step.error,
        "output": (!step.output.is_null()).then(|| serde_json::to_string_pretty(&step.output).unwrap_or_default()),
        "turns": step.turns,
        "tool_calls": step.tool_calls,
        "tokens_in": tokens(usage.total_input()),
        "tokens_out": tokens(step.output_tokens),
        "cache_share": cache_share(&usage),
        "cost": step.cost_usd.map(usd),
        "duration": seconds(step.duration_ms),
        // A wait shorter than the precision shown is no wait.
        "queue": step.queue_ms.filter(|q| *q >= 50).map(seconds),
        "started_at": step.started_at.as_deref().map(crate::units::when),
        "branch": step.branch,
        "worktree": step.worktree,
        "reused_from": step.reused_from,
        "compactions": step.compactions,
        "ran_out_of_turns": step.ran_out_of_turns,
        "checks": step.checks.iter().map(|c| json!({
            "command": c.command,
            "round": c.round,
            "exit_code": c.exit_code,
            "passed": c.passed,
            "timed_out": c.timed_out,
            "duration": seconds(c.duration_ms),
        })).collect::<Vec<_>>(),
        "subagents": step.subagents.iter().map(|s| json!({
            "id": s.id,
            "agent": s.agent,
            "model": s.model,
            "status": s.status.as_str(),
            "turns": s.turns,
            "tokens": tokens(s.total_tokens()),
            "duration": seconds(s.duration_ms),
            "error": s.error,
        })).collect::<Vec<_>>(),
        "diff": diff,
        "transcript": transcript,
        "failed": matches!(step.status, StepStatus::Failed | StepStatus::Cancelled),
    })
}

/// What changed against an earlier run: `runner diff`'s comparison, drawn.
fn baseline(base: &RunRecord, record: &RunRecord) -> Value {
    use crate::commands::diff::{compare, pair};
    let diff = compare(base, record);
    json!({
        "a": diff.a,
        "b": diff.b,
        "status": diff.status,
        "cost": pair(&[base.cost_usd, record.cost_usd], |c| usd(*c)),
        "duration": pair(&[Some(base.duration_ms), Some(record.duration_ms)], |d| seconds(*d)),
        "steps": diff.steps.iter().map(|s| json!({
            "id": s.id,
            "change": s.change,
            "status": pair(&s.status, |t| (*t).to_owned()),
            "tools": pair(&s.tool_calls, u32::to_string),
            "tokens": pair(&s.tokens, |t| tokens(*t)),
            "cost": pair(&s.cost_usd, |c| usd(*c)),
            "time": pair(&s.duration_ms, |d| seconds(*d)),
            "summary": s.summary.map(|[a, b]| summary_diff(a, b)),
            "output": s.output.map(|[a, b]| [a.to_string(), b.to_string()]),
        })).collect::<Vec<_>>(),
    })
}

/// A line diff of two summaries, bounded like `runner diff`'s.
fn summary_diff(a: &str, b: &str) -> Vec<Value> {
    let lines = similar::TextDiff::configure()
        .timeout(crate::commands::diff::DIFF_DEADLINE)
        .diff_lines(a, b);
    lines
        .iter_all_changes()
        .take(crate::commands::diff::MAX_SUMMARY_LINES)
        .map(|change| {
            let kind = match change.tag() {
                similar::ChangeTag::Delete => "del",
                similar::ChangeTag::Insert => "add",
                similar::ChangeTag::Equal => "",
            };
            json!({"kind": kind, "text": change.value().trim_end_matches('\n')})
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of `(id, status, start ms, duration ms, needs)`.
    fn run(steps: &[(&str, &str, u64, u64, &[&str])]) -> RunRecord {
        let at = |ms: u64| {
            jiff::Timestamp::from_millisecond(1_800_000_000_000 + ms as i64)
                .unwrap()
                .to_string()
        };
        let mut record = serde_json::json!({
            "run_id": "r", "workflow": "w", "status": "succeeded", "started_at": at(0),
            "duration_ms": 0, "steps": {}, "needs": {},
        });
        for (id, status, start, duration, needs) in steps {
            let mut step = serde_json::to_value(StepRecord::pending("m")).unwrap();
            step["status"] = json!(status);
            step["started_at"] = json!(at(*start));
            step["duration_ms"] = json!(duration);
            record["steps"][id] = step;
            if !needs.is_empty() {
                record["needs"][id] = json!(needs);
            }
        }
        serde_json::from_value(record).unwrap()
    }

    #[test]
    fn the_critical_path_follows_what_ended_last() {
        // a (0-100) and b (0-300) feed c (300-400); d ran alone (0-350).
        let record = run(&[
            ("a", "succeeded", 0, 100, &[]),
            ("b", "succeeded", 0, 300, &[]),
            ("c", "succeeded", 300, 100, &["a", "b"]),
            ("d", "succeeded", 0, 350, &[]),
            ("e", "skipped", 500, 0, &["c"]),
        ]);
        let times = Times::of(&record);
        assert_eq!(critical_path(&record, &times), vec!["b", "c"]);
        // A skipped step has no bar, and is not on the path even with a late start.
        assert!(!times.spans.contains_key("e"));
    }

    #[test]
    fn long_replies_and_outputs_are_cut_and_html_is_text() {
        let record = run(&[("s", "succeeded", 0, 100, &[])]);
        let long = "y".repeat(30_000);
        let lines = [
            json!({"event": "turn_started", "step": "s", "turn": 1}),
            json!({"event": "turn_finished", "step": "s", "turn": 1, "usage": {},
                "body": {"content": [{"type": "text", "text": format!("<b>bold</b>{long}")}],
                    "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}}}),
            json!({"event": "tool_started", "step": "s", "turn": 1, "id": "t", "name": "read_file",
                "input": {"path": "a"}}),
            json!({"event": "tool_finished", "step": "s", "turn": 1, "id": "t", "name": "read_file",
                "is_error": false, "output": long}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let transcript = |step: &str| (step == "s").then(|| text.clone());
        let page = render(
            &record,
            &Sources {
                transcript: &transcript,
                baseline: None,
            },
        )
        .unwrap();
        // minijinja escapes `/` too.
        assert!(page.contains("&lt;b&gt;bold&lt;&#x2f;b&gt;"), "escaped");
        assert!(!page.contains("<b>bold"));
        assert!(page.contains("(30011 bytes in all)"), "the reply is cut");
        assert!(page.contains("(30000 bytes in all)"), "the output is cut");
        assert!(page.len() < 60_000, "{}", page.len());
    }

    #[test]
    fn ticks_are_round_numbers() {
        assert_eq!(nice_tick(1_000), 200);
        assert_eq!(nice_tick(9_000), 2_000);
        assert_eq!(nice_tick(60_000), 10_000);
        assert_eq!(nice_tick(1), 1);
        assert_eq!(tick_label(40, 20), "40 ms");
        assert_eq!(tick_label(4_000, 2_000), "4s");
        assert_eq!(tick_label(120_000, 20_000), "2m00s");
    }
}
