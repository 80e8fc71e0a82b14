//! What the model sees of each tool (name, description, JSON Schema) and the dispatch of its
//! calls: only tools the step was given run; anything else is an error result.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::ToolName;
use super::bash::BashEnv;
use super::confine::Workspace;
use super::fs::ToolOutput;
use crate::provider::message::ToolDef;

pub fn definition(tool: ToolName) -> ToolDef {
    let (description, schema) = match tool {
        ToolName::ReadFile => (
            "Read a text file. Lines come numbered from 1. Long files are paged: pass `offset` (a line number) and `limit` to read more.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "File path, relative to the working directory"},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)"},
                "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to read (default 2000)"}
            }, "required": ["path"]}),
        ),
        ToolName::ListDir => (
            "List the entries of a directory; directories end with `/`.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "Directory, relative to the working directory (default: the working directory)"}
            }}),
        ),
        ToolName::Glob => (
            "Find files whose path matches a glob such as `**/*.rs` or `src/*.ts`. Honours .gitignore.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "Glob, matched against paths relative to `path`"},
                "path": {"type": "string", "description": "Directory to search (default: the working directory)"}
            }, "required": ["pattern"]}),
        ),
        ToolName::Grep => (
            "Search file contents with a regular expression (Rust regex syntax). Returns `path:line:text`. Honours .gitignore.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "Regular expression"},
                "path": {"type": "string", "description": "File or directory to search (default: the working directory)"},
                "glob": {"type": "string", "description": "Only search files matching this glob, e.g. `*.py`"},
                "case_insensitive": {"type": "boolean"},
                "max_results": {"type": "integer", "minimum": 1, "description": "Matching lines to return (default 200)"}
            }, "required": ["pattern"]}),
        ),
        ToolName::Bash => (
            "Run a command with `bash -c` in the working directory. Returns the exit code, stdout and stderr.",
            json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "timeout": {"type": "number", "description": "Seconds before the command is killed (default 120, at most 600)"}
            }, "required": ["command"]}),
        ),
        ToolName::WriteFile => (
            "Create a file, or overwrite it, with the given content. Missing folders are created.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"}
            }, "required": ["path", "content"]}),
        ),
        ToolName::EditFile => (
            "Replace `old_string` with `new_string` in a file. `old_string` must occur exactly once unless `replace_all` is true; copy it exactly, whitespace included.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"}
            }, "required": ["path", "old_string", "new_string"]}),
        ),
    };
    ToolDef {
        name: tool.as_str().to_owned(),
        description: description.to_owned(),
        input_schema: schema,
    }
}

/// Everything a step's tool calls need.
#[derive(Debug, Clone)]
pub struct ToolBox {
    pub workspace: Arc<Workspace>,
    pub allowed: BTreeSet<ToolName>,
    /// How `bash` runs in this step.
    pub bash: Arc<BashEnv>,
}

impl ToolBox {
    pub fn definitions(&self) -> Vec<ToolDef> {
        self.allowed.iter().map(|t| definition(*t)).collect()
    }

    /// Runs one call. A tool the step was not given is refused without running. A known secret
    /// in the result (a key a command printed) is hidden before the model sees it.
    pub async fn call(&self, name: &str, input: &Value) -> ToolOutput {
        let mut output = self.dispatch(name, input).await;
        output.text = crate::secrets::redact_owned(output.text);
        output
    }

    async fn dispatch(&self, name: &str, input: &Value) -> ToolOutput {
        let Some(tool) = ToolName::parse(name).filter(|t| t.as_str() == name) else {
            return ToolOutput::error(format!("there is no tool `{name}`"));
        };
        if !self.allowed.contains(&tool) {
            return ToolOutput::error(format!("`{name}` is not available to this step"));
        }
        if tool == ToolName::Bash {
            return super::bash::bash(&self.workspace, input, &self.bash).await;
        }
        // File system work blocks; keep it off the async workers.
        let ws = self.workspace.clone();
        let input = input.clone();
        let task = tokio::task::spawn_blocking(move || match tool {
            ToolName::ReadFile => super::fs::read_file(&ws, &input),
            ToolName::ListDir => super::fs::list_dir(&ws, &input),
            ToolName::WriteFile => super::fs::write_file(&ws, &input),
            ToolName::EditFile => super::fs::edit_file(&ws, &input),
            ToolName::Glob => super::search::glob(&ws, &input),
            ToolName::Grep => super::search::grep(&ws, &input),
            ToolName::Bash => ToolOutput::error("unreachable"),
        });
        task.await
            .unwrap_or_else(|err| ToolOutput::error(format!("the tool failed unexpectedly: {err}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use camino::Utf8PathBuf;

    #[tokio::test]
    async fn denied_and_unknown_tools_do_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        let tools = ToolBox {
            workspace: Arc::new(Workspace::new(&root).unwrap()),
            allowed: [ToolName::ReadFile].into_iter().collect(),
            bash: Arc::new(BashEnv::new(crate::sandbox::Mode::ReadOnly, false)),
        };
        let denied = tools
            .call("write_file", &json!({"path": "x", "content": "y"}))
            .await;
        assert_eq!(
            denied,
            ToolOutput::error("`write_file` is not available to this step")
        );
        assert!(!root.join("x").exists());
        let unknown = tools.call("Write", &json!({})).await;
        assert_eq!(unknown, ToolOutput::error("there is no tool `Write`"));
        assert_eq!(tools.definitions().len(), 1);
        for tool in ToolName::ALL {
            let def = definition(tool);
            assert_eq!(def.input_schema["type"], "object", "{}", def.name);
        }
    }
}
