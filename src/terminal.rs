//! Text from servers and models is shown on terminals; escape sequences in it could move the
//! cursor, rewrite earlier lines, set the window title or worse (OSC 52 writes the clipboard),
//! and bidirectional controls reorder what a reader sees (docs/src/security.md). Text is
//! cleaned by [`clean`], JSON is written by [`to_json_pretty`] and [`to_json_line`], and every
//! byte reaches stdout and stderr through [`Escaping`], which escapes whatever is left.

use std::borrow::Cow;

mod json;
#[cfg(test)]
mod scan;
mod writer;

pub use json::{to_json_line, to_json_pretty};
pub use writer::{Escaping, escape, live_stderr, stderr, stdout};

/// Whether `c` is escaped in every output, text or JSON, whatever else is done with controls:
/// a C1 control (U+0080 to U+009F), or a bidirectional control (Unicode's `Bidi_Control`:
/// the embeddings and overrides U+202A to U+202E, the isolates U+2066 to U+2069, and the marks
/// U+200E, U+200F and U+061C, which reorder neutral characters around them).
pub fn needs_escape(c: char) -> bool {
    matches!(c, '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
}

/// Whether `c` is a bidirectional control (see [`needs_escape`]).
fn is_bidi(c: char) -> bool {
    needs_escape(c) && !c.is_control()
}

/// `text` without terminal control: escape sequences (CSI, OSC, DCS and the rest) are dropped
/// whole, other C0 and C1 control characters and DEL are dropped; newlines and tabs stay. A
/// bidirectional control is shown as its escape (`\u202e`): dropped, it would hide that the
/// text held one.
pub fn clean(text: &str) -> Cow<'_, str> {
    let is_control = |c: char| (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}';
    if !text.chars().any(|c| is_control(c) || is_bidi(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                // CSI: parameters and intermediates, then one final byte in @..~.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC, DCS, SOS, PM, APC: a string ended by BEL or ST (ESC \).
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                // Two-character sequences (ESC 7, ESC c, ...) and anything else.
                _ => {}
            },
            '\u{9b}' => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            '\u{9d}' | '\u{90}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if is_control(c) => {}
            c if is_bidi(c) => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `text` with every control character but newline and tab (and a carriage return before a
/// newline), and every bidirectional control, shown as `?`, one per byte: for source quoted
/// under a diagnostic, whose byte offsets must not move.
pub fn mask(text: &str) -> Cow<'_, str> {
    let is_control = |c: char, next: Option<char>| {
        (c.is_control() && c != '\n' && c != '\t' && !(c == '\r' && next == Some('\n')))
            || c == '\u{7f}'
            || is_bidi(c)
    };
    let mut chars = text.chars().peekable();
    let mut dirty = false;
    while let Some(c) = chars.next() {
        if is_control(c, chars.peek().copied()) {
            dirty = true;
            break;
        }
    }
    if !dirty {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if is_control(c, chars.peek().copied()) {
            out.extend(std::iter::repeat_n('?', c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' if chars.peek() == Some(&'\\') => {
                chars.next();
                return;
            }
            _ => {}
        }
    }
}

/// The width of the terminal stderr is, when it is one.
pub fn stderr_width() -> Option<usize> {
    use std::io::IsTerminal as _;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let mut size = nix::libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the winsize it is given, which lives for the call.
    let done = unsafe { nix::libc::ioctl(2, nix::libc::TIOCGWINSZ, &mut size) } == 0;
    (done && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_controls_are_removed() {
        let hostile = "ok\u{1b}[2J\u{1b}[1;31mred\u{1b}[0m \u{1b}]0;title\u{7}\u{1b}]52;c;ZXZpbA==\u{1b}\\done\r\u{8}\u{9b}31m!\u{7f}\n\tnext";
        assert_eq!(clean(hostile), "okred done!\n\tnext");
        assert!(matches!(clean("plain text\n"), Cow::Borrowed(_)));
        assert!(matches!(clean("עברית ו-English\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn bidirectional_controls_are_shown_as_escapes() {
        let spoof = "ok\u{202e}txt.exe\u{202c} \u{2066}a\u{2069} \u{200f}\u{61c}\u{200e}";
        assert_eq!(
            clean(spoof),
            r"ok\u202etxt.exe\u202c \u2066a\u2069 \u200f\u061c\u200e"
        );
        assert_eq!(mask("a\u{202e}b"), "a???b");
    }

    #[test]
    fn masking_keeps_every_byte_offset() {
        let hostile = "a\u{1b}[2Jb\u{9b}c\r\nd\re\t";
        let masked = mask(hostile);
        assert_eq!(masked, "a?[2Jb??c\r\nd?e\t");
        assert_eq!(masked.len(), hostile.len());
        assert!(matches!(mask("line\r\nnext\n"), Cow::Borrowed(_)));
    }
}
