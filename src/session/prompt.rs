//! What a step's model is told. The system prompt holds only what is the same for every step of
//! an agent (its prompt, and the shape of its final answer), so all those requests share one
//! byte-identical, cacheable prefix; where and when the step runs goes into its first message,
//! as Claude Code does.

use serde_json::Value;

/// The agent's prompt plus, with `output_schema`, the shape its final answer must have.
pub fn system_prompt(agent_prompt: &str, output_schema: Option<&Value>) -> String {
    let mut text = agent_prompt.to_owned();
    if let Some(schema) = output_schema {
        text.push_str(&format!(
            "\n\n# Final answer\nEnd your work with a final answer that is a single JSON value matching this JSON Schema (a ```json fenced block is fine):\n{}",
            serde_json::to_string_pretty(schema).unwrap_or_default()
        ));
    }
    text
}

/// The step's first message: where it runs, then its rendered prompt.
pub fn first_message(workdir: &str, prompt: &str) -> String {
    let date = jiff::ZonedDateTime::now().date();
    format!(
        "<environment>\nWorking directory: {workdir}\nPlatform: {}\nToday's date: {date}\nAll paths you use must be inside the working directory.\n</environment>\n\n{prompt}",
        std::env::consts::OS
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_prompt_does_not_depend_on_where_or_when() {
        let a = system_prompt("You explore.", None);
        assert_eq!(a, "You explore.");
        let first = first_message("/tmp/w", "Find login");
        assert!(first.contains("Working directory: /tmp/w"));
        assert!(first.ends_with("\n\nFind login"));
    }
}
