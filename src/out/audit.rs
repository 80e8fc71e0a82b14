//! Every place in `src/` that opens a file to write, makes a folder, renames, connects or takes
//! the terminal, found by reading the source: outside the places listed in [`ALLOWED`] (each
//! with why it may), one is a way out that bypasses the redactor or the confined writer, and
//! this test fails naming it. The source is read as Rust's tokens (proc-macro2's lexer):
//! comments, the contents of literals and `#[cfg(test)]` items and modules are left out, and
//! `use` trees are written out whole, so an import by another name is found too. An allowance
//! that matches nothing fails as well, so the list stays true.

use std::collections::BTreeSet;

/// What opens a way to a file, a folder, a socket or the terminal.
const WAYS_OUT: &[&str] = &[
    "fs::write",
    "File::create",
    "File::options",
    "OpenOptions",
    "io::stdout",
    "io::stderr",
    "print!(",
    "println!(",
    "eprint!(",
    "eprintln!(",
    "dbg!(",
    "TcpStream",
    "TcpListener",
    "UdpSocket",
    "UnixStream",
    "UnixListener",
    "UnixDatagram",
    "reqwest::Client",
    "reqwest::blocking",
    "ClientBuilder",
    "tokio::fs",
    "create_dir",
    "fs::rename",
    "fs::copy",
    "hard_link",
    "::symlink(",
    ".symlink(",
    "set_permissions",
    "tempfile",
    ".persist(",
    "open_ambient_dir",
    "console::Term",
    "ProgressDrawTarget::",
    "Stdio::inherit",
    "DirBuilder",
    "from_std_file",
    "reopen_dir",
    "unistd::write",
    "libc::write",
    "fcntl::open",
    "tokio::net",
    "ambient_authority",
    "libc::open",
    "libc::socket",
    "sys::socket",
    "from_raw_fd",
    "fs::*",
    "io::*",
    "net::*",
];

/// Who may, and why: (a file, or a folder ending in `/`; the way out, or `*` for any).
const ALLOWED: &[(&str, &str, &str)] = &[
    ("src/out/", "*", "the writers themselves"),
    (
        "src/tools/",
        "*",
        "the tools' confined opener and writer (tools::confine): every path resolved beneath the working directory and checked where it really is",
    ),
    (
        "src/sandbox/",
        "*",
        "the sandbox: read-only binds, Landlock rules and the supervisor's private folders",
    ),
    (
        "src/run/state.rs",
        "*",
        "the state directory made and checked before any write, and this user's key (O_EXCL, 0600)",
    ),
    (
        "src/run/worktree/owned.rs",
        "*",
        "removes runner's own worktrees by descriptor (O_NOFOLLOW, cap-std's remove_dir_all): opens folders, writes nothing",
    ),
    (
        "src/run/seal.rs",
        "*",
        "this user's key: made once in a 0700 folder (a new file, 0600, placed without replacing), read without following a link",
    ),
    (
        "src/run/records.rs",
        "fcntl::open",
        "a run's files read back, opened read-only by descriptor with O_NOFOLLOW",
    ),
    (
        "src/run/confinement.rs",
        "*",
        "empty folders made before a step runs (the key's, 0700; a registered submodule's missing folder, entering no link), so the sandbox can cover them: nothing is written in them",
    ),
    (
        "src/run/lock.rs",
        "OpenOptions",
        "the run's lock file, opened to hold a lock and never written",
    ),
    (
        "src/provider/http.rs",
        "*",
        "the model and MCP HTTP client: request bodies are redacted message by message (provider/format/body.rs)",
    ),
    (
        "src/provider/registry.rs",
        "reqwest::Client",
        "hands MCP servers the client of provider/http.rs",
    ),
    (
        "src/report/otel/exporter.rs",
        "reqwest::blocking",
        "the OTLP client: every body it sends passes a Redacting writer first",
    ),
    (
        "src/limits.rs",
        "OpenOptions",
        "bounded reads, opened read-only and non-blocking",
    ),
    (
        "src/terminal.rs",
        "io::stderr",
        "the terminal's width, never written",
    ),
];

/// A file's code as one text of its tokens (as proc-macro2 reads them: comments gone, each
/// literal as `""`), with `#[cfg(test)]` items left out and every `use` written out whole
/// (`use std::io::{self, stdout}` as `use std::io::stdout;`), and the source line of each token.
#[derive(Default)]
struct Code {
    text: String,
    /// Where each token starts in `text`, and its line.
    lines: Vec<(usize, usize)>,
    /// The modules declared `#[cfg(test)] mod name;`: their files are tests' too.
    test_modules: Vec<String>,
}

impl Code {
    fn read(source: &str) -> Result<Code, String> {
        let tokens: proc_macro2::TokenStream = source.parse().map_err(|e| format!("{e:?}"))?;
        let mut code = Code::default();
        code.walk(tokens);
        Ok(code)
    }

    fn push(&mut self, text: &str, line: usize) {
        let word = |c: char| c.is_alphanumeric() || c == '_' || c == '"';
        if self.text.ends_with(word) && text.starts_with(word) {
            self.text.push(' ');
        }
        self.lines.push((self.text.len(), line));
        self.text.push_str(text);
    }

    fn walk(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::{Delimiter, TokenTree};
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            let line = tokens[i].span().start().line;
            match &tokens[i] {
                TokenTree::Punct(p) if p.as_char() == '#' && is_cfg_test(tokens.get(i + 1)) => {
                    // The item ends with its first `;` or the braces it opens.
                    i += 2;
                    if let [
                        TokenTree::Ident(word),
                        TokenTree::Ident(name),
                        TokenTree::Punct(end),
                    ] = tokens.get(i..i + 3).unwrap_or_default()
                        && word == "mod"
                        && end.as_char() == ';'
                    {
                        self.test_modules.push(name.to_string());
                    }
                    while let Some(token) = tokens.get(i) {
                        i += 1;
                        match token {
                            TokenTree::Punct(p) if p.as_char() == ';' => break,
                            TokenTree::Group(g) if g.delimiter() == Delimiter::Brace => break,
                            _ => {}
                        }
                    }
                    continue;
                }
                TokenTree::Ident(word) if word == "use" => {
                    let end = tokens[i..]
                        .iter()
                        .position(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ';'))
                        .map_or(tokens.len(), |at| i + at);
                    let mut paths = Vec::new();
                    use_paths(String::new(), &tokens[i + 1..end], &mut paths);
                    for path in paths {
                        self.push(&format!("use {path};"), line);
                    }
                    i = end + 1;
                    continue;
                }
                TokenTree::Ident(word) => self.push(&word.to_string(), line),
                TokenTree::Punct(p) => self.push(&p.as_char().to_string(), line),
                TokenTree::Literal(_) => self.push("\"\"", line),
                TokenTree::Group(group) => {
                    let (open, close) = match group.delimiter() {
                        Delimiter::Parenthesis => ("(", ")"),
                        Delimiter::Brace => ("{", "}"),
                        Delimiter::Bracket => ("[", "]"),
                        Delimiter::None => ("", ""),
                    };
                    self.push(open, line);
                    self.walk(group.stream());
                    self.push(close, group.span_close().start().line);
                }
            }
            i += 1;
        }
    }

    /// The line of the token at or before `at` in `text`.
    fn line_at(&self, at: usize) -> usize {
        let after = self.lines.partition_point(|(start, _)| *start <= at);
        after.checked_sub(1).map_or(0, |i| self.lines[i].1)
    }
}

/// Whether `token` is the `[cfg(test)]` of an attribute.
fn is_cfg_test(token: Option<&proc_macro2::TokenTree>) -> bool {
    match token {
        Some(proc_macro2::TokenTree::Group(group)) => {
            group.delimiter() == proc_macro2::Delimiter::Bracket
                && group.stream().to_string().replace(' ', "") == "cfg(test)"
        }
        _ => false,
    }
}

/// The paths a `use` tree names, each written out from its root (`a::{b, c::d as e}` as
/// `a::b` and `a::c::d`; `self` as the path it stands in).
fn use_paths(prefix: String, tokens: &[proc_macro2::TokenTree], out: &mut Vec<String>) {
    use proc_macro2::{Delimiter, TokenTree};
    let mut path = prefix;
    for token in tokens {
        match token {
            TokenTree::Ident(word) if word == "as" => break,
            TokenTree::Ident(word) if word == "self" => {}
            TokenTree::Ident(word) => path.push_str(&word.to_string()),
            TokenTree::Punct(p) if p.as_char() == ':' => path.push(':'),
            TokenTree::Punct(p) if p.as_char() == '*' => path.push('*'),
            TokenTree::Group(group) if group.delimiter() == Delimiter::Brace => {
                let inner: Vec<TokenTree> = group.stream().into_iter().collect();
                for part in inner.split(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','))
                {
                    if !part.is_empty() {
                        use_paths(path.clone(), part, out);
                    }
                }
                return;
            }
            _ => {}
        }
    }
    out.push(path.trim_end_matches(':').to_owned());
}

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every way out in `code`, as `(line, way)`.
fn found_in(code: &Code) -> Vec<(usize, &'static str)> {
    let mut found = Vec::new();
    for way in WAYS_OUT {
        for (at, _) in code.text.match_indices(way) {
            found.push((code.line_at(at), *way));
        }
    }
    found.sort();
    found
}

/// Every way out in the crate's source, as `(file, line, way)`.
fn ways_out() -> Vec<(String, usize, &'static str)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut read = Vec::new();
    let mut tests_only: Vec<std::path::PathBuf> = Vec::new();
    for file in files {
        let code = Code::read(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|err| panic!("{} does not read as Rust: {err}", file.display()));
        // A module's own folder: `a/mod.rs` and `lib.rs` declare into theirs, `a/b.rs` into `a/b/`.
        let stem = file.file_stem().unwrap_or_default();
        let folder = match stem.to_str() {
            Some("mod" | "lib" | "main") => file.parent().unwrap().to_owned(),
            _ => file.with_extension(""),
        };
        for module in &code.test_modules {
            tests_only.push(folder.join(format!("{module}.rs")));
            tests_only.push(folder.join(module));
        }
        read.push((file, code));
    }
    let mut found = Vec::new();
    for (file, code) in read {
        if tests_only.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        let name = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for (line, way) in found_in(&code) {
            found.push((name.clone(), line, way));
        }
    }
    found
}

fn allows(entry: &(&str, &str, &str), file: &str, way: &str) -> bool {
    let (place, what, _) = entry;
    // A folder (`src/tools/`) or a file's name without its end (`src/run/worktree`: the file
    // and its folder of parts).
    file.starts_with(place) && (*what == "*" || *what == way)
}

#[test]
fn every_way_out_goes_through_the_writers() {
    let found = ways_out();
    if std::env::var_os("RUNNER_AUDIT_LIST").is_some() {
        for (file, line, way) in &found {
            eprintln!("{file}:{line}: {way}");
        }
    }
    let bypasses: Vec<String> = found
        .iter()
        .filter(|(file, _, way)| !ALLOWED.iter().any(|entry| allows(entry, file, way)))
        .map(|(file, line, way)| format!("{file}:{line}: `{way}`"))
        .collect();
    assert!(
        bypasses.is_empty(),
        "these write a file, a folder, a socket or the terminal without crate::out (write through \
         crate::out::{{write_file, OutDir, stdout, stderr}}, or add an allowance with its reason):\n{}",
        bypasses.join("\n")
    );
    let used: BTreeSet<usize> = found
        .iter()
        .flat_map(|(file, _, way)| {
            ALLOWED
                .iter()
                .enumerate()
                .filter(|(_, entry)| allows(entry, file, way))
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        })
        .collect();
    let stale: Vec<String> = ALLOWED
        .iter()
        .enumerate()
        .filter(|(i, _)| !used.contains(i))
        .map(|(_, (place, way, _))| format!("{place} `{way}`"))
        .collect();
    assert!(stale.is_empty(), "allowances that match nothing: {stale:?}");
}

/// The reader finds what it must, however it is imported or laid out, and nothing in
/// comments, strings or tests.
#[test]
fn the_reader_skips_comments_strings_and_tests() {
    let source = r##"
fn a() { let _ = std::fs::write("x", "y"); } // std::io::stdout()
/* File::create("z") /* nested */ */
fn b() { let s = "println!(\"no\")"; let r = r#"eprintln!("no")"#; let c = '"'; }
fn c<'a>(x: &'a str) { print!("{x}"); }
#[cfg(test)]
mod tests {
    fn t() { std::io::stdout(); }
}
#[cfg(test)]
fn helper() { let _ = std::net::TcpStream::connect("x"); }
fn d() { std::io::stderr(); }
use std::io::{self, Write as _, stdout as out};
fn e() { std::fs
    ::write("a", "b"); }
"##;
    let code = Code::read(source).unwrap();
    assert_eq!(
        found_in(&code),
        vec![
            (2, "fs::write"),
            (5, "print!("),
            (12, "io::stderr"),
            (13, "io::stdout"),
            (14, "fs::write"),
        ],
        "{}",
        code.text
    );
}
