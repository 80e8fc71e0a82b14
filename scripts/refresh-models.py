#!/usr/bin/env python3
"""Refreshes models/litellm.json, runner's snapshot of LiteLLM's model map, from the `litellm`
package installed for this Python (`pip install litellm==VERSION`, or a folder on PYTHONPATH).

    python3 scripts/refresh-models.py --date 2026-11-20

`--date` is the day the package was published (PyPI shows it); without it, today (UTC).

The map is trimmed to what runner speaks: models of the `anthropic` and `openai` providers, in
`chat` or `responses` mode, named without `/`, with only the fields runner reads. Models the
package lists replace the snapshot's; a model the snapshot has and the package no longer lists
is kept, marked `retired` with the last version and date that listed it, so a run recorded
before it left the map is still priced.

The package is found without importing it (importing litellm needs its dependencies).
"""

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import pathlib
import sys

PROVIDERS = ("anthropic", "openai")
MODES = ("chat", "responses")
FIELDS = (
    "litellm_provider",
    "mode",
    "input_cost_per_token",
    "output_cost_per_token",
    "cache_read_input_token_cost",
    "cache_creation_input_token_cost",
    "max_input_tokens",
    "max_output_tokens",
    "prompt_cache_min_tokens",
    "deprecation_date",
)
MAP_FILE = "model_prices_and_context_window_backup.json"
DEFAULT_OUT = pathlib.Path(__file__).resolve().parent.parent / "models" / "litellm.json"


def installed_map():
    """The installed package's version and its model map."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("refresh-models: no `litellm` package is installed (pip install litellm)")
    for folder in spec.submodule_search_locations:
        path = pathlib.Path(folder) / MAP_FILE
        if path.is_file():
            break
    else:
        sys.exit(f"refresh-models: the installed litellm has no {MAP_FILE}")
    try:
        version = importlib.metadata.version("litellm")
    except importlib.metadata.PackageNotFoundError:
        sys.exit("refresh-models: the installed litellm has no package metadata (no version)")
    with open(path, encoding="utf-8") as f:
        return version, json.load(f)


def trim(models):
    """The entries runner speaks, with the fields it reads."""
    out = {}
    for name, entry in models.items():
        if not isinstance(entry, dict) or "/" in name:
            continue
        if entry.get("litellm_provider") not in PROVIDERS or entry.get("mode") not in MODES:
            continue
        out[name] = {k: entry[k] for k in FIELDS if entry.get(k) is not None}
    return out


def merge(old, new, version, date):
    """New entries replace old ones; old ones the package dropped are kept and marked."""
    source = old.get("litellm", {})
    merged = dict(new)
    for name, entry in old.get("models", {}).items():
        if name in merged:
            continue
        kept = dict(entry)
        kept.setdefault(
            "retired",
            {"version": source.get("version", "unknown"), "date": source.get("date", "unknown")},
        )
        merged[name] = kept
    return {
        "litellm": {"version": version, "date": date},
        "models": dict(sorted(merged.items())),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--date", help="the day the package was published, YYYY-MM-DD")
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    date = args.date or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        sys.exit(f"refresh-models: --date {date!r} is not YYYY-MM-DD")
    version, models = installed_map()
    old = {}
    if args.out.is_file():
        with open(args.out, encoding="utf-8") as f:
            old = json.load(f)
    snapshot = merge(old, trim(models), version, date)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(snapshot, f, indent=1, sort_keys=False)
        f.write("\n")
    retired = sum(1 for e in snapshot["models"].values() if "retired" in e)
    print(
        f"{args.out}: litellm {version} ({date}), {len(snapshot['models'])} models"
        f" ({retired} retired)"
    )


if __name__ == "__main__":
    main()
