//! A request body written once per turn. A conversation only grows: every message but the newest
//! is written in the API's wire format once, the turn it stops being the newest, and kept as
//! shared bytes; each turn writes only the newest message (which carries Anthropic's cache
//! breakpoint, and which the loop may still add text to) and the closing brackets. The body goes
//! out as those pieces, without being copied into one buffer, and its digest is a SHA-256 over
//! the same bytes, carried forward from turn to turn. So a turn costs what it adds, not the
//! whole conversation again (README, "Performance").

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use sha2::{Digest, Sha256};

use super::{anthropic, openai};
use crate::provider::message::{ChatRequest, Message};

/// The wire format of an API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    /// Chat Completions; `completion_tokens` names the output limit `max_completion_tokens`
    /// (OpenAI's reasoning models refuse `max_tokens`).
    OpenAi {
        completion_tokens: bool,
    },
}

impl Wire {
    /// The opening of the body, up to and with the `messages` array's `[` (and, for Chat
    /// Completions, its system message).
    fn head(self, request: &ChatRequest) -> Vec<u8> {
        // Every byte to a model passes the one redactor: the system prompt here, each message
        // in `message` (README "Security").
        let hidden;
        let request = if crate::secrets::holds_secret(&request.system) {
            hidden = ChatRequest {
                system: crate::secrets::redact_owned(request.system.clone()),
                ..request.clone()
            };
            &hidden
        } else {
            request
        };
        match self {
            Wire::Anthropic => anthropic::head(request),
            Wire::OpenAi { completion_tokens } => openai::head(request, completion_tokens),
        }
    }

    /// One message as the wire's array elements, each preceded by a comma unless `first`; every
    /// known secret in it hidden.
    fn message(self, out: &mut Vec<u8>, message: &Message, first: bool, newest: bool) {
        let message = message.redacted();
        let message = message.as_ref();
        match self {
            Wire::Anthropic => anthropic::message(out, message, first, newest),
            Wire::OpenAi { .. } => openai::message(out, message, first),
        }
    }

    /// A message's newest form from its settled form, and how many bytes the two share at
    /// their start; `None` when this one cannot be made so.
    fn mark_newest(self, settled: &[u8], out: &mut Vec<u8>) -> Option<usize> {
        match self {
            Wire::Anthropic => anthropic::mark_newest(settled, out),
            // No breakpoints: the newest is written as it settles.
            Wire::OpenAi { .. } => {
                out.extend_from_slice(settled);
                Some(settled.len())
            }
        }
    }

    /// Whether the wire's head already holds a first element of `messages` (the system message).
    fn head_holds_a_message(self) -> bool {
        matches!(self, Wire::OpenAi { .. })
    }
}

/// A settled message at least this long is a piece of its own (kept without a copy when it can
/// be). Smaller ones are written into a shared buffer of about this size, whose new part is
/// frozen each turn: sending them copies nothing.
const PIECE: usize = 64 * 1024;

/// Frozen parts of the shared buffer waiting to be joined into one piece: each is a separate
/// slice to write, and the HTTP writer takes only so many slices a call.
const JOIN_AFTER: usize = 8;

/// Writes one conversation's requests, turn after turn. It belongs to one conversation: its
/// model, system prompt and tools stay as they were at the first turn, and its messages are only
/// added to (the newest may still change).
pub struct Encoder {
    wire: Wire,
    head: Bytes,
    /// Settled messages: joined pieces in order, then the parts frozen since the last join.
    pieces: Vec<Bytes>,
    recent: Vec<Bytes>,
    /// Where small settled messages are written; its written part is frozen into `recent` each
    /// turn, and what is left of it is written next.
    open: BytesMut,
    /// Where the newest message is written (kept, so its capacity is reused).
    scratch: Vec<u8>,
    settled: usize,
    /// The digest of the head and the settled messages so far.
    hasher: Sha256,
    bytes: usize,
    /// The newest message of the last turn, written in its settled form: when the message there
    /// is still the same at the next turn (as it nearly always is), it settles from these bytes
    /// instead of being written again.
    newest: Option<Newest>,
}

struct Newest {
    index: usize,
    message: Message,
    settled: Vec<u8>,
    /// The digest so far with the start its two forms share (`shared` bytes): the turn's digest
    /// and, when it settles, the settled digest go on from here, so those bytes are hashed once.
    prefix: Sha256,
    shared: usize,
}

impl Encoder {
    pub fn new(wire: Wire, request: &ChatRequest) -> Self {
        let head = Bytes::from(wire.head(request));
        let mut hasher = Sha256::new();
        hasher.update(&head);
        Self {
            wire,
            bytes: head.len(),
            head,
            pieces: Vec::new(),
            recent: Vec::new(),
            open: BytesMut::new(),
            scratch: Vec::new(),
            settled: 0,
            hasher,
            newest: None,
        }
    }

    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// The body of `request`, which must be this encoder's conversation, grown since the last
    /// call (the request with fewer messages than were settled starts the encoder over).
    pub fn encode(&mut self, request: &ChatRequest) -> Body {
        let count = request.messages.len();
        if count < self.settled {
            *self = Encoder::new(self.wire, request);
        }
        for index in self.settled..count.saturating_sub(1) {
            let message = &request.messages[index];
            let kept = self
                .newest
                .take()
                .filter(|n| n.index == index && n.message == *message);
            let bytes = match kept {
                // Kept by the last call, whose digest state this one still has (nothing is
                // settled between a call's newest and the next call's first message).
                Some(kept) => {
                    self.hasher = kept.prefix;
                    self.hasher.update(&kept.settled[kept.shared..]);
                    kept.settled
                }
                None => {
                    let first = self.settled == 0 && !self.wire.head_holds_a_message();
                    let mut bytes = Vec::new();
                    self.wire.message(&mut bytes, message, first, false);
                    self.hasher.update(&bytes);
                    bytes
                }
            };
            self.bytes += bytes.len();
            self.settled += 1;
            if bytes.len() >= PIECE {
                self.freeze_open();
                self.join_recent();
                // Bytes kept from the turn before are already exactly their size: no copy.
                let piece = if bytes.len() == bytes.capacity() {
                    Bytes::from(bytes)
                } else {
                    Bytes::copy_from_slice(&bytes)
                };
                self.pieces.push(piece);
            } else {
                if self.open.capacity() - self.open.len() < bytes.len() {
                    // The frozen parts keep the old buffer alive; new writes go to a new one.
                    self.freeze_open();
                    self.open = BytesMut::with_capacity(PIECE.max(bytes.len()));
                }
                self.open.extend_from_slice(&bytes);
            }
        }
        self.freeze_open();
        if self.recent.len() >= JOIN_AFTER {
            self.join_recent();
        }
        self.scratch.clear();
        self.newest = None;
        let mut hasher = self.hasher.clone();
        let mut shared = 0;
        if let Some(newest) = request.messages.last()
            && count > self.settled
        {
            let first = self.settled == 0 && !self.wire.head_holds_a_message();
            let mut settled = Vec::new();
            self.wire.message(&mut settled, newest, first, false);
            shared = match self.wire.mark_newest(&settled, &mut self.scratch) {
                Some(shared) => shared,
                None => {
                    self.wire.message(&mut self.scratch, newest, first, true);
                    0
                }
            };
            hasher.update(&settled[..shared]);
            settled.shrink_to_fit();
            self.newest = Some(Newest {
                index: count - 1,
                message: newest.clone(),
                settled,
                prefix: hasher.clone(),
                shared,
            });
        }
        self.scratch.extend_from_slice(b"]}");
        let tail = Bytes::copy_from_slice(&self.scratch);
        // A huge newest message leaves no huge buffer behind.
        if self.scratch.capacity() > 4 * PIECE {
            self.scratch = Vec::new();
        }
        hasher.update(&tail[shared..]);
        let mut chunks = Vec::with_capacity(self.pieces.len() + self.recent.len() + 2);
        chunks.push(self.head.clone());
        chunks.extend(self.pieces.iter().cloned());
        chunks.extend(self.recent.iter().cloned());
        let len = self.bytes + tail.len();
        chunks.push(tail);
        Body {
            chunks,
            len,
            digest: hex(&hasher.finalize()),
        }
    }
}

impl Encoder {
    /// What was written into the shared buffer since the last call, as a part to send.
    fn freeze_open(&mut self) {
        if !self.open.is_empty() {
            self.recent.push(self.open.split().freeze());
        }
    }

    /// The frozen parts joined into one piece (each byte is copied once here, not every turn).
    fn join_recent(&mut self) {
        match self.recent.len() {
            0 => {}
            1 => self.pieces.append(&mut self.recent),
            _ => {
                let len = self.recent.iter().map(Bytes::len).sum();
                let mut joined = BytesMut::with_capacity(len);
                for part in self.recent.drain(..) {
                    joined.extend_from_slice(&part);
                }
                self.pieces.push(joined.freeze());
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// One request's body: its pieces in order, how long it is, and the SHA-256 of its bytes.
#[derive(Debug, Clone)]
pub struct Body {
    chunks: Vec<Bytes>,
    len: usize,
    digest: String,
}

impl Body {
    /// The whole body written at once, for a request sent a single time.
    pub fn of(wire: Wire, request: &ChatRequest) -> Body {
        Encoder::new(wire, request).encode(request)
    }

    /// Lowercase hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The body in one buffer (tests and error paths; sending never needs it).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for chunk in &self.chunks {
            out.extend_from_slice(chunk);
        }
        out
    }

    /// The pieces as an HTTP body of known length (sent with `Content-Length`).
    pub fn http(&self) -> Pieces {
        Pieces {
            chunks: self.chunks.iter().cloned().collect(),
            left: self.len as u64,
        }
    }
}

/// A body's pieces on their way out (cloned cheaply: the pieces are shared, for a request sent
/// again on a new connection).
#[derive(Clone)]
pub struct Pieces {
    chunks: VecDeque<Bytes>,
    left: u64,
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = self.chunks.pop_front();
        if let Some(chunk) = &next {
            self.left -= chunk.len() as u64;
        }
        Poll::Ready(next.map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::message::{Block, Role, one_tool_round};
    use serde_json::{Value, json};

    fn parse(body: &Body) -> Value {
        serde_json::from_slice(&body.to_vec()).expect("the body is JSON")
    }

    /// Every turn's body equals the body written whole, byte for byte, and so does its digest:
    /// what the encoder carries forward is exactly what writing it again would give.
    #[test]
    fn growing_a_conversation_writes_what_writing_it_whole_would() {
        for wire in [
            Wire::Anthropic,
            Wire::OpenAi {
                completion_tokens: false,
            },
        ] {
            let mut request = one_tool_round("read_file", json!({"path": "a"}), "x", false);
            request.messages.truncate(1);
            let mut encoder = Encoder::new(wire, &request);
            for turn in 0..200usize {
                let body = encoder.encode(&request);
                // Written whole now and then (every time would be slow in a debug build); the
                // encoder itself runs every turn, so what it carries is checked all the same.
                if turn.is_multiple_of(9) || turn % 11 == 5 || turn == 199 {
                    let whole = Body::of(wire, &request).to_vec();
                    assert_eq!(body.to_vec(), whole, "{wire:?} turn {turn}");
                    assert_eq!(body.len(), whole.len());
                    assert_eq!(
                        body.digest(),
                        hex(&Sha256::digest(&whole)),
                        "{wire:?} turn {turn}"
                    );
                    parse(&body);
                }
                grow(&mut request, turn);
            }
        }
    }

    /// A tool round, and now and then text added to the newest message (as the loop does).
    fn grow(request: &mut ChatRequest, turn: usize) {
        let id = format!("t{turn}");
        request.messages.push(Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: id.clone(),
                name: "read_file".into(),
                input: json!({"path": "a"}),
            }],
        });
        request.messages.push(Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: id,
                // Now and then one big enough to be a piece of its own.
                content: if turn % 50 == 7 {
                    "x".repeat(70_000)
                } else {
                    "line\n".repeat(400)
                },
                is_error: turn.is_multiple_of(3),
            }],
        });
        if turn.is_multiple_of(5) {
            crate::session::push_user_text(&mut request.messages, "again".into());
        }
        // Now and then a newest message with no blocks, whose newest form is written apart.
        if turn % 11 == 4 {
            request.messages.push(Message {
                role: Role::Assistant,
                content: Vec::new(),
            });
        }
    }

    #[test]
    fn only_the_newest_message_has_a_cache_breakpoint() {
        let mut request = one_tool_round("read_file", json!({"path": "a"}), "no", true);
        let mut encoder = Encoder::new(Wire::Anthropic, &request);
        encoder.encode(&request);
        request.messages.push(Message::user_text("more"));
        // (Two user messages in a row would not be sent; the encoder does not care.)
        let body = parse(&encoder.encode(&request));
        let marked: Vec<usize> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                m["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|b| b.get("cache_control").is_some())
            })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(marked, vec![3]);
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["stream"], true);
    }

    #[test]
    fn a_shorter_conversation_starts_over() {
        let mut request = one_tool_round("glob", json!({"pattern": "*"}), "a.rs", false);
        let wire = Wire::OpenAi {
            completion_tokens: true,
        };
        let mut encoder = Encoder::new(wire, &request);
        encoder.encode(&request);
        request.messages.truncate(1);
        let body = encoder.encode(&request);
        assert_eq!(body.to_vec(), Body::of(wire, &request).to_vec());
        assert_eq!(parse(&body)["max_completion_tokens"], 100);
    }
}
