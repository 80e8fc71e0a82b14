//! `runner man [COMMAND]`: the manual page clap_mangen writes from the clap definitions, as
//! roff on stdout (`runner man > runner.1`, `runner man | man -l -`); a command's page is
//! `runner-COMMAND(1)`, as git names its pages (docs/src/install.md "Manual pages").

use clap::CommandFactory;

use crate::cli::{Cli, Io, ManArgs};
use crate::error::Exit;

pub fn man(args: ManArgs, io: &mut Io<'_>) -> Exit {
    let cli = Cli::command();
    let page = match args.command.as_deref() {
        None => cli,
        Some(name) => match cli.find_subcommand(name) {
            // The page's title and synopsis name the command as it is typed. clap takes a
            // `&'static str` for a name (its `string` feature aside): the one page a process
            // prints before it exits leaks a few bytes.
            Some(command) => command
                .clone()
                .name(format!("runner-{name}").leak() as &str)
                .bin_name(format!("runner {name}"))
                .version(env!("CARGO_PKG_VERSION")),
            None => {
                let names: Vec<&str> = cli
                    .get_subcommands()
                    .map(clap::Command::get_name)
                    .filter(|n| *n != "help")
                    .collect();
                let _ = writeln!(
                    io.err,
                    "error: runner has no command `{}`: its commands are {}",
                    crate::terminal::clean(name),
                    names.join(", ")
                );
                return Exit::Invalid;
            }
        },
    };
    let mut roff = Vec::new();
    let rendered = clap_mangen::Man::new(page).render(&mut roff);
    match rendered
        .and_then(|()| io.out.write_all(&roff))
        .and_then(|()| io.out.flush())
    {
        Ok(()) => Exit::Success,
        Err(e) => {
            let _ = writeln!(io.err, "error: failed to write the manual page: {e}");
            Exit::Unexpected
        }
    }
}
