//! What the benchmarks share: medians, and two commands timed in alternating pairs (this
//! machine's speed drifts over minutes, so two cases timed one after the other are not like
//! with like; timed in turn, each pair sees the machine in one state).

// Each benchmark uses only some of these.
#![allow(dead_code)]

use std::time::Instant;

/// The middle value (the upper of the two middle ones for an even count).
pub fn median<T: PartialOrd + Copy>(mut values: Vec<T>) -> T {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    values[values.len() / 2]
}

/// `first` and `second` timed in turn, `n` pairs: the medians of each, in milliseconds, and the
/// median of the pairs' ratios (`first / second`) with their range.
pub struct Pairs {
    pub first_ms: f64,
    pub second_ms: f64,
    pub ratio: f64,
    pub low: f64,
    pub high: f64,
}

pub fn in_turn(n: usize, mut first: impl FnMut(), mut second: impl FnMut()) -> Pairs {
    let time = |run: &mut dyn FnMut()| {
        let started = Instant::now();
        run();
        started.elapsed().as_secs_f64() * 1e3
    };
    let (mut firsts, mut seconds, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let a = time(&mut first);
        let b = time(&mut second);
        firsts.push(a);
        seconds.push(b);
        ratios.push(a / b);
    }
    Pairs {
        first_ms: median(firsts),
        second_ms: median(seconds),
        ratio: median(ratios.clone()),
        low: ratios.iter().copied().fold(f64::INFINITY, f64::min),
        high: ratios.iter().copied().fold(0.0, f64::max),
    }
}

/// Runs `command` to its end; its output, which must be a success (its stderr says why not).
pub fn succeeded(command: &mut std::process::Command) -> std::process::Output {
    let out = command.output().expect("start the command");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A command step printing `N` items (from its input), one explore instance per item, and a
/// step reading every instance's summary.
pub const FAN_OUT_WORKFLOW: &str = r#"name = "fan-out"
max_parallel = 16
[inputs.n]
[models]
default = "anthropic/bench"
[steps.list]
run = 'i=0; printf "{\"items\": ["; while [ $i -lt "$N" ]; do [ $i -gt 0 ] && printf ","; printf "\"item-%d\"" $i; i=$((i+1)); done; printf "]}"'
env = { N = "{{ inputs.n }}" }
output_schema = { type = "object", properties = { items = { type = "array", items = { type = "string" } } }, required = ["items"] }
[steps.each]
agent = "explore"
needs = ["list"]
for_each = "steps.list.output.items"
max_instances = 1000
prompt = "Look at {{ item }} ({{ item_index }})."
[steps.sum]
run = 'printf "%s" "$COUNT"'
needs = ["each"]
env = { COUNT = "{{ steps.each | length }}" }
"#;
