//! Expressions: their types, the fields they read, filters and tests, and the paths a
//! condition proves present.

use std::ops::Range;

use minijinja::machinery::ast::{self, BinOpKind, CompareOpKind, Expr, UnaryOpKind};
use minijinja::value::ValueKind;

use super::syntax::{path_of, proves, range_of};
use super::walk::Walker;
use super::{Found, Kind, Ty, TypeProblem};

impl Walker<'_> {
    // Over 80 lines: one arm per template expression kind.
    pub(super) fn ty(&mut self, e: &Expr<'_>) -> Ty {
        match e {
            Expr::Var(v) => self.lookup(v.id),
            Expr::Const(c) => match c.value.kind() {
                ValueKind::String => Ty::string(),
                ValueKind::Number => Kind::Number.into(),
                ValueKind::Bool => Kind::Bool.into(),
                ValueKind::None => Kind::Null.into(),
                _ => Ty::any(),
            },
            Expr::GetAttr(g) => {
                let base = self.soft(&g.expr);
                self.field(e, &g.expr, base, g.name)
            }
            Expr::GetItem(g) => {
                let base = self.soft(&g.expr);
                let key = self.value(&g.subscript_expr);
                match &g.subscript_expr {
                    Expr::Const(c) if c.value.as_str().is_some() => {
                        let name = c.value.as_str().unwrap_or_default();
                        self.field(e, &g.expr, base, name)
                    }
                    _ => {
                        let kind = match (&base.kind, &key.kind) {
                            (Kind::List(item), Kind::Number | Kind::Any) => item.kind.clone(),
                            (Kind::Str, _) => Kind::Str,
                            _ => Kind::Any,
                        };
                        Ty {
                            kind,
                            absent: base.absent,
                        }
                    }
                }
            }
            Expr::Slice(s) => {
                let base = self.value(&s.expr);
                for part in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                    self.value(part);
                }
                match base.kind {
                    Kind::Str | Kind::List(_) => base,
                    _ => Ty::any(),
                }
            }
            Expr::UnaryOp(u) => match u.op {
                UnaryOpKind::Not => {
                    self.soft(&u.expr);
                    Kind::Bool.into()
                }
                UnaryOpKind::Neg => {
                    self.value(&u.expr);
                    Kind::Number.into()
                }
            },
            Expr::BinOp(b) => self.binop(b),
            Expr::Compare(c) => {
                let ordered = c
                    .ops
                    .iter()
                    .any(|op| !matches!(op.op, CompareOpKind::Eq | CompareOpKind::Ne));
                self.operand(&c.expr, ordered);
                for op in &c.ops {
                    self.operand(&op.expr, ordered);
                }
                Kind::Bool.into()
            }
            Expr::IfExpr(i) => {
                self.soft(&i.test_expr);
                let yes = self.guarded(proves(&i.test_expr, true), |w| w.soft(&i.true_expr));
                let no = match &i.false_expr {
                    Some(f) => self.guarded(proves(&i.test_expr, false), |w| w.soft(f)),
                    None => Ty::any(),
                };
                Ty {
                    kind: Kind::Any,
                    absent: yes.absent.or(no.absent),
                }
            }
            Expr::Filter(f) => self.filter(range_of(e), f),
            Expr::Test(t) => {
                self.check_name(range_of(e), false, t.name);
                self.soft(&t.expr);
                self.args(&t.args);
                Kind::Bool.into()
            }
            Expr::Call(c) => {
                self.soft(&c.expr);
                self.args(&c.args);
                Ty::any()
            }
            Expr::List(l) => {
                for item in &l.items {
                    self.value(item);
                }
                Kind::List(Box::new(Ty::any())).into()
            }
            Expr::Tuple(t) => {
                for item in &t.items {
                    self.value(item);
                }
                Ty::any()
            }
            Expr::Map(m) => {
                for k in m.keys.iter().chain(&m.values) {
                    self.value(k);
                }
                Ty::any()
            }
        }
    }

    pub(super) fn operand(&mut self, e: &Expr<'_>, used: bool) {
        if used {
            self.value(e);
        } else {
            self.soft(e);
        }
    }

    pub(super) fn binop(&mut self, b: &ast::BinOp<'_>) -> Ty {
        match b.op {
            BinOpKind::ScAnd => {
                let left = self.soft(&b.left);
                self.guarded(proves(&b.left, true), |w| w.soft(&b.right));
                // `a and b` is `a` when `a` is false: a missing `a` comes out as it is.
                Ty {
                    kind: Kind::Any,
                    absent: left.absent,
                }
            }
            BinOpKind::ScOr => {
                self.soft(&b.left);
                // `a or b` is `b` when `a` is false, which a missing `a` is.
                let right = self.guarded(proves(&b.left, false), |w| w.soft(&b.right));
                Ty {
                    kind: Kind::Any,
                    absent: right.absent,
                }
            }
            BinOpKind::Eq | BinOpKind::Ne => {
                self.soft(&b.left);
                self.soft(&b.right);
                Kind::Bool.into()
            }
            BinOpKind::Lt | BinOpKind::Lte | BinOpKind::Gt | BinOpKind::Gte | BinOpKind::In => {
                self.value(&b.left);
                self.value(&b.right);
                Kind::Bool.into()
            }
            BinOpKind::Concat => {
                self.value(&b.left);
                self.value(&b.right);
                Ty::string()
            }
            _ => {
                let left = self.value(&b.left);
                let right = self.value(&b.right);
                match (left.kind, right.kind) {
                    (Kind::Number, Kind::Number) => Kind::Number.into(),
                    _ => Ty::any(),
                }
            }
        }
    }

    pub(super) fn filter(&mut self, span: Range<usize>, f: &ast::Filter<'_>) -> Ty {
        self.check_name(span, true, f.name);
        let input = match &f.expr {
            // `default` exists for values that may be missing.
            Some(e) if matches!(f.name, "default" | "d") => self.soft(e).present(),
            Some(e) => self.value(e),
            None => Ty::any(),
        };
        self.args(&f.args);
        match f.name {
            "default" | "d" => input,
            "length" | "count" | "int" | "float" | "abs" | "round" | "sum" | "wordcount" => {
                Kind::Number.into()
            }
            "upper" | "lower" | "title" | "capitalize" | "trim" | "replace" | "join" | "string"
            | "safe" | "escape" | "e" | "format" | "indent" | "urlencode" | "tojson"
            | "truncate" | "center" | "striptags" => Ty::string(),
            "bool" => Kind::Bool.into(),
            "lines" | "split" => Kind::List(Box::new(Ty::string())).into(),
            "first" | "last" | "min" | "max" | "random" => match input.kind {
                Kind::List(item) => item.present(),
                Kind::Str => Ty::string(),
                _ => Ty::any(),
            },
            "sort" | "reverse" | "unique" | "select" | "reject" | "selectattr" | "rejectattr" => {
                match input.kind {
                    Kind::List(_) | Kind::Str => input,
                    _ => Ty::any(),
                }
            }
            _ => Ty::any(),
        }
    }

    /// Whether a filter (or test) exists in the environment: minijinja only finds out when it
    /// renders, so ask it once per name.
    pub(super) fn check_name(&mut self, span: Range<usize>, filter: bool, name: &str) {
        let key = (filter, name.to_owned());
        let exists = *self.known.entry(key).or_insert_with(|| {
            let source = if filter {
                format!("none | {name}")
            } else {
                format!("none is {name}")
            };
            let unknown = if filter {
                minijinja::ErrorKind::UnknownFilter
            } else {
                minijinja::ErrorKind::UnknownTest
            };
            match self.env.compile_expression(&source) {
                Ok(expr) => !matches!(expr.eval(()), Err(err) if err.kind() == unknown),
                Err(_) => true,
            }
        });
        if !exists {
            let found = if filter {
                Found::UnknownFilter(name.to_owned())
            } else {
                Found::UnknownTest(name.to_owned())
            };
            self.report_name(span, name, found);
        }
    }

    /// Reports a filter or test at its name, the last place it stands in the expression.
    pub(super) fn report_name(&mut self, range: Range<usize>, name: &str, found: Found) {
        let at = self
            .source
            .get(range.clone())
            .and_then(|text| text.rfind(name))
            .map_or(range.clone(), |i| {
                range.start + i..range.start + i + name.len()
            });
        if self.seen.insert((at.start, at.end, format!("{found:?}"))) {
            self.problems.push(TypeProblem { span: at, found });
        }
    }

    /// The field `name` of `base` (the value of `base_expr`), read by `e`.
    pub(super) fn field(&mut self, e: &Expr<'_>, base_expr: &Expr<'_>, base: Ty, name: &str) -> Ty {
        let read = || path_of(e).unwrap_or_else(|| name.to_owned());
        let base_path = || path_of(base_expr).unwrap_or_else(|| "the value".into());
        let not_a_map = match &base.kind {
            Kind::Any => return self.narrowed(Ty::any(), base.absent),
            Kind::Map(fields) => match fields.fields.get(name) {
                Some(ty) => return self.narrowed(ty.clone(), base.absent),
                None if fields.open => return self.narrowed(Ty::any(), base.absent),
                None => {
                    let found = Found::NoProperty {
                        read: read(),
                        base: base_path(),
                        field: name.to_owned(),
                        known: fields.fields.keys().cloned().collect(),
                    };
                    self.report(range_of(e), found);
                    return Ty::any();
                }
            },
            other => super::kind_word(other),
        };
        let found = Found::NotAMap {
            read: read(),
            base: base_path(),
            kind: not_a_map,
        };
        self.report(range_of(e), found);
        Ty::any()
    }

    /// A field's type, missing when it or what it was read from may be, unless a guard around
    /// it proves it present.
    fn narrowed(&self, ty: Ty, from: Option<std::rc::Rc<super::Absence>>) -> Ty {
        let ty = Ty {
            absent: ty.absent.or(from),
            ..ty
        };
        match &ty.absent {
            Some(a) if self.is_guarded(&a.at) => ty.present(),
            _ => ty,
        }
    }
}
