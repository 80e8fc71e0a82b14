//! `runner completions SHELL`: the completion script clap_complete writes from the clap
//! definitions, so it names every command and flag the binary has (docs/src/install.md
//! "Shell completions").

use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs, Io};
use crate::error::Exit;

/// The name the script completes: the installed program's.
const BIN: &str = "runner";

pub fn completions(args: CompletionsArgs, io: &mut Io<'_>) -> Exit {
    let mut cli = Cli::command();
    // Into a buffer first: clap_complete gives no error back, and a half-written script that
    // a shell sources is worse than none.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cli, BIN, &mut script);
    match io.out.write_all(&script).and_then(|()| io.out.flush()) {
        Ok(()) => Exit::Success,
        Err(e) => {
            let _ = writeln!(io.err, "error: failed to write the completion script: {e}");
            Exit::Unexpected
        }
    }
}
