//! The scheduler driven in-process by a channel executor: the test decides when each step ends,
//! so overlap, limits, ordering and the stop policy are checked without timing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use camino::Utf8PathBuf;
use futures_util::future::BoxFuture;
use runner::agent::AgentCatalog;
use runner::event::Sinks;
use runner::plan::{Plan, PlanOptions, build_plan};
use runner::run::executor::{Executor, StepJob};
use runner::run::{self, RunOptions, RunRecord, StepStatus};
use runner::session::{FailureKind, StepOutcome};
use runner::tools::Registry;
use runner::workflow::load_workflow;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Started(String),
    Finished(String),
    Dropped(String),
}

/// Runs no model: each step waits until the test finishes it.
#[derive(Clone)]
struct Channels {
    events: mpsc::UnboundedSender<Event>,
    log: Arc<Mutex<Vec<Event>>>,
    waiting: Arc<Mutex<BTreeMap<String, oneshot::Sender<StepOutcome>>>>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

/// Notes a step whose future was dropped before it finished (cancelled or timed out).
struct DropGuard(Option<(String, Channels)>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if let Some((id, channels)) = self.0.take() {
            channels.in_flight.fetch_sub(1, Ordering::SeqCst);
            channels
                .log
                .lock()
                .unwrap()
                .push(Event::Dropped(id.clone()));
            let _ = channels.events.send(Event::Dropped(id));
        }
    }
}

impl Executor for Channels {
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome> {
        let id = job.step.id.clone();
        // Counted when the scheduler asks, so the count reflects its decisions alone.
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id.clone(), tx);
        let channels = self.clone();
        Box::pin(async move {
            // "Started" once the step really runs (its future polled), so a cancelled step is
            // always seen being dropped.
            let mut guard = DropGuard(Some((id.clone(), channels.clone())));
            channels
                .log
                .lock()
                .unwrap()
                .push(Event::Started(id.clone()));
            let _ = channels.events.send(Event::Started(id.clone()));
            let outcome = rx.await.unwrap_or_else(|_| {
                StepOutcome::failed(FailureKind::Crashed, "test dropped the step")
            });
            guard.0 = None;
            channels.in_flight.fetch_sub(1, Ordering::SeqCst);
            outcome
        })
    }
}

impl Channels {
    fn finish(&self, id: &str, succeeded: bool) {
        self.log
            .lock()
            .unwrap()
            .push(Event::Finished(id.to_owned()));
        let tx = self
            .waiting
            .lock()
            .unwrap()
            .remove(id)
            .unwrap_or_else(|| panic!("{id} is not running"));
        let outcome = if succeeded {
            StepOutcome::succeeded(format!("{id} done"))
        } else {
            StepOutcome::failed(FailureKind::Model, format!("{id} broke"))
        };
        let _ = tx.send(outcome);
    }
}

fn plan(dir: &tempfile::TempDir, steps: &str, max_parallel: u32) -> Plan {
    let text = format!(
        "name = \"s\"\nmax_parallel = {max_parallel}\n[models]\ndefault = \"anthropic/x\"\n{steps}"
    );
    let path = Utf8PathBuf::from_path_buf(dir.path().join("w.toml")).unwrap();
    std::fs::write(&path, text).unwrap();
    let loaded = load_workflow(&path).unwrap();
    let (plan, problems) = build_plan(
        &loaded,
        &AgentCatalog::load(&[], &Registry::builtin()),
        &Registry::builtin(),
        &PlanOptions::default(),
    );
    plan.unwrap_or_else(|| panic!("{problems:?}"))
}

fn step(id: &str, needs: &[&str], extra: &str) -> String {
    let needs: Vec<String> = needs.iter().map(|n| format!("\"{n}\"")).collect();
    format!(
        "[steps.{id}]\nagent = \"explore\"\nprompt = \"{id}\"\nneeds = [{}]\n{extra}\n",
        needs.join(", ")
    )
}

struct Harness {
    channels: Channels,
    events: mpsc::UnboundedReceiver<Event>,
    run: tokio::task::JoinHandle<RunRecord>,
    _dir: tempfile::TempDir,
}

fn start(steps: &str, max_parallel: u32, fail_fast: bool) -> Harness {
    start_with(steps, max_parallel, fail_fast, CancellationToken::new())
}

fn start_with(
    steps: &str,
    max_parallel: u32,
    fail_fast: bool,
    interrupt: CancellationToken,
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let plan = plan(&dir, steps, max_parallel);
    let (tx, events) = mpsc::unbounded_channel();
    let channels = Channels {
        events: tx,
        log: Arc::default(),
        waiting: Arc::default(),
        in_flight: Arc::default(),
        max_in_flight: Arc::default(),
    };
    let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
    let options = RunOptions {
        workdir: root.clone(),
        state_dir: root.join(".runner"),
        fail_fast,
        resume: None,
        continue_steps: false,
        only: BTreeSet::new(),
        run_id: None,
        interrupt,
        last_saved: Default::default(),
    };
    let executor: Arc<dyn Executor> = Arc::new(channels.clone());
    let run = tokio::spawn(async move {
        run::execute(&plan, executor, &options, &mut Sinks::default())
            .await
            .expect("run")
    });
    Harness {
        channels,
        events,
        run,
        _dir: dir,
    }
}

impl Harness {
    /// The next event; a guard against hanging forever, not a synchronisation.
    async fn next(&mut self) -> Event {
        tokio::time::timeout(Duration::from_secs(20), self.events.recv())
            .await
            .expect("the scheduler stalled")
            .expect("event channel open")
    }

    async fn expect_started(&mut self, ids: &[&str]) {
        let mut got = BTreeSet::new();
        while got.len() < ids.len() {
            match self.next().await {
                Event::Started(id) => {
                    got.insert(id);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(got, ids.iter().map(|s| s.to_string()).collect());
    }

    async fn done(self) -> (RunRecord, Vec<Event>, usize) {
        let record = self.run.await.unwrap();
        let log = self.channels.log.lock().unwrap().clone();
        (
            record,
            log,
            self.channels.max_in_flight.load(Ordering::SeqCst),
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn independent_steps_run_at_the_same_time() {
    let steps = [step("a", &[], ""), step("b", &[], ""), step("c", &[], "")].concat();
    let mut h = start(&steps, 4, false);
    // All three start before any is finished.
    h.expect_started(&["a", "b", "c"]).await;
    for id in ["b", "c", "a"] {
        h.channels.finish(id, true);
    }
    let (record, _, max) = h.done().await;
    assert_eq!(max, 3);
    assert!(
        record
            .steps
            .values()
            .all(|s| s.status == StepStatus::Succeeded)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn max_parallel_one_runs_steps_one_by_one() {
    let steps = [step("a", &[], ""), step("b", &[], ""), step("c", &[], "")].concat();
    let mut h = start(&steps, 1, false);
    for id in ["a", "b", "c"] {
        h.expect_started(&[id]).await;
        h.channels.finish(id, true);
    }
    let (_, log, max) = h.done().await;
    assert_eq!(max, 1);
    let starts: Vec<&Event> = log
        .iter()
        .filter(|e| matches!(e, Event::Started(_)))
        .collect();
    assert_eq!(starts.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_starts_only_after_all_its_needs() {
    let steps = [
        step("a", &[], ""),
        step("b", &[], ""),
        step("c", &["a", "b"], ""),
        step("d", &["a"], ""),
    ]
    .concat();
    let mut h = start(&steps, 4, false);
    h.expect_started(&["a", "b"]).await;
    h.channels.finish("a", true);
    h.expect_started(&["d"]).await;
    h.channels.finish("b", true);
    h.expect_started(&["c"]).await;
    h.channels.finish("c", true);
    h.channels.finish("d", true);
    let (_, log, _) = h.done().await;
    let at = |e: Event| log.iter().position(|x| *x == e).unwrap();
    assert!(at(Event::Started("c".into())) > at(Event::Finished("b".into())));
    assert!(at(Event::Started("d".into())) > at(Event::Finished("a".into())));
    assert!(at(Event::Started("d".into())) < at(Event::Finished("b".into())));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_skips_dependents_while_independent_steps_finish() {
    let steps = [
        step("a", &[], ""),
        step("b", &[], ""),
        step("c", &["a"], ""),
        step("d", &["c"], ""),
    ]
    .concat();
    let mut h = start(&steps, 4, false);
    h.expect_started(&["a", "b"]).await;
    h.channels.finish("a", false);
    h.channels.finish("b", true);
    let (record, log, _) = h.done().await;
    assert_eq!(record.steps["a"].status, StepStatus::Failed);
    assert_eq!(record.steps["b"].status, StepStatus::Succeeded);
    assert_eq!(record.steps["c"].status, StepStatus::Skipped);
    assert_eq!(record.steps["d"].status, StepStatus::Skipped);
    assert_eq!(record.status, run::RunStatus::Failed);
    assert!(!log.contains(&Event::Started("c".into())));
}

#[tokio::test(flavor = "multi_thread")]
async fn fail_fast_cancels_running_steps_and_starts_nothing_new() {
    let steps = [
        step("a", &[], ""),
        step("b", &[], ""),
        step("c", &["a"], ""),
        step("d", &["b"], ""),
    ]
    .concat();
    let mut h = start(&steps, 4, true);
    h.expect_started(&["a", "b"]).await;
    h.channels.finish("a", false);
    assert_eq!(h.next().await, Event::Dropped("b".into()));
    let (record, log, _) = h.done().await;
    assert_eq!(record.steps["a"].status, StepStatus::Failed);
    assert_eq!(record.steps["b"].status, StepStatus::Cancelled);
    assert_eq!(record.steps["c"].status, StepStatus::Cancelled);
    assert_eq!(record.steps["d"].status, StepStatus::Cancelled);
    assert_eq!(
        log.iter()
            .filter(|e| matches!(e, Event::Started(_)))
            .count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn continue_on_error_lets_dependents_run_and_the_run_succeed() {
    let steps = [
        step("a", &[], "continue_on_error = true"),
        step("b", &["a"], ""),
    ]
    .concat();
    let mut h = start(&steps, 4, false);
    h.expect_started(&["a"]).await;
    h.channels.finish("a", false);
    h.expect_started(&["b"]).await;
    h.channels.finish("b", true);
    let (record, _, _) = h.done().await;
    assert_eq!(record.steps["a"].status, StepStatus::Failed);
    assert_eq!(record.steps["b"].status, StepStatus::Succeeded);
    assert_eq!(record.status, run::RunStatus::Succeeded);
}

#[tokio::test(flavor = "multi_thread")]
async fn conditions_skip_and_skips_propagate_unless_a_step_has_its_own_if() {
    let steps = [
        step("a", &[], "if = \"false\""),
        step("b", &["a"], ""),
        step("c", &["a"], "if = \"steps.a.status == 'skipped'\""),
        step("d", &[], "if = \"workflow.name == 's'\""),
    ]
    .concat();
    let mut h = start(&steps, 4, false);
    h.expect_started(&["c", "d"]).await;
    h.channels.finish("c", true);
    h.channels.finish("d", true);
    let (record, log, _) = h.done().await;
    assert_eq!(record.steps["a"].status, StepStatus::Skipped);
    assert_eq!(record.steps["b"].status, StepStatus::Skipped);
    assert_eq!(record.steps["c"].status, StepStatus::Succeeded);
    assert_eq!(record.steps["d"].status, StepStatus::Succeeded);
    assert!(!log.contains(&Event::Started("a".into())));
    assert_eq!(record.status, run::RunStatus::Succeeded);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_cancels_running_steps() {
    let interrupt = CancellationToken::new();
    let mut h = start_with(
        &[step("a", &[], ""), step("b", &["a"], "")].concat(),
        2,
        false,
        interrupt.clone(),
    );
    h.expect_started(&["a"]).await;
    interrupt.cancel();
    assert_eq!(h.next().await, Event::Dropped("a".into()));
    let log = h.channels.log.clone();
    let Harness { run, _dir: dir, .. } = h;
    let record = run.await.unwrap();
    let root = dir.path().to_owned();
    let log = log.lock().unwrap().clone();
    assert_eq!(record.status, run::RunStatus::Interrupted);
    assert_eq!(record.steps["a"].status, StepStatus::Cancelled);
    assert_eq!(record.steps["b"].status, StepStatus::Cancelled);
    assert!(!log.contains(&Event::Started("b".into())));
    let saved =
        std::fs::read_to_string(root.join(format!(".runner/runs/{}/run.json", record.run_id)))
            .unwrap();
    assert!(saved.contains("\"status\": \"interrupted\""));
}

/// Panics in the step named `boom`, finishes the others at once.
struct Panics;

impl Executor for Panics {
    fn run(&self, job: StepJob) -> BoxFuture<'static, StepOutcome> {
        Box::pin(async move {
            assert!(job.step.id != "boom", "the executor blew up");
            StepOutcome::succeeded("")
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_that_panics_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let plan = plan(
        &dir,
        &[
            step("boom", &[], ""),
            step("fine", &[], ""),
            step("after", &["boom"], ""),
        ]
        .concat(),
        2,
    );
    let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
    let options = RunOptions {
        workdir: root.clone(),
        state_dir: root.join(".runner"),
        fail_fast: false,
        resume: None,
        continue_steps: false,
        only: BTreeSet::new(),
        run_id: None,
        interrupt: CancellationToken::new(),
        last_saved: Default::default(),
    };
    let record = run::execute(&plan, Arc::new(Panics), &options, &mut Sinks::default())
        .await
        .unwrap();
    assert_eq!(record.steps["boom"].status, StepStatus::Failed);
    assert!(
        record.steps["boom"]
            .error
            .as_deref()
            .unwrap()
            .contains("the step crashed")
    );
    assert_eq!(record.steps["fine"].status, StepStatus::Succeeded);
    assert_eq!(record.steps["after"].status, StepStatus::Skipped);
}
