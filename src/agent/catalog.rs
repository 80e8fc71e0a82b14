//! Every agent a workflow can see, and the lookup order of docs/src/agents.md: each `--agents-dir`,
//! the `agents/` folder beside the workflow's folder, `.claude/agents/`, `~/.claude/agents/`,
//! then the built-ins; and the trust boundary between the user's agent files and those the
//! working directory brings.

use std::collections::{BTreeMap, BTreeSet};

use camino::{Utf8Path, Utf8PathBuf};

use super::{Agent, AgentSource, builtin, load_agent_source};
use crate::error::Problem;
use crate::tools::{Registry, ToolSet};
use crate::workflow::source::SourceFile;

/// Every agent a workflow can use, highest priority first (docs/src/agents.md).
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
    // Over 80 lines: the agent lookup order, one directory after another.
    /// Loads the agents of `dirs` (highest priority first), then the built-ins.
    pub fn load(dirs: &[AgentDir], registry: &Registry) -> Self {
        let builtins = builtin::builtins();
        let mut catalog = AgentCatalog::default();
        let places = super::skills::Places::of(dirs);
        for dir in dirs {
            // The working directory's own files are read as the tools read them: a link out of
            // it (to `/proc/self/environ`, a credentials file) is refused, never quoted.
            let confined = match &dir.trust {
                DirTrust::Workdir(_) => Some(
                    dir.path
                        .parent()
                        .and_then(Utf8Path::parent)
                        .map(|root| {
                            if root.as_str().is_empty() {
                                Utf8Path::new(".")
                            } else {
                                root
                            }
                        })
                        .and_then(|root| crate::tools::confine::Workspace::new(root).ok()),
                ),
                DirTrust::Trusted | DirTrust::User => None,
            };
            for path in agent_files(&dir.path) {
                let stem = path.file_stem().unwrap_or_default().to_owned();
                let source = match &confined {
                    None => SourceFile::read(&path),
                    Some(None) => Err(Problem::error(format!(
                        "cannot read `{path}`: its working directory cannot be opened"
                    ))),
                    Some(Some(ws)) => {
                        // The folder is `.claude/agents` of the working directory.
                        let relative =
                            format!(".claude/agents/{}", path.file_name().unwrap_or_default());
                        ws.read_text(&relative, crate::limits::MAX_SOURCE_BYTES)
                            .map(|text| SourceFile::new(&path, text))
                            .map_err(|why| Problem::error(format!("cannot read `{path}`: {why}")))
                    }
                };
                let loaded = source.map_err(|p| (vec![p], None)).and_then(|file| {
                    load_agent_source(file.clone(), registry).map_err(|p| (p, Some(file)))
                });
                let loaded = loaded.and_then(|mut loaded| {
                    let name = loaded.agent.name.clone();
                    if dir.trust == DirTrust::User {
                        loaded.agent.source = AgentSource::User(path.clone());
                    }
                    if !dir.trust.trusts(&name) {
                        let shadows = builtins.iter().find(|b| b.name == name);
                        let notes = narrow_untrusted(&mut loaded.agent, shadows, &path);
                        loaded.warnings.extend(notes);
                    }
                    match super::skills::append(&mut loaded.agent, &places) {
                        Ok(()) => Ok(loaded),
                        Err(problems) => Err((problems, None)),
                    }
                });
                match loaded {
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
                    Err((problems, file)) => {
                        // Known by the name it gives itself when that can be read (a step asks
                        // for `reviewer`, not for `rev.md`), else by its file name.
                        let name = file.and_then(|f| declared_name(&f.text)).unwrap_or(stem);
                        // A broken file the working directory brought cannot take a built-in
                        // away.
                        let hides_builtin = builtins.iter().any(|b| b.name == name);
                        if !catalog.agents.contains_key(&name)
                            && (dir.trust.trusts(&name) || !hides_builtin)
                        {
                            catalog.broken.entry(name).or_insert((path, problems));
                        }
                    }
                }
            }
        }
        for agent in builtins {
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

/// Which of the working directory's agent files the user trusts: all of them
/// (`--trust-workdir`, `trust_workdir = true`), those named in `trusted_agents`, or none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkdirTrust {
    pub all: bool,
    pub agents: BTreeSet<String>,
}

impl WorkdirTrust {
    /// From `--trust-workdir` and the workflow's `trust_workdir` / `trusted_agents`.
    pub fn new(flag: bool, def: Option<&crate::workflow::WorkflowFile>) -> Self {
        Self {
            all: flag || def.and_then(|d| d.trust_workdir).unwrap_or(false),
            agents: def
                .map(|d| d.trusted_agents.iter().cloned().collect())
                .unwrap_or_default(),
        }
    }
}

/// One folder of agent files and how far its files are trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDir {
    pub path: Utf8PathBuf,
    pub trust: DirTrust,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirTrust {
    /// The user's own folders: `--agents-dir` and the workflow's `agents/`.
    Trusted,
    /// The user's `~/.claude/agents/`: trusted, and marked `user` where agents are listed.
    User,
    /// A folder the working directory brings: only the agents `WorkdirTrust` names.
    Workdir(WorkdirTrust),
}

impl DirTrust {
    fn trusts(&self, name: &str) -> bool {
        match self {
            DirTrust::Trusted | DirTrust::User => true,
            DirTrust::Workdir(trust) => trust.all || trust.agents.contains(name),
        }
    }
}

/// The lookup directories of docs/src/agents.md, highest priority first: each `--agents-dir`, the
/// `agents/` folder beside the workflow's folder, `.claude/agents/` under the working directory
/// (trusted only as `trust` says), then `~/.claude/agents/` under `home` (the user's own). A
/// folder met twice keeps its first, higher-priority place and trust.
pub fn lookup_dirs(
    agents_dirs: &[Utf8PathBuf],
    workflow: Option<&Utf8Path>,
    workdir: &Utf8Path,
    trust: &WorkdirTrust,
    home: Option<&Utf8Path>,
) -> Vec<AgentDir> {
    let mut dirs: Vec<AgentDir> = agents_dirs
        .iter()
        .map(|path| AgentDir {
            path: path.clone(),
            trust: DirTrust::Trusted,
        })
        .collect();
    if let Some(workflow) = workflow {
        dirs.push(AgentDir {
            path: beside_folder(workflow),
            trust: DirTrust::Trusted,
        });
    }
    let base = if workdir == "." {
        Utf8PathBuf::new()
    } else {
        workdir.to_owned()
    };
    dirs.push(AgentDir {
        path: base.join(".claude").join("agents"),
        trust: DirTrust::Workdir(trust.clone()),
    });
    // Lowest: the user's own agents, as Claude Code finds them after the project's.
    if let Some(home) = home {
        dirs.push(AgentDir {
            path: home.join(".claude").join("agents"),
            trust: DirTrust::User,
        });
    }
    let mut seen = BTreeSet::new();
    dirs.retain(|d| seen.insert(absolute(&d.path)));
    dirs
}

/// What an untrusted agent file may still do: give a step its prompt and fewer tools. Its tools
/// are capped at the built-in it replaces (or, for a new name, the read-only tools of
/// `explore`); it starts no MCP server, picks no model, forks no conversation and sets no turn
/// limit. Returns the warnings that say so, naming the file.
fn narrow_untrusted(agent: &mut Agent, shadows: Option<&Agent>, path: &Utf8Path) -> Vec<Problem> {
    let mut notes = Vec::new();
    let trust_hint = "the working directory's agent files are not trusted; `--trust-workdir`, `trust_workdir = true` or `trusted_agents` in the workflow trusts them";
    let read_only = builtin::builtins()
        .into_iter()
        .find(|b| b.name == "explore")
        .map(|b| b.tools);
    let cap = shadows
        .map(|b| b.tools.clone())
        .or(read_only)
        .unwrap_or(ToolSet::Some(BTreeSet::new()));
    let narrowed = intersect(&agent.tools, &cap);
    if let Some(builtin) = shadows {
        notes.push(
            Problem::warning(format!(
                "`{path}` (from the working directory, not trusted) replaces the built-in `{}`: it keeps at most the built-in's tools ({})",
                builtin.name,
                cap.describe()
            ))
            .help(trust_hint),
        );
        agent.default_alias = builtin.default_alias;
    } else if narrowed != agent.tools {
        notes.push(
            Problem::warning(format!(
                "`{path}` (from the working directory, not trusted): agent `{}` is limited to read-only tools ({})",
                agent.name,
                narrowed.describe()
            ))
            .help(trust_hint),
        );
    }
    agent.tools = narrowed;
    let mut ignored = Vec::new();
    if !agent.mcp_servers.is_empty() || !agent.mcp_server_names.is_empty() {
        ignored.push("`mcpServers` (no program is started)");
        agent.mcp_servers.clear();
        agent.mcp_server_names.clear();
    }
    if agent.model.take().is_some() {
        ignored.push("`model`");
    }
    if std::mem::take(&mut agent.fork_context) {
        ignored.push("`forkContext`");
    }
    if agent.max_turns.take().is_some() {
        ignored.push("`maxTurns`");
    }
    // Cost is the user's to choose, like `model`.
    if agent.effort.take().is_some() {
        ignored.push("`effort`");
    }
    // A folder outside the working directory is not the working directory's to write.
    if agent.memory == Some(super::MemoryScope::User) {
        agent.memory = None;
        ignored.push("`memory: user` (its folder is outside the working directory)");
    }
    if !ignored.is_empty() {
        notes.push(
            Problem::warning(format!(
                "`{path}` is not trusted, so runner ignores its {}",
                ignored.join(", ")
            ))
            .help(trust_hint),
        );
    }
    agent.source = AgentSource::Untrusted(path.to_owned());
    notes
}

fn intersect(tools: &ToolSet, cap: &ToolSet) -> ToolSet {
    match (tools, cap) {
        (any, ToolSet::All) => any.clone(),
        (ToolSet::All, some) => some.clone(),
        (ToolSet::Some(a), ToolSet::Some(b)) => ToolSet::Some(a.intersection(b).cloned().collect()),
    }
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
fn declared_name(text: &str) -> Option<String> {
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
