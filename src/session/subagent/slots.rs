//! The run's `max_subagents` slots, handed out by priority instead of first come, first served
//! (docs/src/runs.md "The order steps start in"): a subagent of the step with the longest
//! remaining path to the end of the DAG gets the next free slot, ties by the step declared
//! first, then by who asked first. A step on the critical path is not held up by the subagents
//! of a step that can wait.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

/// Whose subagent asks: the longer its step's remaining path, the sooner it gets a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Priority {
    /// The step's (or instance's) longest remaining path, as the scheduler weighed it.
    pub remaining: u64,
    /// The step's place in the file, first declared first.
    pub declared: Reverse<usize>,
}

impl Default for Priority {
    /// Last of all: what no scheduler ranked.
    fn default() -> Self {
        Priority {
            remaining: 0,
            declared: Reverse(usize::MAX),
        }
    }
}

/// One waiting request: highest priority first, then the earliest.
struct Waiter {
    priority: Priority,
    order: Reverse<u64>,
    granted: oneshot::Sender<()>,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        (self.priority, self.order) == (other.priority, other.order)
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.priority, self.order).cmp(&(other.priority, other.order))
    }
}

struct State {
    free: usize,
    waiting: BinaryHeap<Waiter>,
    asked: u64,
}

/// A fixed number of slots.
pub struct Slots {
    state: Mutex<State>,
}

/// A slot held until dropped.
pub struct Permit {
    slots: Arc<Slots>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.slots.release();
    }
}

/// A request not granted yet: dropped (its subagent cancelled), it gives back a slot that was
/// granted meanwhile, so none is lost.
struct Pending {
    granted: Option<oneshot::Receiver<()>>,
    slots: Arc<Slots>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut granted) = self.granted.take() {
            // Closed first: no slot can be sent after this look.
            granted.close();
            if granted.try_recv().is_ok() {
                self.slots.release();
            }
        }
    }
}

impl Slots {
    pub fn new(slots: usize) -> Arc<Self> {
        Arc::new(Slots {
            state: Mutex::new(State {
                free: slots,
                waiting: BinaryHeap::new(),
                asked: 0,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot, when one is free and no one with a claim is waiting; else the wait for one.
    pub async fn acquire(self: &Arc<Self>, priority: Priority) -> Permit {
        let granted = {
            let mut state = self.state();
            if state.free > 0 && state.waiting.is_empty() {
                state.free -= 1;
                return Permit {
                    slots: self.clone(),
                };
            }
            let (granted, wait) = oneshot::channel();
            state.asked += 1;
            let order = Reverse(state.asked);
            state.waiting.push(Waiter {
                priority,
                order,
                granted,
            });
            wait
        };
        let mut pending = Pending {
            granted: Some(granted),
            slots: self.clone(),
        };
        if let Some(granted) = pending.granted.as_mut() {
            // The sender is only dropped after a send: an error cannot happen while `self`
            // lives, and would only mean the slot is ours anyway.
            let _ = granted.await;
        }
        pending.granted = None;
        Permit {
            slots: self.clone(),
        }
    }

    /// Gives a slot to the first waiter still waiting, else back to the free ones.
    fn release(&self) {
        let mut state = self.state();
        while let Some(waiter) = state.waiting.pop() {
            if waiter.granted.send(()).is_ok() {
                return;
            }
        }
        state.free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priority(remaining: u64, declared: usize) -> Priority {
        Priority {
            remaining,
            declared: Reverse(declared),
        }
    }

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_longest_path_then_the_first_declared_then_the_first_asked() {
        let slots = Slots::new(1);
        let held = slots.acquire(Priority::default()).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        // Queued in this order, one at a time (each is waiting before the next asks).
        for (name, p) in [
            ("short", priority(1, 0)),
            ("long", priority(5, 3)),
            ("long, declared first", priority(5, 1)),
            ("long, declared first, asked later", priority(5, 1)),
        ] {
            let (asking, tx) = (slots.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let permit = asking.acquire(p).await;
                tx.send(name).unwrap();
                drop(permit);
            }));
            // Until it waits: its waiter is in the heap.
            while slots.state().waiting.len() < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        let mut order = Vec::new();
        for _ in 0..4 {
            order.push(rx.recv().await.unwrap());
        }
        assert_eq!(
            order,
            [
                "long, declared first",
                "long, declared first, asked later",
                "long",
                "short"
            ]
        );
    }

    #[tokio::test]
    async fn a_request_dropped_while_waiting_loses_no_slot() {
        let slots = Slots::new(1);
        let held = slots.acquire(Priority::default()).await;
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(Priority::default()).await }
        });
        while slots.state().waiting.is_empty() {
            tokio::task::yield_now().await;
        }
        waiting.abort();
        let _ = waiting.await;
        drop(held);
        assert_eq!(slots.state().free, 1);
        let _again = slots.acquire(Priority::default()).await;
        assert_eq!(slots.state().free, 0);
    }
}
