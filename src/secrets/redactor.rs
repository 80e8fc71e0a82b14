//! The matcher behind [`super::redact`] and [`crate::out::Redacting`]: every registered form of
//! every secret in one Aho-Corasick automaton (the `aho-corasick` crate), leftmost-longest, so
//! one pass over the bytes finds them all and a secret that contains another is hidden whole.

use std::borrow::Cow;

use aho_corasick::{AhoCorasick, MatchKind};

use super::HIDDEN;

/// What a secret's bytes become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// `[hidden]`: for text.
    Hidden,
    /// As many `*` as the secret had bytes: for a binary encoding whose lengths must not move
    /// (an OTLP protobuf body, whose strings carry their lengths).
    Mask,
}

#[derive(Debug)]
pub struct Redactor {
    pub(super) forms: Vec<String>,
    matcher: Option<AhoCorasick>,
    longest: usize,
}

impl Redactor {
    pub(super) fn new(forms: Vec<String>) -> Self {
        let matcher = if forms.is_empty() {
            None
        } else {
            // Building fails only past the automaton's size limits, far beyond the forms of a
            // run's secrets; then every form is matched one by one instead (see `find`).
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&forms)
                .ok()
        };
        let longest = forms.iter().map(String::len).max().unwrap_or(0);
        Self {
            forms,
            matcher,
            longest,
        }
    }

    /// The length of the longest form: a writer holds back one byte less than this between
    /// writes, so a secret split across two writes is still found whole.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// The first secret in `bytes` at or after `from`: its start and end.
    fn find(&self, bytes: &[u8], from: usize) -> Option<(usize, usize)> {
        let haystack = bytes.get(from..)?;
        match &self.matcher {
            Some(matcher) => {
                let found = matcher.find(haystack)?;
                Some((from + found.start(), from + found.end()))
            }
            None => self
                .forms
                .iter()
                .filter_map(|form| {
                    memchr::memmem::find(haystack, form.as_bytes())
                        .map(|at| (from + at, from + at + form.len()))
                })
                .min_by_key(|&(start, end)| (start, std::cmp::Reverse(end))),
        }
    }

    pub fn holds(&self, bytes: &[u8]) -> bool {
        !self.forms.is_empty() && self.find(bytes, 0).is_some()
    }

    /// `bytes` with every secret replaced by `[hidden]`.
    pub fn redact<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        if !self.holds(bytes) {
            return Cow::Borrowed(bytes);
        }
        let mut out = Vec::with_capacity(bytes.len());
        let _ = self.redact_into(bytes, true, Replace::Hidden, &mut |piece| {
            out.extend_from_slice(piece);
            Ok(())
        });
        Cow::Owned(out)
    }

    /// Writes `bytes` to `write` with every secret replaced, and returns how many bytes it
    /// consumed. Unless `last`, the end of `bytes` that could still be the start of a secret
    /// (fewer than [`Self::longest`] bytes) is left for the next call, with the bytes that follow.
    pub fn redact_into(
        &self,
        bytes: &[u8],
        last: bool,
        replace: Replace,
        write: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> std::io::Result<usize> {
        // A secret starting before `safe` lies wholly inside `bytes`, so what is found there is
        // final; one starting after it may go on in the next write.
        let safe = if last || self.longest == 0 {
            bytes.len()
        } else {
            bytes.len().saturating_sub(self.longest - 1)
        };
        let mut done = 0;
        if !self.forms.is_empty() {
            while let Some((start, end)) = self.find(bytes, done) {
                if start >= safe {
                    break;
                }
                write(&bytes[done..start])?;
                match replace {
                    Replace::Hidden => write(HIDDEN.as_bytes())?,
                    Replace::Mask => write(&vec![b'*'; end - start])?,
                }
                done = end;
            }
        }
        if done < safe {
            write(&bytes[done..safe])?;
            done = safe;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(forms: &[&str]) -> Redactor {
        Redactor::new(forms.iter().map(|f| (*f).to_owned()).collect())
    }

    #[test]
    fn the_longest_form_wins_and_masks_keep_lengths() {
        let r = redactor(&["secret-one", "secret-one-longer"]);
        assert_eq!(
            r.redact(b"a secret-one-longer b secret-one c").as_ref(),
            b"a [hidden] b [hidden] c"
        );
        let mut out = Vec::new();
        r.redact_into(b"x secret-one y", true, Replace::Mask, &mut |p| {
            out.extend_from_slice(p);
            Ok(())
        })
        .unwrap();
        assert_eq!(out, b"x ********** y");
        assert!(matches!(r.redact(b"nothing"), Cow::Borrowed(_)));
    }

    #[test]
    fn the_end_that_may_start_a_secret_is_held_back() {
        let r = redactor(&["secret-one"]);
        let mut out = Vec::new();
        let used = r
            .redact_into(b"abc secret-o", false, Replace::Hidden, &mut |p| {
                out.extend_from_slice(p);
                Ok(())
            })
            .unwrap();
        assert_eq!(&out, b"abc");
        assert_eq!(used, 3);
    }
}
