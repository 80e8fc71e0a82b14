//! Integration tests: they drive the real `runner` binary over files in temp dirs.

mod agents;
mod diagnostics;
mod fake;
mod live;
mod no_panic;
mod plan;
mod run;
mod scheduler;
mod schema;
mod support;
mod workflows;
