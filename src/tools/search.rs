//! `glob` and `grep`, on ripgrep's libraries: parallel walks that honour .gitignore.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use camino::{Utf8Path, Utf8PathBuf};
use futures_util::future::BoxFuture;
use globset::GlobBuilder;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::UTF8;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::{WalkBuilder, WalkState};
use serde::Deserialize;
use serde_json::{Value, json};

use super::confine::{ConfineError, Workspace};
use super::{Tool, ToolContext, ToolOutput, blocking, capped_lines, parse_input};

/// Paths `glob` returns at most.
pub const MAX_GLOB_RESULTS: usize = 1000;
/// Matching lines `grep` returns by default, and at most.
pub const DEFAULT_GREP_RESULTS: usize = 200;
pub const MAX_GREP_RESULTS: usize = 2000;
/// Characters kept of a matching line.
const MAX_MATCH_CHARS: usize = 500;

/// A walk from `base` that reads ignore files as git and rg do in a checkout at `root`: from
/// the working directory down, never from the folders above it. A checkout inside a CI build
/// folder whose own `.gitignore` says `*` (`gitlab-ci-local`'s `.gitlab-ci-local/builds/`) is
/// searched in full (docs/src/tools.md "Tools in detail").
fn walker(root: &Utf8Path, base: &Utf8Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(base);
    // .gitignore applies whether or not the directory is a git checkout, as users expect of rg;
    // and since that lets ignore files of any parent apply, parents are read by hand below,
    // only up to the working directory.
    builder.require_git(false).parents(false);
    let mut dir = base
        .parent()
        .filter(|_| base != root && base.starts_with(root));
    while let Some(above) = dir {
        for name in [".gitignore", ".ignore", ".rgignore"] {
            let file = above.join(name);
            if file.is_file() {
                builder.add_ignore(file);
            }
        }
        if above == root {
            break;
        }
        dir = above.parent();
    }
    let exclude = root.join(".git/info/exclude");
    if base != root && exclude.is_file() {
        builder.add_ignore(exclude);
    }
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    builder.threads(threads);
    builder
}

fn relative(ws: &Workspace, path: &std::path::Path) -> Option<String> {
    let path = Utf8Path::from_path(path)?;
    Some(ws.display(path))
}

/// Where a search starts: opened beneath the root (so the path is checked), then walked by its
/// real path. The walk itself goes by names, so every file it finds is opened (grep) or checked
/// (glob) through the root's handle again: an entry a swapped symlink led to is dropped there.
fn base(ws: &Workspace, path: Option<&str>) -> Result<Utf8PathBuf, ToolOutput> {
    let shown = path.unwrap_or(".");
    match ws.open_dir(shown) {
        Ok((_, real)) => Ok(real),
        // A single file: grep searches just it.
        Err(ConfineError::Io { .. }) => ws
            .open_read(shown)
            .map(|(_, real)| real)
            .map_err(ToolOutput::from),
        Err(err) => Err(ToolOutput::from(err)),
    }
}

/// The walk's entry as a path relative to the root, unless it is somewhere tools may not read.
fn inside(ws: &Workspace, path: &std::path::Path) -> Option<Utf8PathBuf> {
    let path = Utf8Path::from_path(path)?;
    if !ws.readable(path) {
        return None;
    }
    path.strip_prefix(ws.root()).ok().map(Utf8Path::to_owned)
}

/// `glob` (Claude Code: `Glob`).
pub struct Glob;

impl Tool for Glob {
    fn name(&self) -> &str {
        "glob"
    }
    fn aliases(&self) -> &[&str] {
        &["Glob"]
    }
    fn description(&self) -> &str {
        "Find files whose path matches a glob such as `**/*.rs` or `src/*.ts`. Honours .gitignore."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "pattern": {"type": "string", "description": "Glob, matched against paths relative to `path`"},
            "path": {"type": "string", "description": "Directory to search (default: the working directory)"}
        }, "required": ["pattern"]})
    }
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        blocking(ctx, input, glob)
    }
}

/// `grep` (Claude Code: `Grep`).
pub struct Grep;

impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }
    fn aliases(&self) -> &[&str] {
        &["Grep"]
    }
    fn description(&self) -> &str {
        "Search file contents with a regular expression (Rust regex syntax). Returns `path:line:text`. Honours .gitignore."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object", "properties": {
            "pattern": {"type": "string", "description": "Regular expression"},
            "path": {"type": "string", "description": "File or directory to search (default: the working directory)"},
            "glob": {"type": "string", "description": "Only search files matching this glob, e.g. `*.py`"},
            "case_insensitive": {"type": "boolean"},
            "max_results": {"type": "integer", "minimum": 1, "description": "Matching lines to return (default 200)"}
        }, "required": ["pattern"]})
    }
    fn call<'a>(&'a self, input: &'a Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        blocking(ctx, input, grep)
    }
}

#[derive(Deserialize)]
struct GlobInput {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

/// Paths under `path` (default: the working directory) whose path relative to it matches.
pub fn glob(ws: &Workspace, input: &Value) -> ToolOutput {
    let input: GlobInput = match parse_input("glob", input) {
        Ok(input) => input,
        Err(err) => return err,
    };
    let base = match base(ws, input.path.as_deref()) {
        Ok(base) => base,
        Err(err) => return err,
    };
    let matcher = match GlobBuilder::new(&input.pattern)
        .literal_separator(true)
        .build()
    {
        Ok(glob) => glob.compile_matcher(),
        Err(err) => return ToolOutput::error(format!("invalid glob `{}`: {err}", input.pattern)),
    };
    let found = Mutex::new(Vec::new());
    let total = AtomicUsize::new(0);
    walker(ws.root(), &base).build_parallel().run(|| {
        Box::new(|entry| {
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if entry.file_type().is_some_and(|t| t.is_dir()) || inside(ws, entry.path()).is_none() {
                return WalkState::Continue;
            }
            let Ok(rel) = entry.path().strip_prefix(&base) else {
                return WalkState::Continue;
            };
            if matcher.is_match(rel) {
                total.fetch_add(1, Ordering::Relaxed);
                if let Some(shown) = relative(ws, entry.path())
                    && let Ok(mut found) = found.lock()
                {
                    found.push(shown);
                }
            }
            WalkState::Continue
        })
    });
    let mut found = found.into_inner().unwrap_or_default();
    found.sort();
    // What is shown must really be inside: checked through the root's handle.
    found.retain(|shown| ws.dir().symlink_metadata(shown).is_ok());
    let total = total.into_inner();
    if found.is_empty() {
        return ToolOutput::ok(format!("no files match `{}`", input.pattern));
    }
    capped_lines(
        found,
        MAX_GLOB_RESULTS,
        total,
        "narrow the pattern or the path",
    )
}

#[derive(Deserialize)]
struct GrepInput {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    max_results: Option<usize>,
}

// Over 80 lines: the search walk with its limits and per-file reporting in one loop.
/// Lines matching a regex, as `path:line:text`, sorted by path and line.
pub fn grep(ws: &Workspace, input: &Value) -> ToolOutput {
    let input: GrepInput = match parse_input("grep", input) {
        Ok(input) => input,
        Err(err) => return err,
    };
    let base = match base(ws, input.path.as_deref()) {
        Ok(base) => base,
        Err(err) => return err,
    };
    // As ripgrep builds it: a matcher that knows no match spans a line break can look for the
    // pattern's literal parts first and confirm only the lines holding them.
    let matcher = match RegexMatcherBuilder::new()
        .case_insensitive(input.case_insensitive)
        .line_terminator(Some(b'\n'))
        .build(&input.pattern)
    {
        Ok(m) => m,
        Err(err) => return ToolOutput::error(format!("invalid regex `{}`: {err}", input.pattern)),
    };
    let filter = match &input.glob {
        Some(pattern) => match GlobBuilder::new(pattern).build() {
            Ok(g) => Some(g.compile_matcher()),
            Err(err) => return ToolOutput::error(format!("invalid glob `{pattern}`: {err}")),
        },
        None => None,
    };
    let limit = input
        .max_results
        .unwrap_or(DEFAULT_GREP_RESULTS)
        .clamp(1, MAX_GREP_RESULTS);
    let hits = Mutex::new(Vec::new());
    let count = AtomicUsize::new(0);
    walker(ws.root(), &base).build_parallel().run(|| {
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .build();
        let matcher = matcher.clone();
        let filter = filter.clone();
        let (hits, count, base, ws) = (&hits, &count, &base, ws);
        Box::new(move |entry| {
            let Ok(entry) = entry else {
                return WalkState::Continue;
            };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                return WalkState::Continue;
            }
            if let Some(filter) = &filter {
                // A glob with a `/` matches the path under `path`; one without, the file name.
                let rel = entry.path().strip_prefix(base).unwrap_or(entry.path());
                let name = entry
                    .path()
                    .file_name()
                    .map(std::path::Path::new)
                    .unwrap_or(rel);
                if !filter.is_match(rel) && !filter.is_match(name) {
                    return WalkState::Continue;
                }
            }
            let Some(rel) = inside(ws, entry.path()) else {
                return WalkState::Continue;
            };
            let shown = rel.to_string();
            // Opened through the root's handle: never a file outside, whatever the walk saw.
            let Ok(file) = ws.dir().open(&rel) else {
                return WalkState::Continue;
            };
            let mut local = Vec::new();
            let _ = searcher.search_file(
                &matcher,
                &file.into_std(),
                UTF8(|line, text| {
                    let text = text.trim_end_matches(['\n', '\r']);
                    let short: String = text.chars().take(MAX_MATCH_CHARS).collect();
                    local.push((shown.clone(), line, short));
                    Ok(count.fetch_add(1, Ordering::Relaxed) < limit * 4)
                }),
            );
            if !local.is_empty()
                && let Ok(mut hits) = hits.lock()
            {
                hits.extend(local);
            }
            if count.load(Ordering::Relaxed) >= limit * 4 {
                WalkState::Quit
            } else {
                WalkState::Continue
            }
        })
    });
    let mut hits = hits.into_inner().unwrap_or_default();
    if hits.is_empty() {
        return ToolOutput::ok(format!("no matches for `{}`", input.pattern));
    }
    hits.sort();
    let total = hits.len();
    let lines = hits
        .into_iter()
        .map(|(path, line, text)| format!("{path}:{line}:{text}"));
    capped_lines(
        lines,
        limit,
        total,
        "there may be more: narrow the pattern, path or glob, or raise max_results",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let root = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        for (path, text) in [
            ("src/auth.rs", "fn login() {}\nfn Logout() {}\n"),
            ("src/db/session.rs", "struct Session;\n// login helper\n"),
            ("target/debug/junk.rs", "fn login() {}\n"),
            ("notes.md", "login flow\n"),
            (".gitignore", "target/\n"),
        ] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        let ws = Workspace::new(&root).unwrap();
        (dir, ws)
    }

    #[test]
    fn glob_matches_relative_paths_and_honours_gitignore() {
        let (_d, ws) = workspace();
        let out = glob(&ws, &json!({"pattern": "**/*.rs"}));
        assert_eq!(out.text, "src/auth.rs\nsrc/db/session.rs\n");
        let out = glob(&ws, &json!({"pattern": "*.rs", "path": "src"}));
        assert_eq!(out.text, "src/auth.rs\n");
        assert!(glob(&ws, &json!({"pattern": "*", "path": "/etc"})).is_error);
        assert!(glob(&ws, &json!({"pattern": "a["})).is_error);
    }

    /// A checkout inside a folder whose `.gitignore` says `*` (a CI engine's build folder) is
    /// searched in full; the checkout's own ignore files still apply, from below too.
    #[test]
    fn ignore_files_above_the_working_directory_do_not_apply() {
        let dir = tempfile::tempdir().unwrap();
        let outer = Utf8PathBuf::from_path_buf(dir.path().to_owned()).unwrap();
        std::fs::write(outer.join(".gitignore"), "*\n").unwrap();
        std::fs::create_dir_all(outer.join(".git")).unwrap();
        let root = outer.join(".gitlab-ci-local/builds/job");
        for (path, text) in [
            ("src/auth.rs", "fn login() {}\n"),
            ("src/gen/out.rs", "fn login() {}\n"),
            ("src/keep.log", "login\n"),
            ("skip.tmp", "login\n"),
            (".gitignore", "*.log\n"),
            ("src/.gitignore", "gen/\n"),
            (".git/info/exclude", "*.tmp\n"),
        ] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        let ws = Workspace::new(&root).unwrap();
        let out = grep(&ws, &json!({"pattern": "login"}));
        assert_eq!(out.text, "src/auth.rs:1:fn login() {}\n");
        // Searching a subfolder still reads the ignore files between it and the root.
        let out = grep(&ws, &json!({"pattern": "login", "path": "src"}));
        assert_eq!(out.text, "src/auth.rs:1:fn login() {}\n");
        let out = glob(&ws, &json!({"pattern": "**/*"}));
        assert_eq!(out.text, "src/auth.rs\n");
    }

    #[test]
    fn grep_finds_lines_with_options() {
        let (_d, ws) = workspace();
        let out = grep(&ws, &json!({"pattern": "login"}));
        assert_eq!(
            out.text,
            "notes.md:1:login flow\nsrc/auth.rs:1:fn login() {}\nsrc/db/session.rs:2:// login helper\n"
        );
        let ci = grep(&ws, &json!({"pattern": "logout", "case_insensitive": true}));
        assert_eq!(ci.text, "src/auth.rs:2:fn Logout() {}\n");
        let filtered = grep(&ws, &json!({"pattern": "login", "glob": "*.md"}));
        assert_eq!(filtered.text, "notes.md:1:login flow\n");
        let capped = grep(&ws, &json!({"pattern": "login", "max_results": 1}));
        assert!(
            capped
                .text
                .starts_with("notes.md:1:login flow\n[showing 1 of 3; there may be more")
        );
        assert!(grep(&ws, &json!({"pattern": "("})).is_error);
        assert!(grep(&ws, &json!({"pattern": "x", "path": "../"})).is_error);
    }
}
