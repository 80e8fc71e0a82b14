//! Every place in `src/` that opens a file to write, makes a folder, renames, connects or takes
//! the terminal, found by reading the source: outside the places listed in [`ALLOWED`] (each
//! with why it may), one is a way out that bypasses the redactor or the confined writer, and
//! this test fails naming it. Comments, string contents and `#[cfg(test)]` items are left out
//! of what is read; an allowance that matches nothing fails too, so the list stays true.

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
        "src/commands/mod.rs",
        "io::stderr",
        "whether stderr is a terminal (colour), never written",
    ),
    (
        "src/commands/run.rs",
        "io::stderr",
        "whether stderr is a terminal (the live display or plain lines), never written",
    ),
    (
        "src/terminal.rs",
        "io::stderr",
        "the terminal's width, never written",
    ),
];

/// `text` with comments and the contents of string and character literals blanked (newlines
/// kept, so lines keep their numbers).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && matches!(next, Some('"' | '#'))
            && !chars
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"..." or r#"..."#.
            let mut hashes = 0;
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            out.push_str("r\"");
            i = j + 1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
            out.push('"');
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if let Some(&c) = chars.get(i) {
                    out.push(blank(c));
                }
                i += 1;
            }
            out.push('"');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal (a lifetime has no closing quote).
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push_str("' '");
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` without its `#[cfg(test)]` items (a module, a function), blanked.
fn without_tests(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let marker: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + marker.len() <= out.len() {
        if out[i..i + marker.len()] != marker[..] {
            i += 1;
            continue;
        }
        // The item ends at its first `;` outside braces, or with the braces it opens.
        let mut j = i;
        let mut depth = 0;
        while j < out.len() {
            match out[j] {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ';' if depth == 0 => break,
                _ => {}
            }
            j += 1;
        }
        let end = j.min(out.len());
        for c in &mut out[i..end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
        i = j;
    }
    out.into_iter().collect()
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

/// Every way out in the crate's source, as `(file, line, way)`.
fn ways_out() -> Vec<(String, usize, &'static str)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let name = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let code = without_tests(&code_only(&std::fs::read_to_string(&file).unwrap()));
        for (number, line) in code.lines().enumerate() {
            let compact: String = line.split_whitespace().collect::<Vec<_>>().join(" ");
            for way in WAYS_OUT {
                if compact.contains(way) {
                    found.push((name.clone(), number + 1, *way));
                }
            }
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

/// The reader finds what it must and nothing in comments, strings or tests.
#[test]
fn the_reader_skips_comments_strings_and_tests() {
    let source = r##"
fn a() { let _ = std::fs::write("x", "y"); } // std::io::stdout()
/* File::create("z") */
fn b() { let s = "println!(\"no\")"; let r = r#"eprintln!("no")"#; let c = '"'; }
fn c<'a>(x: &'a str) { print!("{x}"); }
#[cfg(test)]
mod tests {
    fn t() { std::io::stdout(); }
}
#[cfg(test)]
fn helper() { let _ = std::net::TcpStream::connect("x"); }
fn d() { std::io::stderr(); }
"##;
    let code = without_tests(&code_only(source));
    let hits: Vec<(usize, &str)> = code
        .lines()
        .enumerate()
        .flat_map(|(n, line)| {
            WAYS_OUT
                .iter()
                .filter(move |w| line.contains(*w))
                .map(move |w| (n, *w))
        })
        .collect();
    assert_eq!(
        hits,
        vec![(1, "fs::write"), (4, "print!("), (11, "io::stderr")],
        "{code}"
    );
}
