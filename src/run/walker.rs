//! The walker only sequences: it hands out a step when every step it needs has completed,
//! whatever the outcome. Concurrency limits, the stop policy and execution sit on top of it.

/// Sequences steps `0..n` where `needs[i]` lists the steps `i` waits for. The graph is sealed
/// (acyclic) before it gets here.
#[derive(Debug, Clone)]
pub struct Walker {
    /// Needs not yet completed, per step.
    waiting: Vec<usize>,
    /// Steps that need each step.
    dependents: Vec<Vec<usize>>,
    completed: Vec<bool>,
    started: bool,
}

impl Walker {
    pub fn new(needs: &[Vec<usize>]) -> Self {
        let mut dependents = vec![Vec::new(); needs.len()];
        let mut waiting = vec![0; needs.len()];
        for (step, deps) in needs.iter().enumerate() {
            let mut deps = deps.clone();
            deps.sort_unstable();
            deps.dedup();
            waiting[step] = deps.len();
            for dep in deps {
                dependents[dep].push(step);
            }
        }
        Self {
            waiting,
            dependents,
            completed: vec![false; needs.len()],
            started: false,
        }
    }

    /// The steps that need nothing. Call once.
    pub fn start(&mut self) -> Vec<usize> {
        if self.started {
            return Vec::new();
        }
        self.started = true;
        (0..self.waiting.len())
            .filter(|&i| self.waiting[i] == 0)
            .collect()
    }

    /// Marks `step` complete; returns the steps that became ready, in index order. Completing a
    /// step twice, or one out of range, changes nothing.
    pub fn complete(&mut self, step: usize) -> Vec<usize> {
        match self.completed.get_mut(step) {
            Some(done) if !*done => *done = true,
            _ => return Vec::new(),
        }
        let mut ready = Vec::new();
        for &dependent in &self.dependents[step] {
            self.waiting[dependent] -= 1;
            if self.waiting[dependent] == 0 {
                ready.push(dependent);
            }
        }
        ready.sort_unstable();
        ready
    }

    pub fn all_complete(&self) -> bool {
        self.completed.iter().all(|&c| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_steps_as_their_needs_complete() {
        // 0 and 1 free; 2 needs both; 3 needs 0; 4 needs 2 and 3.
        let mut w = Walker::new(&[vec![], vec![], vec![0, 1], vec![0], vec![2, 3]]);
        assert_eq!(w.start(), vec![0, 1]);
        assert_eq!(w.complete(1), Vec::<usize>::new());
        assert_eq!(w.complete(0), vec![2, 3]);
        assert_eq!(w.complete(3), Vec::<usize>::new());
        assert_eq!(
            w.complete(3),
            Vec::<usize>::new(),
            "completing twice is a no-op"
        );
        assert_eq!(w.complete(2), vec![4]);
        assert!(!w.all_complete());
        assert_eq!(w.complete(4), Vec::<usize>::new());
        assert!(w.all_complete());
    }

    #[test]
    fn repeated_needs_count_once() {
        let mut w = Walker::new(&[vec![], vec![0, 0]]);
        assert_eq!(w.start(), vec![0]);
        assert_eq!(w.complete(0), vec![1]);
    }
}
