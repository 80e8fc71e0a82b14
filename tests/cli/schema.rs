//! The committed JSON Schemas are exactly what `runner schema` prints, and they accept the
//! shipped examples.

use crate::support::{REPO, Test};

#[test]
fn committed_schemas_match_runner_schema() {
    for kind in ["workflow", "agent"] {
        let out = Test::new().args(&["schema", kind]).run();
        assert_eq!(out.status, 0, "{}", out.stderr);
        let path = format!("{REPO}/schemas/{kind}.schema.json");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == out.stdout,
            "schemas/{kind}.schema.json is out of date; run `cargo run -- schema {kind} > schemas/{kind}.schema.json`"
        );
        let schema: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        jsonschema::validator_for(&schema).expect("schema compiles");
    }
}

#[test]
fn the_schema_rejects_unknown_keys_and_accepts_examples() {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{REPO}/schemas/workflow.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let example: serde_json::Value = toml::from_str(
        &std::fs::read_to_string(format!("{REPO}/workflows/jwt-migration.toml")).unwrap(),
    )
    .unwrap();
    assert!(validator.is_valid(&example));
    let mut bad = example.clone();
    bad["steps"]["plan"]["agnet"] = "x".into();
    assert!(!validator.is_valid(&bad));
}
