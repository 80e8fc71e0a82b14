//! What an expression is, read off its syntax alone: the path it names, the paths a condition
//! proves present, where it stands in the template. Shared by the expression checker
//! (`expr.rs`) and the statement walk (`walk.rs`), which then do not import each other for it.

use std::ops::Range;

use minijinja::machinery::Span;
use minijinja::machinery::ast::{BinOpKind, CompareOpKind, Expr, UnaryOpKind};

/// The dotted path an expression reads (`steps.a.output.files`), when it is one.
pub(super) fn path_of(e: &Expr<'_>) -> Option<String> {
    match e {
        Expr::Var(v) => Some(v.id.to_owned()),
        Expr::GetAttr(g) => path_of(&g.expr).map(|p| format!("{p}.{}", g.name)),
        Expr::GetItem(g) => {
            let Expr::Const(c) = &g.subscript_expr else {
                return None;
            };
            let base = path_of(&g.expr)?;
            match c.value.as_str() {
                Some(key) => Some(format!("{base}.{key}")),
                None => Some(format!("{base}[{}]", c.value)),
            }
        }
        _ => None,
    }
}

/// The paths a condition proves present when it comes out `truth`.
pub(super) fn proves(e: &Expr<'_>, truth: bool) -> Vec<String> {
    match e {
        Expr::Test(t) => match (t.name, truth) {
            ("defined", true) | ("undefined", false) => path_of(&t.expr).into_iter().collect(),
            _ => Vec::new(),
        },
        Expr::UnaryOp(u) if matches!(u.op, UnaryOpKind::Not) => proves(&u.expr, !truth),
        Expr::BinOp(b) => match (&b.op, truth) {
            (BinOpKind::ScAnd, true) | (BinOpKind::ScOr, false) => {
                let mut all = proves(&b.left, truth);
                all.extend(proves(&b.right, truth));
                all
            }
            (BinOpKind::Eq, true) | (BinOpKind::Ne, false) => succeeded(&b.left, &b.right),
            _ => Vec::new(),
        },
        Expr::Compare(c) => match c.ops.as_slice() {
            [op] if matches!(
                (op.op, truth),
                (CompareOpKind::Eq, true) | (CompareOpKind::Ne, false)
            ) =>
            {
                succeeded(&c.expr, &op.expr)
            }
            _ => Vec::new(),
        },
        // A value that is true is there; a missing one is false.
        Expr::Var(_) | Expr::GetAttr(_) | Expr::GetItem(_) if truth => {
            path_of(e).into_iter().collect()
        }
        _ => Vec::new(),
    }
}

/// `steps.X.status == "succeeded"` proves `steps.X.output` present.
fn succeeded(left: &Expr<'_>, right: &Expr<'_>) -> Vec<String> {
    let is_succeeded =
        |e: &Expr<'_>| matches!(e, Expr::Const(c) if c.value.as_str() == Some("succeeded"));
    let status = |e: &Expr<'_>| {
        path_of(e).and_then(|p| {
            p.strip_suffix(".status")
                .map(|step| format!("{step}.output"))
        })
    };
    match (status(left), status(right)) {
        (Some(output), _) if is_succeeded(right) => vec![output],
        (_, Some(output)) if is_succeeded(left) => vec![output],
        _ => Vec::new(),
    }
}

/// Where an expression stands in the template: its own span, widened to the start of what it
/// is applied to (minijinja starts an attribute's span at the attribute).
pub(super) fn range_of(e: &Expr<'_>) -> Range<usize> {
    let own = span_of(e);
    let own = own.start_offset as usize..own.end_offset as usize;
    let inner = match e {
        Expr::GetAttr(g) => Some(&g.expr),
        Expr::GetItem(g) => Some(&g.expr),
        Expr::Call(c) => Some(&c.expr),
        Expr::Test(t) => Some(&t.expr),
        Expr::Filter(f) => f.expr.as_ref(),
        _ => None,
    };
    match inner {
        Some(inner) => range_of(inner).start.min(own.start)..own.end,
        None => own,
    }
}

fn span_of(e: &Expr<'_>) -> Span {
    match e {
        Expr::Var(s) => s.span(),
        Expr::Const(s) => s.span(),
        Expr::Slice(s) => s.span(),
        Expr::UnaryOp(s) => s.span(),
        Expr::BinOp(s) => s.span(),
        Expr::Compare(s) => s.span(),
        Expr::IfExpr(s) => s.span(),
        Expr::Filter(s) => s.span(),
        Expr::Test(s) => s.span(),
        Expr::GetAttr(s) => s.span(),
        Expr::GetItem(s) => s.span(),
        Expr::Call(s) => s.span(),
        Expr::List(s) => s.span(),
        Expr::Tuple(s) => s.span(),
        Expr::Map(s) => s.span(),
    }
}
