//! Siblings that share a cacheable prefix (the forks of one turn, the fan-out instances of one
//! step) do not each write it: the first request with a given prefix goes
//! alone, and the others follow as soon as its reply begins, when the provider has cached the
//! prefix, so they read it at a tenth of the price instead of writing it at 1.25 times
//! (docs/src/runs.md, "Context that lasts"). They wait only when it pays: when the shared
//! prefix reaches the shortest one the provider caches ([`crate::provider::known`]); a shorter
//! prefix, or a provider with no prompt cache to wait for, sends them all at once.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::provider::message::ChatRequest;

/// How long a sibling waits for the first reply to begin before it goes anyway (a slow or
/// stuck first request must not hold the others for its whole time).
const LONGEST_WAIT: Duration = Duration::from_secs(30);

fn gates() -> &'static Mutex<BTreeMap<String, watch::Sender<bool>>> {
    static GATES: OnceLock<Mutex<BTreeMap<String, watch::Sender<bool>>>> = OnceLock::new();
    GATES.get_or_init(Mutex::default)
}

/// The history a request shares with its siblings: a fork's caller's, up to its breakpoint.
fn shared(request: &ChatRequest) -> &[crate::provider::message::Message] {
    request.shared_until.map_or(&request.messages[..0], |end| {
        &request.messages[..(end + 1).min(request.messages.len())]
    })
}

/// Whether siblings of `request` should wait for the first to write the cache: its shared
/// prefix (tools, system prompt, shared history; four bytes a token, as the context estimate
/// counts) reaches `min_cacheable`, the shortest prefix the provider caches. `None` (no cache
/// to wait for) never waits.
pub fn worth_waiting(request: &ChatRequest, min_cacheable: Option<u64>) -> bool {
    let Some(min) = min_cacheable else {
        return false;
    };
    // Once a conversation: the copy costs less than a second way to count.
    let prefix = ChatRequest {
        system: request.system.clone(),
        tools: request.tools.clone(),
        messages: shared(request).to_vec(),
        ..ChatRequest::default()
    };
    super::context::bytes_of(&prefix) as u64 / 4 >= min
}

/// The prefix a provider can cache for `request` among the siblings of `step` (its fan-out
/// instances, its forks): model, system prompt, tools, and the history shared with siblings (a
/// fork's caller's), as a digest. Other steps do not wait for each other.
pub fn key(request: &ChatRequest, step: &str) -> String {
    // An instance `X[3]` is a sibling of every `X[k]`.
    let step = step.split_once('[').map_or(step, |(base, _)| base);
    let shared = shared(request);
    let prefix = serde_json::json!({
        "step": step,
        "model": request.model,
        "system": request.system,
        "tools": request.tools,
        "shared": shared,
    });
    Sha256::digest(prefix.to_string().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The first request with a prefix holds this until its reply begins; dropped, it opens too
/// (a failed request must not hold the others).
pub struct Opener(watch::Sender<bool>);

impl Opener {
    pub fn open(&self) {
        self.0.send_replace(true);
    }
}

impl Drop for Opener {
    fn drop(&mut self) {
        self.open();
    }
}

/// Waits until a request with `key`'s prefix may go: at once for the first (which gets the
/// [`Opener`] to hold until its reply begins) and for any once the prefix is cached; the others
/// wait for that, at most [`LONGEST_WAIT`].
pub async fn enter(key: String) -> Option<Opener> {
    let mut waiting = {
        let mut gates = gates().lock().unwrap_or_else(PoisonError::into_inner);
        match gates.get(&key) {
            Some(sender) => sender.subscribe(),
            None => {
                let (sender, _) = watch::channel(false);
                gates.insert(key, sender.clone());
                return Some(Opener(sender));
            }
        }
    };
    let _ = tokio::time::timeout(LONGEST_WAIT, waiting.wait_for(|open| *open)).await;
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::message::Message;

    fn request(system: &str) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            system: system.into(),
            messages: vec![Message::user_text("task one")],
            ..ChatRequest::default()
        }
    }

    #[test]
    fn siblings_wait_only_for_a_prefix_the_provider_caches() {
        let small = request("You explore.");
        assert!(!worth_waiting(&small, Some(1024)));
        let large = request(&"The rules of the project. ".repeat(200));
        assert!(worth_waiting(&large, Some(1024)));
        assert!(
            !worth_waiting(&large, Some(4096)),
            "Opus 4.5 caches from 4,096"
        );
        assert!(!worth_waiting(&large, None), "no cache to wait for");
        // A fork's shared history counts; the first message after it does not.
        let mut fork = request("You explore.");
        fork.messages = vec![
            Message::user_text("x".repeat(8000)),
            Message::user_text("the fork's own task"),
        ];
        assert!(!worth_waiting(&fork, Some(1024)));
        fork.shared_until = Some(0);
        assert!(worth_waiting(&fork, Some(1024)));
    }

    #[tokio::test]
    async fn the_first_goes_and_the_others_wait_for_its_reply_to_begin() {
        let key = key(&request("gate test"), "each[0]");
        // The first message is not part of the shared prefix; instances are siblings.
        let mut other = request("gate test");
        other.messages = vec![Message::user_text("task two")];
        assert_eq!(super::key(&other, "each[7]"), key);
        assert_ne!(super::key(&request("another system"), "each[0]"), key);
        // Another step does not wait for this one.
        assert_ne!(super::key(&request("gate test"), "other"), key);
        let opener = enter(key.clone()).await.expect("the first goes at once");
        let second = tokio::spawn(enter(key.clone()));
        tokio::task::yield_now().await;
        assert!(
            !second.is_finished(),
            "the second went before the first's reply began"
        );
        opener.open();
        assert!(second.await.unwrap().is_none());
        // Once open, anyone goes at once.
        drop(opener);
        assert!(enter(key).await.is_none());
    }
}
