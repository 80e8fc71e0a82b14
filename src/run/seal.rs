//! Run records sealed by their content (docs/src/runs.md "Resume").
//!
//! `run.json` begins with `"recorded_by": "hmac-sha256:<hex>"`: an HMAC-SHA256, with this user's
//! key, of every byte of the record as it would read without that line. A record edited
//! anywhere, or made by anyone else (a checkout may ship a `.runner/`), does not carry this
//! user's seal, so it is never `latest` and is shown as not yours.
//!
//! The key is 32 random bytes in `$XDG_STATE_HOME/runner/key`, else
//! `~/.local/state/runner/key`: made on first use, mode 600 in a folder of mode 700, and refused
//! when it is a link, someone else's, open to others, or inside the working directory (which
//! steps read, and where a checkout could ship a key of its own). Steps cannot read it
//! (docs/src/security.md).

use std::io::{self, Read, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::sync::{Mutex, OnceLock, PoisonError};

use camino::{Utf8Path, Utf8PathBuf};
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// How a sealed record begins: the seal is its first member, in the form serde_json's pretty
/// printer writes it, so the reader finds it without parsing anything first.
const OPENING: &[u8] = b"{\n  \"recorded_by\": \"hmac-sha256:";
const CLOSING: &[u8] = b"\",";
const HEX_LEN: usize = 64;
const SEALED_LEN: usize = OPENING.len() + HEX_LEN + CLOSING.len();
/// What the HMAC starts with, so that no other use of the key can make a record's seal.
const DOMAIN: &[u8] = b"runner run record v2\0";

/// Folders runner's key must not be in: the working directories this process works on.
static DISTRUSTED: Mutex<Vec<Utf8PathBuf>> = Mutex::new(Vec::new());

/// Says that `workdir` is a working directory of this process: runner's key is never read from
/// or made inside it.
pub fn distrust(workdir: &Utf8Path) {
    let real = workdir
        .canonicalize_utf8()
        .unwrap_or_else(|_| workdir.to_owned());
    let mut roots = DISTRUSTED.lock().unwrap_or_else(PoisonError::into_inner);
    if !roots.contains(&real) {
        roots.push(real);
    }
}

/// Where this user's key lives (no step's bash may read its folder: `run/confinement.rs`).
pub(crate) fn key_path() -> Result<Utf8PathBuf, String> {
    let base = std::env::var("XDG_STATE_HOME")
        .ok()
        .filter(|d| d.starts_with('/'))
        .map(Utf8PathBuf::from)
        .or_else(|| {
            std::env::var("HOME")
                .ok()
                .filter(|h| h.starts_with('/'))
                .map(|home| Utf8PathBuf::from(home).join(".local/state"))
        })
        .ok_or("neither XDG_STATE_HOME nor HOME is an absolute path")?;
    Ok(base.join("runner").join("key"))
}

/// The key's folder is outside every working directory of this process (the nearest folder on
/// its path that exists, as it really is).
fn outside_workdirs(path: &Utf8Path) -> Result<(), String> {
    let real = path
        .ancestors()
        .find_map(|p| p.canonicalize_utf8().ok())
        .unwrap_or_else(|| path.to_owned());
    let roots = DISTRUSTED.lock().unwrap_or_else(PoisonError::into_inner);
    match roots.iter().find(|root| real.starts_with(root)) {
        Some(root) => Err(format!(
            "runner's key `{path}` would be inside the working directory `{root}`, which steps read and a checkout may ship a key in: set XDG_STATE_HOME to a folder outside it"
        )),
        None => Ok(()),
    }
}

/// This user's key, or why there is none to trust.
fn key() -> Result<&'static [u8], String> {
    static KEY: OnceLock<Result<(Utf8PathBuf, [u8; 32]), String>> = OnceLock::new();
    let (path, key) = KEY.get_or_init(load).as_ref().map_err(Clone::clone)?;
    // Again at each use: a working directory may be named after the key was first loaded.
    outside_workdirs(path)?;
    Ok(key)
}

/// Why runs cannot be sealed or checked here, if they cannot.
pub fn key_problem() -> Option<String> {
    key().err()
}

fn load() -> Result<(Utf8PathBuf, [u8; 32]), String> {
    let path = key_path()?;
    outside_workdirs(&path)?;
    let dir = path
        .parent()
        .ok_or_else(|| format!("`{path}` has no folder"))?;
    // A folder an older runner made (mode 755) is closed to others before the key is read.
    if dir.symlink_metadata().is_ok() {
        check_folder(dir)?;
    }
    if let Some(key) = read_key(&path)? {
        return Ok((path, key));
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|err| format!("cannot create `{dir}` for runner's key: {err}"))?;
    check_folder(dir)?;
    // Written whole beside its place and linked there only if no key is there yet: two runs
    // starting at once agree on one key, and none reads half of one.
    let key: [u8; 32] = rand::random();
    let mut file = tempfile::Builder::new()
        .prefix(".key")
        .tempfile_in(dir)
        .map_err(|err| format!("cannot make runner's key in `{dir}`: {err}"))?;
    file.write_all(&key)
        .and_then(|()| file.as_file().sync_all())
        .map_err(|err| format!("cannot write runner's key `{path}`: {err}"))?;
    match file.persist_noclobber(&path) {
        Ok(_) => Ok((path, key)),
        Err(err) if err.error.kind() == io::ErrorKind::AlreadyExists => read_key(&path)?
            .map(|key| (path.clone(), key))
            .ok_or_else(|| format!("runner's key `{path}` vanished as it was made")),
        Err(err) => Err(format!("cannot write runner's key `{path}`: {}", err.error)),
    }
}

/// The key's folder: a real folder of this user's that no one else can change; one made by an
/// older runner (mode 755) is closed to others.
fn check_folder(dir: &Utf8Path) -> Result<(), String> {
    let meta = dir
        .symlink_metadata()
        .map_err(|err| format!("cannot look at `{dir}`: {err}"))?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(format!(
            "`{dir}` (where runner keeps its key) is not a folder of yours"
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .map_err(|err| format!("cannot close `{dir}` to others: {err}"))?;
    }
    Ok(())
}

/// The key in `path`, `None` when there is none yet.
fn read_key(path: &Utf8Path) -> Result<Option<[u8; 32]>, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(format!("cannot read runner's key `{path}`: {err}")),
    };
    let meta = file
        .metadata()
        .map_err(|err| format!("cannot read runner's key `{path}`: {err}"))?;
    if !meta.is_file() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(format!(
            "runner's key `{path}` is not a file of yours: remove it, and runner makes a new one"
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "runner's key `{path}` is open to others (mode {:o}): `chmod 600 {path}`, or remove it and runner makes a new one",
            meta.mode() & 0o777
        ));
    }
    let mut bytes = Vec::with_capacity(33);
    file.take(33)
        .read_to_end(&mut bytes)
        .map_err(|err| format!("cannot read runner's key `{path}`: {err}"))?;
    // An older runner wrote 32 bytes too.
    let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| {
        format!(
            "runner's key `{path}` is not one runner made: remove it, and runner makes a new one"
        )
    })?;
    Ok(Some(key))
}

fn mac(key: &[u8]) -> HmacSha256 {
    // Invariant: HMAC takes a key of any length.
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key");
    mac.update(DOMAIN);
    mac
}

/// `text` (a record as runner writes it: a JSON object, pretty-printed) with this user's seal
/// as its first member. Without a key to seal with, the text as it is, and why.
pub fn seal(text: String) -> (String, Option<String>) {
    let key = match key() {
        Ok(key) => key,
        Err(why) => return (text, Some(why)),
    };
    let Some(rest) = text.strip_prefix('{') else {
        return (text, Some("a record is a JSON object".into()));
    };
    let mut mac = mac(key);
    mac.update(text.as_bytes());
    let code = mac.finalize().into_bytes();
    let mut sealed = Vec::with_capacity(text.len() + SEALED_LEN);
    sealed.extend_from_slice(OPENING);
    for byte in code {
        let _ = write!(sealed, "{byte:02x}");
    }
    sealed.extend_from_slice(CLOSING);
    sealed.extend_from_slice(rest.as_bytes());
    // Invariant: ASCII around text that was UTF-8.
    (
        String::from_utf8(sealed).expect("a sealed record is UTF-8"),
        None,
    )
}

/// A record being read, its seal taken off and checked as it goes: what it yields is the record
/// as it was before it was sealed, and [`Opened::ours`], once everything is read, says whether
/// this user's key sealed exactly that.
pub struct Opened<R> {
    inner: R,
    /// Bytes to yield before reading on.
    head: Vec<u8>,
    at: usize,
    /// With the seal the record claims, when it has one and there is a key to check it with.
    check: Option<(HmacSha256, [u8; 32])>,
    ended: bool,
}

impl<R: Read> Opened<R> {
    pub fn new(mut inner: R) -> io::Result<Self> {
        let mut first = vec![0; SEALED_LEN];
        let mut got = 0;
        while got < SEALED_LEN {
            match inner.read(&mut first[got..])? {
                0 => break,
                n => got += n,
            }
        }
        first.truncate(got);
        let claimed = claimed_seal(&first);
        let (head, check) = match (claimed, key()) {
            (Some(code), Ok(key)) => {
                let mut mac = mac(key);
                mac.update(b"{");
                (b"{".to_vec(), Some((mac, code)))
            }
            (Some(_), Err(_)) => (b"{".to_vec(), None),
            (None, _) => (first, None),
        };
        Ok(Self {
            inner,
            head,
            at: 0,
            check,
            ended: false,
        })
    }

    /// Whether this user sealed the record: read to its end, and its seal is this user's key's
    /// for exactly what was read.
    pub fn ours(self) -> bool {
        match self.check {
            Some((mac, code)) if self.ended => mac.verify_slice(&code).is_ok(),
            _ => false,
        }
    }
}

/// The seal `first` (a record's first bytes) claims, if it is shaped like one.
fn claimed_seal(first: &[u8]) -> Option<[u8; 32]> {
    let hex = first
        .strip_prefix(OPENING)?
        .strip_suffix(CLOSING)
        .filter(|h| h.len() == HEX_LEN)?;
    let mut code = [0u8; 32];
    for (byte, pair) in code.iter_mut().zip(hex.chunks(2)) {
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(code)
}

impl<R: Read> Read for Opened<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at < self.head.len() {
            let n = buf.len().min(self.head.len() - self.at);
            buf[..n].copy_from_slice(&self.head[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        let n = self.inner.read(buf)?;
        if n == 0 {
            self.ended = true;
        }
        if let Some((mac, _)) = &mut self.check {
            mac.update(&buf[..n]);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(text: &str) -> (String, bool) {
        let mut reader = Opened::new(text.as_bytes()).unwrap();
        let mut out = String::new();
        reader.read_to_string(&mut out).unwrap();
        (out, reader.ours())
    }

    #[test]
    fn a_sealed_record_reads_as_it_was_and_any_change_unseals_it() {
        let text = serde_json::to_string_pretty(&serde_json::json!({
            "run_id": "r1", "steps": {"s": {"summary": "fine"}},
        }))
        .unwrap();
        let (sealed, why) = seal(text.clone());
        assert_eq!(why, None);
        assert!(sealed.starts_with("{\n  \"recorded_by\": \"hmac-sha256:"));
        let parsed: serde_json::Value = serde_json::from_str(&sealed).unwrap();
        assert_eq!(parsed["steps"]["s"]["summary"], "fine");
        assert_eq!(opened(&sealed), (text.clone(), true));
        // One byte changed anywhere, the seal's own included.
        for at in [40, sealed.len() / 2, sealed.len() - 3] {
            let mut edited = sealed.clone().into_bytes();
            edited[at] = if edited[at] == b'1' { b'2' } else { b'1' };
            let edited = String::from_utf8(edited).unwrap();
            assert!(!opened(&edited).1, "edited at {at}: {edited}");
        }
        // Unsealed, or cut short.
        assert_eq!(opened(&text), (text.clone(), false));
        assert!(!opened(&sealed[..sealed.len() - 1]).1);
    }
}
