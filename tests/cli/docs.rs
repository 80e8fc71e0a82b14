//! The docs (README.md and the book in `docs/`) against the program: every key the schemas know
//! is documented in the reference, and every whole workflow the docs show validates.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::Test;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every property name a JSON Schema declares, at any depth.
fn keys(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(fields) => {
            if let Some(Value::Object(properties)) = fields.get("properties") {
                out.extend(properties.keys().cloned());
            }
            for value in fields.values() {
                keys(value, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| keys(item, out)),
        _ => {}
    }
}

fn undocumented(schema: &str, page: &str) -> Vec<String> {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join(schema)).unwrap()).unwrap();
    let text = std::fs::read_to_string(root().join(page)).unwrap();
    let mut all = Vec::new();
    keys(&schema, &mut all);
    all.sort();
    all.dedup();
    assert!(all.len() > 20, "{schema} declares {} keys", all.len());
    all.into_iter()
        .filter(|key| !text.contains(&format!("`{key}`")) && !text.contains(&format!("{key} =")))
        .collect()
}

#[test]
fn every_workflow_key_is_in_the_reference() {
    let missing = undocumented(
        "schemas/workflow.schema.json",
        "docs/src/reference/workflow.md",
    );
    assert!(
        missing.is_empty(),
        "keys of schemas/workflow.schema.json not in docs/src/reference/workflow.md: {missing:?}"
    );
}

#[test]
fn every_agent_key_is_in_the_agents_chapter() {
    let missing = undocumented("schemas/agent.schema.json", "docs/src/agents.md");
    assert!(
        missing.is_empty(),
        "keys of schemas/agent.schema.json not in docs/src/agents.md: {missing:?}"
    );
}

/// README.md and every page of the book.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// The fenced blocks of `text` in `language`, with the line each starts on.
fn blocks(text: &str, language: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut open: Option<(usize, String, bool)> = None;
    for (number, line) in text.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match &mut open {
            None if fence => {
                let info = line.trim_start().trim_start_matches('`').trim();
                open = Some((number + 1, String::new(), info == language));
            }
            Some((start, body, wanted)) if fence => {
                if *wanted {
                    found.push((*start, std::mem::take(body)));
                }
                open = None;
            }
            Some((_, body, _)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {}
        }
    }
    found
}

/// A block that is a whole workflow (it names itself and has steps), not a fragment of one.
fn whole_workflow(language: &str, text: &str) -> bool {
    match language {
        "toml" => text
            .parse::<toml::Table>()
            .is_ok_and(|table| table.contains_key("name") && table.contains_key("steps")),
        _ => text.lines().any(|l| l.starts_with("name:")) && text.lines().any(|l| l == "steps:"),
    }
}

#[test]
fn the_workflows_the_docs_show_validate() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for language in ["toml", "yaml"] {
            for (line, block) in blocks(&text, language) {
                if !whole_workflow(language, &block) {
                    continue;
                }
                checked += 1;
                let name = format!("example.{language}");
                let out = Test::new()
                    .file(&name, &block)
                    .args(&["validate", &name])
                    .run();
                if out.status != 0 {
                    failures.push(format!(
                        "{}:{line}: {}",
                        page.strip_prefix(root()).unwrap().display(),
                        out.stderr
                    ));
                }
            }
        }
    }
    assert!(
        checked >= 4,
        "only {checked} whole workflows found in the docs"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A heading's anchor as GitHub and mdBook make it.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// Every relative link of README.md, the book, CONTRIBUTING.md and ARCHITECTURE.md leads to a
/// file that exists, and to a heading in it when it names one.
#[test]
fn the_docs_links_lead_somewhere() {
    let mut pages = pages();
    pages.push(root().join("CONTRIBUTING.md"));
    pages.push(root().join("ARCHITECTURE.md"));
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let link = &rest[..end];
            if link.starts_with("http") || link.contains(char::is_whitespace) {
                continue;
            }
            let (path, heading) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(path)
            };
            let Ok(target_text) = std::fs::read_to_string(&target) else {
                if !target.is_dir() {
                    broken.push(format!("{}: {link} (no such file)", page.display()));
                }
                continue;
            };
            if !heading.is_empty() && !anchors(&target_text).iter().any(|a| a == heading) {
                broken.push(format!("{}: {link} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}
