//! A tool call written as text. Local models served with their own chat template (llama.cpp,
//! Ollama, vLLM without a tool parser) often answer with the call as plain content: bare JSON
//! `{"name": …, "arguments": {…}}`, fenced in a code block, or inside `<tool_call>` tags. Taken
//! as a final answer, that is a silent false success; so such a reply can run as that call. It
//! does only when it is a call (docs/src/runs.md, "Agents that loop or run out of turns"): the
//! reply's whole text, naming a tool the turn offered and allowed calling, not a valid answer
//! of the step's `output_schema`, and not a call that text the model was given holds (a file it
//! read, a tool's output, a prompt), which a reply quoting it would otherwise run.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value};

use crate::provider::message::{Block, ChatRequest, Role, ToolDef};

/// What a reply's text is.
#[derive(Debug, PartialEq)]
pub enum Reading {
    /// Text: an answer, or anything else that is not a call.
    Text,
    /// A call to run: the tool's name and its input.
    Call { name: String, input: Value },
    /// A call of an offered tool on a turn that allows none (the last turn): neither run nor
    /// an answer.
    NotAllowed { name: String },
}

/// What a turn's reply is read against.
pub struct Turn<'a> {
    /// The request the reply answers: the tools it offered, whether it allowed calling them.
    pub request: &'a ChatRequest,
    /// The step's `output_schema`: a valid answer of it is an answer, whatever its shape.
    pub output_schema: Option<&'a Value>,
    /// The calls that text the model was given holds.
    pub given: &'a Given,
}

/// What `text` is, as the reply to `turn`.
pub fn read(text: &str, turn: &Turn<'_>) -> Reading {
    let Some((name, input)) = parse(text, &turn.request.tools) else {
        return Reading::Text;
    };
    if turn
        .output_schema
        .is_some_and(|schema| super::output::check(text, schema).is_ok())
        || turn.given.holds(&name, &input)
    {
        return Reading::Text;
    }
    if turn.request.no_tool_calls {
        return Reading::NotAllowed { name };
    }
    Reading::Call { name, input }
}

/// The call `text` is, when its whole text is one call of one of `tools`: the tool's name and
/// its input.
pub fn parse(text: &str, tools: &[ToolDef]) -> Option<(String, Value)> {
    let inner = unwrap(text.trim())?;
    let value: Value = serde_json::from_str(inner).ok()?;
    let (name, input) = call_of(value.as_object()?)?;
    tools
        .iter()
        .any(|t| t.name == name)
        .then(|| (name.to_owned(), input))
}

/// An object read as a call: its `name` and its `arguments` (or `parameters`), an object.
fn call_of(object: &Map<String, Value>) -> Option<(&str, Value)> {
    let name = object.get("name")?.as_str()?;
    let input = match object.get("arguments").or_else(|| object.get("parameters")) {
        None => Value::Object(Map::new()),
        // Double-encoded: the arguments as a JSON string.
        Some(Value::String(encoded)) => serde_json::from_str(encoded).ok()?,
        Some(arguments) => arguments.clone(),
    };
    input.is_object().then_some((name, input))
}

/// The JSON inside a fence or `<tool_call>` tags, or the text itself when it is bare.
fn unwrap(text: &str) -> Option<&str> {
    if let Some(rest) = text.strip_prefix("<tool_call>") {
        return Some(rest.strip_suffix("</tool_call>")?.trim());
    }
    if let Some(rest) = text.strip_prefix("```") {
        let rest = rest.strip_suffix("```")?;
        // The fence's language (`json`), up to the first line end.
        let body = rest.split_once('\n').map_or(rest, |(lang, body)| {
            if lang.trim().chars().all(|c| c.is_ascii_alphanumeric()) {
                body
            } else {
                rest
            }
        });
        return Some(body.trim());
    }
    text.starts_with('{').then_some(text)
}

/// The calls that text given to the model holds: every JSON object in it that [`parse`] would
/// read as a call, whatever tool it names. Kept as fingerprints of name and input, so a
/// conversation's clearings and compactions do not make the model's quote of an earlier
/// output runnable, and memory stays small whatever the outputs hold.
#[derive(Debug, Default)]
pub struct Given {
    calls: HashSet<u64>,
}

impl Given {
    /// Learns what `request` gives the model from its message `from` on (0: everything, its
    /// system prompt and tool descriptions too). Every request passes here before it is sent,
    /// so whatever the model is given is known before its reply can quote it.
    pub fn learn(&mut self, request: &ChatRequest, from: usize) {
        if from == 0 {
            self.learn_text(&request.system);
            for tool in &request.tools {
                self.learn_text(&tool.description);
            }
        }
        for message in request.messages.iter().skip(from) {
            if message.role != Role::User {
                continue;
            }
            for block in &message.content {
                match block {
                    Block::Text { text } => self.learn_text(text),
                    Block::ToolResult { content, .. } => self.learn_text(content),
                    Block::ToolUse { .. } => {}
                }
            }
        }
    }

    /// Learns `text` as it is and as the model sees it (secrets hidden), and, when it is
    /// numbered as `read_file` numbers lines, without the numbers.
    fn learn_text(&mut self, text: &str) {
        self.learn_json_in(text, 0);
        let redacted = crate::secrets::redact(text);
        if redacted != text {
            self.learn_json_in(&redacted, 0);
        }
        if let Some(plain) = unnumbered(text) {
            self.learn_json_in(&plain, 0);
        }
    }

    /// Every call in `text`: each JSON value that starts at a `{` of it, whole, and every call
    /// inside that value. A value read whole is not read again from a `{` inside it, so valid
    /// JSON is read once; text that fails to read is tried again from its next `{`, at most as
    /// often as serde's nesting limit (128) lets one `{` hold another.
    fn learn_json_in(&mut self, text: &str, depth: u8) {
        let mut read_to = 0;
        for (at, _) in text.match_indices('{') {
            if at < read_to {
                continue;
            }
            let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
            if let Some(Ok(value)) = values.next() {
                read_to = at + values.byte_offset();
                self.learn_value(&value, depth);
            }
        }
    }

    /// The calls in `value`: itself, what it holds, and, two levels deep, calls written as
    /// JSON inside its strings (a file holding a call as an escaped string, which a reply
    /// may write out plainly).
    fn learn_value(&mut self, value: &Value, depth: u8) {
        match value {
            Value::Object(object) => {
                if let Some((name, input)) = call_of(object) {
                    self.calls.insert(fingerprint(name, &input));
                }
                for item in object.values() {
                    self.learn_value(item, depth);
                }
            }
            Value::Array(items) => {
                for item in items {
                    self.learn_value(item, depth);
                }
            }
            Value::String(text) if depth < 2 && text.contains('{') => {
                self.learn_json_in(text, depth + 1);
            }
            _ => {}
        }
    }

    fn holds(&self, name: &str, input: &Value) -> bool {
        self.calls.contains(&fingerprint(name, input))
    }
}

/// `text` without the line numbers `read_file` (and `cat -n`) put before each line, when it
/// has them: a file's JSON across lines reads whole again.
fn unnumbered(text: &str) -> Option<String> {
    fn strip(line: &str) -> Option<&str> {
        let rest = line.trim_start_matches(' ');
        let unnumbered = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        if unnumbered.len() == rest.len() {
            return None;
        }
        unnumbered.strip_prefix('\t')
    }
    if !text.lines().any(|line| strip(line).is_some()) {
        return None;
    }
    let lines: Vec<&str> = text.lines().map(|l| strip(l).unwrap_or(l)).collect();
    Some(lines.join("\n"))
}

/// A call's name and input as one number: equal for equal values, whatever the order of
/// their keys. Two calls that share one by chance only make a call read as text, never the
/// other way round.
fn fingerprint(name: &str, input: &Value) -> u64 {
    fn value(v: &Value, hasher: &mut impl Hasher) {
        match v {
            Value::Null => 0u8.hash(hasher),
            Value::Bool(b) => (1u8, b).hash(hasher),
            Value::Number(n) => (2u8, n.to_string()).hash(hasher),
            Value::String(s) => (3u8, s).hash(hasher),
            Value::Array(items) => {
                (4u8, items.len()).hash(hasher);
                for item in items {
                    value(item, hasher);
                }
            }
            Value::Object(map) => {
                (5u8, map.len()).hash(hasher);
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by_key(|(key, _)| *key);
                for (key, item) in entries {
                    key.hash(hasher);
                    value(item, hasher);
                }
            }
        }
    }
    let mut hasher = std::hash::DefaultHasher::new();
    name.hash(&mut hasher);
    value(input, &mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::message::Message;
    use serde_json::json;

    fn tools() -> Vec<ToolDef> {
        ["grep", "read_file"]
            .iter()
            .map(|name| ToolDef {
                name: (*name).into(),
                description: String::new(),
                input_schema: json!({}),
            })
            .collect()
    }

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            tools: tools(),
            messages,
            ..Default::default()
        }
    }

    fn result(content: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                tool_use_id: "t".into(),
                content: content.into(),
                is_error: false,
            }],
        }
    }

    fn read_in(text: &str, request: &ChatRequest, schema: Option<&Value>) -> Reading {
        let mut given = Given::default();
        given.learn(request, 0);
        read(
            text,
            &Turn {
                request,
                output_schema: schema,
                given: &given,
            },
        )
    }

    const CALL: &str = r#"{"name": "grep", "arguments": {"pattern": "login"}}"#;

    fn grep_login() -> Reading {
        Reading::Call {
            name: "grep".into(),
            input: json!({"pattern": "login"}),
        }
    }

    #[test]
    fn a_whole_text_call_in_each_form_is_a_call() {
        let want = Some(("grep".to_owned(), json!({"pattern": "login"})));
        for text in [
            CALL,
            "```json\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"login\"}}\n```",
            "```\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"login\"}}\n```\n",
            "<tool_call>\n{\"name\": \"grep\", \"arguments\": {\"pattern\": \"login\"}}\n</tool_call>",
            r#"{"name": "grep", "arguments": "{\"pattern\": \"login\"}"}"#,
            r#"{"name": "grep", "parameters": {"pattern": "login"}}"#,
        ] {
            assert_eq!(parse(text, &tools()), want, "{text}");
        }
        assert_eq!(read_in(CALL, &request(vec![]), None), grep_login());
    }

    #[test]
    fn anything_else_stays_text() {
        for text in [
            "The answer is in src/auth.py.",
            r#"Here is the call: {"name": "grep", "arguments": {}}"#,
            r#"{"name": "bash", "arguments": {"command": "ls"}}"#,
            r#"{"name": "grep", "arguments": [1]}"#,
            r#"{"files": ["a"]}"#,
            "```json\n{\"name\": \"grep\"\n",
        ] {
            assert_eq!(parse(text, &tools()), None, "{text}");
        }
    }

    #[test]
    fn a_turn_that_allows_no_calls_runs_none() {
        let mut last = request(vec![]);
        last.no_tool_calls = true;
        assert_eq!(
            read_in(CALL, &last, None),
            Reading::NotAllowed {
                name: "grep".into()
            }
        );
        let offered_none = ChatRequest::default();
        assert_eq!(read_in(CALL, &offered_none, None), Reading::Text);
    }

    #[test]
    fn a_valid_answer_of_the_output_schema_is_an_answer() {
        let schema = json!({
            "type": "object", "required": ["name", "parameters"],
            "properties": {"name": {"type": "string"}, "parameters": {"type": "object"}}
        });
        let text = r#"{"name": "grep", "parameters": {"pattern": "login"}}"#;
        assert_eq!(
            read_in(text, &request(vec![]), Some(&schema)),
            Reading::Text
        );
        // An answer the schema refuses is still read as the call it is.
        let other = json!({"type": "object", "required": ["files"]});
        assert_eq!(read_in(text, &request(vec![]), Some(&other)), grep_login());
    }

    #[test]
    fn a_call_that_given_text_holds_is_a_quote() {
        let numbered = "     1\t{\n     2\t  \"arguments\": {\"pattern\": \"login\"},\n     3\t  \"name\": \"grep\"\n     4\t}\n";
        for given in [
            format!("The file holds {CALL} and more."),
            format!("{{\"calls\": [{CALL}]}}"),
            numbered.to_owned(),
            format!("<tool_call>{CALL}</tool_call>"),
            // Escaped in a JSON string, as a file's example of a call.
            serde_json::to_string(&json!({"example": CALL})).unwrap(),
            // After another value, and inside an object that never closes.
            format!("{{\"a\": 1}} then {{\"b\": [{CALL}, "),
        ] {
            let quoted = request(vec![Message::user_text("go"), result(&given)]);
            for reply in [CALL.to_owned(), format!("```json\n{CALL}\n```")] {
                assert_eq!(read_in(&reply, &quoted, None), Reading::Text, "{given}");
            }
        }
        // The prompt and the system prompt are given text too.
        let prompted = request(vec![Message::user_text(format!("Say {CALL}"))]);
        assert_eq!(read_in(CALL, &prompted, None), Reading::Text);
        let mut system = request(vec![]);
        system.system = format!("Example: {CALL}");
        assert_eq!(read_in(CALL, &system, None), Reading::Text);
        // Another call than the one given is a call.
        let other = request(vec![result(
            r#"{"name": "grep", "arguments": {"pattern": "logout"}}"#,
        )]);
        assert_eq!(read_in(CALL, &other, None), grep_login());
        // The model's own earlier calls are not given text.
        let own = request(vec![Message {
            role: Role::Assistant,
            content: vec![Block::Text { text: CALL.into() }],
        }]);
        assert_eq!(read_in(CALL, &own, None), grep_login());
    }

    #[test]
    fn learning_from_a_later_message_keeps_what_was_learnt() {
        let mut given = Given::default();
        let mut conversation = request(vec![Message::user_text("go"), result(CALL)]);
        given.learn(&conversation, 0);
        // The output is cleared from the conversation, as context clearing does.
        conversation.messages[1] = result("[cleared]");
        conversation.messages.push(Message::user_text("next"));
        given.learn(&conversation, 2);
        let turn = Turn {
            request: &conversation,
            output_schema: None,
            given: &given,
        };
        assert_eq!(read(CALL, &turn), Reading::Text);
    }

    #[test]
    fn fingerprints_ignore_key_order_only() {
        let a = json!({"a": 1, "b": [true, null, "x"]});
        let b: Value = serde_json::from_str(r#"{"b": [true, null, "x"], "a": 1}"#).unwrap();
        assert_eq!(fingerprint("t", &a), fingerprint("t", &b));
        assert_ne!(fingerprint("t", &a), fingerprint("u", &a));
        assert_ne!(
            fingerprint("t", &a),
            fingerprint("t", &json!({"a": 2, "b": [true, null, "x"]}))
        );
    }
}
