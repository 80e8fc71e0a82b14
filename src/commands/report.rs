//! `runner report [RUN] -o FILE [--baseline RUN]`: a recorded run as one self-contained HTML
//! file (docs/src/runs.md, "The report"). What it draws is in `report::html`.

use camino::Utf8Path;

use crate::cli::{Io, ReportArgs};
use crate::error::Exit;

pub fn report(args: ReportArgs, io: &mut Io<'_>) -> Exit {
    let (state_dir, record, _) = match args.dirs.recorded_run(args.run.as_deref(), io.err) {
        Ok(found) => found,
        Err(message) => {
            let _ = writeln!(io.err, "error: {message}");
            return Exit::Invalid;
        }
    };
    let baseline = match args.baseline.as_deref() {
        None => None,
        Some(which) => match crate::commands::diff::load(which, &state_dir) {
            Ok(base) => Some(base),
            Err(problem) => {
                super::report(io, &[problem]);
                return Exit::Invalid;
            }
        },
    };
    // A transcript that cannot be read (a step that never ran, a file too large) is left out
    // of the page; the step's record is still shown.
    let transcript = |step: &str| {
        let in_run = crate::report::transcript::TranscriptSink::path(Utf8Path::new(""), step);
        crate::run::records::read_run_file(&state_dir, &record.run_id, &in_run).ok()
    };
    let sources = crate::report::html::Sources {
        transcript: &transcript,
        baseline: baseline.as_ref(),
    };
    let page = match crate::report::html::render(&record, &sources) {
        Ok(page) => crate::secrets::redact_owned(page),
        Err(err) => {
            let _ = writeln!(io.err, "error: {err}");
            return Exit::Invalid;
        }
    };
    if let Err(err) = write(&args.output, &page) {
        let _ = writeln!(io.err, "error: cannot write `{}`: {err}", args.output);
        return Exit::Invalid;
    }
    let _ = writeln!(
        io.out,
        "wrote {} (run {}, {}, {} steps)",
        args.output,
        record.run_id,
        record.status.as_str(),
        record.steps.len()
    );
    Exit::Success
}

/// Written beside its place and renamed, so a reader never opens half a page.
fn write(path: &Utf8Path, page: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_str().is_empty() => dir,
        _ => Utf8Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, page.as_bytes())?;
    // A page to share, as any file the user writes (a temporary file starts private).
    let mut permissions = file.as_file().metadata()?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o644);
    file.as_file().set_permissions(permissions)?;
    file.persist(path).map_err(|err| err.error)?;
    Ok(())
}
