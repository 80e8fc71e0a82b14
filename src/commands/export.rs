//! `runner export github-actions|gitlab-ci|argo WORKFLOW`: see [`crate::export`].

use super::load_plan_to_inspect;
use crate::cli::{ExportArgs, ExportTarget, Io};
use crate::error::Exit;
use crate::export::{Install, Options, argo, github, gitlab};
use crate::workflow::load_workflow;

// Over 80 lines: one arm per export engine and its flags.
pub fn export(args: ExportArgs, io: &mut Io<'_>) -> Exit {
    // Inputs are given when the exported workflow is dispatched, not now.
    let Some(plan) = load_plan_to_inspect(&args.workflow, &args.resolve, io) else {
        return Exit::Invalid;
    };
    let inputs = match load_workflow(&args.workflow) {
        Ok(loaded) => loaded.def.inputs,
        Err(problems) => {
            super::report(io, &problems);
            return Exit::Invalid;
        }
    };
    let (install, install_note) = match install(&args) {
        Ok(found) => found,
        Err(message) => {
            let _ = writeln!(io.err, "error: {message}");
            return Exit::Invalid;
        }
    };
    if let Some(note) = &install_note {
        let _ = writeln!(io.err, "note: {note}");
    }
    if let Some(why) = args.image.as_deref().and_then(crate::export::unsafe_text) {
        let _ = writeln!(io.err, "error: the `--image` holds {why}");
        return Exit::Invalid;
    }
    // Every engine takes `--image`; GitHub's jobs run on the runner's machine unless it is
    // given, and `none` leaves it out (a GitLab shell executor). Argo's tasks need one.
    let image = match (args.image.as_deref(), &args.target) {
        (Some("none"), ExportTarget::Argo) => {
            let _ = writeln!(
                io.err,
                "error: `--image none`: every Argo task runs in a container; name its image"
            );
            return Exit::Invalid;
        }
        (Some("none"), _) | (None, ExportTarget::GithubActions) => None,
        (Some(image), _) => Some(image),
        (None, _) => Some(crate::export::DEFAULT_IMAGE),
    };
    let options = Options {
        workflow_path: args.workflow.as_str(),
        inputs: &inputs,
        install: &install,
        install_note: install_note.as_deref(),
        replay: args.replay.as_ref().map(|d| d.as_str()),
        image,
    };
    let (errors, warnings) = match args.target {
        ExportTarget::GithubActions => github::check(&plan, &options),
        ExportTarget::GitlabCi => gitlab::check(&plan, &options),
        ExportTarget::Argo => argo::check(&plan, &options),
    };
    for warning in &warnings {
        let _ = writeln!(io.err, "warning: {warning}");
    }
    if !errors.is_empty() {
        for error in &errors {
            let _ = writeln!(io.err, "error: {error}");
        }
        return Exit::Invalid;
    }
    let text = match args.target {
        ExportTarget::GithubActions => github::github_actions(&plan, &options),
        ExportTarget::GitlabCi => gitlab::gitlab_ci(&plan, &options),
        ExportTarget::Argo => argo::argo(
            &plan,
            &options,
            image.unwrap_or(crate::export::DEFAULT_IMAGE),
        ),
    };
    match &args.output {
        Some(path) => {
            // Through the confined writer: a link in the file's place is replaced, a folder on
            // the way that is a link refused (docs/src/ci.md, "Where runner writes").
            if let Err(err) = crate::out::write_file(path, text.as_bytes()) {
                let _ = writeln!(io.err, "error: {err}");
                return Exit::Unexpected;
            }
            let _ = writeln!(
                io.err,
                "wrote {path}: {}",
                crate::units::count(plan.steps().len() as u64, "step", "steps")
            );
        }
        None => {
            let _ = write!(io.out, "{text}");
        }
    }
    Exit::Success
}

/// How the first job installs runner (docs/src/ci.md, "How the jobs get runner"): `--install`;
/// else this version's release archive, when the table or the flags know its SHA-256; else
/// `cargo install --git` of the commit it was built from, with a note saying why.
fn install(args: &ExportArgs) -> Result<(Install, Option<String>), String> {
    if let Some(command) = &args.install {
        return Ok((Install::Command(command.clone()), None));
    }
    let why = match crate::export::release::find(
        env!("CARGO_PKG_VERSION"),
        args.release_url.as_deref(),
        &args.release_sha256,
    )? {
        Ok(release) => return Ok((Install::Release(release), None)),
        Err(why) => why,
    };
    match crate::export::default_install() {
        Some(command) => Ok((
            Install::Command(command),
            Some(format!(
                "{why}: the first job builds it with `cargo install --git` instead (minutes, not seconds)"
            )),
        )),
        None => Err(format!(
            "{why}, and this runner does not know the repository it was built from: pass `--install 'cargo install --locked --git https://... --rev <commit> agent-runner'`, or --release-sha256 TARGET=SHA256 for archives of your own"
        )),
    }
}
