//! Agent files on arbitrary text, read as Claude Code Markdown, as TOML and as YAML (so the
//! agents in `agents/` serve as seeds as they are).
#![no_main]

use libfuzzer_sys::fuzz_target;
use runner::agent::load_agent_source;
use runner::tools::Registry;
use runner::workflow::source::SourceFile;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let registry = Registry::builtin();
    for name in ["fuzz.md", "fuzz.toml", "fuzz.yaml"] {
        match load_agent_source(SourceFile::new(name, text.as_ref()), &registry) {
            Ok(loaded) => common::show(&loaded.warnings),
            Err(problems) => common::show(&problems),
        }
    }
});
