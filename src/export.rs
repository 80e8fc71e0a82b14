//! `runner export github-actions` (SPEC §9): a plan as a GitHub Actions workflow, one job per
//! step, so a pipeline too big for one machine runs on an engine people already trust.
//!
//! Every job runs `runner run WORKFLOW --only STEP --run-id $GITHUB_RUN_ID`: runner, not GitHub,
//! decides skips (a failed need, the step's `if`) and records why, from the state of earlier
//! jobs, which travels as artifacts (`runs/<id>/steps/<step>/record.json` files never collide, so
//! downloading them all into one directory merges them). Model jobs get read-only `contents`
//! permission, no credentials left in the checkout, and only the API keys their step's models
//! need; a final job with no model and no key, and the only one allowed to write, pushes the
//! branches of worktree steps (the safe-outputs pattern).

use std::collections::BTreeSet;
use std::fmt::Write as _;

use indexmap::IndexMap;

use crate::plan::{Plan, PlannedStep};
use crate::sandbox::Mode;
use crate::workflow::{InputDef, Isolation};

/// The actions the workflow uses, pinned by commit: a tag can be moved to other code, a commit
/// cannot.
const CHECKOUT: &str = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683 # v4.2.2";
const DOWNLOAD: &str =
    "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093 # v4.3.0";
const UPLOAD: &str = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02 # v4.6.2";
/// Minutes a job gets on top of its step's timeout: checkout, install, artifacts.
const JOB_OVERHEAD_MINUTES: u64 = 10;
/// The longest a job may run on a GitHub-hosted runner (6 hours).
const MAX_JOB_MINUTES: u64 = 360;

pub struct Options<'a> {
    /// The workflow file as the jobs see it: relative to the repository root.
    pub workflow_path: &'a str,
    pub inputs: &'a IndexMap<String, InputDef>,
    /// The command that installs runner in a job.
    pub install: &'a str,
}

/// How jobs install runner unless `--install` says: this program's own repository at the commit
/// it was built from (known when it was built from a git checkout with an https remote). Never
/// `cargo install runner`: that name on crates.io is another program.
pub fn default_install() -> Option<String> {
    let url = option_env!("RUNNER_SOURCE_URL")?;
    let rev = option_env!("RUNNER_SOURCE_REV")?;
    Some(format!(
        "cargo install --locked --git {url} --rev {rev} runner"
    ))
}

/// The job that installs runner once; the others download its binary.
const BUILD_JOB: &str = "runner-build";

/// A YAML double-quoted scalar (JSON's string syntax is valid YAML).
fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// The environment variable an input is passed in (never interpolated into a script).
fn input_var(name: &str) -> String {
    format!(
        "INPUT_{}",
        name.to_ascii_uppercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    )
}

/// GitHub's rule for input and job ids.
fn valid_id(id: &str) -> bool {
    id.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The environment variables holding the keys a step's models need: its own model's provider,
/// and with `task` every provider an alias names (its subagents may use any).
fn key_vars(plan: &Plan, step: &PlannedStep) -> BTreeSet<String> {
    let mut providers: BTreeSet<String> = step.model.iter().map(|m| m.provider.clone()).collect();
    if !step.subagents.is_empty() {
        providers.extend(plan.aliases.values().map(|m| m.provider.clone()));
    }
    providers
        .iter()
        .filter_map(|p| plan.providers.get(p))
        .filter_map(|spec| spec.api_key_env.clone())
        .collect()
}

/// The minutes a step's job gets: its timeout and the job's overhead, at most what GitHub allows.
fn job_minutes(step: &PlannedStep) -> u64 {
    step.timeout
        .as_secs()
        .div_ceil(60)
        .saturating_add(JOB_OVERHEAD_MINUTES)
        .min(MAX_JOB_MINUTES)
}

/// Why `text` cannot be written into the exported file, if it cannot: a line break would start
/// new YAML, and GitHub evaluates `${{ }}` wherever it finds it, so neither may come from the
/// workflow.
fn unsafe_text(text: &str) -> Option<&'static str> {
    if text.chars().any(char::is_control) {
        Some("a line break or control character")
    } else if text.contains("${{") {
        Some("`${{`, which GitHub would evaluate as an expression")
    } else {
        None
    }
}

/// Problems that make an export impossible, and warnings about what will not carry over.
pub fn check(plan: &Plan, options: &Options<'_>) -> (Vec<String>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    // GitHub ids are case-insensitive, and the variable folds `-` into `_`: two inputs that meet
    // there would pass one value for both.
    let mut vars: IndexMap<String, &str> = IndexMap::new();
    for (name, def) in options.inputs {
        if !valid_id(name) {
            errors.push(format!(
                "input `{name}` cannot be a GitHub Actions input: use letters, digits, `_` and `-`, starting with a letter or `_`"
            ));
        } else if let Some(first) = vars.insert(input_var(name), name) {
            errors.push(format!(
                "inputs `{first}` and `{name}` would be one GitHub Actions input (`{}`): GitHub ignores case and runner passes `-` as `_`; rename one",
                input_var(name)
            ));
            vars.insert(input_var(name), first);
        }
        let texts = [
            ("description", def.description.as_deref()),
            ("default", def.default.as_deref()),
        ];
        for (key, text) in texts {
            if let Some(why) = text.and_then(unsafe_text) {
                errors.push(format!("input `{name}`: its `{key}` holds {why}"));
            }
        }
    }
    if let Some(why) = unsafe_text(options.workflow_path) {
        errors.push(format!("the workflow path holds {why}: rename the file"));
    }
    if let Some(why) = unsafe_text(&plan.name) {
        errors.push(format!("the workflow `name` holds {why}"));
    }
    for step in plan.steps() {
        if !valid_id(&step.id) || step.id == "runner-apply" || step.id == BUILD_JOB {
            errors.push(format!(
                "step `{}` cannot be a GitHub Actions job id",
                step.id
            ));
        }
        if let Some(why) = unsafe_text(&step.agent) {
            errors.push(format!("step `{}`: its agent's name holds {why}", step.id));
        }
        if step.timeout.as_secs() > (MAX_JOB_MINUTES - JOB_OVERHEAD_MINUTES) * 60 {
            warnings.push(format!(
                "step `{}` has a timeout over {} minutes: its job gets `timeout-minutes: {MAX_JOB_MINUTES}`, the most a GitHub-hosted runner allows",
                step.id,
                MAX_JOB_MINUTES - JOB_OVERHEAD_MINUTES
            ));
        }
        if step
            .for_each
            .as_ref()
            .is_some_and(|f| f.known.as_ref().is_some_and(|k| k.len() > 256))
        {
            errors.push(format!(
                "step `{}` fans out to more than 256 instances: a GitHub Actions matrix holds at most 256 jobs",
                step.id
            ));
        }
        if step.sandbox != Mode::ReadOnly && step.isolation != Isolation::Worktree {
            warnings.push(format!(
                "step `{}` can change files but has no `isolation = \"worktree\"`: on GitHub Actions its changes stay on its job's machine (give it a worktree to have them pushed as a branch)",
                step.id
            ));
        }
    }
    if std::path::Path::new(options.workflow_path).is_absolute() {
        warnings.push(format!(
            "`{}` is an absolute path: jobs run in a checkout, so export with the path relative to the repository root",
            options.workflow_path
        ));
    }
    (errors, warnings)
}

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
fn build_job(out: &mut String) {
    let _ = writeln!(out, "  {BUILD_JOB}:");
    let _ = writeln!(out, "    name: Install runner once");
    let _ = writeln!(out, "    runs-on: ubuntu-latest");
    let _ = writeln!(out, "    timeout-minutes: 30");
    let _ = writeln!(out, "    permissions:");
    let _ = writeln!(out, "      contents: read");
    let _ = writeln!(out, "    steps:");
    let _ = writeln!(out, "      - name: Install runner");
    let _ = writeln!(out, "        run: |");
    let _ = writeln!(out, "          sh -c \"$RUNNER_INSTALL\"");
    let _ = writeln!(out, "          mkdir -p runner-bin");
    let _ = writeln!(
        out,
        "          cp \"$(command -v runner)\" runner-bin/runner"
    );
    let _ = writeln!(out, "      - uses: {UPLOAD}");
    let _ = writeln!(out, "        with:");
    let _ = writeln!(out, "          name: {BUILD_JOB}");
    let _ = writeln!(out, "          path: runner-bin/runner");
    let _ = writeln!(out, "          retention-days: 1");
}

fn step_job(out: &mut String, plan: &Plan, step: &PlannedStep, options: &Options<'_>) {
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
    let _ = writeln!(out, "    timeout-minutes: {}", job_minutes(step));
    // A list known before the run is a matrix: a job per instance. Ids are plain names
    // (letters, digits, `_`, `-`, `.`, brackets), so they are safe in YAML and in `--only`.
    let matrix = matrix_instances(step);
    if let Some(instances) = &matrix {
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
    let _ = writeln!(
        out,
        "      - name: {}",
        quote(&format!("Run step {}", step.id))
    );
    let keys = key_vars(plan, step);
    if !keys.is_empty() || !options.inputs.is_empty() || matrix.is_some() {
        let _ = writeln!(out, "        env:");
        if matrix.is_some() {
            let _ = writeln!(out, "          RUNNER_INSTANCE: ${{{{ matrix.instance }}}}");
        }
        for key in &keys {
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
    let only = match matrix {
        Some(_) => "\"$RUNNER_INSTANCE\"".to_owned(),
        None => step.id.clone(),
    };
    let mut command = format!(
        "runner run {} --only {only} --run-id \"$GITHUB_RUN_ID\" --state-dir .runner",
        shell_word(options.workflow_path),
    );
    for name in options.inputs.keys() {
        let _ = write!(command, " -i \"{name}=${}\"", input_var(name));
    }
    let _ = writeln!(out, "        run: {}", quote(&command));
    let _ = writeln!(out, "      - name: Keep its state for the steps after it");
    let _ = writeln!(out, "        if: ${{{{ !cancelled() }}}}");
    let _ = writeln!(out, "        uses: {UPLOAD}");
    let _ = writeln!(out, "        with:");
    match matrix {
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

/// Pushes each instance's branch (`runner/<run>/X.0`, ...) from its own record. The branch name
/// is runner's own, and only one of that shape is pushed.
fn fan_out_apply(out: &mut String, id: &str) {
    let _ = writeln!(
        out,
        "      - name: {}",
        quote(&format!("Push the branches of the instances of step {id}"))
    );
    let _ = writeln!(out, "        run: |");
    for line in [
        format!("for record in .runner/runs/\"$GITHUB_RUN_ID\"/steps/{id}\\[*\\]/record.json; do"),
        "  [ -f \"$record\" ] || continue".to_owned(),
        "  if [ \"$(jq -r .status \"$record\")\" != succeeded ] || [ -z \"$(jq -r '.diff // empty' \"$record\")\" ]; then continue; fi".to_owned(),
        "  branch=\"$(jq -r .branch \"$record\")\"".to_owned(),
        format!("  case \"$branch\" in \"runner/$GITHUB_RUN_ID/{id}.\"[0-9]*) ;; *) echo \"unexpected branch in $record\"; exit 1 ;; esac"),
        "  git switch --create \"$branch\" \"$GITHUB_SHA\"".to_owned(),
        "  jq -j .diff \"$record\" | git apply --index".to_owned(),
        "  git -c user.name='github-actions[bot]' -c user.email='41898282+github-actions[bot]@users.noreply.github.com' commit --quiet -m \"runner: $(jq -r .instance \"$record\" | tr -cd 'A-Za-z0-9_.[]-') (run $GITHUB_RUN_ID)\"".to_owned(),
        "  git push origin \"$branch\"".to_owned(),
        "  git switch --detach \"$GITHUB_SHA\"".to_owned(),
        "done".to_owned(),
    ] {
        let _ = writeln!(out, "          {line}");
    }
}

/// The instance ids of a fan-out whose list is known before the run (literals, inputs with
/// values): its job becomes a matrix. A list from an upstream output is one job running every
/// instance.
fn matrix_instances(step: &PlannedStep) -> Option<Vec<String>> {
    let for_each = step.for_each.as_ref()?;
    let items = for_each.known.as_ref()?;
    crate::plan::verified::instance_ids(&step.id, items, for_each.key.as_deref())
        .ok()
        .filter(|ids| !ids.is_empty())
}

/// A word for `sh`, quoted only when it has to be.
fn shell_word(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-'))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

fn apply_job(out: &mut String, plan: &Plan, worktree_steps: &[&PlannedStep]) {
    let needs: Vec<String> = plan.steps().iter().map(|s| quote(&s.id)).collect();
    let _ = writeln!(out, "  runner-apply:");
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
    for step in worktree_steps {
        let id = &step.id;
        if step.for_each.is_some() {
            fan_out_apply(out, id);
            continue;
        }
        let _ = writeln!(
            out,
            "      - name: {}",
            quote(&format!("Push the branch of step {id}"))
        );
        let _ = writeln!(out, "        run: |");
        for line in [
            format!("record=\".runner/runs/$GITHUB_RUN_ID/steps/{id}/record.json\""),
            "if [ -f \"$record\" ] && [ \"$(jq -r .status \"$record\")\" = succeeded ] && [ -n \"$(jq -r '.diff // empty' \"$record\")\" ]; then".to_owned(),
            format!("  branch=\"runner/$GITHUB_RUN_ID/{id}\""),
            "  git switch --create \"$branch\" \"$GITHUB_SHA\"".to_owned(),
            "  jq -j .diff \"$record\" | git apply --index".to_owned(),
            format!("  git -c user.name='github-actions[bot]' -c user.email='41898282+github-actions[bot]@users.noreply.github.com' commit --quiet -m \"runner: {id} (run $GITHUB_RUN_ID)\""),
            "  git push origin \"$branch\"".to_owned(),
            "  git switch --detach \"$GITHUB_SHA\"".to_owned(),
            "else".to_owned(),
            format!("  echo \"step {id} left no change to push\""),
            "fi".to_owned(),
        ] {
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
    let _ = writeln!(out, "env:");
    let _ = writeln!(
        out,
        "  # How the first job installs runner (pinned: a repository at a commit, or a checked binary)."
    );
    let _ = writeln!(out, "  RUNNER_INSTALL: {}", quote(options.install));
    let _ = writeln!(out, "jobs:");
    build_job(&mut out);
    for step in plan.steps() {
        step_job(&mut out, plan, step, options);
    }
    let worktree_steps: Vec<&PlannedStep> = plan
        .steps()
        .iter()
        .filter(|s| s.isolation == Isolation::Worktree)
        .collect();
    if !worktree_steps.is_empty() {
        apply_job(&mut out, plan, &worktree_steps);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_words_are_made_safe() {
        assert_eq!(input_var("base-dir"), "INPUT_BASE_DIR");
        assert!(valid_id("find_auth") && valid_id("_x") && !valid_id("9a") && !valid_id("a.b"));
        assert_eq!(shell_word("workflows/a.toml"), "workflows/a.toml");
        assert_eq!(shell_word("my flows/it's.toml"), "'my flows/it'\\''s.toml'");
        assert_eq!(quote("a \"b\"\n"), "\"a \\\"b\\\"\\n\"");
    }
}
