//! Server-sent events read from a response body as its chunks arrive (the WHATWG rules: lines
//! end in LF, CR or CRLF; `event:` names the event, `data:` lines are joined with LF, a line
//! starting with `:` is a comment, a blank line ends an event; a byte order mark opening the
//! stream is skipped; an event left unfinished when the body ends is dropped).
//!
//! What it buys over an SSE crate: a size cap. Every byte received counts against one cap, so a
//! server that never ends a line (or never ends the stream) cannot grow memory: a line is held
//! only until it ends or the cap is hit. The SSE crates for reqwest buffer without a limit.

/// Why reading the events stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop<E> {
    /// The handler refused an event.
    Handler(E),
    /// More than the cap's bytes arrived.
    TooLarge,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The reader's state between chunks.
pub struct Events {
    /// The part of the current line received so far.
    line: Vec<u8>,
    /// The last chunk ended in CR: an LF opening the next one belongs to that line end.
    after_cr: bool,
    event: String,
    data: String,
    /// Whether any `data:` line came (an event with none is not dispatched).
    has_data: bool,
    /// No line has ended yet: the first may open with a byte order mark, which is not part of it.
    first_line: bool,
    received: usize,
    cap: usize,
}

impl Events {
    pub fn new(cap: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            first_line: true,
            received: 0,
            cap,
        }
    }

    /// Reads one chunk, handing each event it completes (its type, `message` when it names
    /// none, and its data) to `on_event`. The first error `on_event` returns stops the reading.
    pub fn feed<E>(
        &mut self,
        chunk: &[u8],
        on_event: &mut dyn FnMut(&str, &str) -> Result<(), E>,
    ) -> Result<(), Stop<E>> {
        self.received = self.received.saturating_add(chunk.len());
        if self.received > self.cap {
            return Err(Stop::TooLarge);
        }
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let Some(tail) = rest.strip_prefix(b"\n") {
                rest = tail;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', rest) {
            let ending = rest[end];
            if self.line.is_empty() {
                self.line_done(&rest[..end], on_event)?;
            } else {
                self.line.extend_from_slice(&rest[..end]);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, on_event)?;
                self.line = line;
                self.line.clear();
            }
            rest = &rest[end + 1..];
            if ending == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
        }
        self.line.extend_from_slice(rest);
        Ok(())
    }

    fn line_done<E>(
        &mut self,
        line: &[u8],
        on_event: &mut dyn FnMut(&str, &str) -> Result<(), E>,
    ) -> Result<(), Stop<E>> {
        let line = if std::mem::take(&mut self.first_line) {
            line.strip_prefix(BOM).unwrap_or(line)
        } else {
            line
        };
        if line.is_empty() {
            if self.has_data {
                let kind = if self.event.is_empty() {
                    "message"
                } else {
                    &self.event
                };
                on_event(kind, &self.data).map_err(Stop::Handler)?;
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        let text = crate::text::lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*text, ""),
        };
        match field {
            // A comment (a line starting with `:`, such as a keep-alive).
            "" => {}
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` steer reconnecting, which a model reply never does.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(chunks: &[&[u8]]) -> Vec<(String, String)> {
        let mut events = Events::new(1 << 20);
        let mut seen = Vec::new();
        for chunk in chunks {
            events
                .feed::<()>(chunk, &mut |kind, data| {
                    seen.push((kind.to_owned(), data.to_owned()));
                    Ok(())
                })
                .unwrap();
        }
        seen
    }

    fn pair(kind: &str, data: &str) -> (String, String) {
        (kind.to_owned(), data.to_owned())
    }

    #[test]
    fn events_split_anywhere_read_the_same() {
        let stream = b": keep-alive\r\nevent: ping\r\ndata: {}\r\n\r\nevent: delta\rdata:one\rdata:  two\r\rid: 7\nretry: 10\ndata\n\ndata: last";
        let whole = read(&[stream]);
        assert_eq!(
            whole,
            vec![
                pair("ping", "{}"),
                pair("delta", "one\n two"),
                pair("message", "")
            ]
        );
        for at in 0..=stream.len() {
            let (a, b) = stream.split_at(at);
            assert_eq!(read(&[a, b]), whole, "split at {at}");
        }
        // One byte at a time, with empty chunks between (a CR's LF may come two chunks later).
        let bytes: Vec<&[u8]> = stream.chunks(1).flat_map(|b| [b, &b""[..]]).collect();
        assert_eq!(read(&bytes), whole);
    }

    #[test]
    fn a_byte_order_mark_opening_the_stream_is_skipped_even_split() {
        let stream = b"\xEF\xBB\xBFdata: x\n\n\xEF\xBB\xBFdata: y\n\n";
        let expected = vec![pair("message", "x")];
        for at in 0..=stream.len() {
            let (a, b) = stream.split_at(at);
            // The second mark is not at the start: it makes an unknown field, ignored.
            assert_eq!(read(&[a, b]), expected, "split at {at}");
        }
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_and_invalid_utf8_is_replaced() {
        assert_eq!(read(&[b"event: x\n\n"]), vec![]);
        assert_eq!(
            read(&[b"data: caf\xc3", b"\xa9 \xff\n\n"]),
            vec![pair("message", "caf\u{e9} \u{fffd}")]
        );
    }

    #[test]
    fn the_cap_counts_every_byte_even_of_an_unended_line() {
        let mut events = Events::new(10);
        let mut none = |_: &str, _: &str| Ok::<(), ()>(());
        assert_eq!(events.feed(b"data: abc", &mut none), Ok(()));
        assert_eq!(events.feed(b"defg", &mut none), Err(Stop::TooLarge));
    }

    #[test]
    fn an_error_from_the_handler_stops_the_reading() {
        let mut events = Events::new(1 << 10);
        let mut calls = 0;
        let result = events.feed(b"data: 1\n\ndata: 2\n\n", &mut |_, data| {
            calls += 1;
            Err(data.to_owned())
        });
        assert_eq!(result, Err(Stop::Handler("1".to_owned())));
        assert_eq!(calls, 1);
    }
}
