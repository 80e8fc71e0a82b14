//! `runner models [FILTER]`: what runner knows of models by name (docs/src/models.md): each
//! model's list price per million tokens, context window and longest reply, and the LiteLLM
//! package it comes from, with the models the newest package no longer lists marked retired.

use serde::Serialize;

use crate::cli::{Format, Io, ModelsArgs};
use crate::error::Exit;
use crate::plan::render::dollars;
use crate::provider::known::{self, Origin, Prices};
use crate::workflow::Price;

#[derive(Serialize)]
struct JsonModels<'a> {
    /// The snapshot: `{"name": "LiteLLM", "version", "date"}`.
    source: JsonSource<'a>,
    models: Vec<JsonModel<'a>>,
}

#[derive(Serialize)]
struct JsonSource<'a> {
    name: &'static str,
    version: &'a str,
    date: &'a str,
}

#[derive(Serialize)]
struct JsonModel<'a> {
    /// `provider/model`, as a workflow names it.
    model: String,
    provider: &'a str,
    name: &'a str,
    mode: &'a str,
    /// USD per million tokens; null when the map has no price for it.
    price: Option<Price>,
    context_window: Option<u64>,
    max_output_tokens: Option<u64>,
    prompt_cache_min_tokens: Option<u64>,
    deprecation_date: Option<&'a str>,
    /// `LiteLLM <version> (<date>)`: the package its entry comes from.
    source: String,
    /// The last package that listed it, when the newest no longer does; null otherwise.
    retired: Option<&'a Origin>,
}

/// One model of the snapshot, by name.
type Known = (&'static str, &'static known::Entry);

pub fn models(args: ModelsArgs, io: &mut Io<'_>) -> Exit {
    let filter = args.filter.as_deref().map(str::to_lowercase);
    let mut list: Vec<Known> = known::models()
        .filter(|(name, entry)| {
            filter
                .as_deref()
                .is_none_or(|f| model(name, entry).to_lowercase().contains(f))
        })
        .collect();
    list.sort_by(|a, b| (&a.1.litellm_provider, a.0).cmp(&(&b.1.litellm_provider, b.0)));
    if args.format == Format::Json {
        let _ = writeln!(io.out, "{}", json(&list));
    } else if list.is_empty() {
        let _ = writeln!(
            io.out,
            "no known model matches `{}` (`runner models` lists them all)",
            crate::terminal::clean(args.filter.as_deref().unwrap_or_default())
        );
    } else {
        let _ = write!(io.out, "{}", text(&list));
    }
    Exit::Success
}

/// `provider/model`, as a workflow names it.
fn model(name: &str, entry: &known::Entry) -> String {
    format!("{}/{name}", entry.litellm_provider)
}

/// Its price as a run prices it: through `Prices`, with no `[prices]` of a workflow.
fn price((name, entry): Known) -> Option<Price> {
    Prices::default()
        .of(&model(name, entry))
        .map(|(price, _)| price)
}

fn source(entry: &'static known::Entry) -> String {
    known::PriceSource::LiteLlm(entry.origin()).to_string()
}

fn json(list: &[Known]) -> String {
    let snapshot = known::snapshot();
    let doc = JsonModels {
        source: JsonSource {
            name: "LiteLLM",
            version: &snapshot.version,
            date: &snapshot.date,
        },
        models: list
            .iter()
            .map(|&(name, entry)| JsonModel {
                model: model(name, entry),
                provider: &entry.litellm_provider,
                name,
                mode: &entry.mode,
                price: price((name, entry)),
                context_window: entry.max_input_tokens,
                max_output_tokens: entry.max_output_tokens,
                prompt_cache_min_tokens: entry.prompt_cache_min_tokens,
                deprecation_date: entry.deprecation_date.as_deref(),
                source: source(entry),
                retired: entry.retired.as_ref(),
            })
            .collect(),
    };
    crate::terminal::to_json_pretty(&doc).unwrap_or_default()
}

fn text(list: &[Known]) -> String {
    let header = [
        "MODEL",
        "INPUT",
        "OUTPUT",
        "CACHE READ",
        "CACHE WRITE",
        "WINDOW",
        "MAX OUT",
        "SOURCE",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.map(str::to_owned).to_vec()];
    let usd = |usd: Option<f64>| usd.map_or_else(|| "-".to_owned(), |d| format!("${}", dollars(d)));
    let count = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), grouped);
    rows.extend(list.iter().map(|&(name, entry)| {
        let price = price((name, entry));
        let mut from = source(entry);
        if entry.retired.is_some() {
            from.push_str(", retired");
        }
        vec![
            model(name, entry),
            usd(price.map(|p| p.input)),
            usd(price.map(|p| p.output)),
            usd(price.map(|p| p.cache_read.unwrap_or(p.input))),
            usd(price.map(|p| p.cache_write.unwrap_or(p.input))),
            count(entry.max_input_tokens),
            count(entry.max_output_tokens),
            from,
        ]
    }));
    let snapshot = known::snapshot();
    format!(
        "{}{} from LiteLLM {} ({}); USD per million tokens; `[prices]` in a workflow overrides a price, `context_window` a window\n",
        crate::report::table(&rows),
        crate::units::count(list.len() as u64, "model", "models"),
        snapshot.version,
        snapshot.date
    )
}

/// `1,000,000`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(super::grouped(1_000_000), "1,000,000");
        assert_eq!(super::grouped(200_000), "200,000");
        assert_eq!(super::grouped(999), "999");
    }
}
