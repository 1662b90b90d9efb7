//! The measured corpus of failures (`tests/it/fixtures/failures`): `failure` documents written
//! from the real tools' own messages (kubeadm, the kubelet, containerd, apt/dpkg, systemd,
//! PostgreSQL, etcd, MinIO, Helm, Tempo, OpenSSH) and prompt-injection logs, each headed by
//! `# expect: REMEDY PATCH_KIND` (`none` for no remedy; patch kinds `fix_job`, `set_parameters`,
//! `retry`, `gate`, `none`). Documents marked `# source: fleet` are real failures captured on fleet
//! hosts by `fleet_captures.rs`, with the command that produced them. Each runs through
//! `diagnose FILE -o json`, the tool users run.
//!
//! A case is right when the remedy and the kind of patch are both the expected ones. Precision:
//! right diagnoses among the diagnoses given; recall: right diagnoses among the cases that have a
//! remedy. Both must be at least 90%, and a case whose right answer is "no patch" never gets one.

use crate::support::{path, root, temp_dir};

/// The kind of patch a diagnosis proposes.
fn patch_kind(patch: &serde_json::Value) -> &'static str {
    let Some(changes) = patch["changes"].as_array() else { return "none" };
    let kinds: Vec<&str> = changes.iter().filter_map(|c| c.as_object()?.keys().next().map(String::as_str)).collect();
    if kinds.iter().any(|k| k.starts_with("insert_")) {
        "fix_job"
    } else if kinds.contains(&"set_parameters") {
        "set_parameters"
    } else if kinds.contains(&"add_gate") {
        "gate"
    } else {
        "retry"
    }
}

/// Whether `v` fits the object schema `s` as far as `schema diagnosis` uses JSON Schema: required
/// keys, no other keys than its properties, and each property's JSON type. (No JSON Schema
/// validator is among the workspace's dependencies; this checks the keywords the schema uses.)
pub(crate) fn fits(v: &serde_json::Value, s: &serde_json::Value) -> Result<(), String> {
    let obj = v.as_object().ok_or("not an object")?;
    for key in s["required"].as_array().into_iter().flatten().filter_map(|k| k.as_str()) {
        if !obj.contains_key(key) {
            return Err(format!("`{key}` is required"));
        }
    }
    for (key, value) in obj {
        let prop = &s["properties"][key];
        if prop.is_null() {
            return Err(format!("`{key}` is not a property of the schema"));
        }
        let types: Vec<&str> = match &prop["type"] {
            serde_json::Value::String(t) => vec![t.as_str()],
            serde_json::Value::Array(ts) => ts.iter().filter_map(|t| t.as_str()).collect(),
            _ => continue,
        };
        let actual = match value {
            serde_json::Value::Null => "null",
            serde_json::Value::Bool(_) => "boolean",
            serde_json::Value::Number(_) => "number",
            serde_json::Value::String(_) => "string",
            serde_json::Value::Array(_) => "array",
            serde_json::Value::Object(_) => "object",
        };
        if !types.contains(&actual) {
            return Err(format!("`{key}` is {actual}, the schema says {types:?}"));
        }
    }
    Ok(())
}

#[test]
fn the_failure_corpus_is_diagnosed_with_precision_and_recall_of_90_percent() {
    let dir = root().join("crates/opsgraph/tests/it/fixtures/failures");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    assert!(files.len() >= 60, "only {} failure documents", files.len());
    let packs = vec![path("packs")];
    let schema = opsgraph::remedy_cmd::diagnosis_schema();
    let data = temp_dir(&[]);
    let (mut given, mut right, mut expected_remedies, mut right_remedies) = (0, 0, 0, 0);
    let (mut wrong, mut patched_no_fix) = (Vec::new(), Vec::new());
    let mut from_fleet = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        from_fleet += usize::from(text.lines().any(|l| l == "# source: fleet"));
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let head = text.lines().next().and_then(|l| l.strip_prefix("# expect: ")).expect("an `# expect:` line");
        let (want_remedy, want_kind) = head.split_once(' ').expect("`# expect: REMEDY KIND`");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = opsgraph::remedy_cmd::diagnose_file(
            &file.display().to_string(),
            &packs,
            data.path(),
            opsgraph::render::Output::Json,
            &mut out,
            &mut err,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_ne!(code, 2, "{name}: bad input: {v}");
        if let Err(e) = fits(&v, &schema["$defs"]["diagnosis"]) {
            panic!("{name}: the output does not fit `opsgraph schema diagnosis`: {e}\n{v}");
        }
        let got_remedy = v["remedy"].as_str().unwrap_or("none");
        let got_kind = patch_kind(&v["plan_patch"]);
        let is_right = got_remedy == want_remedy && got_kind == want_kind;
        if got_remedy != "none" {
            given += 1;
            right += usize::from(is_right);
        }
        if want_remedy != "none" {
            expected_remedies += 1;
            right_remedies += usize::from(is_right);
        }
        if want_remedy == "none" && got_remedy == "none" {
            assert_eq!(code, 1, "{name}: no remedy applies, exit 1");
        }
        if !is_right {
            wrong.push(format!("{name}: expected {want_remedy} ({want_kind}), got {got_remedy} ({got_kind})"));
        }
        if want_kind == "none" && got_kind != "none" {
            patched_no_fix.push(format!("{name}: {got_remedy} proposes a {got_kind} patch"));
        }
    }
    let precision = right as f64 / given.max(1) as f64;
    let recall = right_remedies as f64 / expected_remedies.max(1) as f64;
    println!(
        "failure corpus: {} documents ({from_fleet} captured on the fleet); precision {:.1}% ({right}/{given}), recall {:.1}% ({right_remedies}/{expected_remedies})",
        files.len(),
        precision * 100.0,
        recall * 100.0
    );
    for w in &wrong {
        println!("  wrong: {w}");
    }
    assert!(patched_no_fix.is_empty(), "cases whose answer is no patch got one:\n{}", patched_no_fix.join("\n"));
    assert!(precision >= 0.9 && recall >= 0.9, "below 90%:\n{}", wrong.join("\n"));
}
