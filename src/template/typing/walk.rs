//! The walk over statements: scopes, guards from conditions, and where a value is used.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use std::rc::Rc;

use minijinja::Environment;
use minijinja::machinery::ast::{self, CallArg, Expr, Stmt};

use super::syntax::{path_of, proves, range_of};
use super::{Absence, Found, Kind, Ty, TypeProblem};

pub(super) struct Walker<'a> {
    pub(super) env: &'a Environment<'static>,
    pub(super) source: &'a str,
    pub(super) roots: &'a BTreeMap<String, Ty>,
    /// Local names (`set`, loop variables, macro arguments), innermost last.
    pub(super) scopes: Vec<HashMap<String, Ty>>,
    /// Paths proven present by the conditions around the current position.
    pub(super) guards: Vec<String>,
    pub(super) problems: Vec<TypeProblem>,
    pub(super) seen: BTreeSet<(usize, usize, String)>,
    pub(super) known: HashMap<(bool, String), bool>,
}

impl<'a> Walker<'a> {
    pub(super) fn new(
        env: &'a Environment<'static>,
        source: &'a str,
        roots: &'a BTreeMap<String, Ty>,
    ) -> Self {
        Walker {
            env,
            source,
            roots,
            scopes: vec![HashMap::new()],
            guards: Vec::new(),
            problems: Vec::new(),
            seen: BTreeSet::new(),
            known: HashMap::new(),
        }
    }

    pub(super) fn report(&mut self, range: Range<usize>, found: Found) {
        // One report per read and place, however often the walk passes it.
        if self
            .seen
            .insert((range.start, range.end, format!("{found:?}")))
        {
            self.problems.push(TypeProblem { span: range, found });
        }
    }

    pub(super) fn body(&mut self, stmts: &[Stmt<'_>]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    pub(super) fn scoped(&mut self, bind: Vec<(String, Ty)>, f: impl FnOnce(&mut Self)) {
        self.scopes.push(bind.into_iter().collect());
        f(self);
        self.scopes.pop();
    }

    pub(super) fn guarded(&mut self, guards: Vec<String>, f: impl FnOnce(&mut Self) -> Ty) -> Ty {
        let depth = self.guards.len();
        self.guards.extend(guards);
        let ty = f(self);
        self.guards.truncate(depth);
        ty
    }

    pub(super) fn bind(&mut self, target: &Expr<'_>, ty: Ty) {
        match target {
            Expr::Var(v) => {
                // A local bound to a value that may be missing is guarded by its own name.
                let ty = Ty {
                    kind: ty.kind,
                    absent: ty.absent.map(|a| {
                        Rc::new(Absence {
                            at: v.id.to_owned(),
                            origin: a.origin.clone(),
                            why: a.why.clone(),
                        })
                    }),
                };
                if let Some(scope) = self.scopes.last_mut() {
                    scope.insert(v.id.to_owned(), ty);
                }
            }
            Expr::Tuple(t) => {
                for item in &t.items {
                    self.bind(item, Ty::any());
                }
            }
            _ => {}
        }
    }

    // Over 80 lines: one arm per template statement kind.
    pub(super) fn stmt(&mut self, stmt: &Stmt<'_>) {
        match stmt {
            Stmt::Template(t) => self.body(&t.children),
            Stmt::EmitExpr(e) => {
                self.value(&e.expr);
            }
            Stmt::ForLoop(f) => {
                // Iterating a missing value yields nothing, so the loop itself is safe.
                let iter = self.soft(&f.iter);
                let item = match &iter.kind {
                    Kind::List(item) => item.present(),
                    Kind::Str => Ty::string(),
                    _ => Ty::any(),
                };
                self.scoped(vec![("loop".into(), Ty::any())], |w| {
                    w.bind(&f.target, item);
                    if let Some(filter) = &f.filter_expr {
                        w.soft(filter);
                    }
                    w.body(&f.body);
                });
                self.body(&f.else_body);
            }
            Stmt::IfCond(c) => {
                self.soft(&c.expr);
                let (yes, no) = (proves(&c.expr, true), proves(&c.expr, false));
                self.guarded(yes, |w| {
                    w.body(&c.true_body);
                    Ty::any()
                });
                self.guarded(no, |w| {
                    w.body(&c.false_body);
                    Ty::any()
                });
            }
            Stmt::WithBlock(w) => {
                let bound: Vec<(&Expr<'_>, Ty)> = w
                    .assignments
                    .iter()
                    .map(|(target, e)| (target, self.soft(e)))
                    .collect();
                self.scoped(Vec::new(), |walker| {
                    for (target, ty) in bound {
                        walker.bind(target, ty);
                    }
                    walker.body(&w.body);
                });
            }
            Stmt::Set(s) => {
                let ty = self.soft(&s.expr);
                self.bind(&s.target, ty);
            }
            Stmt::SetBlock(s) => {
                if let Some(filter) = &s.filter {
                    self.soft(filter);
                }
                self.body(&s.body);
                self.bind(&s.target, Ty::string());
            }
            Stmt::AutoEscape(a) => self.body(&a.body),
            Stmt::FilterBlock(f) => {
                self.soft(&f.filter);
                self.body(&f.body);
            }
            Stmt::Block(b) => self.body(&b.body),
            Stmt::Macro(m) => self.macro_body(m),
            Stmt::CallBlock(c) => {
                self.args(&c.call.args);
                self.macro_body(&c.macro_decl);
            }
            Stmt::Do(d) => {
                self.soft(&d.call.expr);
                self.args(&d.call.args);
            }
            Stmt::Import(i) => self.bind(&i.name, Ty::any()),
            Stmt::FromImport(i) => {
                for (name, alias) in &i.names {
                    self.bind(alias.as_ref().unwrap_or(name), Ty::any());
                }
            }
            _ => {}
        }
    }

    pub(super) fn macro_body(&mut self, m: &ast::Macro<'_>) {
        for d in &m.defaults {
            self.value(d);
        }
        let mut bind: Vec<(String, Ty)> = ["caller", "varargs", "kwargs"]
            .map(|n| (n.to_owned(), Ty::any()))
            .into();
        bind.extend(m.args.iter().filter_map(|a| match a {
            Expr::Var(v) => Some((v.id.to_owned(), Ty::any())),
            _ => None,
        }));
        self.scoped(bind, |w| w.body(&m.body));
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(m.name.to_owned(), Ty::any());
        }
    }

    pub(super) fn args(&mut self, args: &[CallArg<'_>]) {
        for arg in args {
            match arg {
                CallArg::Pos(e)
                | CallArg::Kwarg(_, e)
                | CallArg::PosSplat(e)
                | CallArg::KwargSplat(e) => {
                    self.value(e);
                }
            }
        }
    }

    /// An expression whose value is used (printed, passed on, computed with): a value that may
    /// be missing is a problem here.
    pub(super) fn value(&mut self, e: &Expr<'_>) -> Ty {
        let ty = self.soft(e);
        if let Some(absence) = &ty.absent {
            let read = path_of(e).unwrap_or_else(|| absence.origin.clone());
            let absence = absence.clone();
            self.report(range_of(e), Found::Absent { read, absence });
        }
        ty.present()
    }

    /// An expression only compared, tested or checked for truth: a missing value is fine.
    pub(super) fn soft(&mut self, e: &Expr<'_>) -> Ty {
        let ty = self.ty(e);
        match &ty.absent {
            Some(a) if self.is_guarded(&a.at) => ty.present(),
            _ => ty,
        }
    }

    pub(super) fn is_guarded(&self, at: &str) -> bool {
        self.guards
            .iter()
            .any(|g| g == at || g.strip_prefix(at).is_some_and(|rest| rest.starts_with('.')))
    }

    pub(super) fn lookup(&self, name: &str) -> Ty {
        for scope in self.scopes.iter().rev() {
            if let Some(ty) = scope.get(name) {
                return ty.clone();
            }
        }
        self.roots.get(name).cloned().unwrap_or_else(Ty::any)
    }
}
