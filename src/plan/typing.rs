//! Typed templates: the types a step's prompt and `if` can see (docs/src/reference/workflow.md "Templates"), when an
//! upstream output may be missing, and the checker's findings as diagnostics.

use super::*;
use crate::template::typing::{self, Found, Ty, TypeProblem};

/// minijinja's filters and tests, for "did you mean" only (whether a name exists is asked of
/// the environment itself).
const FILTERS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "center",
    "chain",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "striptags",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "urlencode",
    "wordcount",
    "wordwrap",
    "zip",
];
const TESTS: &[&str] = &[
    "boolean",
    "defined",
    "divisibleby",
    "endingwith",
    "eq",
    "equalto",
    "escaped",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "gt",
    "in",
    "integer",
    "iterable",
    "le",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "safe",
    "sameas",
    "sequence",
    "startingwith",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
];

impl Builder<'_> {
    /// Types a prompt (`expression` false) or an `if` (true) and reports what cannot work.
    pub(super) fn check_types(
        &mut self,
        ctx: &StepCtx<'_>,
        at: &[Seg],
        source: &str,
        names: &BTreeSet<String>,
        env: &minijinja::Environment<'static>,
        expression: bool,
    ) {
        let roots = self.roots(ctx, names);
        let problems = if expression {
            typing::check_expression(env, source, &roots)
        } else {
            typing::check_template(env, source, &roots)
        };
        for problem in problems {
            self.report_type(ctx, at, source, problem);
        }
    }

    /// `inputs` and `workflow` are strings; `steps` holds the upstream steps the template reads.
    /// Names that do not exist are left open here: [`Builder::check_names`] reports them.
    pub(super) fn roots(
        &self,
        ctx: &StepCtx<'_>,
        names: &BTreeSet<String>,
    ) -> BTreeMap<String, Ty> {
        let strings = |keys: &mut dyn Iterator<Item = &str>| {
            Ty::map(keys.map(|k| (k.to_owned(), Ty::string())).collect(), true)
        };
        let mut steps = BTreeMap::new();
        for name in names {
            let mut parts = name.split('.');
            let (Some("steps"), Some(other)) = (parts.next(), parts.next()) else {
                continue;
            };
            let Some(&x) = ctx.steps_index.get(other) else {
                continue;
            };
            let upstream = ctx.graph.is_some_and(|g| g.is_ancestor(x, ctx.index));
            if !upstream || steps.contains_key(other) {
                continue;
            }
            let mut fields: BTreeMap<String, Ty> = ["summary", "status", "branch", "diff"]
                .into_iter()
                .map(|f| (f.to_owned(), Ty::string()))
                .collect();
            if let Some(Some(schema)) = ctx.schemas.get(x) {
                let origin = format!("steps.{other}.output");
                let mut output = Ty::from_schema(schema);
                if let Some(why) = self.absence(ctx, x) {
                    output = output.maybe_absent(&origin, why);
                }
                fields.insert("output".into(), output);
            }
            let check = BTreeMap::from([
                ("command".to_owned(), Ty::string()),
                ("passed".to_owned(), Ty::boolean()),
            ]);
            fields.insert("checks".into(), Ty::list(Ty::map(check, false)));
            let fans_out = ctx.steps.get(x).is_some_and(|s| s.for_each.is_some());
            let result = if fans_out {
                fields.insert("item".into(), Ty::any());
                Ty::list(Ty::map(fields, true))
            } else {
                Ty::map(fields, true)
            };
            steps.insert(other.to_owned(), result);
        }
        let mut roots = BTreeMap::from([
            (
                "inputs".to_owned(),
                strings(&mut self.loaded.def.inputs.keys().map(String::as_str)),
            ),
            (
                "workflow".to_owned(),
                strings(&mut ["name", "description"].into_iter()),
            ),
            ("steps".to_owned(), Ty::map(steps, true)),
        ]);
        if let Some(item) = &ctx.item {
            roots.insert("item".to_owned(), item.clone());
            roots.insert("item_index".to_owned(), Ty::number());
        }
        roots
    }

    /// Why step `ctx.index` can run after step `x` (upstream) was skipped or failed, if it can
    /// (docs/src/runs.md "Scheduling and failures"): `x` tolerates failure, or a step between them (or the
    /// reader) has an `if` — which runs after a skipped need — and `x` not succeeding can reach it
    /// as a skip: `x` itself can be skipped, or a step between them is skipped when `x` fails.
    fn absence(&self, ctx: &StepCtx<'_>, x: usize) -> Option<String> {
        let graph = ctx.graph?;
        let id = |i: usize| ctx.ids.get(i).map(|s| s.as_str());
        let (x_id, r_id) = (id(x)?, ctx.id);
        let sx = ctx.steps.get(x)?;
        if sx.continue_on_error {
            return Some(format!(
                "`{x_id}` has `continue_on_error`, so `{r_id}` runs even when it failed"
            ));
        }
        let between = graph.between(x, ctx.index, ctx.wave_of);
        let x_skippable = sx.condition.is_some() || !sx.needs.is_empty();
        let s = between.iter().copied().find(|&s| {
            let step = ctx.steps[s];
            // Reached through a step that a failure of `x` skips, not only from `x` itself.
            let via_skip = step.needs.iter().any(|n| {
                ctx.steps_index
                    .get(n.as_str())
                    .is_some_and(|n| between.binary_search(n).is_ok())
            });
            step.condition.is_some() && (x_skippable || via_skip)
        })?;
        let runs = if s == ctx.index {
            format!("`{r_id}` has an `if`, so it runs after a skipped need")
        } else {
            format!(
                "`{}` (before `{r_id}`) has an `if`, so it runs after a skipped need",
                id(s)?
            )
        };
        let skipped = if sx.condition.is_some() {
            format!("`{x_id}` has an `if`, so it can be skipped")
        } else if x_skippable {
            format!("`{x_id}` is skipped when one of its needs fails")
        } else {
            format!("when `{x_id}` fails the steps after it are skipped")
        };
        Some(format!("{skipped}, and {runs}"))
    }

    // Over 80 lines: one arm per kind of type mismatch, each with its own help.
    pub(super) fn report_type(
        &mut self,
        ctx: &StepCtx<'_>,
        at: &[Seg],
        source: &str,
        problem: TypeProblem,
    ) {
        let id = ctx.id;
        let span = self.source_span(at, source, problem.span);
        let (message, label, help) = match problem.found {
            Found::NotAMap { read, base, kind } => {
                let field = base.rsplit('.').next().unwrap_or_default();
                let step = base
                    .strip_prefix("steps.")
                    .and_then(|s| s.split('.').next());
                let help = match (step, field, kind) {
                    (Some(step), "summary", _) if base.matches('.').count() == 2 => Some(format!(
                        "`summary` is the step's final text; for fields, give `{step}` an `output_schema` and read `steps.{step}.output.<field>`"
                    )),
                    (Some(_), "status", _) if base.matches('.').count() == 2 => {
                        Some("`status` is `succeeded`, `failed`, `skipped` or `cancelled`".into())
                    }
                    (_, _, "a list") => Some(format!(
                        "loop over it (`{{% for item in {base} %}}`) or take one item (`{base}[0]`)"
                    )),
                    _ => None,
                };
                (
                    format!("step `{id}` reads `{read}`, but `{base}` is {kind}"),
                    format!("`{base}` is {kind}"),
                    help,
                )
            }
            Found::NoProperty {
                read,
                base,
                field,
                known,
            } => {
                let help = did_you_mean(&field, known.iter().map(String::as_str)).or_else(|| {
                    Some(if known.is_empty() {
                        "the schema declares no properties there".into()
                    } else {
                        format!(
                            "its properties: {}",
                            known
                                .iter()
                                .map(|k| format!("`{k}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
                });
                // `item` is typed by the schema of the list the step fans out over.
                let whose = if base == "item" || base.starts_with("item.") {
                    "the schema of its `for_each` items"
                } else {
                    "the output schema"
                };
                (
                    format!(
                        "step `{id}` reads `{read}`, but {whose} gives `{base}` no property `{field}`"
                    ),
                    "not in the schema".to_owned(),
                    help,
                )
            }
            Found::Absent { read, absence } => {
                let step = absence
                    .origin
                    .strip_prefix("steps.")
                    .and_then(|s| s.strip_suffix(".output"))
                    .unwrap_or(&absence.origin);
                let origin = &absence.origin;
                (
                    format!(
                        "step `{id}` reads `{read}`, but `{origin}` is undefined when `{step}` did not succeed, and `{id}` can run then"
                    ),
                    "may be undefined".to_owned(),
                    Some(format!(
                        "{}; guard the read with `{{% if {origin} is defined %}}…{{% endif %}}`, or give it a default: `{read} | default(\"…\")`",
                        absence.why
                    )),
                )
            }
            Found::UnknownFilter(name) => (
                format!("step `{id}` uses unknown filter `{name}`"),
                "unknown filter".to_owned(),
                did_you_mean(&name, FILTERS.iter().copied()),
            ),
            Found::UnknownTest(name) => (
                format!("step `{id}` uses unknown test `{name}`"),
                "unknown test".to_owned(),
                did_you_mean(&name, TESTS.iter().copied()),
            ),
        };
        self.error(message, span, &label, help);
    }
}
