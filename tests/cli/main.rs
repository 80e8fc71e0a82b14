//! Integration tests: they drive the real `runner` binary over files in temp dirs.

mod agents;
mod bash;
mod budget;
mod ci;
mod delegate;
mod diagnostics;
mod export;
mod fake;
mod gitlab;
mod hostile;
mod limits;
mod live;
mod mcp;
mod newcomer;
mod no_panic;
mod plan;
mod race;
mod run;
mod scheduler;
mod schema;
mod seams;
mod stream;
mod support;
mod trust;
mod verified;
mod workflows;
