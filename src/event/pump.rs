//! The sinks on a thread of their own. Steps and the scheduler put events on a [`Queue`] and go
//! on: putting one takes a lock and wakes nobody. The sinks' thread takes everything queued
//! about every [`TICK`] (at once when asked to flush), hands it to the sinks in the order it was
//! queued (so each step's events stay in order), then lets the sinks write what they buffered.
//! Encoding, redaction and file writes never hold up a step or the scheduler (docs/src/performance.md).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{Event, Sinks};

/// How long queued events wait for the sinks at most.
pub const TICK: Duration = Duration::from_millis(20);

/// Events queued past this many are handed over at once: each may carry a large tool output.
const HAND_OVER: usize = 4096;

enum Item {
    Event(Event),
    /// Answered once everything queued before it has been handled and written.
    Flush(oneshot::Sender<()>),
}

#[derive(Default)]
struct State {
    items: Vec<Item>,
    closed: bool,
    failure: Option<String>,
}

/// Where events wait for the sinks.
#[derive(Default)]
pub struct Queue {
    state: Mutex<State>,
    wake: Condvar,
    failed: CancellationToken,
}

impl Queue {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn push(&self, event: Event) {
        let mut state = self.state();
        state.items.push(Item::Event(event));
        if state.items.len() >= HAND_OVER {
            self.wake.notify_one();
        }
    }

    /// The first failure to record (a full disk), once a sink has met it.
    pub fn failure(&self) -> Option<String> {
        self.state().failure.clone()
    }

    /// Cancelled when a sink fails to record: the run stops.
    pub fn failed(&self) -> &CancellationToken {
        &self.failed
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Queue")
    }
}

/// The sinks' thread, and the queue that feeds it.
pub struct Pump {
    queue: Arc<Queue>,
    thread: Option<JoinHandle<Sinks>>,
}

impl Pump {
    pub fn start(sinks: Sinks) -> Pump {
        let queue = Arc::new(Queue::default());
        let feed = queue.clone();
        let thread = std::thread::Builder::new()
            .name("runner-sinks".into())
            .spawn(move || work(&feed, sinks));
        match thread {
            Ok(thread) => Pump {
                queue,
                thread: Some(thread),
            },
            // No thread to be had: the run cannot record, and says so when it stops.
            Err(err) => {
                queue.state().failure = Some(format!("cannot start the recording thread: {err}"));
                queue.failed.cancel();
                Pump {
                    queue,
                    thread: None,
                }
            }
        }
    }

    pub fn queue(&self) -> &Arc<Queue> {
        &self.queue
    }

    pub fn emit(&self, event: Event) {
        self.queue.push(event);
    }

    /// Waits until everything emitted so far has been handled and written.
    pub async fn flush(&self) {
        if self.thread.is_none() {
            return;
        }
        let (sender, receiver) = oneshot::channel();
        {
            let mut state = self.queue.state();
            state.items.push(Item::Flush(sender));
            self.queue.wake.notify_one();
        }
        let _ = receiver.await;
    }

    /// Handles what is left, stops the thread and gives the sinks back.
    pub fn finish(mut self) -> Sinks {
        self.queue.state().closed = true;
        self.queue.wake.notify_one();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(sinks)) => sinks,
            // A sink that panicked took the others with it; the run's record says so.
            _ => Sinks::failed("the recording thread stopped unexpectedly".into()),
        }
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.queue.state().closed = true;
            self.queue.wake.notify_one();
            let _ = thread.join();
        }
    }
}

fn work(queue: &Queue, mut sinks: Sinks) -> Sinks {
    loop {
        let (items, closed) = {
            let mut state = queue.state();
            if state.items.is_empty() && !state.closed {
                let wait = sinks
                    .deadline()
                    .map_or(TICK, |at| at.saturating_duration_since(Instant::now()))
                    .min(TICK);
                state = queue
                    .wake
                    .wait_timeout(state, wait)
                    .map_or_else(|e| e.into_inner().0, |(state, _)| state);
            }
            (std::mem::take(&mut state.items), state.closed)
        };
        for item in items {
            match item {
                Item::Event(event) => sinks.emit(&event),
                Item::Flush(done) => {
                    sinks.flush();
                    let _ = done.send(());
                }
            }
        }
        sinks.flush();
        if sinks.deadline().is_some_and(|at| at <= Instant::now()) {
            sinks.tick();
        }
        if let Some(failure) = sinks.failure() {
            let mut state = queue.state();
            if state.failure.is_none() {
                state.failure = Some(failure.clone());
                queue.failed.cancel();
            }
        }
        if closed && queue.state().items.is_empty() {
            return sinks;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventKind, Sink};

    /// Keeps the steps of what it handles, and fails on a step named `full`.
    struct Keep(Arc<Mutex<Vec<String>>>);

    impl Sink for Keep {
        fn handle(&mut self, event: &Event) -> Result<(), String> {
            let step = event.kind.step().unwrap_or_default().to_owned();
            if step == "full" {
                return Err("cannot write `run.json`: no space left".into());
            }
            self.0.lock().unwrap().push(step);
            Ok(())
        }
    }

    fn started(step: &str) -> Event {
        EventKind::StepStarted {
            step: step.into(),
            agent: "explore".into(),
            model: "m".into(),
        }
        .into()
    }

    #[tokio::test]
    async fn events_reach_the_sinks_in_order_and_flush_waits_for_them() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let pump = Pump::start(Sinks::new(vec![Box::new(Keep(seen.clone()))]));
        let want: Vec<String> = (0..10_000).map(|i| format!("s{i}")).collect();
        for step in &want {
            pump.emit(started(step));
        }
        pump.flush().await;
        // Everything emitted before the flush was handled when it returned.
        assert_eq!(*seen.lock().unwrap(), want);
        let sinks = pump.finish();
        assert!(sinks.failure().is_none());
    }

    #[tokio::test]
    async fn a_failure_to_record_cancels_the_run() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let pump = Pump::start(Sinks::new(vec![Box::new(Keep(seen.clone()))]));
        let failed = pump.queue().failed().clone();
        pump.emit(started("a"));
        pump.emit(started("full"));
        pump.emit(started("b"));
        failed.cancelled().await;
        assert_eq!(
            pump.queue().failure().as_deref(),
            Some("cannot write `run.json`: no space left")
        );
        let sinks = pump.finish();
        assert_eq!(*seen.lock().unwrap(), ["a", "b"]);
        assert!(sinks.failure().is_some());
    }
}
