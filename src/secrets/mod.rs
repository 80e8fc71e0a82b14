//! Provider keys: kept in runner's memory only and out of everything else.
//!
//! At start the binary makes itself non-dumpable (so a process of the same user cannot read its
//! memory or `/proc/<pid>/environ`), moves every `*_API_KEY` variable out of its environment into
//! a vault, and overwrites the original bytes, which `/proc/<pid>/environ` would otherwise go on
//! showing. Children (bash, git, MCP servers) then inherit no key. Every key value runner uses is
//! also registered for [`redact`], which every sink applies to what it writes: a key a server
//! echoes back shows as `[hidden]`.

mod forms;
mod redactor;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, RwLock};

pub use redactor::{Redactor, Replace};

/// What a secret value is replaced with.
pub const HIDDEN: &str = "[hidden]";

/// Values shorter than this are not redacted: replacing every `abc` in every output would ruin
/// it, and such a value is not a real key.
pub const MIN_REDACTED_LEN: usize = 8;

/// Set by the binary's `main`: runner owns the process, and may change its environment while the
/// command line is being handled (before the async runtime starts any thread). Tests that drive
/// the CLI in-process leave it unset, and the environment alone.
static OWNS_PROCESS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keys taken out of the environment, by variable name.
static VAULT: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());
/// Values to hide in every output, and the redactor that finds every form of them.
static KNOWN: LazyLock<RwLock<Known>> = LazyLock::new(|| {
    RwLock::new(Known {
        values: BTreeSet::new(),
        redactor: Arc::new(Redactor::new(Vec::new())),
    })
});

struct Known {
    /// The values registered, as given (trimmed).
    values: BTreeSet<String>,
    redactor: Arc<Redactor>,
}

/// Whether a variable holds a provider key by its name alone.
pub fn is_key_name(name: &str) -> bool {
    name.ends_with("_API_KEY")
}

/// Whether a variable's name says it holds a secret: `*_TOKEN`, `*_KEY`, `*SECRET*`,
/// `*PASSWORD*`, `*_CREDENTIALS`, GitHub's `ACTIONS_*_TOKEN_*`. Its value is hidden in every
/// output, and no child gets it unless a workflow names it.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.ends_with("_TOKEN")
        || upper.ends_with("_KEY")
        || upper.contains("SECRET")
        || upper.contains("PASSWORD")
        || upper.contains("_TOKEN_")
        || upper.ends_with("_CREDENTIALS")
        || upper.ends_with("_PAT")
        || upper == "TOKEN"
}

/// What a child runner starts (bash, an MCP server) gets from runner's environment: what
/// programs need to run and to find their toolchains. Nothing else, so no secret of the user's
/// or of the CI (whatever its name) reaches a command a model wrote.
const CLEAN_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "CI",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "GOCACHE",
    "JAVA_HOME",
    "NODE_PATH",
    "NVM_DIR",
    "PYENV_ROOT",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTHONPATH",
    "PKG_CONFIG_PATH",
];

/// The variables of [`CLEAN_ENV`] that are set.
pub fn clean_env() -> Vec<(&'static str, std::ffi::OsString)> {
    CLEAN_ENV
        .iter()
        .filter_map(|name| std::env::var_os(name).map(|v| (*name, v)))
        .collect()
}

/// `${VAR}` replaced by runner's variable (keys included: the workflow named them on purpose);
/// an unset one is empty.
pub fn expand_vars(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(end) = rest[start..].find('}') else {
            break;
        };
        out.push_str(&rest[..start]);
        let var = &rest[start + 2..start + end];
        let value = var_any(var).unwrap_or_default();
        // A value taken from runner's environment on purpose is a secret of the run, whatever
        // its name: hidden in everything runner writes or sends (docs/src/security.md).
        register(&value);
        out.push_str(&value);
        rest = &rest[start + end + 1..];
    }
    out.push_str(rest);
    out
}

/// A variable by name, from the vault or the environment; a secret-named one is registered for
/// redaction.
fn var_any(name: &str) -> Option<String> {
    if is_key_name(name) || is_secret_name(name) {
        return var(name);
    }
    std::env::var(name).ok()
}

/// Registers the value of every secret-named variable for redaction (done once at start): a
/// `GITHUB_TOKEN` a tool prints shows as `[hidden]` like a provider key.
pub fn hide_secret_vars() {
    for (name, value) in std::env::vars_os() {
        if let (Some(name), Some(value)) = (name.to_str(), value.to_str())
            && is_secret_name(name)
        {
            register(value);
        }
    }
}

/// Hardening for the whole process, done first thing in `main`: no core dumps and no ptrace or
/// `/proc/<pid>/{environ,mem}` access by other processes of the same user.
pub fn harden_process() {
    let _ = nix::sys::prctl::set_dumpable(false);
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    // A file-size limit must fail a write with an error runner reports (EFBIG), not kill it
    // silently with SIGXFSZ.
    // SAFETY: setting a signal to "ignore" installs no handler code.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGXFSZ,
            nix::sys::signal::SigHandler::SigIgn,
        )
    };
}

/// Moves every `*_API_KEY` variable into the vault, and lets [`seal`] move others later.
///
/// # Safety
/// Changes the process environment: call it only while the process has a single thread, and
/// only from a `main` that starts threads after the command line is handled.
pub unsafe fn take_keys_from_env() {
    OWNS_PROCESS.store(true, std::sync::atomic::Ordering::SeqCst);
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| is_key_name(k))
        .collect();
    for name in names {
        // SAFETY: the caller guarantees a single thread.
        unsafe { take_var(&name) };
    }
}

/// Moves one variable into the vault, overwriting its bytes in the environment block.
///
/// # Safety
/// Changes the process environment: call it only while the process has a single thread.
pub unsafe fn take_var(name: &str) {
    let Ok(value) = std::env::var(name) else {
        return;
    };
    register(&value);
    VAULT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.to_owned(), value);
    let Ok(c_name) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: single-threaded (the caller's guarantee), so nothing reads the environment while
    // it changes. `getenv` points into the environment block the kernel set up (what
    // /proc/<pid>/environ shows) unless the variable was set later; the bytes up to the NUL are
    // the value, writable, and overwritten in place before the entry is removed.
    unsafe {
        let value = nix::libc::getenv(c_name.as_ptr());
        if !value.is_null() {
            let len = nix::libc::strlen(value);
            std::ptr::write_bytes(value, 0, len);
        }
        std::env::remove_var(name);
    }
}

/// Moves a configured key variable (`api_key_env`) into the vault when runner owns the process.
/// Callers run while the command line is handled, before the async runtime exists.
pub fn seal(name: &str) {
    if OWNS_PROCESS.load(std::sync::atomic::Ordering::SeqCst) {
        // SAFETY: OWNS_PROCESS is set only by the binary's `main`, which handles the command
        // line on its one thread; runner starts no thread before the run's runtime is built,
        // and keys are sealed before that.
        unsafe { take_var(name) };
    }
}

/// A key by variable name: from the vault, else from the environment (and then registered).
pub fn var(name: &str) -> Option<String> {
    let vaulted = VAULT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .cloned();
    let value = vaulted.or_else(|| std::env::var(name).ok())?;
    register(&value);
    Some(value)
}

/// Hides `value` in every output from now on, in every form it can be written in (see
/// [`forms`]).
pub fn register(value: &str) {
    let value = value.trim();
    if value.len() < MIN_REDACTED_LEN {
        return;
    }
    {
        let known = KNOWN.read().unwrap_or_else(PoisonError::into_inner);
        if known.values.contains(value) {
            return;
        }
    }
    let forms = forms::of(value);
    let mut known = KNOWN.write().unwrap_or_else(PoisonError::into_inner);
    if !known.values.insert(value.to_owned()) {
        return;
    }
    let mut all: Vec<String> = known.redactor.forms.clone();
    let before = all.len();
    for form in forms {
        if !all.contains(&form) {
            all.push(form);
        }
    }
    if all.len() != before {
        known.redactor = Arc::new(Redactor::new(all));
    }
}

/// The redactor as it is now: what [`crate::out::Redacting`] writers use for a whole write.
pub fn redactor() -> Arc<Redactor> {
    KNOWN
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .redactor
        .clone()
}

/// Whether `text` holds a registered secret (what [`redact`] would hide).
pub fn holds_secret(text: &str) -> bool {
    redactor().holds(text.as_bytes())
}

/// `text` with every registered secret replaced by `[hidden]`.
pub fn redact(text: &str) -> Cow<'_, str> {
    let redactor = redactor();
    match redactor.redact(text.as_bytes()) {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        // Whole UTF-8 sequences are replaced by ASCII, so the text stays UTF-8.
        Cow::Owned(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
    }
}

/// A JSON value with every secret in it hidden (for a value about to be cut or reshaped, where
/// the writer's redaction would come too late).
pub fn redact_json(value: &serde_json::Value) -> Cow<'_, serde_json::Value> {
    let text = value.to_string();
    match redact(&text) {
        Cow::Borrowed(_) => Cow::Borrowed(value),
        Cow::Owned(hidden) => {
            Cow::Owned(serde_json::from_str(&hidden).unwrap_or(serde_json::Value::Null))
        }
    }
}

/// [`redact`] for an owned string, without copying when nothing is hidden.
pub fn redact_owned(text: String) -> String {
    match redact(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(hidden) => hidden,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_and_unknown_ones_are_empty() {
        // SAFETY: tests in this module do not read this variable concurrently.
        unsafe { std::env::set_var("RUNNER_SECRETS_TEST_VAR", "v1") };
        assert_eq!(expand_vars("a-${RUNNER_SECRETS_TEST_VAR}-b"), "a-v1-b");
        assert_eq!(expand_vars("${RUNNER_SECRETS_NOT_SET_X}"), "");
        assert_eq!(expand_vars("no ${brace"), "no ${brace");
    }

    #[test]
    fn secret_names() {
        for name in [
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
            "ACTIONS_ID_TOKEN_REQUEST_URL",
            "NPM_TOKEN",
            "DB_PASSWORD",
            "GCP_CREDENTIALS",
            "SSH_KEY",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "TOKENIZERS_PARALLELISM", "KEYBOARD", "CI"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn registered_values_are_hidden_and_short_ones_ignored() {
        register("sk-unit-test-redaction-0001");
        register("short");
        assert_eq!(
            redact("key=sk-unit-test-redaction-0001; again sk-unit-test-redaction-0001"),
            "key=[hidden]; again [hidden]"
        );
        assert_eq!(redact("a short word"), "a short word");
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
    }

    /// A secret inside a longer base64 text (a Basic header a proxy echoes) or URL-encoded is
    /// hidden too, at any alignment.
    #[test]
    fn encodings_of_a_secret_are_hidden() {
        use base64::Engine as _;
        let secret = "tok-9f8e7d6c5b4a-secret";
        register(secret);
        for prefix in ["", "u", "us", "user:"] {
            for engine in [
                &base64::engine::general_purpose::STANDARD,
                &base64::engine::general_purpose::URL_SAFE,
            ] {
                let encoded = engine.encode(format!("{prefix}{secret}"));
                let header = format!("Proxy-Authorization: Basic {encoded}");
                assert!(redact(&header).contains(HIDDEN), "{prefix:?}: {header}");
            }
        }
        let url = "https://x.test/?token=tok-9f8e7d6c5b4a-secret%20";
        assert!(redact(url).contains(HIDDEN));
        let key = "k3y/with+slash=and:colon";
        register(key);
        let escaped = format!(
            "q={}",
            percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC)
        );
        assert_eq!(redact(&escaped), format!("q={HIDDEN}"), "{escaped}");
    }
}
