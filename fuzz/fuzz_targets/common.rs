//! What every target does with a loaded workflow: plan it as `runner plan` would, render every
//! diagnostic and every plan format. Any panic, overflow or runaway allocation is a finding.

// Shared by the targets; not each uses every function.
#![allow(dead_code)]

use runner::agent::AgentCatalog;
use runner::error::{Problem, Renderer};
use runner::plan::{PlanOptions, build_plan, render};
use runner::sandbox::Support;
use runner::tools::Registry;
use runner::workflow::load::load_workflow_source;
use runner::workflow::source::{SourceFile, Syntax};

pub fn plan_text(name: &str, text: &str, syntax: Syntax) {
    let file = SourceFile::new(name, text);
    let loaded = match load_workflow_source(file, syntax) {
        Ok(loaded) => loaded,
        Err(problems) => return show(&problems),
    };
    let registry = Registry::builtin();
    let catalog = AgentCatalog::load(&[], &registry);
    let (plan, problems) = build_plan(&loaded, &catalog, &registry, &PlanOptions::default());
    show(&problems);
    if let Some(plan) = plan {
        // Both ways a machine can be: with Landlock (ABI 4) and without (0).
        for landlock_abi in [0, 4] {
            let _ = render::to_text(&plan, Support { landlock_abi });
            let _ = render::to_json(&plan, Support { landlock_abi });
        }
        let _ = render::to_mermaid(&plan);
        let _ = render::to_dot(&plan);
    }
}

pub fn show(problems: &[Problem]) {
    let _ = Renderer::new(false).render(problems);
}
