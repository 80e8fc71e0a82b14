//! `runner export github-actions`: one job per step (see [`super`]), a first job that installs
//! runner once, and `runner-apply` pushing worktree branches. Model jobs get read-only
//! `contents` permission, no credentials left in the checkout, and only the API keys their
//! step's models need, as secrets.

use std::fmt::Write as _;

use super::{
    APPLY_JOB, BUILD_JOB, GATHER_JOB, Install, JOB_OVERHEAD_MINUTES, Job, Options, PushEnv,
    REPORT_FILE, gather_lines, input_var, jobs, push_lines, quote, run_line,
};
use crate::plan::Plan;

/// The actions the workflow uses, pinned by commit: a tag can be moved to other code, a commit
/// cannot.
const CHECKOUT: &str = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2";
const DOWNLOAD: &str =
    "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093 # v4.3.0";
const UPLOAD: &str = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2";
/// The longest a job may run on a GitHub-hosted runner (6 hours).
const MAX_JOB_MINUTES: u64 = 360;

fn download_state(out: &mut String) {
    let _ = writeln!(out, "      - name: Fetch the state of earlier steps");
    let _ = writeln!(out, "        uses: {DOWNLOAD}");
    let _ = writeln!(out, "        with:");
    let _ = writeln!(out, "          pattern: runner-state-*");
    let _ = writeln!(out, "          merge-multiple: true");
    let _ = writeln!(out, "          path: .runner/runs");
}

/// The first job: installs runner once (no key, no write) and keeps its binary as an artifact,
/// so every step job runs the same program and none spends minutes compiling it.
fn build_job(out: &mut String, install: &Install) {
    let _ = writeln!(out, "  {BUILD_JOB}:");
    let _ = writeln!(out, "    name: Install runner once");
    let _ = writeln!(out, "    runs-on: ubuntu-latest");
    let _ = writeln!(out, "    timeout-minutes: 30");
    let _ = writeln!(out, "    permissions:");
    let _ = writeln!(out, "      contents: read");
    let _ = writeln!(out, "    steps:");
    let _ = writeln!(out, "      - name: Install runner");
    let _ = writeln!(out, "        run: |");
    match install {
        Install::Command(_) => {
            let _ = writeln!(out, "          sh -c \"$RUNNER_INSTALL\"");
            let _ = writeln!(out, "          mkdir -p runner-bin");
            let _ = writeln!(
                out,
                "          test -x runner-bin/runner || cp \"$(command -v runner)\" runner-bin/runner"
            );
        }
        Install::Release(release) => {
            for line in super::release::install_lines(release, "runner-bin", BUILD_JOB) {
                let _ = writeln!(out, "          {line}");
            }
        }
    }
    let _ = writeln!(out, "      - uses: {UPLOAD}");
    let _ = writeln!(out, "        with:");
    let _ = writeln!(out, "          name: {BUILD_JOB}");
    let _ = writeln!(out, "          path: runner-bin/runner");
    let _ = writeln!(out, "          retention-days: 1");
}

/// What GitHub adds to the shared checks: a job's time limit.
pub fn check(plan: &Plan, options: &Options<'_>) -> (Vec<String>, Vec<String>) {
    let (errors, mut warnings) = super::check(plan, options, "GitHub Actions", 256);
    for step in plan.steps() {
        if step.settings.timeout.as_secs() > (MAX_JOB_MINUTES - JOB_OVERHEAD_MINUTES) * 60 {
            warnings.push(format!(
                "step `{}` has a timeout over {} minutes: its job gets `timeout-minutes: {MAX_JOB_MINUTES}`, the most a GitHub-hosted runner allows",
                step.id,
                MAX_JOB_MINUTES - JOB_OVERHEAD_MINUTES
            ));
        }
    }
    (errors, warnings)
}

// Over 80 lines: one exported job's fields, in the order the YAML shows them.
fn step_job(out: &mut String, job: &Job<'_>, options: &Options<'_>) {
    let step = job.step;
    let _ = writeln!(out, "  {}:", step.id);
    let _ = writeln!(
        out,
        "    name: {}",
        quote(&format!("{} [{}]", step.id, step.agent))
    );
    let mut needs: Vec<String> = vec![quote(BUILD_JOB)];
    needs.extend(step.needs.iter().map(|n| quote(n)));
    let _ = writeln!(out, "    needs: [{}]", needs.join(", "));
    if !step.needs.is_empty() {
        // runner decides inside the job (a failed need, the step's `if`) and records why.
        let _ = writeln!(
            out,
            "    if: ${{{{ !cancelled() && needs.{BUILD_JOB}.result == 'success' }}}}"
        );
    }
    let _ = writeln!(out, "    runs-on: ubuntu-latest");
    let _ = writeln!(
        out,
        "    timeout-minutes: {}",
        job.minutes.min(MAX_JOB_MINUTES)
    );
    // A list known before the run is a matrix: a job per instance. Ids are plain names
    // (letters, digits, `_`, `-`, `.`, brackets), so they are safe in YAML and in `--only`.
    if let Some(instances) = &job.matrix {
        let _ = writeln!(out, "    strategy:");
        let _ = writeln!(out, "      fail-fast: false");
        let _ = writeln!(out, "      matrix:");
        let _ = writeln!(out, "        include:");
        for (slot, id) in instances.iter().enumerate() {
            let _ = writeln!(out, "          - instance: {}", quote(id));
            let _ = writeln!(out, "            slot: {slot}");
        }
    }
    if step.continue_on_error {
        let _ = writeln!(out, "    continue-on-error: true");
    }
    let _ = writeln!(out, "    permissions:");
    let _ = writeln!(out, "      contents: read");
    let _ = writeln!(out, "    steps:");
    let _ = writeln!(out, "      - uses: {CHECKOUT}");
    let _ = writeln!(out, "        with:");
    let _ = writeln!(out, "          persist-credentials: false");
    if !step.needs.is_empty() {
        download_state(out);
    }
    fetch_runner(out);
    let _ = writeln!(
        out,
        "      - name: {}",
        quote(&format!("Run step {}", step.id))
    );
    if !job.keys.is_empty() || !options.inputs.is_empty() || job.matrix.is_some() {
        let _ = writeln!(out, "        env:");
        if job.matrix.is_some() {
            let _ = writeln!(out, "          RUNNER_INSTANCE: ${{{{ matrix.instance }}}}");
        }
        for key in &job.keys {
            let _ = writeln!(out, "          {key}: ${{{{ secrets.{key} }}}}");
        }
        for name in options.inputs.keys() {
            let _ = writeln!(
                out,
                "          {}: ${{{{ inputs.{name} }}}}",
                input_var(name)
            );
        }
    }
    let only = match job.matrix {
        Some(_) => "\"$RUNNER_INSTANCE\"".to_owned(),
        None => step.id.clone(),
    };
    let command = run_line(options, &only, "\"$GITHUB_RUN_ID\"");
    let _ = writeln!(out, "        run: {}", quote(&command));
    let _ = writeln!(out, "      - name: Keep its state for the steps after it");
    let _ = writeln!(out, "        if: ${{{{ !cancelled() }}}}");
    let _ = writeln!(out, "        uses: {UPLOAD}");
    let _ = writeln!(out, "        with:");
    match job.matrix {
        Some(_) => {
            let _ = writeln!(
                out,
                "          name: runner-state-{}-${{{{ matrix.slot }}}}",
                step.id
            );
        }
        None => {
            let _ = writeln!(out, "          name: runner-state-{}", step.id);
        }
    }
    let _ = writeln!(out, "          path: .runner/runs");
    let _ = writeln!(out, "          include-hidden-files: true");
}

/// The steps that take the first job's runner and put it on the PATH.
fn fetch_runner(out: &mut String) {
    let _ = writeln!(out, "      - name: Fetch runner");
    let _ = writeln!(out, "        uses: {DOWNLOAD}");
    let _ = writeln!(out, "        with:");
    let _ = writeln!(out, "          name: {BUILD_JOB}");
    let _ = writeln!(out, "          path: ${{{{ runner.temp }}}}/runner-bin");
    let _ = writeln!(out, "      - name: Put runner on the PATH");
    let _ = writeln!(
        out,
        "        run: chmod +x \"$RUNNER_TEMP/runner-bin/runner\" && echo \"$RUNNER_TEMP/runner-bin\" >> \"$GITHUB_PATH\""
    );
}

/// The last job: every step job's records into one run, published with its report. It runs
/// whatever the steps did (`always()`): a failed step's record is what one wants to read.
fn gather_job(out: &mut String, jobs: &[Job<'_>], options: &Options<'_>) {
    let mut needs: Vec<String> = jobs.iter().map(|j| quote(j.id())).collect();
    if jobs.iter().any(|j| j.pushes) {
        needs.push(quote(APPLY_JOB));
    }
    let _ = writeln!(out, "  {GATHER_JOB}:");
    let _ = writeln!(
        out,
        "    name: Gather the records into one run and its report"
    );
    let _ = writeln!(out, "    needs: [{}]", needs.join(", "));
    let _ = writeln!(out, "    if: ${{{{ always() }}}}");
    let _ = writeln!(out, "    runs-on: ubuntu-latest");
    let _ = writeln!(out, "    timeout-minutes: {JOB_OVERHEAD_MINUTES}");
    let _ = writeln!(out, "    permissions:");
    let _ = writeln!(out, "      contents: read");
    let _ = writeln!(out, "    steps:");
    let _ = writeln!(out, "      - uses: {CHECKOUT}");
    let _ = writeln!(out, "        with:");
    let _ = writeln!(out, "          persist-credentials: false");
    download_state(out);
    fetch_runner(out);
    let _ = writeln!(out, "      - name: Gather the records");
    let _ = writeln!(out, "        run: |");
    for line in gather_lines(options, "\"$GITHUB_RUN_ID\"") {
        let _ = writeln!(out, "          {line}");
    }
    let _ = writeln!(out, "      - name: Publish the run and its report");
    let _ = writeln!(out, "        if: ${{{{ always() }}}}");
    let _ = writeln!(out, "        uses: {UPLOAD}");
    let _ = writeln!(out, "        with:");
    let _ = writeln!(out, "          name: runner-run");
    let _ = writeln!(out, "          path: |");
    let _ = writeln!(out, "            .runner/runs/");
    let _ = writeln!(out, "            {REPORT_FILE}");
    let _ = writeln!(out, "          include-hidden-files: true");
}

fn apply_job(out: &mut String, jobs: &[Job<'_>]) {
    let needs: Vec<String> = jobs.iter().map(|j| quote(j.id())).collect();
    let _ = writeln!(out, "  {APPLY_JOB}:");
    let _ = writeln!(out, "    name: Push the branches of worktree steps");
    let _ = writeln!(out, "    needs: [{}]", needs.join(", "));
    let _ = writeln!(out, "    if: ${{{{ !cancelled() }}}}");
    let _ = writeln!(out, "    runs-on: ubuntu-latest");
    let _ = writeln!(out, "    timeout-minutes: {JOB_OVERHEAD_MINUTES}");
    let _ = writeln!(out, "    permissions:");
    let _ = writeln!(out, "      contents: write");
    let _ = writeln!(out, "    steps:");
    let _ = writeln!(out, "      - uses: {CHECKOUT}");
    download_state(out);
    let env = PushEnv {
        run_id: "$GITHUB_RUN_ID",
        sha: "$GITHUB_SHA",
        committer: "-c user.name='github-actions[bot]' -c user.email='41898282+github-actions[bot]@users.noreply.github.com'",
        push: "git push origin",
    };
    for job in jobs.iter().filter(|j| j.pushes) {
        let id = job.id();
        let fan_out = job.step.for_each.is_some();
        let name = if fan_out {
            format!("Push the branches of the instances of step {id}")
        } else {
            format!("Push the branch of step {id}")
        };
        let _ = writeln!(out, "      - name: {}", quote(&name));
        let _ = writeln!(out, "        run: |");
        for line in push_lines(id, fan_out, &env) {
            let _ = writeln!(out, "          {line}");
        }
    }
}

/// The GitHub Actions workflow for `plan`.
pub fn github_actions(plan: &Plan, options: &Options<'_>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Generated by `runner export github-actions {}`. Change the workflow file and export",
        options.workflow_path
    );
    let _ = writeln!(
        out,
        "# again rather than editing this. Set the API keys as repository secrets."
    );
    for line in super::install_comment(options) {
        let _ = writeln!(out, "# {line}");
    }
    let _ = writeln!(out, "name: {}", quote(&plan.name));
    let _ = writeln!(out, "on:");
    let _ = writeln!(out, "  workflow_dispatch:");
    if !options.inputs.is_empty() {
        let _ = writeln!(out, "    inputs:");
        for (name, def) in options.inputs {
            let _ = writeln!(out, "      {name}:");
            if let Some(description) = &def.description {
                let _ = writeln!(out, "        description: {}", quote(description));
            }
            let _ = writeln!(out, "        required: {}", def.default.is_none());
            let _ = writeln!(out, "        type: string");
            if let Some(default) = &def.default {
                let _ = writeln!(out, "        default: {}", quote(default));
            }
        }
    }
    let _ = writeln!(out, "permissions: {{}}");
    // One run of a pipeline per ref at a time: two would push branches over each other.
    let _ = writeln!(out, "concurrency:");
    let _ = writeln!(
        out,
        "  group: runner-${{{{ github.workflow }}}}-${{{{ github.ref }}}}"
    );
    let _ = writeln!(out, "  cancel-in-progress: false");
    if let Some(command) = options.install.command() {
        let _ = writeln!(out, "env:");
        let _ = writeln!(
            out,
            "  # How the first job installs runner (pinned: a repository at a commit, or a checked binary)."
        );
        let _ = writeln!(out, "  RUNNER_INSTALL: {}", quote(command));
    }
    let _ = writeln!(out, "jobs:");
    build_job(&mut out, options.install);
    let jobs = jobs(plan, options);
    for job in &jobs {
        step_job(&mut out, job, options);
    }
    if jobs.iter().any(|j| j.pushes) {
        apply_job(&mut out, &jobs);
    }
    gather_job(&mut out, &jobs, options);
    out
}
