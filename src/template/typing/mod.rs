//! Static types for templates, checked before any model is paid for: the syntax tree is walked
//! with the types of what it reads (strings for summaries, the `output_schema`'s shape for
//! outputs), and reads that cannot work at run time are reported: a field of a string, a property
//! the schema does not declare, an output that may be missing and is used without a guard, an
//! unknown filter or test.

use std::collections::BTreeMap;
use std::ops::Range;
use std::rc::Rc;

use minijinja::Environment;

/// The type of a value a template reads.
#[derive(Debug, Clone)]
pub struct Ty {
    kind: Kind,
    /// Set when the value may be missing at run time (its step may not have succeeded).
    absent: Option<Rc<Absence>>,
}

#[derive(Debug, Clone)]
enum Kind {
    Any,
    Str,
    Number,
    Bool,
    Null,
    List(Box<Ty>),
    Map(Rc<Fields>),
}

#[derive(Debug)]
struct Fields {
    fields: BTreeMap<String, Ty>,
    /// Whether names not in `fields` may be read (as values of unknown type).
    open: bool,
}

/// Why a value may be missing.
#[derive(Debug)]
pub struct Absence {
    /// The path that must be guarded (`steps.t.output`, or a local variable bound to it).
    at: String,
    /// The path as the workflow names it (`steps.t.output`).
    pub origin: String,
    /// Why it may be missing, in words.
    pub why: String,
}

impl Ty {
    pub fn any() -> Ty {
        Kind::Any.into()
    }

    pub fn string() -> Ty {
        Kind::Str.into()
    }

    /// A map of the given fields; `open` lets other names through unchecked.
    pub fn map(fields: BTreeMap<String, Ty>, open: bool) -> Ty {
        Kind::Map(Rc::new(Fields { fields, open })).into()
    }

    /// This value, missing at run time for the reason given (`origin` is its path).
    pub fn maybe_absent(mut self, origin: &str, why: String) -> Ty {
        self.absent = Some(Rc::new(Absence {
            at: origin.to_owned(),
            origin: origin.to_owned(),
            why,
        }));
        self
    }

    /// The type of a JSON value described by `schema`. Only what is certain is typed: `anyOf`,
    /// `$ref` and the like become "any", and an object is closed only when it lists its
    /// properties and does not allow others.
    pub fn from_schema(schema: &serde_json::Value) -> Ty {
        from_schema(schema, 0)
    }

    pub fn number() -> Ty {
        Kind::Number.into()
    }

    pub fn boolean() -> Ty {
        Kind::Bool.into()
    }

    /// A list of `item`.
    pub fn list(item: Ty) -> Ty {
        Kind::List(Box::new(item)).into()
    }

    /// The type of one item when this is a list (anything, when the type is not known), else
    /// what it is instead, in words.
    pub fn item(&self) -> Result<Ty, &'static str> {
        match &self.kind {
            Kind::List(item) => Ok(item.present()),
            Kind::Any => Ok(Ty::any()),
            other => Err(kind_word(other)),
        }
    }

    /// The fields a map declares: `Ok(None)` when any name may be read (an open map, a value
    /// of unknown type), else what it is instead of a map, in words.
    pub fn field_names(&self) -> Result<Option<Vec<String>>, &'static str> {
        match &self.kind {
            Kind::Map(fields) if fields.open => Ok(None),
            Kind::Map(fields) => Ok(Some(fields.fields.keys().cloned().collect())),
            Kind::Any => Ok(None),
            other => Err(kind_word(other)),
        }
    }

    fn present(&self) -> Ty {
        Ty {
            kind: self.kind.clone(),
            absent: None,
        }
    }
}

impl From<Kind> for Ty {
    fn from(kind: Kind) -> Ty {
        Ty { kind, absent: None }
    }
}

/// Nesting deeper than this is typed "any": schemas are size-limited, but a deep one should not
/// cost a deep recursion.
const MAX_SCHEMA_DEPTH: usize = 32;

fn from_schema(schema: &serde_json::Value, depth: usize) -> Ty {
    use serde_json::Value as J;
    let Some(obj) = schema.as_object() else {
        return Ty::any();
    };
    if depth > MAX_SCHEMA_DEPTH
        || ["anyOf", "oneOf", "allOf", "$ref", "if", "not"]
            .iter()
            .any(|k| obj.contains_key(*k))
    {
        return Ty::any();
    }
    let declared: Vec<&str> = match obj.get("type") {
        Some(J::String(t)) => vec![t.as_str()],
        Some(J::Array(ts)) => ts
            .iter()
            .filter_map(J::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ if obj.contains_key("properties") => vec!["object"],
        _ if obj.contains_key("items") => vec!["array"],
        _ => vec![],
    };
    let [kind] = declared.as_slice() else {
        return Ty::any();
    };
    match *kind {
        "string" => Ty::string(),
        "number" | "integer" => Kind::Number.into(),
        "boolean" => Kind::Bool.into(),
        "null" => Kind::Null.into(),
        "array" => Kind::List(Box::new(
            obj.get("items")
                .map_or_else(Ty::any, |items| from_schema(items, depth + 1)),
        ))
        .into(),
        "object" => {
            let Some(J::Object(properties)) = obj.get("properties") else {
                return Ty::map(BTreeMap::new(), true);
            };
            let fields = properties
                .iter()
                .map(|(name, s)| (name.clone(), from_schema(s, depth + 1)))
                .collect();
            // JSON Schema allows undeclared properties unless told otherwise, but a template
            // reading one the schema does not list is almost always a typo; only an explicit
            // `additionalProperties` (or patterns) opens the object.
            let open = obj.contains_key("patternProperties")
                || obj
                    .get("additionalProperties")
                    .is_some_and(|a| !matches!(a, J::Bool(false)));
            Ty::map(fields, open)
        }
        _ => Ty::any(),
    }
}

/// What is wrong with one read.
#[derive(Debug)]
pub enum Found {
    /// `read` takes a field of `base`, which is a string, number, list...
    NotAMap {
        read: String,
        base: String,
        kind: &'static str,
    },
    /// `read` takes a field the schema of `base` does not declare.
    NoProperty {
        read: String,
        base: String,
        field: String,
        known: Vec<String>,
    },
    /// `read` uses a value that may be missing, without a guard.
    Absent {
        read: String,
        absence: Rc<Absence>,
    },
    UnknownFilter(String),
    UnknownTest(String),
}

/// A problem and where it stands in the template's source.
#[derive(Debug)]
pub struct TypeProblem {
    pub span: Range<usize>,
    pub found: Found,
}

/// Checks a template against the types of its root names (`inputs`, `workflow`, `steps`). A
/// template that does not parse gives no problems here: compiling it reports that.
pub fn check_template(
    env: &Environment<'static>,
    source: &str,
    roots: &BTreeMap<String, Ty>,
) -> Vec<TypeProblem> {
    let Ok(tree) = minijinja::machinery::parse(source, "<template>", Default::default()) else {
        return Vec::new();
    };
    let mut walker = Walker::new(env, source, roots);
    walker.stmt(&tree);
    walker.problems
}

/// Checks an `if` expression; its value is only tested for truth.
pub fn check_expression(
    env: &Environment<'static>,
    source: &str,
    roots: &BTreeMap<String, Ty>,
) -> Vec<TypeProblem> {
    let Ok(expr) = minijinja::machinery::parse_expr(source) else {
        return Vec::new();
    };
    let mut walker = Walker::new(env, source, roots);
    walker.soft(&expr);
    walker.problems
}

/// Types an expression whose value is used whole (a `for_each` list): its type, and what
/// cannot work in it. `None` when it does not parse (compiling it reports that).
pub fn type_expression(
    env: &Environment<'static>,
    source: &str,
    roots: &BTreeMap<String, Ty>,
) -> (Option<Ty>, Vec<TypeProblem>) {
    let Ok(expr) = minijinja::machinery::parse_expr(source) else {
        return (None, Vec::new());
    };
    let mut walker = Walker::new(env, source, roots);
    let ty = walker.value(&expr);
    (Some(ty), walker.problems)
}

/// A type that is not a map, in words.
fn kind_word(kind: &Kind) -> &'static str {
    match kind {
        Kind::Any | Kind::Map(_) => "a table",
        Kind::Str => "a string",
        Kind::Number => "a number",
        Kind::Bool => "a boolean",
        Kind::Null => "always none",
        Kind::List(_) => "a list",
    }
}

mod expr;
mod syntax;
mod walk;

use walk::Walker;

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(absent: bool) -> BTreeMap<String, Ty> {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "severity": {"type": "string"},
                "files": {"type": "array", "items": {"type": "object", "properties": {"path": {"type": "string"}}}}
            }
        });
        let mut output = Ty::from_schema(&schema);
        if absent {
            output = output.maybe_absent("steps.t.output", "t can be skipped".into());
        }
        let step = Ty::map(
            BTreeMap::from([
                ("summary".to_owned(), Ty::string()),
                ("status".to_owned(), Ty::string()),
                ("output".to_owned(), output),
            ]),
            true,
        );
        BTreeMap::from([(
            "steps".to_owned(),
            Ty::map(BTreeMap::from([("t".to_owned(), step)]), true),
        )])
    }

    fn found(source: &str, absent: bool) -> Vec<String> {
        let env = crate::template::environment();
        check_template(&env, source, &roots(absent))
            .into_iter()
            .map(|p| match p.found {
                Found::NotAMap { read, .. } => format!("not a map: {read}"),
                Found::NoProperty { read, .. } => format!("no property: {read}"),
                Found::Absent { read, .. } => format!("absent: {read}"),
                Found::UnknownFilter(n) => format!("filter: {n}"),
                Found::UnknownTest(n) => format!("test: {n}"),
            })
            .collect()
    }

    #[test]
    fn guarded_reads_of_a_missing_output_pass() {
        let env = crate::template::environment();
        for source in [
            "{% if steps.t.output is defined %}{{ steps.t.output.severity }}{% endif %}",
            "{% if steps.t.output.severity is defined %}{{ steps.t.output.severity }}{% endif %}",
            "{% if steps.t.output is undefined %}none{% else %}{{ steps.t.output.severity }}{% endif %}",
            "{% if steps.t.output %}{{ steps.t.output.severity }}{% endif %}",
            "{% if steps.t.status == 'succeeded' %}{{ steps.t.output.severity }}{% endif %}",
            "{% if x and steps.t.output %}{{ steps.t.output.severity }}{% endif %}",
            "{{ steps.t.output.severity | default('low') }}",
            "{{ steps.t.output.severity or 'low' }}",
            "{{ steps.t.output.severity if steps.t.output is defined else 'low' }}",
            "{% for f in steps.t.output.files %}{{ f.path }}{% endfor %}",
            "{% set o = steps.t.output %}{% if o is defined %}{{ o.severity }}{% endif %}",
            "{{ steps.t.summary }} {{ steps.t.status }}",
        ] {
            assert_eq!(found(source, true), Vec::<String>::new(), "{source}");
            // What validation lets through renders at run time when the step was skipped.
            if let Err(err) = crate::template::render(&env, source, skipped()) {
                panic!("{source}: {err}");
            }
        }
    }

    /// The context of a run in which `t` was skipped.
    fn skipped() -> minijinja::Value {
        minijinja::context! {
            x => true,
            steps => minijinja::context! { t => crate::template::step_value(
                "".into(),
                "skipped".into(),
                crate::template::Missing::value("steps.t.output"),
                minijinja::Value::from(()),
                minijinja::Value::from(()),
            ) },
        }
    }

    #[test]
    fn unguarded_or_wrongly_guarded_reads_are_found() {
        for (source, expected) in [
            (
                "{{ steps.t.output.severity }}",
                "absent: steps.t.output.severity",
            ),
            (
                "{% if steps.t.output is not none %}{{ steps.t.output.severity }}{% endif %}",
                "absent: steps.t.output.severity",
            ),
            (
                "{% if steps.t.output is defined %}{% endif %}{{ steps.t.output.severity }}",
                "absent: steps.t.output.severity",
            ),
            (
                "{% set o = steps.t.output %}{{ o.severity }}",
                "absent: o.severity",
            ),
        ] {
            assert_eq!(found(source, true), vec![expected.to_owned()], "{source}");
            // ... and each would fail at run time.
            let env = crate::template::environment();
            let err = crate::template::render(&env, source, skipped()).unwrap_err();
            assert!(err.to_string().contains("undefined"), "{source}: {err}");
        }
        // A filter would get a blank value at run time (no error): validation refuses it.
        assert_eq!(
            found("{{ steps.t.output.severity | upper }}", true),
            ["absent: steps.t.output.severity"]
        );
        // The same reads are fine when the step always succeeds first.
        assert_eq!(
            found("{{ steps.t.output.severity }}", false),
            Vec::<String>::new()
        );
    }

    #[test]
    fn fields_follow_the_types() {
        assert_eq!(
            found("{{ steps.t.summary.foo }}", false),
            ["not a map: steps.t.summary.foo"]
        );
        assert_eq!(
            found("{{ steps.t.output.severty }}", false),
            ["no property: steps.t.output.severty"]
        );
        assert_eq!(
            found("{{ steps.t.output['severty'] }}", false),
            ["no property: steps.t.output.severty"]
        );
        assert_eq!(
            found(
                "{% for f in steps.t.output.files %}{{ f.pth }}{% endfor %}",
                false
            ),
            ["no property: f.pth"]
        );
        assert_eq!(
            found("{{ steps.t.output.files.path }}", false),
            ["not a map: steps.t.output.files.path"]
        );
        assert_eq!(
            found("{{ steps.t.output.files[0].path }}", false),
            Vec::<String>::new()
        );
        assert_eq!(
            found("{{ (steps.t.output.files | first).pth }}", false),
            ["no property: pth"]
        );
        assert_eq!(
            found("{{ steps.t.summary | shout }}{{ 1 is evn }}", false),
            ["filter: shout", "test: evn"]
        );
        // Locals shadow roots, and what is not typed is not guessed at.
        assert_eq!(
            found("{% set steps = 1 %}{{ x.y.z }}", false),
            Vec::<String>::new()
        );
    }

    #[test]
    fn schemas_open_only_when_they_say_so() {
        let open = Ty::from_schema(&serde_json::json!({
            "type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": true
        }));
        assert!(matches!(&open.kind, Kind::Map(f) if f.open));
        let closed = Ty::from_schema(&serde_json::json!({"properties": {"a": {}}}));
        assert!(matches!(&closed.kind, Kind::Map(f) if !f.open));
        let nullable = Ty::from_schema(&serde_json::json!({"type": ["string", "null"]}));
        assert!(matches!(nullable.kind, Kind::Str));
        let either = Ty::from_schema(&serde_json::json!({"anyOf": [{"type": "string"}]}));
        assert!(matches!(either.kind, Kind::Any));
    }
}
