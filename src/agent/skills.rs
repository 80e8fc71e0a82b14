//! An agent file's `skills`: each named skill's `SKILL.md` appended to the agent's system prompt,
//! as Claude Code preloads them (docs/src/agents.md, "Skills"). A skill is looked for in
//! `~/.claude/skills/<name>/`, then in the working directory's `.claude/skills/<name>/`: as in
//! Claude Code, the user's own skill wins over the project's of the same name, so a repository
//! cannot put its text in a trusted agent's prompt under a skill the user wrote. Both are read
//! through the confined opener, so a link out of either folder is refused, never quoted.

use camino::{Utf8Path, Utf8PathBuf};

use super::catalog::{AgentDir, DirTrust};
use super::{Agent, AgentSource};
use crate::error::Problem;
use crate::tools::confine::Workspace;

/// Where skills are looked for: the home directory, then the working directory.
pub struct Places {
    workdir: Option<Utf8PathBuf>,
    home: Option<Utf8PathBuf>,
}

impl Places {
    /// From the lookup folders: `.claude/agents` of the working directory and of the home
    /// directory (as `lookup_dirs` makes them) name the two roots.
    pub fn of(dirs: &[AgentDir]) -> Places {
        let root = |dir: &AgentDir| {
            dir.path
                .parent()
                .and_then(Utf8Path::parent)
                .map(|p| match p.as_str() {
                    "" => Utf8PathBuf::from("."),
                    _ => p.to_owned(),
                })
        };
        Places {
            workdir: dirs
                .iter()
                .find(|d| matches!(d.trust, DirTrust::Workdir(_)))
                .and_then(root),
            home: dirs
                .iter()
                .find(|d| d.trust == DirTrust::User)
                .and_then(root),
        }
    }
}

/// Appends each of `agent`'s skills to its system prompt, in the order the file lists them; an
/// error names a skill that is in neither place, and where it was looked for. An agent the
/// working directory brought (not trusted) reads only the working directory's skills.
pub fn append(agent: &mut Agent, places: &Places) -> Result<(), Vec<Problem>> {
    if agent.skills.is_empty() {
        return Ok(());
    }
    let file = agent
        .source
        .path()
        .map_or_else(|| agent.name.clone(), ToString::to_string);
    let mut roots: Vec<&Utf8Path> = Vec::new();
    if !matches!(agent.source, AgentSource::Untrusted(_)) {
        roots.extend(places.home.iter().map(Utf8PathBuf::as_path));
    }
    roots.extend(places.workdir.iter().map(Utf8PathBuf::as_path));
    let mut problems = Vec::new();
    let mut texts = Vec::new();
    for skill in &agent.skills {
        let relative = format!(".claude/skills/{skill}/SKILL.md");
        let mut found = None;
        for root in &roots {
            match read(root, &relative) {
                Ok(Some(text)) => {
                    found = Some(text);
                    break;
                }
                Ok(None) => {}
                Err(why) => {
                    problems.push(Problem::error(format!(
                        "`{file}`: cannot read skill `{skill}` from `{root}/{relative}`: {why}"
                    )));
                    found = Some(String::new());
                    break;
                }
            }
        }
        match found {
            Some(text) => texts.push((skill, text)),
            None => {
                let looked: Vec<String> =
                    roots.iter().map(|r| format!("`{r}/{relative}`")).collect();
                let mut problem = Problem::error(format!(
                    "`{file}`: agent `{}` names the skill `{skill}`, which is not there (looked for {})",
                    agent.name,
                    if looked.is_empty() {
                        "it nowhere: no working or home directory".to_owned()
                    } else {
                        looked.join(" and ")
                    }
                ));
                if matches!(agent.source, AgentSource::Untrusted(_)) {
                    problem = problem.help(
                        "an agent file the working directory brought reads only the working directory's skills",
                    );
                }
                problems.push(problem);
            }
        }
    }
    if !problems.is_empty() {
        if let Some((file, span)) = &agent.skills_at {
            problems = problems
                .into_iter()
                .map(|p| p.at(file, span.clone(), "skills"))
                .collect();
        }
        return Err(problems);
    }
    for (skill, text) in texts {
        agent.system_prompt.push_str(&format!(
            "\n\n<skill name=\"{skill}\">\n{}\n</skill>",
            text.trim()
        ));
    }
    Ok(())
}

/// A skill file's text through the confined opener of `root`; `None` when it is not there.
fn read(root: &Utf8Path, relative: &str) -> Result<Option<String>, String> {
    // A missing root or file is "not here"; anything else found there is an error to show.
    if root.join(relative).symlink_metadata().is_err() {
        return Ok(None);
    }
    let workspace = Workspace::new(root).map_err(|e| e.to_string())?;
    workspace
        .read_text(relative, crate::limits::MAX_SOURCE_BYTES)
        .map(Some)
}
