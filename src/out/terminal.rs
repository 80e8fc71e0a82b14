//! The terminal, through the redactor: stdout and stderr as [`Redacting`] writers that pass on
//! each line as it ends, and the live display's draw target (indicatif's `TermLike`), which
//! redacts every line it draws.

use std::io;

use super::Redacting;
use crate::terminal::Escaping;

/// Standard output, every line redacted as it ends, then escaped (`crate::terminal::Escaping`:
/// no control or bidirectional character reaches the terminal raw).
pub fn stdout() -> Redacting<Escaping<io::Stdout>> {
    Redacting::lines(Escaping::new(io::stdout()))
}

/// Standard error, every line redacted as it ends. Unlocked: the sinks' thread, the signal
/// task and the command write to it, each a whole line at a time.
pub fn stderr() -> Redacting<Escaping<io::Stderr>> {
    Redacting::lines(Escaping::new(io::stderr()))
}

/// Whether stderr is a terminal (colour, the live display or plain lines): the one look at it
/// outside [`stderr`], which writes nothing.
pub fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal as _;
    io::stderr().is_terminal()
}

/// Where the live display draws: stderr, each line redacted (hidden, as indicatif's own
/// target is, when `TERM` is unset or `dumb`).
pub fn progress_target() -> indicatif::ProgressDrawTarget {
    let dumb = std::env::var("TERM").map_or(true, |t| t.is_empty() || t == "dumb");
    if dumb {
        return indicatif::ProgressDrawTarget::hidden();
    }
    indicatif::ProgressDrawTarget::term_like_with_hz(
        Box::new(RedactedTerm(console::Term::buffered_stderr())),
        20,
    )
}

/// A terminal whose text passes the redactor; cursor movement passes as it is.
#[derive(Debug)]
struct RedactedTerm(console::Term);

impl indicatif::TermLike for RedactedTerm {
    fn width(&self) -> u16 {
        self.0.size().1
    }

    fn height(&self) -> u16 {
        self.0.size().0
    }

    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_up(n)
    }

    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_down(n)
    }

    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_right(n)
    }

    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        self.0.move_cursor_left(n)
    }

    fn write_line(&self, s: &str) -> io::Result<()> {
        self.0
            .write_line(&crate::terminal::escape(&crate::secrets::redact(s)))
    }

    fn write_str(&self, s: &str) -> io::Result<()> {
        self.0
            .write_str(&crate::terminal::escape(&crate::secrets::redact(s)))
    }

    fn clear_line(&self) -> io::Result<()> {
        self.0.clear_line()
    }

    fn flush(&self) -> io::Result<()> {
        self.0.flush()
    }
}
