//! Source files parsed into one spanned tree, whatever their syntax.
//!
//! TOML and YAML are both read into [`Node`], which keeps the byte range of every key and value so
//! that later stages (schema checks, semantic validation) can point at the exact text they object
//! to. Only after that do typed structs get built, through `serde_json`.

use std::ops::Range;
use std::sync::Arc;

use camino::Utf8Path;
use indexmap::IndexMap;
use serde_json::{Map, Value};

use crate::error::Problem;

pub use crate::source_file::SourceFile;

impl SourceFile {
    /// Reads a file; an unreadable file is a problem about that path, not a panic. Only regular
    /// files within [`MAX_SOURCE_BYTES`](crate::limits::MAX_SOURCE_BYTES) are read, and a UTF-8
    /// byte-order mark is dropped.
    pub fn read(path: &Utf8Path) -> Result<Arc<Self>, Problem> {
        match crate::limits::read_text(path, crate::limits::MAX_SOURCE_BYTES) {
            Ok(text) => Ok(Self::new(path, text)),
            Err(err) => Err(Problem::error(format!("cannot read `{path}`: {err}"))),
        }
    }
}

/// The syntax a file is written in, chosen by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    Toml,
    Yaml,
}

impl Syntax {
    pub fn from_path(path: &Utf8Path) -> Option<Self> {
        match path.extension().map(str::to_ascii_lowercase).as_deref() {
            Some("toml") => Some(Self::Toml),
            Some("yaml" | "yml") => Some(Self::Yaml),
            _ => None,
        }
    }
}

/// A value with the byte range it came from.
#[derive(Debug, Clone)]
pub struct Spanned<T> {
    pub span: Range<usize>,
    pub value: T,
}

#[derive(Debug, Clone)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Node>>),
    /// Keys in file order, each with the span of the key's text.
    Map(Entries),
}

pub type Entries = IndexMap<String, (Range<usize>, Spanned<Node>)>;

/// One step of a path into a tree: a map key or a sequence index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

impl From<&str> for Seg {
    fn from(key: &str) -> Self {
        Seg::Key(key.to_owned())
    }
}

impl From<usize> for Seg {
    fn from(index: usize) -> Self {
        Seg::Index(index)
    }
}

/// Builds a path from keys and indexes: `path!["steps", id, "needs", 2]`.
#[macro_export]
macro_rules! path {
    ($($seg:expr),* $(,)?) => { [$($crate::workflow::source::Seg::from($seg)),*] };
}

impl Spanned<Node> {
    pub fn get(&self, key: &str) -> Option<&Spanned<Node>> {
        match &self.value {
            Node::Map(entries) => entries.get(key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn key_span(&self, key: &str) -> Option<Range<usize>> {
        match &self.value {
            Node::Map(entries) => entries.get(key).map(|(k, _)| k.clone()),
            _ => None,
        }
    }

    pub fn find(&self, path: &[Seg]) -> Option<&Spanned<Node>> {
        let mut node = self;
        for seg in path {
            node = match (seg, &node.value) {
                (Seg::Key(key), _) => node.get(key)?,
                (Seg::Index(i), Node::Seq(items)) => items.get(*i)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// The span of the deepest node along `path` that exists: a good place to point at when the
    /// exact node is missing (e.g. a required key that is absent points at its table).
    pub fn best_span(&self, path: &[Seg]) -> Range<usize> {
        let mut node = self;
        for seg in path {
            let next = match (seg, &node.value) {
                (Seg::Key(key), _) => node.get(key),
                (Seg::Index(i), Node::Seq(items)) => items.get(*i),
                _ => None,
            };
            match next {
                Some(next) => node = next,
                None => break,
            }
        }
        node.span.clone()
    }

    /// The span of the key that introduces the node at `path` (or the node's own span).
    pub fn key_or_value_span(&self, path: &[Seg]) -> Range<usize> {
        if let Some((Seg::Key(last), parent)) = path.split_last()
            && let Some(span) = self.find(parent).and_then(|p| p.key_span(last))
        {
            return span;
        }
        self.best_span(path)
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn to_json(&self) -> Value {
        match &self.value {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Int(i) => Value::from(*i),
            Node::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Node::Str(s) => Value::String(s.clone()),
            Node::Seq(items) => Value::Array(items.iter().map(Self::to_json).collect()),
            Node::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, (_, v))| (k.clone(), v.to_json()))
                    .collect::<Map<_, _>>(),
            ),
        }
    }
}

pub use super::yaml::{parse_yaml, parse_yaml_text};

pub fn parse(file: &Arc<SourceFile>, syntax: Syntax) -> Result<Spanned<Node>, Vec<Problem>> {
    match syntax {
        Syntax::Toml => parse_toml(file),
        Syntax::Yaml => parse_yaml(file),
    }
}

// Over 80 lines: walking toml_edit's tree into the spanned tree, one arm per item kind.
fn parse_toml(file: &Arc<SourceFile>) -> Result<Spanned<Node>, Vec<Problem>> {
    let (table, errors) = toml::de::DeTable::parse_recoverable(&file.text);
    if !errors.is_empty() {
        // An array or inline table left open swallows the rest of the file, and the parser
        // reports every line after it: one error, where it opens, says what is wrong.
        let unclosed = errors.iter().any(|e| e.message().starts_with("unclosed"));
        if let Some((at, open)) = unclosed.then(|| unclosed_opener(&file.text)).flatten() {
            let (what, close) = if open == '[' {
                ("array", ']')
            } else {
                ("inline table", '}')
            };
            let mut problems: Vec<Problem> = errors
                .iter()
                .filter(|e| e.span().is_some_and(|s| s.end <= at))
                .map(|e| {
                    let message = e.message().trim_end().trim_end_matches('.');
                    Problem::error(format!("invalid TOML: {message}")).at(
                        file,
                        e.span().unwrap_or(0..0),
                        "here",
                    )
                })
                .collect();
            problems.push(
                Problem::error(format!(
                    "invalid TOML: this {what} is never closed (`{close}` missing)"
                ))
                .at(file, at..at + 1, "opens here")
                .help(format!(
                    "close it with `{close}` where it ends: everything after it was read as part of it"
                )),
            );
            return Err(problems);
        }
        let mut problems = Vec::new();
        // Inside a table defined twice, every key is a duplicate too: one error says it all.
        let mut in_duplicate_table = false;
        for err in &errors {
            let span = err.span().unwrap_or(0..0);
            let message = err.message().trim_end().trim_end_matches('.');
            if message != "duplicate key" {
                in_duplicate_table = false;
                problems.push(
                    Problem::error(format!("invalid TOML: {message}")).at(file, span, "here"),
                );
                continue;
            }
            let line = line_at(&file.text, span.start);
            let header = line.trim();
            if header.starts_with('[') {
                in_duplicate_table = true;
                let first = file
                    .text
                    .lines()
                    .position(|l| l.trim() == header)
                    .map_or(String::new(), |n| format!(" (first at line {})", n + 1));
                problems.push(
                    Problem::error(format!("invalid TOML: table `{header}` is defined twice"))
                        .at(file, span, "again here")
                        .help(format!(
                            "TOML allows one `{header}`{first}: merge the two, or rename one"
                        )),
                );
            } else if !in_duplicate_table {
                let key = file.text.get(span.clone()).unwrap_or("").trim();
                problems.push(
                    Problem::error(format!(
                        "invalid TOML: key `{key}` is set twice in one table"
                    ))
                    .at(file, span, "set again here"),
                );
            }
        }
        return Err(problems);
    }
    let span = table.span();
    let mut entries = Entries::new();
    for (key, value) in table.into_inner() {
        entries.insert(key.get_ref().to_string(), (key.span(), toml_node(&value)));
    }
    Ok(Spanned {
        span,
        value: Node::Map(entries),
    })
}

/// Where the first array (`[`) or inline table (`{`) of a TOML text that is never closed opens,
/// skipping strings and comments; table headers open and close on their line.
fn unclosed_opener(text: &str) -> Option<(usize, char)> {
    let bytes = text.as_bytes();
    let mut open: Vec<(usize, char)> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            quote @ (b'"' | b'\'') => {
                let triple = bytes.get(i..i + 3) == Some(&[quote, quote, quote][..]);
                i += if triple { 3 } else { 1 };
                while i < bytes.len() {
                    if quote == b'"' && bytes[i] == b'\\' {
                        i += 2;
                        continue;
                    }
                    if triple {
                        if bytes.get(i..i + 3) == Some(&[quote, quote, quote][..]) {
                            i += 2;
                            break;
                        }
                    } else if bytes[i] == quote || bytes[i] == b'\n' {
                        break;
                    }
                    i += 1;
                }
            }
            b'[' => open.push((i, '[')),
            b'{' => open.push((i, '{')),
            b']' | b'}' => {
                open.pop();
            }
            _ => {}
        }
        i += 1;
    }
    open.first().copied()
}

/// The line of `text` that holds byte `at`.
fn line_at(text: &str, at: usize) -> &str {
    let at = at.min(text.len());
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    &text[start..end]
}

fn toml_node(value: &toml::Spanned<toml::de::DeValue<'_>>) -> Spanned<Node> {
    use toml::de::DeValue;
    let node = match value.get_ref() {
        DeValue::String(s) => Node::Str(s.to_string()),
        DeValue::Integer(i) => {
            let digits = i.as_str().replace('_', "");
            let digits = digits.trim_start_matches("0x").trim_start_matches("0o");
            let digits = digits.trim_start_matches("0b");
            match i64::from_str_radix(digits, i.radix()) {
                Ok(n) => Node::Int(n),
                // Out of range: keep the text so the schema check reports a type problem.
                Err(_) => Node::Str(i.as_str().to_owned()),
            }
        }
        DeValue::Float(f) => match f.as_str().replace('_', "").parse::<f64>() {
            Ok(n) => Node::Float(n),
            Err(_) => Node::Str(f.as_str().to_owned()),
        },
        DeValue::Boolean(b) => Node::Bool(*b),
        DeValue::Datetime(d) => Node::Str(d.to_string()),
        DeValue::Array(items) => Node::Seq(items.iter().map(toml_node).collect()),
        DeValue::Table(table) => Node::Map(
            table
                .iter()
                .map(|(k, v)| (k.get_ref().to_string(), (k.span(), toml_node(v))))
                .collect(),
        ),
    };
    Spanned {
        span: value.span(),
        value: node,
    }
}
