//! YAML read into the spanned [`Node`] tree, from yaml-rust2's marked events, with limits on
//! alias expansion and nesting so that a small hostile file cannot take the machine.

use std::ops::Range;
use std::sync::Arc;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::source::{Entries, Node, SourceFile, Spanned};
use crate::error::Problem;
use crate::limits::{MAX_NESTING, MAX_YAML_BYTES, MAX_YAML_VALUES};

/// Builds a [`Node`] tree from yaml-rust2's marked events. Its markers count characters, so they
/// are turned into byte offsets here.
struct YamlBuilder<'a> {
    text: &'a str,
    /// Byte offset of every char index (plus one past the end).
    char_to_byte: Vec<usize>,
    stack: Vec<Frame>,
    /// Anchored values, with how many values each holds (aliases copy them).
    anchors: Vec<(usize, Spanned<Node>, Weight)>,
    root: Option<Spanned<Node>>,
    documents: usize,
    problems: Vec<(Range<usize>, String)>,
    /// Values and text built so far, aliases counted at their full size.
    built: Weight,
    /// Collections opened past [`MAX_NESTING`]: their events are ignored until they close.
    too_deep: usize,
    /// Set once a limit is passed: nothing more is built, so a bomb costs no memory.
    gave_up: bool,
}

/// What a value costs once built: how many values it holds, and how many bytes of text (a short
/// file can repeat one long string through aliases into gigabytes).
#[derive(Debug, Clone, Copy, Default)]
struct Weight {
    values: usize,
    bytes: usize,
}

impl Weight {
    fn scalar(text: &str) -> Self {
        Weight {
            values: 1,
            bytes: text.len(),
        }
    }

    fn add(self, other: Weight) -> Self {
        Weight {
            values: self.values.saturating_add(other.values),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }
}

enum Frame {
    Seq {
        start: usize,
        anchor: usize,
        items: Vec<Spanned<Node>>,
        /// Values inside, nested ones included.
        size: Weight,
    },
    Map {
        start: usize,
        anchor: usize,
        entries: Entries,
        pending_key: Option<Spanned<Node>>,
        size: Weight,
    },
}

impl YamlBuilder<'_> {
    fn byte(&self, mark: &Marker) -> usize {
        self.char_to_byte
            .get(mark.index())
            .copied()
            .unwrap_or(self.text.len())
    }

    fn scalar_span(&self, start: usize, value: &str, style: TScalarStyle) -> Range<usize> {
        let rest = &self.text[start.min(self.text.len())..];
        let len = match style {
            TScalarStyle::Plain => value.len(),
            TScalarStyle::SingleQuoted | TScalarStyle::DoubleQuoted => {
                // Closing quote: the first unescaped quote char after the opening one.
                let quote = rest.chars().next().unwrap_or('"');
                let mut escaped = false;
                let mut end = rest.len();
                for (i, c) in rest.char_indices().skip(1) {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' && quote == '"' {
                        escaped = true;
                    } else if c == quote {
                        end = i + c.len_utf8();
                        break;
                    }
                }
                end
            }
            TScalarStyle::Literal | TScalarStyle::Folded => rest.find('\n').unwrap_or(rest.len()),
        };
        start..(start + len).min(self.text.len())
    }

    /// Adds a value of `size` values to the collection being built.
    fn push(&mut self, node: Spanned<Node>, size: Weight) {
        match self.stack.last_mut() {
            None => {
                if self.root.is_none() {
                    self.root = Some(node);
                }
            }
            Some(Frame::Seq {
                items, size: total, ..
            }) => {
                *total = total.add(size);
                items.push(node);
            }
            Some(Frame::Map {
                entries,
                pending_key,
                size: total,
                ..
            }) => match pending_key.take() {
                None => {
                    *total = total.add(size);
                    *pending_key = Some(node);
                }
                Some(key) => {
                    *total = total.add(size);
                    let key_text = match &key.value {
                        Node::Str(s) => s.clone(),
                        Node::Int(i) => i.to_string(),
                        Node::Bool(b) => b.to_string(),
                        Node::Float(f) => f.to_string(),
                        Node::Null => "null".to_owned(),
                        Node::Seq(_) | Node::Map(_) => {
                            self.problems
                                .push((key.span.clone(), "a key must be a plain value".into()));
                            return;
                        }
                    };
                    if entries.contains_key(&key_text) {
                        self.problems
                            .push((key.span.clone(), format!("duplicate key `{key_text}`")));
                        return;
                    }
                    entries.insert(key_text, (key.span, node));
                }
            },
        }
    }

    fn remember(&mut self, anchor: usize, node: &Spanned<Node>, size: Weight) {
        if anchor > 0 {
            self.anchors.push((anchor, node.clone(), size));
        }
    }

    /// Counts `n` more; past a limit, says so once and stops building.
    fn count(&mut self, n: Weight, at: Range<usize>) -> bool {
        self.built = self.built.add(n);
        let over = if self.built.values > MAX_YAML_VALUES {
            Some(format!("{MAX_YAML_VALUES} values"))
        } else if self.built.bytes > MAX_YAML_BYTES {
            Some(format!("{} MiB of text", MAX_YAML_BYTES >> 20))
        } else {
            None
        };
        if let Some(limit) = over {
            self.problems.push((
                at,
                format!("this file holds more than {limit} once its aliases are expanded"),
            ));
            self.gave_up = true;
            self.stack.clear();
            return false;
        }
        true
    }
}

impl MarkedEventReceiver for YamlBuilder<'_> {
    // Over 80 lines: one arm per YAML parser event, building the spanned tree.
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.gave_up {
            return;
        }
        let at = self.byte(&mark);
        if self.too_deep > 0 {
            match ev {
                Event::SequenceStart(..) | Event::MappingStart(..) => self.too_deep += 1,
                Event::SequenceEnd | Event::MappingEnd => self.too_deep -= 1,
                _ => {}
            }
            return;
        }
        match ev {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents > 1 {
                    // One error says it; the rest of the file is not read (a file of thousands
                    // of `---` would otherwise cost an error, and its quoting, each).
                    self.problems.push((
                        at..at,
                        "a workflow file holds one YAML document; found another (the rest of the file is not read)".into(),
                    ));
                    self.gave_up = true;
                    self.stack.clear();
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                let span = self.scalar_span(at, &value, style);
                let weight = Weight::scalar(&value);
                let node = if style == TScalarStyle::Plain && tag.is_none() {
                    match yaml_rust2::Yaml::from_str(&value) {
                        yaml_rust2::Yaml::Boolean(b) => Node::Bool(b),
                        yaml_rust2::Yaml::Integer(i) => Node::Int(i),
                        yaml_rust2::Yaml::Real(r) => match r.parse::<f64>() {
                            Ok(f) => Node::Float(f),
                            Err(_) => Node::Str(r),
                        },
                        yaml_rust2::Yaml::Null => Node::Null,
                        _ => Node::Str(value),
                    }
                } else {
                    Node::Str(value)
                };
                let node = Spanned { span, value: node };
                if !self.count(weight, node.span.clone()) {
                    return;
                }
                self.remember(anchor, &node, weight);
                self.push(node, weight);
            }
            Event::Alias(anchor) => {
                let found = self
                    .anchors
                    .iter()
                    .rev()
                    .find(|(id, _, _)| *id == anchor)
                    .map(|(_, n, size)| (n, *size));
                match found {
                    Some((node, size)) => {
                        // Count before copying: the copy is what a bomb multiplies.
                        let value = node.value.clone();
                        if self.count(size, at..at + 1) {
                            self.push(
                                Spanned {
                                    span: at..at + 1,
                                    value,
                                },
                                size,
                            );
                        }
                    }
                    None => self
                        .problems
                        .push((at..at + 1, "alias to an unknown anchor".into())),
                }
            }
            Event::SequenceStart(..) | Event::MappingStart(..)
                if self.stack.len() >= MAX_NESTING =>
            {
                self.too_deep = 1;
                self.problems.push((
                    at..at + 1,
                    format!("values are nested more than {MAX_NESTING} levels deep"),
                ));
            }
            Event::SequenceStart(anchor, _) => {
                if self.count(Weight::scalar(""), at..at + 1) {
                    self.stack.push(Frame::Seq {
                        start: at,
                        anchor,
                        items: Vec::new(),
                        size: Weight::default(),
                    });
                }
            }
            Event::MappingStart(anchor, _) => {
                if self.count(Weight::scalar(""), at..at + 1) {
                    self.stack.push(Frame::Map {
                        start: at,
                        anchor,
                        entries: Entries::new(),
                        pending_key: None,
                        size: Weight::default(),
                    });
                }
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (start, anchor, value, size) = match self.stack.pop() {
                    Some(Frame::Seq {
                        start,
                        anchor,
                        items,
                        size,
                    }) => (start, anchor, Node::Seq(items), size),
                    Some(Frame::Map {
                        start,
                        anchor,
                        entries,
                        size,
                        ..
                    }) => (start, anchor, Node::Map(entries), size),
                    None => return,
                };
                let node = Spanned {
                    span: start..at.max(start),
                    value,
                };
                let size = size.add(Weight::scalar(""));
                self.remember(anchor, &node, size);
                self.push(node, size);
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

pub fn parse_yaml(file: &Arc<SourceFile>) -> Result<Spanned<Node>, Vec<Problem>> {
    parse_yaml_text(file, &file.text, 0)
}

/// Parses YAML found at byte `offset` of `file` (front matter inside a Markdown file).
pub fn parse_yaml_text(
    file: &Arc<SourceFile>,
    text: &str,
    offset: usize,
) -> Result<Spanned<Node>, Vec<Problem>> {
    let mut char_to_byte: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    char_to_byte.push(text.len());
    let mut builder = YamlBuilder {
        text,
        char_to_byte,
        stack: Vec::new(),
        anchors: Vec::new(),
        root: None,
        documents: 0,
        problems: Vec::new(),
        built: Weight::default(),
        too_deep: 0,
        gave_up: false,
    };
    let mut parser = Parser::new_from_str(text);
    if let Err(err) = parser.load(&mut builder, true) {
        let at = builder.byte(err.marker());
        return Err(vec![
            Problem::error(format!("invalid YAML: {}", err.info())).at(
                file,
                offset + at..offset + at,
                "here",
            ),
        ]);
    }
    if !builder.problems.is_empty() {
        return Err(builder
            .problems
            .into_iter()
            .map(|(span, msg)| {
                Problem::error(msg).at(file, offset + span.start..offset + span.end, "here")
            })
            .collect());
    }
    let mut root = builder.root.unwrap_or(Spanned {
        span: 0..0,
        value: Node::Map(Entries::new()),
    });
    // An empty document is an empty table, as in TOML.
    if matches!(root.value, Node::Null) {
        root.value = Node::Map(Entries::new());
    }
    if offset > 0 {
        shift(&mut root, offset);
    }
    Ok(root)
}

fn shift(node: &mut Spanned<Node>, by: usize) {
    node.span = node.span.start + by..node.span.end + by;
    match &mut node.value {
        Node::Seq(items) => items.iter_mut().for_each(|n| shift(n, by)),
        Node::Map(entries) => {
            for (k, v) in entries.values_mut() {
                *k = k.start + by..k.end + by;
                shift(v, by);
            }
        }
        _ => {}
    }
}
