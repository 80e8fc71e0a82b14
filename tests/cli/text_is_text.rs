//! Text is text everywhere (docs/src/security.md): a workflow, an agent and a model reply that
//! carry ESC, U+009B (CSI) and U+202E (right-to-left override) reach no output raw. Every
//! command's stdout and stderr hold no C0 control but newline and tab, no C1 control and no
//! bidirectional control; JSON outputs still parse to the very strings that went in.

use serde_json::Value;

use crate::fake::{Fake, anthropic_text};
use crate::support::{Output, Test};

/// What the files and the model write: a colour, a screen clear by C1 CSI, a title by OSC, a
/// right-to-left override and an isolate.
const HOSTILE: &str =
    "red\u{1b}[31m clear\u{9b}2J title\u{1b}]0;pwned\u{7} rtl\u{202e}txt.exe \u{2066}i\u{2069}";

/// The TOML form of [`HOSTILE`]: TOML has no raw controls, only escapes.
fn toml_escaped(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            c if c.is_control() || ('\u{2000}'..='\u{2fff}').contains(&c) => {
                format!("\\u{:04X}", u32::from(c))
            }
            c => c.to_string(),
        })
        .collect()
}

/// The characters no output may hold, with where: every control but newline and tab, and
/// every bidirectional control.
fn raw_controls(text: &str) -> Vec<String> {
    text.char_indices()
        .filter(|(_, c)| {
            (c.is_control() && !matches!(c, '\n' | '\t'))
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{61c}')
        })
        .map(|(at, c)| format!("U+{:04X} at {at}: {:?}", u32::from(c), &text[at.saturating_sub(20)..at]))
        .collect()
}

fn assert_clean(what: &str, out: &Output) {
    for (stream, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let found = raw_controls(text);
        assert!(
            found.is_empty(),
            "{what}: {stream} holds {found:?}\n{}",
            out.transcript()
        );
    }
}

/// Every string in `value`, depth first.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

fn holds(value: &Value, text: &str) -> bool {
    let mut all = Vec::new();
    strings(value, &mut all);
    all.iter().any(|s| s.contains(text))
}

fn project(fake: &Fake) -> Test {
    let hostile = toml_escaped(HOSTILE);
    Test::new()
        .file(
            "w.toml",
            &format!(
                "name = \"t {hostile}\"\ndescription = \"{hostile}\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"spoof\"\nretries = 0\nprompt = \"Say {hostile}\"\n"
            ),
        )
        .file(
            "agents/spoof.md",
            &format!(
                "---\nname: spoof\ndescription: \"{}\"\ntools: Read\n---\nYou answer.\n",
                toml_escaped(HOSTILE)
            ),
        )
        .anthropic_api(&fake.uri(), "sk-test")
}

#[tokio::test(flavor = "multi_thread")]
async fn controls_and_bidi_overrides_reach_no_output_raw() {
    let first = format!("first {HOSTILE}");
    let second = format!("second {HOSTILE}");
    let fake = Fake::anthropic(vec![
        anthropic_text(&first),
        anthropic_text(&second),
        anthropic_text(&first),
    ])
    .await;
    let mut test = project(&fake);
    let with_agents = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--agents-dir", "agents"]);
        all.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let mut ask = |args: &[&str]| {
        let owned = with_agents(args);
        let all: Vec<&str> = owned.iter().map(String::as_str).collect();
        test = std::mem::replace(&mut test, Test::new())
            .clear_args()
            .args(&all);
        test.run_keeping()
    };

    let out = ask(&["run", "w.toml", "--format", "json"]);
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_clean("run --format json", &out);
    let record: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(record["steps"]["s"]["summary"], first.as_str());

    let out = ask(&["run", "w.toml", "--format", "jsonl"]);
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_clean("run --format jsonl", &out);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(events.iter().any(|e| holds(e, &second)), "{}", out.stdout);

    let out = ask(&["run", "w.toml"]);
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_clean("run", &out);

    for args in [
        &["plan", "w.toml"][..],
        &["validate", "w.toml"],
        &["graph", "w.toml"],
    ] {
        let out = ask(args);
        assert_eq!(out.status, 0, "{args:?}: {}", out.transcript());
        assert_clean(&args.join(" "), &out);
    }
    let out = ask(&["plan", "w.toml", "--format", "json"]);
    assert_clean("plan --format json", &out);
    let plan: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(holds(&plan, HOSTILE), "{}", out.stdout);

    // The runs the state directory holds, shown: no flag but their own.
    let mut ask = |args: &[&str]| {
        test = std::mem::replace(&mut test, Test::new())
            .clear_args()
            .args(args);
        test.run_keeping()
    };
    let out = ask(&["agents", "--workflow", "w.toml", "--agents-dir", "agents"]);
    assert_eq!(out.status, 0, "{}", out.transcript());
    assert_clean("agents", &out);
    let out = ask(&["runs", "--format", "json"]);
    assert_clean("runs --format json", &out);
    let runs: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    let ids: Vec<String> = runs
        .iter()
        .map(|r| r["run_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3, "{}", out.stdout);
    // Newest first: the jsonl run (second reply) is in the middle.
    let (oldest, middle) = (ids[2].as_str(), ids[1].as_str());
    for args in [
        &["runs"][..],
        &["show", oldest],
        &["show", oldest, "s"],
        &["diff", oldest, middle],
    ] {
        let out = ask(args);
        assert_eq!(out.status, 0, "{args:?}: {}", out.transcript());
        assert_clean(&args.join(" "), &out);
    }
    for (args, want) in [
        (&["show", oldest, "--format", "json"][..], &first),
        (&["show", oldest, "s", "--format", "json"], &first),
        (&["diff", oldest, middle, "--format", "json"], &second),
    ] {
        let out = ask(args);
        assert_clean(&args.join(" "), &out);
        let shown: Value = serde_json::from_str(&out.stdout).unwrap();
        assert!(holds(&shown, want), "{args:?}: {}", out.stdout);
    }
}

/// A diagnostic quotes the file it is about: the source under it and its message show no
/// control or override raw.
#[test]
fn diagnostics_show_no_control_raw() {
    let hostile = toml_escaped(HOSTILE);
    let head = "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\n";
    for (what, file) in [
        // The message names the agent, hostile text and all.
        (
            "message",
            format!("{head}agent = \"{hostile}\"\nprompt = \"hi\"\n"),
        ),
        // The source under the diagnostic holds them raw.
        (
            "source",
            format!("{head}agent = \"code\"\nprompt = \"hi\"\nbad = {HOSTILE}\n"),
        ),
    ] {
        let out = Test::new()
            .file("w.toml", &file)
            .args(&["validate", "w.toml"])
            .run();
        assert_eq!(out.status, 2, "{what}: {}", out.transcript());
        assert_clean(what, &out);
        if what == "message" {
            assert!(out.stderr.contains(r"\u202e"), "{}", out.stderr);
        }
    }
}

/// An agent name of one word that is all controls.
const NAME: &str = "spoof\u{1b}[35m\u{9b}2J\u{202e}exe\u{1b}]0;pwned\u{7}";

/// An agent whose name would head every line about its step holds no control or
/// bidirectional character: its file is refused (the step asks for it by its file's name),
/// with the name shown escaped.
#[test]
fn an_agent_named_with_controls_is_refused() {
    let name = toml_escaped(NAME);
    for args in [
        &["validate", "w.toml", "--agents-dir", "agents"][..],
        &["run", "w.toml", "--agents-dir", "agents"],
    ] {
        let out = Test::new()
            .file(
                "w.toml",
                "name = \"t\"\n[models]\ndefault = \"anthropic/claude-test\"\n[steps.s]\nagent = \"spoof\"\nprompt = \"hi\"\n",
            )
            .file(
                "agents/spoof.md",
                &format!("---\nname: \"{name}\"\ntools: Read\n---\nYou answer.\n"),
            )
            .args(args)
            .run();
        assert_eq!(out.status, 2, "{args:?}: {}", out.transcript());
        assert!(
            out.stderr
                .contains("must be one word, with no control or bidirectional character"),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains(r"spoof"), "{}", out.stderr);
        assert_clean(&args.join(" "), &out);
    }
}

/// The escape sequences a terminal acts on in `shown` other than colours (SGR): each as the
/// text from its ESC to its end.
fn sequences_not_colours(shown: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in shown.match_indices('\u{1b}') {
        let rest = &shown[at + 1..];
        let sgr = rest.strip_prefix('[').and_then(|r| {
            let end = r.find(|c: char| !(c.is_ascii_digit() || c == ';'))?;
            (r[end..].starts_with('m')).then_some(())
        });
        if sgr.is_none() {
            found.push(rest.chars().take(8).collect());
        }
    }
    found
}

/// The live display on a terminal (a pty, by util-linux's `script`) draws the step's line and
/// its error, and the summary names the workflow, hostile text and all: the cursor moves the
/// display makes are the only sequences written; no override or C1 control is raw, no title
/// set, no colour the text asks for.
#[tokio::test(flavor = "multi_thread")]
async fn the_live_display_shows_no_control_raw() {
    let fake = Fake::anthropic(vec![crate::fake::bad_request(HOSTILE)]).await;
    let test = project(&fake);
    let command = format!(
        "{} run w.toml --agents-dir agents",
        env!("CARGO_BIN_EXE_runner")
    );
    let dir = test.path().to_owned();
    let uri = fake.uri();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("script")
            .args(["-qefc", &command, "/dev/null"])
            .current_dir(dir)
            .env("ANTHROPIC_BASE_URL", uri)
            .env("ANTHROPIC_API_KEY", "sk-test")
            .env_remove("GITHUB_ACTIONS")
            .env_remove("NO_COLOR")
            .env("TERM", "xterm")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    // The step's line names its error, and the summary the workflow, both cleaned.
    assert!(shown.contains("[spoof] s failed"), "{shown:?}");
    assert!(shown.contains(r"rtl\u202etxt.exe"), "{shown:?}");
    assert!(
        shown.contains(r"(t red clear title rtl\u202etxt.exe"),
        "{shown:?}"
    );
    // Not even the colour the text asks for.
    assert!(!shown.contains("\u{1b}[31m"), "{shown:?}");
    let raw: Vec<char> = shown
        .chars()
        .filter(|&c| {
            (c.is_control() && !matches!(c, '\n' | '\t' | '\r' | '\u{1b}'))
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect();
    assert!(raw.is_empty(), "{raw:?} in {shown:?}");
    // Cursor moves and line clears (indicatif's), the cursor hidden and shown: nothing else.
    let moves = not_the_displays_own(&sequences_not_colours(&shown));
    assert!(moves.is_empty(), "{moves:?} in {shown:?}");
}

/// The sequences of `found` that are not the live display's own: a cursor move up, down,
/// left or right, a line cleared, the cursor hidden or shown.
fn not_the_displays_own(found: &[String]) -> Vec<String> {
    found
        .iter()
        .filter(|s| {
            let Some(rest) = s.strip_prefix('[') else {
                return true;
            };
            let own = ["?25l", "?25h", "2K"].iter().any(|o| rest.starts_with(o))
                || rest.find(|c: char| !c.is_ascii_digit()).is_some_and(|end| {
                    end > 0 && matches!(&rest[end..end + 1], "A" | "B" | "C" | "D" | "G")
                });
            !own
        })
        .cloned()
        .collect()
}
