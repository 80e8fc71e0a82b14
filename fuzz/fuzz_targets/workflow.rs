//! The workflow loader and planner on arbitrary text, read both as TOML and as YAML (so the
//! examples in `workflows/` serve as seeds as they are).
#![no_main]

use libfuzzer_sys::fuzz_target;
use runner::workflow::source::Syntax;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    common::plan_text("fuzz.toml", &text, Syntax::Toml);
    common::plan_text("fuzz.yaml", &text, Syntax::Yaml);
});
