//! Every agent a workflow can see, and the lookup order of SPEC §2: each `--agents-dir`, the
//! `agents/` folder beside the workflow's folder, `.claude/agents/`, then the built-ins.

use std::collections::{BTreeMap, BTreeSet};

use camino::{Utf8Path, Utf8PathBuf};

use super::{Agent, builtin, load_agent_file};
use crate::error::Problem;
use crate::tools::Registry;

/// Every agent a workflow can use, highest priority first (SPEC §2).
#[derive(Debug, Default)]
pub struct AgentCatalog {
    agents: BTreeMap<String, Agent>,
    /// Agents hidden by one of the same name from a higher-priority place.
    pub shadowed: Vec<Agent>,
    /// Agent files that did not load, by the agent name they would have had.
    pub broken: BTreeMap<String, (Utf8PathBuf, Vec<Problem>)>,
    pub warnings: BTreeMap<String, Vec<Problem>>,
}

impl AgentCatalog {
    /// Loads the agents of `dirs` (highest priority first), then the built-ins.
    pub fn load(dirs: &[Utf8PathBuf], registry: &Registry) -> Self {
        let mut catalog = AgentCatalog::default();
        for dir in dirs {
            for path in agent_files(dir) {
                let stem = path.file_stem().unwrap_or_default().to_owned();
                match load_agent_file(&path, registry) {
                    Ok(loaded) => {
                        let name = loaded.agent.name.clone();
                        if catalog.agents.contains_key(&name) || catalog.broken.contains_key(&name)
                        {
                            catalog.shadowed.push(loaded.agent);
                        } else {
                            if !loaded.warnings.is_empty() {
                                catalog.warnings.insert(name.clone(), loaded.warnings);
                            }
                            catalog.agents.insert(name, loaded.agent);
                        }
                    }
                    Err(problems) => {
                        // Known by the name it gives itself when that can be read (a step asks
                        // for `reviewer`, not for `rev.md`), else by its file name.
                        let name = declared_name(&path).unwrap_or(stem);
                        if !catalog.agents.contains_key(&name) {
                            catalog.broken.entry(name).or_insert((path, problems));
                        }
                    }
                }
            }
        }
        for agent in builtin::builtins() {
            if catalog.agents.contains_key(&agent.name) || catalog.broken.contains_key(&agent.name)
            {
                catalog.shadowed.push(agent);
            } else {
                catalog.agents.insert(agent.name.clone(), agent);
            }
        }
        catalog
    }

    pub fn get(&self, name: &str) -> Option<&Agent> {
        self.agents.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.agents.keys().map(String::as_str)
    }

    pub fn agents(&self) -> impl Iterator<Item = &Agent> {
        self.agents.values()
    }
}

/// The agent files in `dir`, sorted by name; a missing directory has none.
fn agent_files(dir: &Utf8Path) -> Vec<Utf8PathBuf> {
    let Ok(entries) = dir.read_dir_utf8() else {
        return Vec::new();
    };
    let mut files: Vec<Utf8PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.into_path())
        .filter(|p| {
            matches!(
                p.extension().map(str::to_ascii_lowercase).as_deref(),
                Some("md" | "toml" | "yaml" | "yml")
            ) && p.is_file()
        })
        .collect();
    files.sort();
    files
}

/// The lookup directories of SPEC §2, highest priority first: each `--agents-dir`, the `agents/`
/// folder beside the workflow's folder, `.claude/agents/` under the working directory.
pub fn lookup_dirs(
    agents_dirs: &[Utf8PathBuf],
    workflow: Option<&Utf8Path>,
    workdir: &Utf8Path,
) -> Vec<Utf8PathBuf> {
    let mut dirs: Vec<Utf8PathBuf> = agents_dirs.to_vec();
    if let Some(workflow) = workflow {
        dirs.push(beside_folder(workflow));
    }
    dirs.push(workdir.join(".claude").join("agents"));
    let mut seen = BTreeSet::new();
    dirs.retain(|d| seen.insert(absolute(d)));
    dirs
}

/// `agents/` beside the workflow's folder, kept relative when the workflow path is (so messages
/// show `agents/x.md`, not an absolute path).
fn beside_folder(workflow: &Utf8Path) -> Utf8PathBuf {
    let folder = workflow.parent().unwrap_or(Utf8Path::new(""));
    let last = folder.file_name();
    match (folder.as_str(), last) {
        ("" | ".", _) => Utf8PathBuf::from("../agents"),
        (_, Some(name)) if name != ".." => match folder.parent() {
            Some(parent) if !parent.as_str().is_empty() => parent.join("agents"),
            _ => Utf8PathBuf::from("agents"),
        },
        _ => folder.join("..").join("agents"),
    }
}

fn absolute(path: &Utf8Path) -> Utf8PathBuf {
    path.canonicalize_utf8().unwrap_or_else(|_| path.to_owned())
}

/// The `name:` (or `name =`) line of an agent file that does not load, read loosely.
fn declared_name(path: &camino::Utf8Path) -> Option<String> {
    let text = crate::limits::read_text(path, crate::limits::MAX_SOURCE_BYTES).ok()?;
    text.lines().take(200).find_map(|line| {
        let rest = line.trim_start().strip_prefix("name")?.trim_start();
        let value = rest.strip_prefix(':').or_else(|| rest.strip_prefix('='))?;
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'').trim();
        (!value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .then(|| value.to_owned())
    })
}
