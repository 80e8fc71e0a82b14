//! How long work waited for a slot (docs/src/runs.md "Scheduling and failures"): the median,
//! 90th and 99th percentile of the queue waits of a run's steps, fan-out instances and
//! subagents, computed once when the run settles so that `show` and the report only show it.

use serde::{Deserialize, Serialize};

use super::{RunRecord, StepRecord};

/// The queue waits of one kind of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    /// How many waited (started) at all.
    pub count: usize,
    pub p50_ms: u64,
    pub p90_ms: u64,
    pub p99_ms: u64,
    pub max_ms: u64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `waits`; `None` when there are none.
    pub fn of(mut waits: Vec<u64>) -> Option<Self> {
        if waits.is_empty() {
            return None;
        }
        waits.sort_unstable();
        let rank = |p: usize| {
            // Nearest rank: the smallest value with at least p% of the values at or below it.
            let at = (p * waits.len()).div_ceil(100).max(1) - 1;
            waits[at.min(waits.len() - 1)]
        };
        Some(Percentiles {
            count: waits.len(),
            p50_ms: rank(50),
            p90_ms: rank(90),
            p99_ms: rank(99),
            max_ms: waits[waits.len() - 1],
        })
    }
}

/// A run's queue waits: what waited for `max_parallel` (steps, instances) and for
/// `max_subagents` (subagents). A kind with nothing that waited is left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueWaits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Percentiles>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Percentiles>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagents: Option<Percentiles>,
}

impl QueueWaits {
    /// The waits of what this run started itself (reused steps waited in their own run).
    pub fn of(record: &RunRecord) -> Option<Self> {
        let here = || record.done_here();
        let subagents_of = |s: &StepRecord| {
            s.subagents
                .iter()
                .chain(s.instances.iter().flat_map(|i| i.subagents.iter()))
                .filter_map(|a| a.queue_ms)
                .collect::<Vec<_>>()
        };
        let waits = QueueWaits {
            // A fan-out step's own wait is none: its instances wait, each its own.
            steps: Percentiles::of(
                here()
                    .filter(|s| s.instances.is_empty())
                    .filter_map(|s| s.queue_ms)
                    .collect(),
            ),
            instances: Percentiles::of(
                here()
                    .flat_map(|s| s.instances.iter())
                    .filter(|i| i.reused_from.is_none())
                    .filter_map(|i| i.queue_ms)
                    .collect(),
            ),
            subagents: Percentiles::of(here().flat_map(subagents_of).collect()),
        };
        (waits != QueueWaits::default()).then_some(waits)
    }

    /// `steps 0 ms median, 1.2 s p90, 3.4 s p99 (6)`, one line per kind that waited.
    pub fn lines(&self) -> Vec<(&'static str, Percentiles)> {
        [
            ("steps", self.steps),
            ("instances", self.instances),
            ("subagents", self.subagents),
        ]
        .into_iter()
        .filter_map(|(kind, p)| p.map(|p| (kind, p)))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        assert_eq!(Percentiles::of(Vec::new()), None);
        let one = Percentiles::of(vec![7]).unwrap();
        assert_eq!(
            (one.p50_ms, one.p90_ms, one.p99_ms, one.count),
            (7, 7, 7, 1)
        );
        let hundred = Percentiles::of((1..=100).rev().collect()).unwrap();
        assert_eq!(
            (
                hundred.p50_ms,
                hundred.p90_ms,
                hundred.p99_ms,
                hundred.max_ms
            ),
            (50, 90, 99, 100)
        );
        let four = Percentiles::of(vec![0, 10, 20, 30]).unwrap();
        assert_eq!((four.p50_ms, four.p90_ms, four.p99_ms), (10, 30, 30));
    }
}
