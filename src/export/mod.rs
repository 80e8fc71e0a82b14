//! `runner export` (docs/src/ci.md): a plan as a pipeline of another engine, one job per step,
//! so a pipeline too big for one machine runs on an engine people already trust.
//!
//! Every engine gets the same model of a step as a job ([`Job`]): what it needs, whether it
//! leaves a branch to push, which keys it holds, the instances it runs one job each for. Every
//! job runs `runner run WORKFLOW --only STEP --run-id <the engine's run id>` ([`run_line`]):
//! runner, not the engine, decides skips (a failed need, the step's `if`) and records why, from
//! the state of earlier jobs, which travels as artifacts (`runs/<id>/steps/<step>/record.json`
//! files never collide, so putting them all in one directory merges them). A final job with no
//! model and no key, and the only one allowed to write, pushes the branches of worktree steps
//! (the safe-outputs pattern). The first job installs runner ([`release`]); the last gathers
//! every job's records into one run and publishes it with its report ([`gather_lines`]). Each
//! engine is one file on top of this one.

pub mod argo;
pub mod github;
pub mod gitlab;
pub mod release;

use std::collections::BTreeSet;

use indexmap::IndexMap;

use crate::plan::{Plan, PlannedStep};
use crate::workflow::{InputDef, Isolation};

pub use github::github_actions;
pub use release::Install;

pub struct Options<'a> {
    /// The workflow file as the jobs see it: relative to the repository root.
    pub workflow_path: &'a str,
    pub inputs: &'a IndexMap<String, InputDef>,
    /// How the first job installs runner.
    pub install: &'a Install,
    /// Why it does not install a release, when it could have (an unreleased version).
    pub install_note: Option<&'a str>,
    /// Cassettes every job answers from (`--replay`): the pipeline needs no key.
    pub replay: Option<&'a str>,
    /// The container image every job runs in (`--image`); `None` for `--image none`, or on
    /// GitHub when not given (its jobs run on the runner's own machine).
    pub image: Option<&'a str>,
}

/// The image jobs run in unless `--image` says: it has git, bash and a Rust toolchain, so the
/// default install (`cargo install --git …`) works in it.
pub const DEFAULT_IMAGE: &str = "docker.io/library/rust:1-bookworm";

/// `text` with every `$` doubled: what GitLab (and `gitlab-ci-local`) read back as the text
/// itself in a `variables:` value, instead of expanding `$HOME` or `${CI_JOB_TOKEN}` in it.
pub fn literal_dollars(text: &str) -> String {
    text.replace('$', "$$")
}

/// How jobs install a runner that has no release yet: this program's own repository at the
/// commit it was built from (known when it was built from a git checkout with an https remote).
/// The package is `agent-runner` (the crate `runner` on crates.io is another program); its
/// binary is `runner`.
pub fn default_install() -> Option<String> {
    let url = option_env!("RUNNER_SOURCE_URL")?;
    let rev = option_env!("RUNNER_SOURCE_REV")?;
    Some(format!(
        "cargo install --locked --git {url} --rev {rev} {}",
        release::PACKAGE
    ))
}

/// The job that installs runner once; the others fetch its binary.
pub const BUILD_JOB: &str = "runner-build";
/// The job that pushes the branches of worktree steps.
pub const APPLY_JOB: &str = "runner-apply";
/// The last job: gathers every job's records into one run and publishes it with its report.
pub const GATHER_JOB: &str = "runner-gather";
/// The report the gather job writes: in the state directory, which git ignores.
pub const REPORT_FILE: &str = ".runner/report.html";
/// Minutes a job gets on top of its step's timeout: checkout, install, artifacts.
pub const JOB_OVERHEAD_MINUTES: u64 = 10;

/// One step as a job of any engine.
pub struct Job<'a> {
    pub step: &'a PlannedStep,
    /// The environment variables of the API keys it holds: its models' providers (with `task`,
    /// every alias's); none when the pipeline replays cassettes.
    pub keys: BTreeSet<String>,
    /// The instance ids it runs one job each for: a fan-out over a list known before the run.
    pub matrix: Option<Vec<String>>,
    /// Whether it leaves a branch for the apply job to push.
    pub pushes: bool,
    /// Its timeout and the job's overhead, in minutes.
    pub minutes: u64,
}

impl Job<'_> {
    pub fn id(&self) -> &str {
        &self.step.id
    }
}

/// Every step of the plan as a job, in plan order.
pub fn jobs<'a>(plan: &'a Plan, options: &Options<'_>) -> Vec<Job<'a>> {
    plan.steps()
        .iter()
        .map(|step| Job {
            step,
            keys: if options.replay.is_some() {
                BTreeSet::new()
            } else {
                key_vars(plan, step)
            },
            matrix: matrix_instances(step),
            pushes: step.isolation == Isolation::Worktree,
            minutes: step
                .settings
                .timeout
                .as_secs()
                .div_ceil(60)
                .saturating_add(JOB_OVERHEAD_MINUTES),
        })
        .collect()
}

/// The command a job runs: its step (or instance, as `only`, already a shell word) of the run
/// the engine names with `run_id` (a shell expression), inputs from `INPUT_*` variables.
pub fn run_line(options: &Options<'_>, only: &str, run_id: &str) -> String {
    let mut command = format!(
        "runner run {} --only {only} --run-id {run_id} --state-dir .runner",
        shell_word(options.workflow_path),
    );
    if let Some(dir) = options.replay {
        command.push_str(&format!(" --replay {}", shell_word(dir)));
    }
    for name in options.inputs.keys() {
        command.push_str(&format!(" -i \"{name}=${}\"", input_var(name)));
    }
    command
}

/// The comment lines (without `# `) every export's header has on how runner is installed.
pub fn install_comment(options: &Options<'_>) -> Vec<String> {
    let mut lines = vec![format!("Install: {}.", options.install.describe())];
    if let Some(why) = options.install_note {
        lines.push(format!("({why}.)"));
    }
    lines
}

/// The commands of the gather job (docs/src/ci.md, "The last job"): every job's records of the
/// run the engine names with `run_id` (a shell expression), in `.runner/runs/`, made into one
/// `run.json`, and its HTML report as [`REPORT_FILE`].
pub fn gather_lines(options: &Options<'_>, run_id: &str) -> Vec<String> {
    vec![
        format!(
            "runner gather {} --run-id {run_id} --state-dir .runner",
            shell_word(options.workflow_path)
        ),
        format!("runner report {run_id} --state-dir .runner --output {REPORT_FILE}"),
    ]
}

/// What the push script of an engine's apply job takes from its environment.
pub struct PushEnv<'a> {
    /// The run id, as a shell expression (`$GITHUB_RUN_ID`).
    pub run_id: &'a str,
    /// The commit the run started from (`$GITHUB_SHA`).
    pub sha: &'a str,
    /// `-c user.name=… -c user.email=…` for the commit.
    pub committer: &'a str,
    /// How a branch is pushed, `"$branch"` at the end (`git push origin`).
    pub push: &'a str,
}

/// The shell lines that push the branch of worktree step `id`, or of each of its instances:
/// each succeeded record with a diff is applied onto the run's commit and pushed. Only a branch
/// of runner's own shape (`runner/<run>/<id>`, `…/<id>.<n>`) is pushed.
pub fn push_lines(id: &str, fan_out: bool, env: &PushEnv<'_>) -> Vec<String> {
    let PushEnv {
        run_id,
        sha,
        committer,
        push,
    } = env;
    let records = if fan_out {
        format!(".runner/runs/\"{run_id}\"/steps/{id}\\[*\\]/record.json")
    } else {
        format!(".runner/runs/\"{run_id}\"/steps/{id}/record.json")
    };
    vec![
        format!("for record in {records}; do"),
        "  [ -f \"$record\" ] || continue".to_owned(),
        "  if [ \"$(jq -r .status \"$record\")\" != succeeded ] || [ -z \"$(jq -r '.diff // empty' \"$record\")\" ]; then echo \"$record: no change to push\"; continue; fi".to_owned(),
        "  branch=\"$(jq -r .branch \"$record\")\"".to_owned(),
        // Only the exact names runner makes: `runner/<run>/<step>`, or for a fan-out's
        // instances `runner/<run>/<step>.<number>` and nothing after the number.
        if fan_out {
            format!("  k=\"${{branch#\"runner/{run_id}/{id}.\"}}\"; case \"$k\" in \"$branch\"|''|*[!0-9]*) echo \"unexpected branch in $record\"; exit 1 ;; esac")
        } else {
            format!("  [ \"$branch\" = \"runner/{run_id}/{id}\" ] || {{ echo \"unexpected branch in $record\"; exit 1; }}")
        },
        format!("  git switch --create \"$branch\" \"{sha}\""),
        "  jq -j .diff \"$record\" | git apply --index".to_owned(),
        format!("  git {committer} commit --quiet -m \"runner: $(jq -r '.instance // \"{id}\"' \"$record\" | tr -cd 'A-Za-z0-9_.[]-') (run {run_id})\""),
        format!("  {push} \"$branch\""),
        format!("  git switch --detach \"{sha}\""),
        "done".to_owned(),
    ]
}

/// A YAML double-quoted scalar (JSON's string syntax is valid YAML).
pub fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// The environment variable an input is passed in (never interpolated into a script).
pub fn input_var(name: &str) -> String {
    format!(
        "INPUT_{}",
        name.to_ascii_uppercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    )
}

/// A job or input id every engine takes: a letter or `_`, then letters, digits, `_`, `-`.
pub fn valid_id(id: &str) -> bool {
    id.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A word for `sh`, quoted only when it has to be.
pub fn shell_word(text: &str) -> String {
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

/// Why `text` cannot be written into an exported file, if it cannot: a line break would start
/// new YAML, and the engines evaluate their expressions (`${{ }}`, `$VAR` in some keys,
/// `{{ }}` in Argo) wherever they find them, so none may come from the workflow.
pub fn unsafe_text(text: &str) -> Option<&'static str> {
    if text.chars().any(char::is_control) {
        Some("a line break or control character")
    } else if text.contains("${{") {
        Some("`${{`, which GitHub would evaluate as an expression")
    } else if text.contains("{{") {
        Some("`{{`, which Argo would evaluate as an expression")
    } else {
        None
    }
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

/// What stops an export on any engine, and what will not carry over; `engine` names it in
/// messages, `max_matrix` is how many jobs its matrix may hold.
pub fn check(
    plan: &Plan,
    options: &Options<'_>,
    engine: &str,
    max_matrix: usize,
) -> (Vec<String>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    // Ids are case-insensitive on GitHub, and the variable folds `-` into `_`: two inputs that
    // meet there would pass one value for both.
    let mut vars: IndexMap<String, &str> = IndexMap::new();
    for (name, def) in options.inputs {
        if !valid_id(name) {
            errors.push(format!(
                "input `{name}` cannot be a {engine} input: use letters, digits, `_` and `-`, starting with a letter or `_`"
            ));
        } else if let Some(first) = vars.insert(input_var(name), name) {
            errors.push(format!(
                "inputs `{first}` and `{name}` would be one {engine} input (`{}`): runner passes `-` as `_` and ignores case; rename one",
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
    if let Some(why) = options.replay.and_then(unsafe_text) {
        errors.push(format!("the `--replay` directory holds {why}"));
    }
    if let Some(why) = unsafe_text(&plan.name) {
        errors.push(format!("the workflow `name` holds {why}"));
    }
    for step in plan.steps() {
        if !valid_id(&step.id) || [APPLY_JOB, BUILD_JOB, GATHER_JOB].contains(&step.id.as_str()) {
            errors.push(format!(
                "step `{}` cannot be a {engine} job: its id must not be `{BUILD_JOB}`, `{APPLY_JOB}` or `{GATHER_JOB}`",
                step.id
            ));
        }
        if let Some(why) = unsafe_text(&step.agent) {
            errors.push(format!("step `{}`: its agent's name holds {why}", step.id));
        }
        if step
            .for_each
            .as_ref()
            .is_some_and(|f| f.known.as_ref().is_some_and(|k| k.len() > max_matrix))
        {
            errors.push(format!(
                "step `{}` fans out to more than {max_matrix} instances: a {engine} matrix holds at most {max_matrix} jobs",
                step.id
            ));
        }
        if step.sandbox != crate::sandbox::Mode::ReadOnly && step.isolation != Isolation::Worktree {
            warnings.push(format!(
                "step `{}` can change files but has no `isolation = \"worktree\"`: on {engine} its changes stay on its job's machine (give it a worktree to have them pushed as a branch)",
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
        assert!(unsafe_text("{{ workflow.name }}").is_some());
    }
}

#[cfg(test)]
mod guard_tests {
    use super::*;

    /// Whether the apply job's branch guard lets `branch` through, run by `sh` as the job would.
    fn passes(fan_out: bool, branch: &str) -> bool {
        let env = PushEnv {
            run_id: "$RUN",
            sha: "$SHA",
            committer: "",
            push: "true",
        };
        let guard = &push_lines("fix", fan_out, &env)[4];
        let script = format!("RUN=42; record=r; branch='{branch}'\n{guard}\necho through");
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("through")
    }

    /// The apply job pushes only the exact branch names runner makes.
    #[test]
    fn the_apply_guard_takes_only_the_exact_branch_names() {
        assert!(passes(false, "runner/42/fix"));
        for hostile in [
            "runner/42/fix.1",
            "runner/42/fixed",
            "main",
            "runner/42/fix/../main",
        ] {
            assert!(!passes(false, hostile), "{hostile}");
        }
        assert!(passes(true, "runner/42/fix.0") && passes(true, "runner/42/fix.17"));
        for hostile in [
            "runner/42/fix",
            "runner/42/fix.1x",
            "runner/42/fix.1/../../main",
            "runner/42/fix.",
            "runner/43/fix.1",
            "main",
        ] {
            assert!(!passes(true, hostile), "{hostile}");
        }
    }
}
