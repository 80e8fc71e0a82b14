//! Prompt templates: one strict minijinja environment, static checks of the names a template
//! reads (and their types, in [`typing`]), and placeholders that stand for results not known yet
//! (plans and dry runs).

pub mod typing;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Value};
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior};

/// The fields of `steps.<id>` a template may read.
pub const STEP_FIELDS: [&str; 6] = ["summary", "output", "status", "branch", "diff", "checks"];

/// Operators, filters, attribute lookups and calls one tag of a template may chain. minijinja
/// nests a chain such as `1 + 1 + 1 ...` one level per operator and walks it recursively, so a
/// long chain would overflow the stack; nothing a prompt needs comes near this.
pub const MAX_CHAIN: usize = 1000;

/// The environment every prompt and condition is rendered in: strict (an unknown name is an
/// error), no HTML escaping, and fuel so that a hostile template cannot spin or allocate without
/// bound.
pub fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(crate::limits::TEMPLATE_FUEL));
    // The output of a step that did not succeed is [`Missing`]: undefined to `is defined` and
    // `default`, false as a condition, and an error when printed. Validation checks that such
    // reads are guarded, so these are the guards it accepts.
    env.add_test("defined", |v: &Value| !is_missing(v));
    env.add_test("undefined", |v: &Value| is_missing(v));
    for name in ["default", "d"] {
        env.add_filter(
            name,
            |state: &minijinja::State, value: &Value, args: minijinja::value::Rest<Value>| {
                let value = if is_missing(value) {
                    Value::UNDEFINED
                } else {
                    value.clone()
                };
                minijinja::filters::default(state, &value, args)
            },
        );
    }
    env.set_formatter(
        |out, state, value| match value.downcast_object_ref::<Missing>() {
            Some(missing) => Err(Error::new(
                ErrorKind::UndefinedError,
                format!("`{}` is undefined: the step did not succeed", missing.0),
            )),
            None => minijinja::escape_formatter(out, state, value),
        },
    );
    env
}

/// Whether a value is undefined, or the output of a step that did not succeed.
fn is_missing(value: &Value) -> bool {
    value.is_undefined() || value.downcast_object_ref::<Missing>().is_some()
}

/// The output of a step that was skipped or failed, and anything read from it: reads chain (like
/// `?.`), so a guard such as `steps.t.output.severity is defined` works however deep it looks.
#[derive(Debug, Clone)]
pub struct Missing(pub String);

impl Missing {
    pub fn value(path: impl Into<String>) -> Value {
        Value::from_object(Missing(path.into()))
    }
}

impl Object for Missing {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        Some(Missing::value(child_path(&self.0, key)))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Empty
    }

    fn is_true(self: &Arc<Self>) -> bool {
        false
    }
}

/// Refuses templates minijinja cannot parse safely: too long, or with a chain of operators longer
/// than [`MAX_CHAIN`] in one tag. `expression` is true for `if` conditions, which are one tag.
pub fn guard(source: &str, expression: bool) -> Result<(), Error> {
    let limit = crate::limits::MAX_TEMPLATE_BYTES;
    if source.len() > limit {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "the template is {} bytes; the limit is {}",
                source.len(),
                crate::limits::bytes(limit as u64)
            ),
        ));
    }
    let tags: Vec<&str> = if expression {
        vec![source]
    } else {
        tag_bodies(source)
    };
    for tag in tags {
        let chained = tag
            .bytes()
            .filter(|b| b"+-*/%~|.[(<>=!".contains(b))
            .count()
            + tag
                .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .filter(|w| matches!(*w, "and" | "or" | "not" | "is" | "in"))
                .count();
        if chained > MAX_CHAIN {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "an expression chains more than {MAX_CHAIN} operators, filters or lookups; split it up"
                ),
            ));
        }
    }
    Ok(())
}

/// The insides of `{{ ... }}` and `{% ... %}` tags.
fn tag_bodies(source: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(start) = rest.find(['{']) {
        let after = &rest[start + 1..];
        let close = match after.as_bytes().first() {
            Some(b'{') => "}}",
            Some(b'%') => "%}",
            _ => {
                rest = after;
                continue;
            }
        };
        let body = &after[1..];
        match body.find(close) {
            Some(end) => {
                out.push(&body[..end]);
                rest = &body[end + close.len()..];
            }
            None => {
                out.push(body);
                break;
            }
        }
    }
    out
}

/// Names a template (or `if` expression) reads from its context, as dotted paths
/// (`steps.find_auth.summary`), minus minijinja's own globals such as `range`.
pub fn referenced_names(
    env: &Environment<'_>,
    names: impl IntoIterator<Item = String>,
) -> BTreeSet<String> {
    let globals: BTreeSet<&str> = env.globals().map(|(name, _)| name).collect();
    names
        .into_iter()
        .filter(|name| {
            let root = name.split('.').next().unwrap_or(name);
            !globals.contains(root)
        })
        .collect()
}

/// Compiles a template and returns the names it reads.
pub fn template_names(env: &Environment<'_>, source: &str) -> Result<BTreeSet<String>, Error> {
    guard(source, false)?;
    let template = env.template_from_str(source)?;
    Ok(referenced_names(env, template.undeclared_variables(true)))
}

/// Compiles an expression (`if`) and returns the names it reads.
pub fn expression_names(env: &Environment<'_>, source: &str) -> Result<BTreeSet<String>, Error> {
    guard(source, true)?;
    let expr = env.compile_expression(source)?;
    Ok(referenced_names(env, expr.undeclared_variables(true)))
}

pub fn render(env: &Environment<'_>, source: &str, context: Value) -> Result<String, Error> {
    guard(source, false)?;
    env.render_str(source, context)
}

/// Evaluates an `if` condition.
pub fn evaluate(env: &Environment<'_>, source: &str, context: Value) -> Result<bool, Error> {
    guard(source, true)?;
    Ok(env.compile_expression(source)?.eval(context)?.is_true())
}

/// Evaluates an expression to its value as JSON (a `for_each` list).
pub fn evaluate_value(
    env: &Environment<'_>,
    source: &str,
    context: Value,
) -> Result<serde_json::Value, Error> {
    guard(source, true)?;
    let value = env.compile_expression(source)?.eval(context)?;
    serde_json::to_value(&value).map_err(|err| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("the value is not plain data: {err}"),
        )
    })
}

/// What a template reads: `inputs`, `workflow`, and `steps` (upstream results, or placeholders
/// in a plan). Plans and runs both build their context here, so they cannot disagree.
pub fn context(
    inputs: BTreeMap<&str, Value>,
    name: &str,
    description: Option<&str>,
    steps: Value,
) -> Value {
    minijinja::context! {
        inputs => inputs,
        workflow => minijinja::context! {
            name => name,
            description => description.unwrap_or_default(),
        },
        steps => steps,
    }
}

/// A fan-out instance's context: the step's, with its `item` and `item_index`.
pub fn with_item(context: Value, item: Value, index: Value) -> Value {
    minijinja::context! { item, item_index => index, ..context }
}

/// Whether text holds template syntax (a `{{ }}`, `{% %}` or `{# #}`).
pub fn is_template(text: &str) -> bool {
    ["{{", "{%", "{#"].iter().any(|open| text.contains(open))
}

/// `steps.<id>`: the fields of [`STEP_FIELDS`].
pub fn step_value(
    summary: Value,
    status: Value,
    output: Value,
    branch: Value,
    diff: Value,
) -> Value {
    minijinja::context! { summary, output, status, branch, diff }
}

/// `steps.<id>` with its `checks`, and for a fan-out instance its `item`.
pub fn step_value_with(base: Value, checks: Value, item: Option<Value>) -> Value {
    match item {
        Some(item) => minijinja::context! { checks, item, ..base },
        None => minijinja::context! { checks, ..base },
    }
}

/// The path of `key` read from the value at `path`: `steps.x.output.files`, `….files[0]`.
fn child_path(path: &str, key: &Value) -> String {
    match key.as_str() {
        Some(name) => format!("{path}.{name}"),
        None => format!("{path}[{key}]"),
    }
}

/// A value not known until a step runs. It renders as `<steps.x.summary>`, and any attribute or
/// item of it is a placeholder too, so `steps.x.output.files` renders `<steps.x.output.files>`.
#[derive(Debug, Clone)]
pub struct Placeholder(pub String);

impl Placeholder {
    pub fn value(path: impl Into<String>) -> Value {
        Value::from_object(Placeholder(path.into()))
    }
}

impl Object for Placeholder {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        Some(Placeholder::value(child_path(&self.0, key)))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Empty
    }

    fn is_true(self: &Arc<Self>) -> bool {
        true
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{}>", self.0)
    }
}

/// A short, one-line description of a template error (its kind and detail, without minijinja's
/// debug dump).
pub fn describe_error(err: &Error) -> String {
    let mut text = match err.kind() {
        ErrorKind::OutOfFuel => format!(
            "the template does too much work (more than {} steps, or about {} MB of text)",
            crate::limits::TEMPLATE_FUEL,
            crate::limits::TEMPLATE_FUEL * 64 / 1_000_000
        ),
        _ => err
            .detail()
            .map_or_else(|| err.kind().to_string(), str::to_owned),
    };
    if let Some(line) = err.line() {
        text.push_str(&format!(" (template line {line})"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_names_are_collected_without_globals() {
        let env = environment();
        let names = template_names(
            &env,
            "{% for i in range(3) %}{{ steps.a.summary }}{% endfor %}{{ inputs.target }}",
        )
        .unwrap();
        assert_eq!(
            names,
            ["inputs.target", "steps.a.summary"]
                .map(String::from)
                .into_iter()
                .collect()
        );
    }

    #[test]
    fn placeholders_render_their_path_and_nest() {
        let env = environment();
        let ctx = minijinja::context! { steps => minijinja::context! { a => minijinja::context! {
            output => Placeholder::value("steps.a.output"),
        } } };
        let out = render(
            &env,
            "{{ steps.a.output.files }} {{ steps.a.output['x'] }}",
            ctx,
        )
        .unwrap();
        assert_eq!(out, "<steps.a.output.files> <steps.a.output.x>");
    }

    #[test]
    fn values_are_not_rendered_twice() {
        let env = environment();
        let out = render(&env, "{{ s }}", minijinja::context! { s => "{{ evil }}" }).unwrap();
        assert_eq!(out, "{{ evil }}");
    }
}
