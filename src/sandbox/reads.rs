//! What a step's `bash` may read: an allowlist that Landlock enforces (docs/src/security.md).
//!
//! The system's directories, the toolchains a build needs (from the variables that name them,
//! else their default places under the home directory), the working directory, the private
//! temporary directory and what the step's `read_paths` names. Nothing else of the home
//! directory: `~/.ssh`, `~/.aws`, `~/.config`, `~/.gitconfig`, runner's own key and state. Inside
//! a toolchain's home only what builds read is granted where that home also keeps credentials
//! (`~/.cargo/credentials.toml`, `~/.m2/settings.xml`, `~/.gradle/gradle.properties`).

use std::path::{Path, PathBuf};

/// The system's directories: programs, libraries, configuration, devices and kernel views.
/// `/tmp` and `/var/tmp` are not among them (other programs' files; each call has its own).
pub const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/nix",
    "/gnu",
    "/snap",
    "/home/linuxbrew/.linuxbrew",
];

/// Folders of the home directory that hold credentials: when the working directory holds the
/// home directory, bash still does not read them unless the step's `read_paths` names them.
pub const CREDENTIALS: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".gnupg",
    ".config",
    ".docker",
    ".kube",
    ".password-store",
    ".local/share/keyrings",
];

/// Toolchain homes named by a variable, with where they are when it is unset (relative to the
/// home directory), and what of each is granted (`None`: all of it).
const TOOLCHAINS: &[(&str, &str, Option<&[&str]>)] = &[
    (
        "CARGO_HOME",
        ".cargo",
        Some(&["bin", "registry", "git", "config.toml", "config", "env"]),
    ),
    ("RUSTUP_HOME", ".rustup", None),
    ("PYENV_ROOT", ".pyenv", None),
    ("NVM_DIR", ".nvm", None),
    ("VOLTA_HOME", ".volta", None),
    ("BUN_INSTALL", ".bun", None),
    ("DENO_INSTALL_ROOT", ".deno", None),
    ("GOPATH", "go", None),
    ("GOROOT", "", None),
    ("GOMODCACHE", "", None),
    ("GOCACHE", ".cache/go-build", None),
    ("VIRTUAL_ENV", "", None),
    ("CONDA_PREFIX", "", None),
    ("JAVA_HOME", "", None),
    ("ASDF_DATA_DIR", ".asdf", None),
    ("SDKMAN_DIR", ".sdkman", None),
    ("RBENV_ROOT", ".rbenv", None),
    ("GHCUP_INSTALL_BASE_PREFIX", "", None),
    ("HOMEBREW_PREFIX", "", None),
];

/// Places under the home directory that hold installed tools, packages and caches only.
const HOME_TOOLS: &[&str] = &[
    ".local/bin",
    ".local/lib",
    ".local/pipx",
    ".local/share/uv",
    ".local/share/pnpm",
    ".local/share/mise",
    ".local/share/virtualenvs",
    ".virtualenvs",
    ".conda",
    "miniconda3",
    "anaconda3",
    "miniforge3",
    ".local/share/fnm",
    ".npm",
    ".npm-global",
    ".yarn",
    ".cache/pip",
    ".cache/uv",
    ".cache/pypoetry",
    ".cache/yarn",
    ".cache/node-gyp",
    ".cache/ms-playwright",
    ".m2/repository",
    ".gradle/caches",
    ".gradle/wrapper",
    ".gem",
    ".ghcup",
    ".cabal",
    ".stack",
    ".dotnet",
    ".nuget/packages",
];

/// Variables holding lists of directories programs are found in.
const SEARCH_PATHS: &[&str] = &["PATH", "PYTHONPATH", "NODE_PATH"];

/// Where a step's bash may read, besides its working and temporary directories: the system,
/// the toolchains `var` names (runner's own environment), and `extra` (the step's `read_paths`,
/// already expanded). Paths that do not exist are left to the ruleset to skip.
pub fn allowed(
    home: Option<&Path>,
    var: impl Fn(&str) -> Option<String>,
    extra: &[PathBuf],
) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = SYSTEM.iter().map(PathBuf::from).collect();
    let home = home.filter(|h| h.is_absolute() && *h != Path::new("/"));
    // A variable pointing at the home itself (or above it) would grant all of it: ignored.
    let usable = |path: &Path| path.is_absolute() && home.is_none_or(|h| !h.starts_with(path));
    for (name, default, parts) in TOOLCHAINS {
        let base = match var(name).filter(|v| !v.is_empty()) {
            Some(value) => PathBuf::from(value),
            None if !default.is_empty() => match home {
                Some(home) => home.join(default),
                None => continue,
            },
            None => continue,
        };
        if !usable(&base) {
            continue;
        }
        match parts {
            Some(parts) => paths.extend(parts.iter().map(|p| base.join(p))),
            None => paths.push(base),
        }
    }
    if let Some(home) = home {
        paths.extend(HOME_TOOLS.iter().map(|p| home.join(p)));
    }
    for name in SEARCH_PATHS {
        if let Some(list) = var(name) {
            paths
                .extend(std::env::split_paths(&list).filter(|p| usable(p) && *p != Path::new("/")));
        }
    }
    paths.extend(extra.iter().cloned());
    paths.sort();
    paths.dedup();
    paths
}

/// A `read_paths` entry as a path: `~` and `~/...` start at the home directory, a relative path
/// at the working directory.
pub fn expand(entry: &str, home: Option<&Path>, workdir: &Path) -> Option<PathBuf> {
    let path = match entry.strip_prefix('~') {
        Some("") => home?.to_owned(),
        Some(rest) if rest.starts_with('/') => home?.join(rest.trim_start_matches('/')),
        _ => workdir.join(entry),
    };
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolchains_are_granted_and_the_rest_of_home_is_not() {
        let home = Path::new("/home/u");
        let vars = |name: &str| match name {
            "PATH" => Some("/home/u/.cargo/bin:/usr/bin:/home/u:/:relative".to_owned()),
            "GOPATH" => Some("/home/u".to_owned()),
            "PYTHONPATH" => Some("/srv/py".to_owned()),
            _ => None,
        };
        let paths = allowed(Some(home), vars, &[PathBuf::from("/home/u/.ssh")]);
        for granted in [
            "/usr",
            "/home/u/.cargo/bin",
            "/home/u/.cargo/registry",
            "/home/u/.rustup",
            "/home/u/.pyenv",
            "/home/u/.nvm",
            "/home/u/.npm",
            "/srv/py",
            "/home/u/.ssh",
        ] {
            assert!(
                paths.contains(&PathBuf::from(granted)),
                "{granted}: {paths:?}"
            );
        }
        for refused in [
            "/home/u",
            "/",
            "/home/u/.cargo",
            "/home/u/.config",
            "relative",
            "/tmp",
        ] {
            assert!(
                !paths.contains(&PathBuf::from(refused)),
                "{refused}: {paths:?}"
            );
        }
        assert!(!paths.iter().any(|p| p.ends_with("credentials.toml")));
    }

    #[test]
    fn read_paths_expand_the_home() {
        let (home, work) = (Path::new("/home/u"), Path::new("/w"));
        assert_eq!(
            expand("~/.ssh", Some(home), work),
            Some(PathBuf::from("/home/u/.ssh"))
        );
        assert_eq!(
            expand("~", Some(home), work),
            Some(PathBuf::from("/home/u"))
        );
        assert_eq!(
            expand("/data", Some(home), work),
            Some(PathBuf::from("/data"))
        );
        assert_eq!(
            expand("../shared", Some(home), work),
            Some(PathBuf::from("/w/../shared"))
        );
        assert_eq!(expand("~/.ssh", None, work), None);
    }
}
