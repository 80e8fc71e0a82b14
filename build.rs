//! Records which repository and commit this runner was built from, so that `runner export`
//! can install this same program in CI (see README "Exporting to GitHub Actions").

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    println!("cargo:rerun-if-env-changed=RUNNER_SOURCE_URL");
    println!("cargo:rerun-if-env-changed=RUNNER_SOURCE_REV");
    let url = std::env::var("RUNNER_SOURCE_URL")
        .ok()
        .or_else(|| git(&["config", "--get", "remote.origin.url"]));
    let rev = std::env::var("RUNNER_SOURCE_REV")
        .ok()
        .or_else(|| git(&["rev-parse", "HEAD"]));
    // Only what a CI machine can fetch: an https repository at a full commit.
    if let (Some(url), Some(rev)) = (url, rev)
        && url.starts_with("https://")
        && !url.contains('@')
        && url.chars().all(|c| c.is_ascii_graphic())
        && rev.len() == 40
        && rev.chars().all(|c| c.is_ascii_hexdigit())
    {
        println!("cargo:rustc-env=RUNNER_SOURCE_URL={url}");
        println!("cargo:rustc-env=RUNNER_SOURCE_REV={rev}");
    }
}
