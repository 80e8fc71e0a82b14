//! `runner report [RUN] -o FILE [--baseline RUN]`: a recorded run as one self-contained HTML
//! file (docs/src/runs.md, "The report"). What it draws is in `report::html`.

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
    // of the page; the step's record is still shown. Redacted before the page cuts long
    // outputs: a cut secret is one the redactor no longer knows.
    let transcript = |step: &str| {
        let in_run =
            crate::report::transcript::TranscriptSink::path(camino::Utf8Path::new(""), step);
        crate::run::records::read_run_file(&state_dir, &record.run_id, &in_run)
            .ok()
            .map(crate::secrets::redact_owned)
    };
    let sources = crate::report::html::Sources {
        transcript: &transcript,
        baseline: baseline.as_ref(),
    };
    let page = match crate::report::html::render(&record, &sources) {
        Ok(page) => page,
        Err(err) => {
            let _ = writeln!(io.err, "error: {err}");
            return Exit::Invalid;
        }
    };
    // Through the confined writer, which redacts it too: written beside its place and renamed,
    // so a reader never opens half a page and a link in its place is replaced, not followed.
    if let Err(err) = crate::out::write_file(&args.output, page.as_bytes()) {
        let _ = writeln!(io.err, "error: {err}");
        return Exit::Invalid;
    }
    let _ = writeln!(
        io.out,
        "wrote {} (run {}, {}, {})",
        args.output,
        record.run_id,
        record.status.as_str(),
        crate::units::count(record.steps.len() as u64, "step", "steps")
    );
    Exit::Success
}
