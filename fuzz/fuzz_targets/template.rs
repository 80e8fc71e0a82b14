//! The template checker and renderer: the first line is a step's `if`, the rest its prompt. They
//! are planned inside a workflow (typed checks against an upstream `output_schema`, the plan's
//! placeholder render), then rendered and evaluated as a run would, once with the upstream
//! output present and once with it missing (the step failed).
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use minijinja::Value;
use runner::template::{self, Missing};
use runner::workflow::source::Syntax;

#[path = "common.rs"]
mod common;

const WORKFLOW: &str = r#"name = "f"
[inputs.target]
default = "src"
[models]
default = "anthropic/x"
[steps.t]
agent = "explore"
prompt = "x"
continue_on_error = true
output_schema = { type = "object", properties = { severity = { type = "string" }, files = { type = "array", items = { type = "string" } } } }
[steps.b]
agent = "plan"
needs = ["t"]
"#;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (condition, prompt) = text.split_once('\n').unwrap_or((&text, ""));
    // Literal strings cannot hold their own delimiter; everything else goes through as is.
    let literal = |s: &str| s.replace("'''", "");
    let workflow = format!(
        "{WORKFLOW}prompt = '''{}'''\nif = '''{}'''\n",
        literal(prompt),
        literal(condition)
    );
    common::plan_text("fuzz.toml", &workflow, Syntax::Toml);

    let env = template::environment();
    let output = minijinja::context! { severity => "high", files => vec!["a.rs", "b.rs"] };
    for output in [output, Missing::value("steps.t.output")] {
        let t = template::step_value(
            Value::from("the summary"),
            Value::from("succeeded"),
            output,
            Value::from(()),
            Value::from(()),
        );
        let steps = Value::from(BTreeMap::from([("t", t)]));
        let inputs = BTreeMap::from([("target", Value::from("src"))]);
        let context = template::context(inputs, "f", None, steps);
        let _ = template::render(&env, prompt, context.clone());
        let _ = template::evaluate(&env, condition, context);
    }
});
