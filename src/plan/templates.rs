//! A step's prompt and `if`: compiled, every name they read checked against what is upstream,
//! and the prompt rendered with placeholders for results not known yet.

use super::*;

impl Builder<'_> {
    /// Checks the names a prompt reads and renders it with placeholders for upstream results.
    pub(super) fn check_template(
        &mut self,
        ctx: &StepCtx<'_>,
        step: &Step,
        inputs: &BTreeMap<String, Option<String>>,
        env: &minijinja::Environment<'static>,
    ) -> Option<String> {
        let at = path!["steps", ctx.id, "prompt"];
        // GitHub Actions habit: `${{ x }}` renders `x` after a literal `$` the model would see.
        if let Some(at_dollar) = step.prompt.find("${{") {
            let rest = &step.prompt[at_dollar + 1..];
            let template = rest.find("}}").map_or(rest, |end| &rest[..end + 2]);
            let value = self.span(&at);
            let raw = self.file.text.get(value.clone()).unwrap_or_default();
            let span = raw
                .find("${{")
                .map_or(value.clone(), |i| value.start + i..value.start + i + 3);
            self.problems.push(
                Problem::warning(format!(
                    "step `{}`: `${{{{ … }}}}` is GitHub Actions syntax; runner's templates are `{{{{ … }}}}`, and the `$` would reach the model as it is",
                    ctx.id
                ))
                .at(self.file, span, "a literal `$` before the template")
                .help(format!("write `{template}` without the `$`")),
            );
        }
        self.check_text(ctx, &at, &step.prompt, "prompt", inputs, env)
    }

    /// Checks a template (a prompt, an `env` value): its names, their types, and that it renders
    /// with placeholders for what is not known yet. `what` names it in messages.
    pub(super) fn check_text(
        &mut self,
        ctx: &StepCtx<'_>,
        at: &[Seg],
        source: &str,
        what: &str,
        inputs: &BTreeMap<String, Option<String>>,
        env: &minijinja::Environment<'static>,
    ) -> Option<String> {
        let names = match template::template_names(env, source) {
            Ok(names) => names,
            Err(err) => {
                let span = self.template_span(at, source, &err);
                self.error(
                    format!(
                        "step `{}`: invalid {what} template: {}",
                        ctx.id,
                        template::describe_error(&err)
                    ),
                    span,
                    "template error",
                    None,
                );
                return None;
            }
        };
        let before = self.error_count();
        self.check_names(ctx, at, &names);
        self.check_types(ctx, at, source, &names, env, false);
        if self.error_count() > before {
            return None;
        }
        let context = plan_context(self.loaded, inputs, ctx.item.is_some());
        match template::render(env, source, context) {
            Ok(text) => Some(text),
            Err(err) => {
                let span = self.template_span(at, source, &err);
                self.error(
                    format!(
                        "step `{}`: the {what} does not render: {}",
                        ctx.id,
                        template::describe_error(&err)
                    ),
                    span,
                    "template error",
                    None,
                );
                None
            }
        }
    }

    pub(super) fn check_condition(
        &mut self,
        ctx: &StepCtx<'_>,
        condition: &str,
        env: &minijinja::Environment<'static>,
    ) {
        let at = path!["steps", ctx.id, "if"];
        match template::expression_names(env, condition) {
            Ok(names) => {
                self.check_names(ctx, &at, &names);
                self.check_types(ctx, &at, condition, &names, env, true);
            }
            Err(err) => {
                let span = self.template_span(&at, condition, &err);
                self.error(
                    format!(
                        "step `{}`: invalid `if` expression: {}",
                        ctx.id,
                        template::describe_error(&err)
                    ),
                    span,
                    "expression error",
                    None,
                );
            }
        }
    }

    /// docs/src/reference/workflow.md: `inputs.<declared>`, `workflow.name`, and
    /// `steps.<ancestor>.<field>`.
    pub(super) fn check_names(&mut self, ctx: &StepCtx<'_>, at: &[Seg], names: &BTreeSet<String>) {
        let id = ctx.id;
        for name in names {
            let parts: Vec<&str> = name.split('.').collect();
            let span = self.name_span(at, name);
            match parts.as_slice() {
                ["inputs"] | ["workflow"] | ["steps"] => {}
                ["item", ..] | ["item_index"] if ctx.item.is_some() => {}
                ["item", ..] | ["item_index", ..]
                    if ctx
                        .steps
                        .get(ctx.index)
                        .is_some_and(|s| s.for_each.is_some()) =>
                {
                    self.error(
                        format!(
                            "step `{id}` reads `{name}` where no instance exists yet: its `if` and its `for_each` are evaluated once, for the whole step"
                        ),
                        span,
                        "no instance here",
                        Some("read `item` in the prompt or `env`; to leave items out, filter the list: `for_each = \"steps.x.output.items | selectattr('ok')\"`".into()),
                    );
                }
                ["item", ..] | ["item_index", ..] => {
                    self.error(
                        format!(
                            "step `{id}` reads `{name}`, but only a step with `for_each` has `{}`",
                            parts[0]
                        ),
                        span,
                        "no `for_each` here",
                        Some(format!(
                            "give `{id}` a `for_each` list to run it once per item"
                        )),
                    );
                }
                ["inputs", input, ..] => {
                    if !self.loaded.def.inputs.contains_key(*input) {
                        let help =
                            did_you_mean(input, self.loaded.def.inputs.keys().map(String::as_str))
                                .or_else(|| Some(format!("declare it: `[inputs.{input}]`")));
                        self.error(
                            format!("step `{id}` reads `{name}`, but there is no input `{input}`"),
                            span,
                            "unknown input",
                            help,
                        );
                    }
                }
                ["workflow", field, ..] => {
                    if !matches!(*field, "name" | "description") {
                        self.error(
                            format!("step `{id}` reads `{name}`; `workflow` has `name` and `description`"),
                            span,
                            "unknown field",
                            did_you_mean(field, ["name", "description"]),
                        );
                    }
                }
                ["steps", other, rest @ ..] => self.check_step_ref(ctx, name, other, rest, span),
                [root, ..] => {
                    let help = did_you_mean(root, ["inputs", "steps", "workflow"]).or_else(|| {
                        Some("templates can read `inputs.<name>`, `workflow.name` and `steps.<id>.<field>`".into())
                    });
                    self.error(
                        format!("step `{id}` reads unknown name `{root}`"),
                        span,
                        "unknown name",
                        help,
                    );
                }
                [] => {}
            }
        }
    }

    pub(super) fn check_step_ref(
        &mut self,
        ctx: &StepCtx<'_>,
        name: &str,
        other: &str,
        rest: &[&str],
        span: Range<usize>,
    ) {
        let id = ctx.id;
        let Some(&other_index) = ctx.steps_index.get(other) else {
            if !self.loaded.broken_steps.contains(other) {
                let help = did_you_mean(other, ctx.steps_index.keys().copied());
                self.error(
                    format!("step `{id}` reads `{name}`, but there is no step `{other}`"),
                    span,
                    "unknown step",
                    help,
                );
            }
            return;
        };
        if let Some(graph) = ctx.graph
            && !graph.is_ancestor(other_index, ctx.index)
        {
            self.error(
                format!("step `{id}` reads `{name}`, but `{other}` is not in its `needs`"),
                span,
                "not an upstream step",
                Some(format!(
                    "a step sees only the results of steps it needs, directly or through others; add `{other}` to the `needs` of `{id}`"
                )),
            );
            return;
        }
        let Some(field) = rest.first() else { return };
        let target = &self.loaded.def.steps[other];
        if target.for_each.is_some() {
            self.error(
                format!(
                    "step `{id}` reads `{name}`, but `{other}` runs once per item (`for_each`), so `steps.{other}` is a list of its instances' results"
                ),
                span,
                "a list of results",
                Some(format!(
                    "loop over them (`{{% for r in steps.{other} %}}{{{{ r.{field} }}}}{{% endfor %}}`) or take one (`steps.{other}[0].{field}`)"
                )),
            );
            return;
        }
        if !STEP_FIELDS.contains(field) {
            let help = did_you_mean(field, STEP_FIELDS).or_else(|| {
                Some(format!(
                    "fields are {}",
                    STEP_FIELDS.map(|f| format!("`{f}`")).join(", ")
                ))
            });
            self.error(
                format!("step `{id}` reads `{name}`: steps have no field `{field}`"),
                span,
                "unknown field",
                help,
            );
        } else if *field == "output" && target.output_schema.is_none() {
            self.error(
                format!("step `{id}` reads `{name}`, but `{other}` has no `output_schema`"),
                span,
                "no structured output",
                Some(format!(
                    "give `{other}` an `output_schema`, or read `steps.{other}.summary`"
                )),
            );
        } else if matches!(*field, "branch" | "diff")
            && self.isolation_of(other, target) != Isolation::Worktree
        {
            self.error(
                format!("step `{id}` reads `{name}`, but `{other}` does not run in a worktree"),
                span,
                "no branch",
                Some(format!("set `isolation = \"worktree\"` on `{other}`")),
            );
        }
    }

    /// Where in the file a name read by a template stands: the name's own text if it appears in
    /// the value once, else the value.
    pub(super) fn name_span(&self, at: &[Seg], name: &str) -> Range<usize> {
        let value = self.span(at);
        let raw = self.file.text.get(value.clone()).unwrap_or_default();
        match raw.find(name) {
            Some(i) => value.start + i..value.start + i + name.len(),
            None => {
                // `steps.a.summary` may be written `steps["a"].summary`; point at the root name.
                let root = name.split('.').next().unwrap_or(name);
                raw.find(root)
                    .map(|i| value.start + i..value.start + i + root.len())
                    .unwrap_or(value)
            }
        }
    }

    /// Maps a template error's range into the file, when the offending text can be found there.
    pub(super) fn template_span(
        &self,
        at: &[Seg],
        source: &str,
        err: &minijinja::Error,
    ) -> Range<usize> {
        if let Some(range) = err.range()
            && let Some(span) = self.find_source(at, source, range)
        {
            return span;
        }
        let value = self.span(at);
        let raw = self.file.text.get(value.clone()).unwrap_or_default();
        if let Some(line) = err.line()
            && let Some(text) = source.lines().nth(line.saturating_sub(1))
            && !text.trim().is_empty()
            && let Some(i) = raw.find(text.trim())
        {
            return value.start + i..value.start + i + text.trim().len();
        }
        value
    }
}

impl Builder<'_> {
    /// Maps a range of a template's source into the file, or else points at the whole value.
    pub(super) fn source_span(
        &self,
        at: &[Seg],
        source: &str,
        range: Range<usize>,
    ) -> Range<usize> {
        self.find_source(at, source, range)
            .unwrap_or_else(|| self.span(at))
    }

    /// Where a range of a template's source stands in the file, when that text can be found in
    /// the value as written (escapes in a TOML string can hide it).
    fn find_source(&self, at: &[Seg], source: &str, range: Range<usize>) -> Option<Range<usize>> {
        let value = self.span(at);
        let raw = self.file.text.get(value.clone())?;
        let snippet = source.get(range.clone())?;
        if snippet.trim().is_empty() {
            return None;
        }
        // The same text may stand twice; take the occurrence nearest its place.
        let i = raw
            .match_indices(snippet)
            .map(|(i, _)| i)
            .min_by_key(|i| i.abs_diff(range.start))?;
        Some(value.start + i..value.start + i + snippet.len())
    }
}

/// The template context of a plan: inputs filled in, upstream results (and a fan-out's item)
/// as placeholders.
pub(super) fn plan_context(
    loaded: &LoadedWorkflow,
    inputs: &BTreeMap<String, Option<String>>,
    item: bool,
) -> JinjaValue {
    let inputs: BTreeMap<&str, JinjaValue> = inputs
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Some(v) => JinjaValue::from(v.as_str()),
                None => Placeholder::value(format!("inputs.{k}")),
            };
            (k.as_str(), value)
        })
        .collect();
    let context = template::context(
        inputs,
        &loaded.def.name,
        loaded.def.description.as_deref(),
        Placeholder::value("steps"),
    );
    if item {
        template::with_item(
            context,
            Placeholder::value("item"),
            Placeholder::value("item_index"),
        )
    } else {
        context
    }
}
