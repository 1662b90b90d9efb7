//! Preview = run ([K] item 9): local `plan` and `apply` build from one world (the documents
//! given plus the resources earlier operations stored), a plan's hash covers every input, and
//! `apply` refuses a preview the world changed under (P011), before or at confirmation.

use std::io::{BufRead, Read};

use clap::Parser as _;

use crate::subop::World;
use crate::support::opsgraph;

const SECOND: (&str, &str) =
    ("intent2.yaml", "intent: {target_resource_type: app.thing, action: run, name: app-2, environment: dev}\n");
/// A bucket someone else made, stored by hand after the preview.
const BUCKET: (&str, &str) = (
    "bucket.yaml",
    "resource: {id: bucket.thing/by-hand, type: bucket.thing, name: by-hand, environment: dev, provides: [{capability: store.bucket}]}\n",
);

struct Paths {
    data: String,
    packs: String,
    world: String,
    intent: String,
    bucket: String,
}

fn paths(w: &World) -> Paths {
    let p = |r: &str| w.dir.join(r).display().to_string();
    Paths { data: p("data"), packs: p("packs"), world: p("world"), intent: p("intent2.yaml"), bucket: p("bucket.yaml") }
}

impl Paths {
    /// `--data-dir DATA CMD -f INTENT --packs PACKS --inventory WORLD` and `extra`.
    fn args(&self, cmd: &str, intent: &str, extra: &[&str]) -> Vec<String> {
        let args = ["--data-dir", &self.data, cmd, "-f", intent, "--packs", &self.packs, "--inventory", &self.world];
        args.iter().chain(extra).map(|a| a.to_string()).collect()
    }

    /// `opsgraph` with those arguments.
    fn run(&self, cmd: &str, intent: &str, extra: &[&str]) -> crate::support::Run {
        opsgraph(&self.args(cmd, intent, extra).iter().map(String::as_str).collect::<Vec<_>>())
    }
}

/// `text` with every `sha256:<64 hex>` written `sha256:…`.
fn no_hashes(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("sha256:") {
        out.push_str(&rest[..i + 7]);
        rest = &rest[i + 7..];
        let n = rest.bytes().take_while(u8::is_ascii_hexdigit).count();
        out.push('…');
        rest = &rest[n..];
    }
    out + rest
}

/// The lines of a preview that say how `store.bucket` is resolved.
fn bucket_lines(text: &str) -> String {
    text.lines()
        .filter(|l| l.contains("store.bucket") || l.contains("bucket_maker"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn plan_sees_resources_earlier_operations_made_as_apply_does() {
    let w = World::new(&[SECOND, BUCKET]);
    let p = paths(&w);
    let before = p.run("plan", &p.intent, &[]);
    // A first operation creates the bucket (a sub-operation) and records it.
    assert_eq!(p.run("apply", &w.dir.join("intent.yaml").display().to_string(), &["--yes"]).code, 0);
    let after = p.run("plan", &p.intent, &[]);
    // `apply` without confirmation: its preview, then "not applied".
    let apply = p.run("apply", &p.intent, &[]);
    assert!(apply.out.starts_with(&after.out), "apply previews another plan:\n{}\n---\n{}", apply.out, after.out);
    let actual = format!("plan before:\n{}\nplan after:\n{}", bucket_lines(&before.out), bucket_lines(&after.out));
    expect_test::expect![[r#"
        plan before:
        store.bucket  create         provider bucket_maker through bucket make (sub-operation)
        bucket_maker for store.bucket (runs first): bucket@1.0.0 make, 1 jobs in 1 stages, 0 gates
        plan after:
        store.bucket  bind           bucket.thing/bucket-maker-app-1 (the only candidate that satisfies every rule)"#]]
    .assert_eq(&actual);
}

/// Runs `apply` (no `--yes`): while the question is open, `meanwhile` runs (another person
/// changes the world or not); then the answer `yes`: its exit code, the operations there are
/// then, and what it wrote to standard error.
fn confirm(change: bool) -> String {
    let w = World::new(&[SECOND, BUCKET]);
    let p = paths(&w);
    struct Answer<F: FnMut()> {
        meanwhile: Option<F>,
        text: &'static [u8],
        at: usize,
    }
    impl<F: FnMut()> Read for Answer<F> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.fill_buf()?.read(buf)?;
            self.consume(n);
            Ok(n)
        }
    }
    impl<F: FnMut()> BufRead for Answer<F> {
        fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
            if let Some(mut f) = self.meanwhile.take() {
                f();
            }
            Ok(&self.text[self.at..])
        }
        fn consume(&mut self, n: usize) {
            self.at += n;
        }
    }
    let (data, bucket) = (p.data.clone(), p.bucket.clone());
    let mut input = Answer {
        meanwhile: Some(move || {
            if change {
                assert_eq!(opsgraph(&["--data-dir", &data, "resource", "apply", "-f", &bucket]).code, 0);
            }
        }),
        text: b"yes\n",
        at: 0,
    };
    let args = std::iter::once("opsgraph".to_string()).chain(p.args("apply", &p.intent, &[]));
    let cli = opsgraph::cli::Cli::try_parse_from(args).unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = opsgraph::cli::run(cli, &mut input, &mut out, &mut err).unwrap();
    let ops = opsgraph(&["--data-dir", &p.data, "get", "operations", "-o", "json"]);
    let ops: serde_json::Value = serde_json::from_str(&ops.out).unwrap();
    let err = String::from_utf8(err).unwrap();
    let err = no_hashes(&err);
    format!("exit {code}; {} operation(s)\n{err}", ops.as_array().unwrap().len()).trim_end().to_owned()
}

#[test]
fn apply_refuses_a_preview_the_world_changed_under_before_confirmation() {
    let report = format!("the same world: {}\nthe world changed: {}", confirm(false), confirm(true));
    expect_test::expect![[r#"
        the same world: exit 0; 2 operation(s)
        the world changed: exit 1; 0 operation(s)
        error[P011]: the preview is stale: it showed plan sha256:…, but the world changed since (resources, packs or policies) and the plan is now sha256:…; nothing was applied: preview again"#]]
    .assert_eq(&report);
}

/// `plan -o json`, then (perhaps) a change to the world, then `apply --plan-hash HASH --yes`: its
/// exit code, the operations there are then, and its error lines.
fn apply_with_plan_hash(change: bool, short: bool) -> String {
    let w = World::new(&[SECOND, BUCKET]);
    let p = paths(&w);
    let plan = p.run("plan", &p.intent, &["-o", "json"]);
    let plan: serde_json::Value = serde_json::from_str(&plan.out).unwrap();
    let hash = plan["revision"]["hash"].as_str().unwrap().to_string();
    let hash = if short { hash[..19].to_string() } else { hash };
    if change {
        assert_eq!(opsgraph(&["--data-dir", &p.data, "resource", "apply", "-f", &p.bucket]).code, 0);
    }
    let apply = p.run("apply", &p.intent, &["--plan-hash", &hash, "--yes"]);
    let ops = opsgraph(&["--data-dir", &p.data, "get", "operations", "-o", "json"]);
    let ops: serde_json::Value = serde_json::from_str(&ops.out).unwrap();
    let err = apply.err.lines().filter(|l| l.starts_with("error")).map(no_hashes).collect::<Vec<_>>().join("\n");
    format!("exit {}; {} operation(s)\n{err}", apply.code, ops.as_array().unwrap().len()).trim_end().to_owned()
}

#[test]
fn apply_plan_hash_refuses_a_stale_preview() {
    let cases = [("the same world", false, false), ("a short hash", false, true), ("the world changed", true, false)];
    let report: Vec<String> = cases
        .iter()
        .map(|(case, change, short)| format!("{case}: {}", apply_with_plan_hash(*change, *short)))
        .collect();
    expect_test::expect![[r#"
        the same world: exit 0; 2 operation(s)
        a short hash: exit 0; 2 operation(s)
        the world changed: exit 1; 0 operation(s)
        error[P011]: the preview is stale: it showed plan sha256:…, but the world changed since (resources, packs or policies) and the plan is now sha256:…; nothing was applied: preview again"#]]
    .assert_eq(&report.join("\n"));
}

/// A plan's hash covers what its preview shows: a secret parameter's value is not part of it, so
/// a published hash cannot be used to test guesses of a password offline; every other value is.
#[test]
fn a_plans_hash_does_not_digest_secret_values() {
    let base = std::fs::read_to_string(crate::support::path("examples/intents/postgresql-install.yaml")).unwrap();
    let with = |extra: &str, database: &str| {
        base.replace("    owner: orders_app\n", &format!("    owner: orders_app\n{extra}"))
            .replace("database: orders\n", &format!("database: {database}\n"))
    };
    let cases = [
        ("a", with("    db_password: correct-horse-battery\n", "orders")),
        ("b", with("    db_password: hunter2-hunter2-hunter2\n", "orders")),
        ("c", with("    db_password: correct-horse-battery\n", "invoices")),
    ];
    let tmp = crate::support::temp_dir(&[]);
    std::fs::create_dir_all(tmp.path()).unwrap();
    let hash = |name: &str, text: &str| {
        let file = tmp.join(&format!("{name}.yaml"));
        std::fs::write(&file, text).unwrap();
        let inventory = crate::support::path("examples/inventory");
        let data = tmp.join("data").display().to_string();
        let run = opsgraph(&[
            "--data-dir",
            &data,
            "plan",
            "-f",
            &file.display().to_string(),
            "--inventory",
            &inventory,
            "-o",
            "json",
        ]);
        assert!(!run.out.contains("correct-horse") && !run.out.contains("hunter2"), "{}", run.out);
        let v: serde_json::Value = serde_json::from_str(&run.out).unwrap_or_else(|e| panic!("{e}: {}", run.render()));
        v["revision"]["hash"].as_str().unwrap().to_owned()
    };
    let [a, b, c] = cases.map(|(n, t)| hash(n, &t));
    assert_eq!(a, b, "the hash changed with the password alone");
    assert_ne!(a, c, "the hash did not change with the database");
}
