//! `runner`: declarative agent workflows. Data flows one way:
//! file -> workflow -> plan -> run -> report.

pub mod agent;
pub mod audit;
pub mod budget;
pub mod cli;
mod commands;
pub mod error;
pub mod event;
pub mod export;
pub mod limits;
pub mod mcp;
pub mod out;
pub mod plan;
pub mod provider;
pub mod record;
pub mod report;
pub mod run;
pub mod sandbox;
pub mod secrets;
pub mod session;
pub mod source_file;
pub mod template;
pub mod terminal;
pub mod text;
pub mod tools;
pub mod units;
pub mod workflow;

pub use commands::{main, run_cli};
