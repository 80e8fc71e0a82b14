//! Problems found in the user's files and flags, and how they become exit codes.
//!
//! Everything wrong with a workflow is a [`Problem`]: a message, an optional caret into a file,
//! and an optional hint. Stages collect problems instead of stopping at the first, so a user sees
//! everything wrong at once, sorted by position.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use miette::{
    Diagnostic, GraphicalReportHandler, GraphicalTheme, LabeledSpan, MietteError, Severity,
    SourceCode, SourceSpan, SpanContents,
};

use crate::source_file::SourceFile;
use crate::terminal::{clean, mask};

/// How a command ended, by class; [`Exit::code`] maps it to the exit codes of docs/src/reference/commands.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Success,
    /// A step failed (1).
    StepFailed,
    /// The user's files or flags are wrong (2).
    Invalid,
    /// Something went wrong that is neither: the machine, the state directory, a bug (1, with an
    /// `error:` line that says what).
    Unexpected,
    /// SIGINT or SIGTERM (130).
    Interrupted,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::StepFailed | Exit::Unexpected => 1,
            Exit::Invalid => 2,
            Exit::Interrupted => 130,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warning,
}

#[derive(Debug, Clone)]
pub struct Problem {
    pub level: Level,
    pub message: String,
    pub file: Option<Arc<SourceFile>>,
    pub span: Option<Range<usize>>,
    pub label: String,
    pub help: Option<String>,
}

impl Problem {
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            level: Level::Error,
            message: message.into(),
            file: None,
            span: None,
            label: String::new(),
            help: None,
        }
    }

    pub fn warning(message: impl Into<String>) -> Self {
        Self {
            level: Level::Warning,
            ..Self::error(message)
        }
    }

    /// Points the problem at `span` of `file`, with a short label under the caret.
    pub fn at(
        mut self,
        file: &Arc<SourceFile>,
        span: Range<usize>,
        label: impl Into<String>,
    ) -> Self {
        self.file = Some(file.clone());
        self.span = Some(span);
        self.label = label.into();
        self
    }

    /// Names the file without pointing into it (a problem about the file as a whole).
    pub fn in_file(mut self, file: &Arc<SourceFile>) -> Self {
        self.file = Some(file.clone());
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn with_help(mut self, help: Option<String>) -> Self {
        self.help = help;
        self
    }

    pub fn is_error(&self) -> bool {
        self.level == Level::Error
    }

    /// `file:line:column` of the problem, for one-line reports.
    pub fn location(&self) -> Option<String> {
        let file = self.file.as_ref()?;
        let Some(span) = &self.span else {
            return Some(file.name.to_string());
        };
        let (line, col) = line_col(&file.text, span.start);
        Some(format!("{}:{line}:{col}", file.name))
    }

    fn sort_key(&self) -> (Option<String>, usize, Level) {
        (
            self.file.as_ref().map(|f| f.name.to_string()),
            self.span.as_ref().map_or(0, |s| s.start),
            self.level,
        )
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = floor_char_boundary(text, offset);
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Length in bytes of the line holding `offset`.
fn line_len(text: &str, offset: usize) -> usize {
    let offset = floor_char_boundary(text, offset);
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    end - start
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Problem {}

/// miette reads the file through this so that its name appears in the report header.
struct FileSource(Arc<SourceFile>);

impl SourceCode for FileSource {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn SpanContents<'a> + 'a>, MietteError> {
        let contents = self
            .0
            .text
            .read_span(span, context_lines_before, context_lines_after)?;
        Ok(Box::new(miette::MietteSpanContents::new_named(
            self.0.name.to_string(),
            contents.data(),
            *contents.span(),
            contents.line(),
            contents.column(),
            contents.line_count(),
        )))
    }
}

/// Lines longer than this are not quoted under a diagnostic (a minified or generated file would
/// flood the terminal); the location goes in the headline instead.
const MAX_QUOTED_LINE: usize = 400;

/// A [`Problem`] as miette sees it; built only to render.
struct Rendered<'a> {
    problem: &'a Problem,
    /// `None` when the problem has no caret, or its line is too long to quote.
    source: Option<FileSource>,
}

impl fmt::Debug for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.problem.fmt(f)
    }
}

impl fmt::Display for Rendered<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.problem.file, &self.source) {
            // Without a caret diagram the location goes in the headline.
            (Some(_), None) => write!(
                f,
                "{}: {}",
                clean(&self.problem.location().unwrap_or_default()),
                clean(&self.problem.message)
            ),
            _ => f.write_str(&clean(&self.problem.message)),
        }
    }
}

impl std::error::Error for Rendered<'_> {}

impl Diagnostic for Rendered<'_> {
    fn severity(&self) -> Option<Severity> {
        Some(match self.problem.level {
            Level::Error => Severity::Error,
            Level::Warning => Severity::Warning,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.problem
            .help
            .as_ref()
            .map(|h| Box::new(clean(h).into_owned()) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        if self.problem.span.is_some() {
            self.source.as_ref().map(|s| s as &dyn SourceCode)
        } else {
            None
        }
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let span = self.problem.span.clone()?;
        self.source.as_ref()?;
        let label =
            (!self.problem.label.is_empty()).then(|| clean(&self.problem.label).into_owned());
        Some(Box::new(std::iter::once(LabeledSpan::new_with_span(
            label,
            SourceSpan::from(span),
        ))))
    }
}

/// Renders problems as miette reports: sorted by file and position, errors before warnings at
/// the same place.
pub struct Renderer {
    handler: GraphicalReportHandler,
}

impl Renderer {
    pub fn new(color: bool) -> Self {
        let theme = if color {
            GraphicalTheme::unicode()
        } else {
            GraphicalTheme::unicode_nocolor()
        };
        Self {
            handler: GraphicalReportHandler::new_themed(theme)
                .with_width(100)
                .with_links(false),
        }
    }

    pub fn render(&self, problems: &[Problem]) -> String {
        let mut sorted: Vec<&Problem> = problems.iter().collect();
        sorted.sort_by_key(|p| p.sort_key());
        let mut out = String::new();
        // What a file says reaches the terminal: its control characters are masked (byte for
        // byte, so spans hold), once per file.
        let mut masked: Vec<(*const SourceFile, Arc<SourceFile>)> = Vec::new();
        for problem in sorted {
            let quotable = match (&problem.file, &problem.span) {
                (Some(file), Some(span)) => line_len(&file.text, span.start) <= MAX_QUOTED_LINE,
                _ => false,
            };
            let rendered = Rendered {
                problem,
                source: problem.file.as_ref().filter(|_| quotable).map(|file| {
                    let key = Arc::as_ptr(file);
                    if let Some((_, done)) = masked.iter().find(|(k, _)| *k == key) {
                        return FileSource(done.clone());
                    }
                    let text = mask(&file.text);
                    let name = clean(file.name.as_str());
                    let safe = match (&text, &name) {
                        (Cow::Borrowed(_), Cow::Borrowed(_)) => file.clone(),
                        _ => SourceFile::new(name.as_ref(), text.into_owned()),
                    };
                    masked.push((key, safe.clone()));
                    FileSource(safe)
                }),
            };
            let mut one = String::new();
            if self.handler.render_report(&mut one, &rendered).is_err() {
                one = format!("{problem}\n");
            }
            out.push_str(&one);
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }
}

pub fn count_summary(problems: &[Problem]) -> String {
    let errors = problems.iter().filter(|p| p.is_error()).count();
    let warnings = problems.len() - errors;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    match (errors, warnings) {
        (e, 0) => plural(e, "error"),
        (0, w) => plural(w, "warning"),
        (e, w) => format!("{}, {}", plural(e, "error"), plural(w, "warning")),
    }
}

/// "did you mean `x`?" for the candidate closest to `given`, when one is close enough.
pub fn did_you_mean<'a>(
    given: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    closest(given, candidates).map(|c| format!("did you mean `{c}`?"))
}

pub fn closest<'a>(given: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let given_lower = given.to_lowercase();
    candidates
        .into_iter()
        .filter(|c| !c.is_empty())
        .map(|c| {
            let distance = strsim::damerau_levenshtein(&given_lower, &c.to_lowercase());
            (distance, c)
        })
        .filter(|(distance, c)| {
            let longest = given.chars().count().max(c.chars().count());
            *distance <= (longest / 3).max(1) && *distance < longest
        })
        .min_by_key(|(distance, c)| (*distance, *c))
        .map(|(_, c)| c)
}
