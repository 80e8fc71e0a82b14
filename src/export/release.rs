//! How an exported pipeline's first job installs runner (docs/src/ci.md, "How the jobs get
//! runner"): by default the release archive of this very version, checked against the SHA-256
//! written into the pipeline, so a job takes seconds instead of a `cargo install` build.
//!
//! Exporting needs no network: the SHA-256 of each released version's archives is in a table
//! committed with the source (`release/checksums.toml`, appended by the release process), read
//! when this runner was built. A version not in it (every build before its release is
//! published) keeps the `cargo install --git` of [`super::default_install`], and the export says
//! why. `--release-url` (a mirror, or a `file://` folder) and `--release-sha256` (a build of
//! one's own, the tests' archives) stand in for the table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

/// The targets runner is released for, and the `uname -m` names of their machines.
pub const TARGETS: &[(&str, &str)] = &[
    ("x86_64-unknown-linux-musl", "x86_64|amd64"),
    ("aarch64-unknown-linux-musl", "aarch64|arm64"),
];

/// The crate the archives are named after (`agent-runner-<target>.tar.xz`, holding
/// `agent-runner-<target>/runner`, as cargo-dist lays them out).
pub const PACKAGE: &str = "agent-runner";

/// Characters a release URL may hold: it is written into shell scripts and YAML, so nothing
/// that quotes, expands or ends a line.
const URL_CHARS: &str = "-._~:/%+@=,";
/// The longest release URL taken.
const MAX_URL: usize = 2048;

/// The committed table, as it was when this runner was built.
const TABLE: &str = include_str!("../../release/checksums.toml");

/// A release to install: where its archives are and the SHA-256 of each target's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub version: String,
    /// The folder holding `v<version>/<archive>`.
    pub base_url: String,
    /// Target to SHA-256 (lowercase hex); a machine of a target not here fails the job.
    pub sha256: BTreeMap<String, String>,
}

/// How the first job installs runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Install {
    /// A shell command (`--install`, or `cargo install --git` for an unreleased version).
    Command(String),
    /// A release archive, checked.
    Release(Release),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    base_url: Option<String>,
    #[serde(default)]
    versions: BTreeMap<String, BTreeMap<String, String>>,
}

/// The committed table, every entry checked: its URL one a job may fetch, each target one
/// runner is released for, each SHA-256 64 hex digits.
fn table() -> Result<Table, String> {
    let table: Table = toml::from_str(TABLE)
        .map_err(|err| format!("release/checksums.toml is not a table of releases: {err}"))?;
    if let Some(url) = &table.base_url {
        check_url(url).map_err(|why| format!("release/checksums.toml: `base_url` {why}"))?;
    }
    for (version, sums) in &table.versions {
        for (target, sum) in sums {
            check_sha256(target, sum)
                .map_err(|why| format!("release/checksums.toml: version {version}: {why}"))?;
        }
    }
    Ok(table)
}

/// Why `url` cannot be a release URL, if it cannot: https, http (a mirror inside a network) or
/// file (a folder on the machine), of plain characters.
pub fn check_url(url: &str) -> Result<(), String> {
    let scheme_ok = ["https://", "http://", "file://"]
        .iter()
        .any(|s| url.starts_with(s) && url.len() > s.len());
    if !scheme_ok {
        return Err(format!(
            "`{}` is not an https://, http:// or file:// URL",
            crate::terminal::clean(url)
        ));
    }
    if url.len() > MAX_URL {
        return Err(format!("is longer than {MAX_URL} characters"));
    }
    if let Some(c) = url
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !URL_CHARS.contains(*c))
    {
        return Err(format!(
            "holds `{}`: a release URL is letters, digits and `{URL_CHARS}`",
            c.escape_default()
        ));
    }
    Ok(())
}

/// Why `sum` cannot be the SHA-256 of `target`'s archive, if it cannot.
fn check_sha256(target: &str, sum: &str) -> Result<(), String> {
    if !TARGETS.iter().any(|(t, _)| *t == target) {
        let known: Vec<&str> = TARGETS.iter().map(|(t, _)| *t).collect();
        return Err(format!(
            "`{}` is not a target runner is released for ({})",
            crate::terminal::clean(target),
            known.join(", ")
        ));
    }
    if sum.len() != 64 || !sum.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!(
            "the SHA-256 of `{target}` is not 64 lowercase hex digits"
        ));
    }
    Ok(())
}

/// `TARGET=SHA256` of `--release-sha256`.
pub fn parse_sha256(text: &str) -> Result<(String, String), String> {
    let (target, sum) = text
        .split_once('=')
        .ok_or("expected TARGET=SHA256, e.g. x86_64-unknown-linux-musl=<64 hex digits>")?;
    let sum = sum.to_ascii_lowercase();
    check_sha256(target, &sum)?;
    Ok((target.to_owned(), sum))
}

/// Where the release of `version` is, and its SHA-256s, from the flags else the table: `Ok(None)`
/// with why when there is none to install (the export then builds from source).
pub fn find(
    version: &str,
    base_url: Option<&str>,
    sha256: &[(String, String)],
) -> Result<Result<Release, String>, String> {
    if let Some(url) = base_url {
        check_url(url).map_err(|why| format!("--release-url {why}"))?;
    }
    let table = table()?;
    let sums: BTreeMap<String, String> = if sha256.is_empty() {
        match table.versions.get(version) {
            Some(sums) if !sums.is_empty() => sums.clone(),
            _ => {
                return Ok(Err(format!(
                    "runner {version} is not in the table of released versions this runner was built with (release/checksums.toml)"
                )));
            }
        }
    } else {
        sha256.iter().cloned().collect()
    };
    let base = match (base_url, &table.base_url) {
        (Some(url), _) => url.to_owned(),
        (None, Some(url)) => url.clone(),
        (None, None) => match github_releases() {
            Some(url) => url,
            None => {
                return Ok(Err(format!(
                    "runner {version} has SHA-256s but no known place to download them from (no `base_url` in release/checksums.toml, and the package's repository is not on GitHub): pass --release-url"
                )));
            }
        },
    };
    Ok(Ok(Release {
        version: version.to_owned(),
        base_url: base.trim_end_matches('/').to_owned(),
        sha256: sums,
    }))
}

/// `https://github.com/<owner>/<repo>/releases/download` of the package's repository, when it is
/// a GitHub repository.
fn github_releases() -> Option<String> {
    let repo = env!("CARGO_PKG_REPOSITORY").trim_end_matches('/');
    let repo = repo.strip_suffix(".git").unwrap_or(repo);
    let path = repo.strip_prefix("https://github.com/")?;
    let url = format!("{repo}/releases/download");
    (path.split('/').count() == 2 && check_url(&url).is_ok()).then_some(url)
}

/// The shell lines (POSIX sh) that install `release` as `<dir>/runner`: the archive of this
/// machine's architecture, downloaded, checked against the SHA-256 written here (never one
/// downloaded beside it, which anyone who can change the archive can change too), unpacked
/// outside the checkout, and run once. `job` names the job in its messages.
pub fn install_lines(release: &Release, dir: &str, job: &str) -> Vec<String> {
    let version = &release.version;
    let mut lines = vec!["set -eu".to_owned(), "case \"$(uname -m)\" in".to_owned()];
    for (target, machines) in TARGETS {
        if let Some(sum) = release.sha256.get(*target) {
            lines.push(format!("  {machines}) target={target}; sha256={sum} ;;"));
        }
    }
    lines.push(format!(
        "  *) echo \"{job}: runner {version} has no release archive for $(uname -m) in this pipeline: export it with --install\" >&2; exit 1 ;;"
    ));
    lines.push("esac".to_owned());
    lines.push(format!("archive=\"{PACKAGE}-$target.tar.xz\""));
    lines.push("unpack=\"$(mktemp -d)\"".to_owned());
    let mut url = String::new();
    let _ = write!(
        url,
        "{}/v{version}/\"$archive\"",
        super::shell_word(&release.base_url)
    );
    lines.push(format!(
        "echo \"{job}: downloading runner {version}: $archive\""
    ));
    lines.push(format!(
        "curl --fail --silent --show-error --location --retry 3 --output \"$unpack/$archive\" {url}"
    ));
    lines.push(format!(
        "if ! (cd \"$unpack\" && echo \"$sha256  $archive\" | sha256sum -c -); then echo \"{job}: $archive does not have the SHA-256 this pipeline was exported with ($sha256): not installing it\" >&2; exit 1; fi"
    ));
    lines.push("tar -xJf \"$unpack/$archive\" -C \"$unpack\"".to_owned());
    lines.push(format!("mkdir -p {dir}"));
    lines.push(format!(
        "cp \"$unpack/{PACKAGE}-$target/runner\" {dir}/runner"
    ));
    lines.push(format!("chmod +x {dir}/runner && {dir}/runner --version"));
    lines
}

impl Install {
    /// What the pipeline's header says of how runner is installed.
    pub fn describe(&self) -> String {
        match self {
            Install::Command(_) => "the first job runs RUNNER_INSTALL".to_owned(),
            Install::Release(release) => format!(
                "the first job downloads the runner {} release from {} and checks its SHA-256",
                release.version, release.base_url
            ),
        }
    }

    /// The command, when it is one.
    pub fn command(&self) -> Option<&str> {
        match self {
            Install::Command(command) => Some(command),
            Install::Release(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed table reads, and every entry in it is a target and a SHA-256.
    #[test]
    fn the_committed_table_reads() {
        table().unwrap();
    }

    #[test]
    fn flags_are_checked() {
        let sum = "ab".repeat(32);
        assert_eq!(
            parse_sha256(&format!("x86_64-unknown-linux-musl={}", sum.to_uppercase())).unwrap(),
            ("x86_64-unknown-linux-musl".to_owned(), sum.clone())
        );
        assert!(parse_sha256(&format!("x86_64-apple-darwin={sum}")).is_err());
        assert!(parse_sha256("x86_64-unknown-linux-musl=abc").is_err());
        assert!(parse_sha256(&sum).is_err());
        assert!(check_url("https://github.com/o/r/releases/download").is_ok());
        assert!(check_url("file:///tmp/mirror").is_ok());
        for bad in [
            "ftp://x",
            "https://",
            "https://x/$(id)",
            "https://x/a b",
            "https://x/'",
            "https://x/\n",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }

    /// The lines run by `sh`: a mismatch stops before anything is unpacked, with the message.
    #[test]
    fn a_wrong_sha256_stops_the_install() {
        let dir = tempfile::tempdir().unwrap();
        let v = dir.path().join("v9.9.9");
        std::fs::create_dir_all(&v).unwrap();
        for (target, _) in TARGETS {
            std::fs::write(v.join(format!("{PACKAGE}-{target}.tar.xz")), b"not it").unwrap();
        }
        let release = Release {
            version: "9.9.9".into(),
            base_url: format!("file://{}", dir.path().display()),
            sha256: TARGETS
                .iter()
                .map(|(t, _)| (t.to_string(), "0".repeat(64)))
                .collect(),
        };
        let script = install_lines(&release, "bin", "runner-build").join("\n");
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("does not have the SHA-256 this pipeline was exported with"),
            "{err}"
        );
        assert!(!dir.path().join("bin").exists());
    }
}
