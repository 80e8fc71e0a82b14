//! One way out (docs/src/security.md, "Secrets" and "What runner writes"): every byte runner
//! writes to a file, a socket or the terminal goes through [`Redacting`], and every file and
//! folder it writes through the confined writer ([`OutDir`]). The handles underneath (files,
//! stdout, stderr) are made here and nowhere else; a test (`audit`) reads the source and fails
//! on a write that bypasses them.

mod confined;
mod redacting;
mod terminal;

#[cfg(test)]
mod audit;
#[cfg(test)]
mod tests;

pub use confined::{OutDir, OutError, OutFile, append_file, create_file, file_place, write_file};
pub use redacting::{Redacted, Redacting};
pub use terminal::{progress_target, stderr, stderr_is_terminal, stdout};
