//! The longest remaining path of each step to the end of the DAG (docs/src/runs.md "The order
//! steps start in"): what the scheduler starts first when more is ready than `max_parallel`
//! allows, and the critical path `plan` shows. Pure: the recorded durations come in from the
//! run's history (`run::history`), read where I/O belongs.

use super::Plan;

/// How a step is weighed: by its recorded duration, or by counting it as one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weigh {
    /// Milliseconds. Steps with no history weigh the median of those with some.
    Time,
    /// No step has history: every step weighs 1.
    Steps,
}

/// Each step's longest remaining path, itself included, by plan index.
#[derive(Debug, Clone)]
pub struct Paths {
    pub weigh: Weigh,
    /// What each step weighs (ms, or 1).
    pub weight: Vec<u64>,
    /// The longest path from the start of step `i` to the end of the DAG.
    pub remaining: Vec<u64>,
    /// Whether step `i`'s weight was recorded (not a stand-in).
    pub known: Vec<bool>,
}

impl Paths {
    /// The paths of `plan` with `recorded[i]` the recorded duration (ms) of step `i`, if any.
    pub fn new(plan: &Plan, recorded: &[Option<u64>]) -> Self {
        let n = plan.steps().len();
        let known: Vec<bool> = (0..n)
            .map(|i| recorded.get(i).copied().flatten().is_some())
            .collect();
        let mut durations: Vec<u64> = recorded.iter().flatten().copied().collect();
        let (weigh, stand_in) = if durations.is_empty() {
            (Weigh::Steps, 1)
        } else {
            // A step with no history is taken to be a typical step of this workflow: not 0
            // (which would start it last) and not a guess from elsewhere.
            durations.sort_unstable();
            (Weigh::Time, durations[(durations.len() - 1) / 2].max(1))
        };
        let weight: Vec<u64> = (0..n)
            .map(|i| match weigh {
                Weigh::Steps => 1,
                // At least 1 ms, so that a longer chain of instant steps still counts as longer.
                Weigh::Time => recorded
                    .get(i)
                    .copied()
                    .flatten()
                    .unwrap_or(stand_in)
                    .max(1),
            })
            .collect();
        let mut remaining = weight.clone();
        // Steps are sealed wave by wave: whatever needs step `i` comes after it, so one pass
        // from the end settles every path.
        for i in (0..n).rev() {
            for &need in plan.needs_of(i) {
                if let Some(slot) = remaining.get(need).copied() {
                    let through = weight[need].saturating_add(remaining[i]);
                    remaining[need] = slot.max(through);
                }
            }
        }
        Paths {
            weigh,
            weight,
            remaining,
            known,
        }
    }

    /// What comes after step `i` on its longest path (its own weight taken off).
    pub fn after(&self, i: usize) -> u64 {
        self.remaining[i].saturating_sub(self.weight[i])
    }

    /// The critical path: the step with the longest remaining path, then at each step the
    /// dependent with the longest, ties by declaration order. Plan indexes, first to last.
    pub fn critical_path(&self, plan: &Plan) -> Vec<usize> {
        let n = plan.steps().len();
        let mut dependents = vec![Vec::new(); n];
        for i in 0..n {
            for &need in plan.needs_of(i) {
                if let Some(list) = dependents.get_mut(need) {
                    list.push(i);
                }
            }
        }
        let best = |candidates: &mut dyn Iterator<Item = usize>| {
            candidates.min_by_key(|&i| (std::cmp::Reverse(self.remaining[i]), plan.declared(i)))
        };
        let mut path = Vec::new();
        let mut at = best(&mut (0..n).filter(|&i| plan.needs_of(i).is_empty()));
        while let Some(i) = at {
            path.push(i);
            let left = self.after(i);
            at = best(
                &mut dependents[i]
                    .iter()
                    .copied()
                    .filter(|&d| self.remaining[d] == left),
            );
        }
        path
    }

    /// The run's predicted length with at most `max_parallel` at once: the walk the scheduler
    /// makes (longest remaining path first), each step taking its weight. A fan-out counts as
    /// one step of its recorded length.
    pub fn makespan(&self, plan: &Plan, max_parallel: u32) -> u64 {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let n = plan.steps().len();
        let mut waiting: Vec<usize> = (0..n).map(|i| plan.needs_of(i).len()).collect();
        let mut dependents = vec![Vec::new(); n];
        for i in 0..n {
            for &need in plan.needs_of(i) {
                if let Some(list) = dependents.get_mut(need) {
                    list.push(i);
                }
            }
        }
        let rank = |i: usize| (self.remaining[i], Reverse(plan.declared(i)));
        let mut ready: BinaryHeap<((u64, Reverse<usize>), usize)> = (0..n)
            .filter(|&i| waiting[i] == 0)
            .map(|i| (rank(i), i))
            .collect();
        // (ends at, step), soonest first.
        let mut running: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
        let (mut now, slots) = (0u64, max_parallel.max(1) as usize);
        loop {
            while running.len() < slots {
                let Some((_, i)) = ready.pop() else { break };
                running.push(Reverse((now.saturating_add(self.weight[i]), i)));
            }
            let Some(Reverse((end, i))) = running.pop() else {
                return now;
            };
            now = end;
            for &d in &dependents[i] {
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    ready.push((rank(d), d));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(steps: &str) -> Plan {
        let dir = tempfile::tempdir().unwrap();
        let path = camino::Utf8PathBuf::from_path_buf(dir.path().join("w.toml")).unwrap();
        std::fs::write(
            &path,
            format!(
                "name = \"c\"\n[models]\ndefault = \"anthropic/x\"\n{}",
                steps.replace("prompt = ", "agent = \"explore\"\nprompt = ")
            ),
        )
        .unwrap();
        let loaded = crate::workflow::load_workflow(&path).unwrap();
        let registry = crate::tools::Registry::builtin();
        let (plan, problems) = super::super::build_plan(
            &loaded,
            &crate::agent::AgentCatalog::load(&[], &registry),
            &registry,
            &super::super::PlanOptions::default(),
        );
        plan.unwrap_or_else(|| panic!("{problems:?}"))
    }

    fn ids(plan: &Plan, path: &[usize]) -> Vec<String> {
        path.iter().map(|&i| plan.steps()[i].id.clone()).collect()
    }

    const CHAIN_AND_ONE: &str = "[steps.z1]\nprompt = \"z1\"\n[steps.z2]\nprompt = \"z2\"\nneeds = [\"z1\"]\n[steps.a]\nprompt = \"a\"\n";

    #[test]
    fn without_history_the_longest_chain_of_steps_is_critical() {
        let plan = plan(CHAIN_AND_ONE);
        let paths = Paths::new(&plan, &vec![None; plan.steps().len()]);
        assert_eq!(paths.weigh, Weigh::Steps);
        assert_eq!(ids(&plan, &paths.critical_path(&plan)), ["z1", "z2"]);
        // Chain first: z1 and a, then z2.
        assert_eq!(paths.makespan(&plan, 2), 2);
        assert_eq!(paths.makespan(&plan, 1), 3);
    }

    #[test]
    fn with_history_the_longest_time_is_critical() {
        let plan = plan(CHAIN_AND_ONE);
        let of = |id: &str| plan.index_of(id).unwrap();
        let mut recorded = vec![None; plan.steps().len()];
        recorded[of("a")] = Some(5_000);
        recorded[of("z1")] = Some(1_000);
        recorded[of("z2")] = Some(1_000);
        let paths = Paths::new(&plan, &recorded);
        assert_eq!(ids(&plan, &paths.critical_path(&plan)), ["a"]);
        assert_eq!(paths.remaining[of("z1")], 2_000);
        assert_eq!(paths.makespan(&plan, 2), 5_000);
        // A step with no history weighs the median of those with some.
        recorded[of("z2")] = None;
        let paths = Paths::new(&plan, &recorded);
        assert_eq!(paths.weight[of("z2")], 1_000);
        assert!(!paths.known[of("z2")]);
    }

    #[test]
    fn ties_go_to_the_step_declared_first() {
        // Both chains are two steps long; `y` is declared before `b`, though `b` sorts first.
        let plan = plan(
            "[steps.y]\nprompt = \"y\"\n[steps.y2]\nprompt = \"y2\"\nneeds = [\"y\"]\n[steps.b]\nprompt = \"b\"\n[steps.b2]\nprompt = \"b2\"\nneeds = [\"b\"]\n",
        );
        let paths = Paths::new(&plan, &vec![None; plan.steps().len()]);
        assert_eq!(ids(&plan, &paths.critical_path(&plan)), ["y", "y2"]);
    }
}
