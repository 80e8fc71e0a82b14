//! The step graph: petgraph underneath, cycles reported whole, steps grouped into waves.

use std::collections::{BTreeSet, VecDeque};

use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

/// Steps by index, with an edge from each need to the step that needs it.
#[derive(Debug)]
pub struct StepGraph {
    graph: DiGraph<usize, ()>,
    /// The ancestry walks' marks, kept between walks: a node is seen in the walk whose number it
    /// holds, so a walk costs the nodes it visits, not a fresh vector of every node (one walk a
    /// template reference made validation grow with the square of the steps).
    marks: std::cell::RefCell<(Vec<u32>, u32)>,
}

impl StepGraph {
    /// `needs[i]` lists the indexes step `i` needs. Node `i` of the graph is step `i`.
    pub fn new(needs: &[Vec<usize>]) -> Self {
        let mut graph = DiGraph::with_capacity(needs.len(), needs.iter().map(Vec::len).sum());
        for i in 0..needs.len() {
            graph.add_node(i);
        }
        for (step, deps) in needs.iter().enumerate() {
            for &dep in deps {
                graph.update_edge(NodeIndex::new(dep), NodeIndex::new(step), ());
            }
        }
        Self {
            marks: std::cell::RefCell::new((vec![0; graph.node_count()], 0)),
            graph,
        }
    }

    /// Every cycle, each as the steps along it in `needs` order, starting and ending at its
    /// first step in file order: `[a, b, a]` reads "a needs b, b needs a".
    pub fn cycles(&self) -> Vec<Vec<usize>> {
        if toposort(&self.graph, None).is_ok() {
            return Vec::new();
        }
        let mut cycles = Vec::new();
        for component in tarjan_scc(&self.graph) {
            let self_loop =
                component.len() == 1 && self.graph.contains_edge(component[0], component[0]);
            if component.len() < 2 && !self_loop {
                continue;
            }
            let start = component.iter().copied().min_by_key(|n| n.index());
            if let Some(start) = start {
                cycles.push(self.cycle_through(start, &component));
            }
        }
        cycles.sort();
        cycles
    }

    /// The shortest walk along `needs` from `start` back to itself, inside one component.
    fn cycle_through(&self, start: NodeIndex, component: &[NodeIndex]) -> Vec<usize> {
        let inside = |n: NodeIndex| component.contains(&n);
        // Following `needs` means walking edges backwards (edges point need -> dependent).
        let mut came_from = vec![None; self.graph.node_count()];
        let mut queue = VecDeque::from([start]);
        while let Some(node) = queue.pop_front() {
            let mut needs: Vec<NodeIndex> = self
                .graph
                .edges_directed(node, petgraph::Direction::Incoming)
                .map(|e| e.source())
                .filter(|&n| inside(n))
                .collect();
            needs.sort();
            for need in needs {
                if need == start {
                    let mut path = vec![start.index()];
                    let mut at = node;
                    let mut back = vec![];
                    while at != start {
                        back.push(at.index());
                        at = came_from[at.index()].unwrap_or(start);
                    }
                    path.extend(back.into_iter().rev());
                    path.push(start.index());
                    return path;
                }
                if came_from[need.index()].is_none() {
                    came_from[need.index()] = Some(node);
                    queue.push_back(need);
                }
            }
        }
        vec![start.index(), start.index()]
    }

    /// Waves: a step's wave is one past the latest wave of its needs. `None` if there is a cycle.
    pub fn waves(&self) -> Option<Vec<Vec<usize>>> {
        let order = toposort(&self.graph, None).ok()?;
        let mut wave_of = vec![0usize; self.graph.node_count()];
        let mut waves: Vec<Vec<usize>> = Vec::new();
        for node in order {
            let wave = self
                .graph
                .edges_directed(node, petgraph::Direction::Incoming)
                .map(|e| wave_of[e.source().index()] + 1)
                .max()
                .unwrap_or(0);
            wave_of[node.index()] = wave;
            if waves.len() <= wave {
                waves.resize_with(wave + 1, Vec::new);
            }
            waves[wave].push(node.index());
        }
        for wave in &mut waves {
            wave.sort_unstable();
        }
        Some(waves)
    }

    /// The steps on some path from `from` down to `to` along `needs` edges: `to` itself (when
    /// it is below `from`) and every step between, but not `from`. `wave` is each step's wave
    /// ([`StepGraph::waves`]): a step below `from` has a later wave, so the walk up from `to`
    /// stops at `from`'s wave and costs only the steps between them.
    pub fn between(&self, from: usize, to: usize, wave: &[usize]) -> Vec<usize> {
        let floor = wave.get(from).copied().unwrap_or(0);
        let later = |n: usize| wave.get(n).is_some_and(|&w| w > floor);
        // Ancestors of `to` (and `to`) in later waves than `from`.
        let mut seen = BTreeSet::from([to]);
        let mut stack = vec![to];
        while let Some(node) = stack.pop() {
            for need in self
                .graph
                .neighbors_directed(NodeIndex::new(node), petgraph::Direction::Incoming)
            {
                if later(need.index()) && seen.insert(need.index()) {
                    stack.push(need.index());
                }
            }
        }
        // Of those, the ones below `from`: any path from `from` to `to` runs inside that set.
        let mut order: Vec<usize> = seen.into_iter().collect();
        order.sort_by_key(|&n| wave.get(n).copied().unwrap_or(0));
        let mut below = BTreeSet::new();
        for n in order {
            let reached = self
                .graph
                .neighbors_directed(NodeIndex::new(n), petgraph::Direction::Incoming)
                .any(|need| need.index() == from || below.contains(&need.index()));
            if reached {
                below.insert(n);
            }
        }
        below.into_iter().collect()
    }

    /// Whether `ancestor` is reachable from `step` by following `needs`.
    pub fn is_ancestor(&self, ancestor: usize, step: usize) -> bool {
        let target = NodeIndex::new(ancestor);
        let mut marks = self.marks.borrow_mut();
        let (seen, walk) = &mut *marks;
        *walk = walk.wrapping_add(1);
        if *walk == 0 {
            // After 4 billion walks the numbers start again: clear the old marks once.
            seen.iter_mut().for_each(|m| *m = 0);
            *walk = 1;
        }
        let walk = *walk;
        let mut stack = vec![NodeIndex::new(step)];
        while let Some(node) = stack.pop() {
            for edge in self
                .graph
                .edges_directed(node, petgraph::Direction::Incoming)
            {
                let need = edge.source();
                if need == target {
                    return true;
                }
                if let Some(mark) = seen.get_mut(need.index())
                    && *mark != walk
                {
                    *mark = walk;
                    stack.push(need);
                }
            }
        }
        false
    }
}

/// Each step's wave, from the waves (`steps` steps in all).
pub fn wave_of(waves: &[Vec<usize>], steps: usize) -> Vec<usize> {
    let mut out = vec![0; steps];
    for (w, wave) in waves.iter().enumerate() {
        for &i in wave {
            out[i] = w;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_follow_longest_path() {
        // 0, 1 independent; 2 needs 0,1; 3 needs 0 and 2.
        let g = StepGraph::new(&[vec![], vec![], vec![0, 1], vec![0, 2]]);
        assert_eq!(g.waves().unwrap(), vec![vec![0, 1], vec![2], vec![3]]);
        assert!(g.cycles().is_empty());
        assert!(g.is_ancestor(0, 3));
        assert!(g.is_ancestor(1, 3));
        assert!(!g.is_ancestor(3, 0));
        let wave = wave_of(&g.waves().unwrap(), 4);
        assert_eq!(wave, vec![0, 0, 1, 2]);
        assert_eq!(g.between(0, 3, &wave), vec![2, 3]);
        assert_eq!(g.between(1, 3, &wave), vec![2, 3]);
        assert_eq!(g.between(2, 3, &wave), vec![3]);
        assert_eq!(g.between(3, 0, &wave), Vec::<usize>::new());
    }

    #[test]
    fn cycles_are_reported_whole() {
        // 0 needs 2, 2 needs 1, 1 needs 0: a -> c -> b -> a.
        let g = StepGraph::new(&[vec![2], vec![0], vec![1], vec![]]);
        assert!(g.waves().is_none());
        assert_eq!(g.cycles(), vec![vec![0, 2, 1, 0]]);
        let self_loop = StepGraph::new(&[vec![0]]);
        assert_eq!(self_loop.cycles(), vec![vec![0, 0]]);
    }
}
