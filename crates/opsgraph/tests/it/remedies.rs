//! Remedies without an operation: `pack test` runs every remedy's examples through the matcher,
//! `diagnose FILE` diagnoses a `failure` document. The runtime's `diagnose` (same matcher) is
//! covered by the lab and patch tests.

use crate::support::{opsgraph, path, root, temp_dir, TempDir};

#[test]
fn the_bundled_remedies_pass_their_examples() {
    let packs: Vec<String> = ["kubernetes", "lab-cluster", "minio", "postgresql", "tempo"]
        .iter()
        .map(|p| path(&format!("packs/{p}")))
        .collect();
    let mut args = vec!["pack", "test"];
    args.extend(packs.iter().map(String::as_str));
    let run = opsgraph(&args);
    assert_eq!(run.code, 0, "{}", run.render());
    for p in ["kubernetes", "minio", "postgresql", "tempo"] {
        assert!(run.out.contains(&format!("ok: pack {p}@")), "{}", run.render());
    }
}

/// The postgresql pack with `remedies.yaml` replaced by `remedies`.
fn postgresql_with(remedies: &str) -> TempDir {
    let src = root().join("packs/postgresql");
    let mut files: Vec<(String, String)> = Vec::new();
    for rel in ["pack.yaml", "templates.yaml", "jobs.yaml", "evidence.yaml", "artifacts.yaml"] {
        files.push((rel.into(), std::fs::read_to_string(src.join(rel)).unwrap()));
    }
    // The scripts and their libraries (scripts/lib/).
    for dir in ["scripts", "scripts/lib"] {
        for e in std::fs::read_dir(src.join(dir)).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                let rel = format!("{dir}/{}", e.file_name().to_string_lossy());
                files.push((rel, std::fs::read_to_string(e.path()).unwrap()));
            }
        }
    }
    files.push(("remedies.yaml".into(), remedies.into()));
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    temp_dir(&refs)
}

#[test]
fn a_remedy_whose_example_fails_is_reported() {
    let pack = postgresql_with(
        r#"remedy:
  id: port-in-use
  applies_to: [start-postgresql]
  signature: {output_matches: ['Address already in use']}
  diagnosis: the port is taken.
  plan_patch: {changes: [{retry: start-postgresql}]}
  examples:
    matches:
      - 'FATAL:  could not create any TCP/IP sockets'
    does_not_match:
      - 'LOG:  could not bind IPv4 address "127.0.0.1": Address already in use'
---
remedy:
  id: untested
  applies_to: [start-postgresql]
  signature: {exit_codes: [3]}
  diagnosis: something.
  plan_patch: {changes: [{retry: start-postgresql}]}
"#,
    );
    let run = opsgraph(&["pack", "test", &pack.display().to_string()]);
    expect_test::expect![[r#"
        exit: 1
        --- stdout
        FAILED: pack postgresql@1.2.0: 3 failures of 2 checks
          remedy port-in-use matches[0] (job start-postgresql): should match, but the signature matches nothing
            | FATAL:  could not create any TCP/IP sockets
          remedy port-in-use does_not_match[0] (job start-postgresql): should not match, but matches on output `LOG:  could not bind IPv4 address "127.0.0.1": Address already in use`
            | LOG:  could not bind IPv4 address "127.0.0.1": Address already in use
          remedy untested matches (job start-postgresql): has no `matches` example: an untested remedy
    "#]]
    // stdout only: the pack's validation warnings (stderr) are not what this test is about.
    .assert_eq(&format!("exit: {}\n--- stdout\n{}", run.code, run.out));
}

const PULL_TIMEOUT: &str = r#"[preflight] Pulling images required for setting up a Kubernetes cluster
error execution phase preflight: [preflight] Some fatal errors occurred:
	[ERROR ImagePull]: failed to pull image registry.k8s.io/kube-apiserver:v1.30.2: output: time="2024-06-12T10:02:03Z" level=fatal msg="pulling image: failed to pull and unpack image: failed to do request: Head \"https://registry.k8s.io/v2/kube-apiserver/manifests/v1.30.2\": dial tcp 34.96.108.209:443: i/o timeout"
"#;

fn failure_file(job: &str, output: &str) -> TempDir {
    let mut doc = format!("failure:\n  pack: kubernetes@1.0.0\n  job: {job}\n  exit_code: 1\n  output: |\n");
    for line in output.lines() {
        doc.push_str(&format!("    {line}\n"));
    }
    doc.push_str("  evidence:\n    - {check: kubeadm_init_done, passed: false}\n");
    temp_dir(&[("failure.yaml", &doc)])
}

#[test]
fn diagnose_file_prints_the_diagnosis_the_patch_and_its_review() {
    let dir = failure_file("init-control-plane@cp-1", PULL_TIMEOUT);
    let file = dir.join("failure.yaml").display().to_string();
    let run = opsgraph(&["diagnose", &file]);
    expect_test::expect![[r#"
        exit: 0
        --- stdout
        Diagnosis of init-control-plane@cp-1 (pack kubernetes@1.0.0, rules analyzer, confidence 0.9)
          cause: The container registry registry.k8s.io cannot be reached from the node, so the Kubernetes images cannot be pulled.
          kubeadm failed because images cannot be pulled from registry.k8s.io (a timeout or refusal on the way to the registry). Pull-through mirrors (registry_mirror for docker.io, k8s_registry_mirror for registry.k8s.io) avoid the path.
          based on: output: [ERROR ImagePull]: failed to pull image registry.k8s.io/kube-apiserver:v1.30.2: output: time="2024-06-12T10:02:03Z" level=fatal msg="pulling image: failed to pull and unpack image: failed to do request: Head \"https://registry.k8s.io/v2/kube-apiserver/manifests/v1.30.2\": dial tcp 34.96.108.209:443: i/o timeout"
          remedy: registry-unreachable (pack kubernetes)
        Patch (approval required: sre):
          Configure containerd pull-through mirrors (registry_mirror for docker.io, k8s_registry_mirror for registry.k8s.io) on every node, restart containerd, pre-pull the images through them, then run the kubeadm job that failed again.
          - insert configure-containerd-registry-mirror, restart-containerd, pre-pull-kubernetes-images after install-kubeadm
          - retry init-control-plane
        Review (against the pack's job library and templates only: there is no plan here, so contracts, order, cycles and parameters are checked when the patch is proposed for a real operation (`opsgraph patch`)):
          ok: every job the patch names exists in pack kubernetes@1.0.0
    "#]]
    .assert_eq(&run.render());

    let json = opsgraph(&["diagnose", &file, "-o", "json"]);
    assert_eq!(json.code, 0, "{}", json.render());
    let v: serde_json::Value = serde_json::from_str(&json.out).unwrap();
    assert_eq!(v["remedy"], "registry-unreachable");
    assert_eq!(v["plan_patch"]["changes"][1]["retry"]["job"], "init-control-plane");
    assert_eq!(v["review"]["findings"], serde_json::json!([]));
}

#[test]
fn diagnose_file_says_plainly_when_no_remedy_applies() {
    let dir = failure_file("init-control-plane", "[ERROR SystemVerification]: unsupported kernel release: 3.10.0\n");
    let file = dir.join("failure.yaml").display().to_string();
    let run = opsgraph(&["diagnose", &file]);
    expect_test::expect![[r#"
        exit: 1
        --- stdout
        Diagnosis of init-control-plane (pack kubernetes@1.0.0, rules analyzer)
          no remedy applies: no remedy of pack kubernetes or of the remedy library matches this failure of init-control-plane
          nothing is proposed
    "#]]
    .assert_eq(&run.render());
    let json = opsgraph(&["diagnose", &file, "-o", "json"]);
    assert_eq!(json.code, 1);
    let v: serde_json::Value = serde_json::from_str(&json.out).unwrap();
    assert!(v["remedy"].is_null() && v["plan_patch"].is_null());

    // A job the pack does not have is still analysed, against the library; no patch can name it.
    let dir = failure_file(
        "no-such-job",
        "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 2716 (unattended-upgr)\n",
    );
    let json = opsgraph(&["diagnose", &dir.join("failure.yaml").display().to_string(), "-o", "json"]);
    assert_eq!(json.code, 0, "{}", json.render());
    let v: serde_json::Value = serde_json::from_str(&json.out).unwrap();
    assert_eq!((v["remedy"].as_str(), v["source"].as_str()), (Some("apt-lock-held"), Some("library")));
    assert!(v["plan_patch"].is_null(), "{v}");
    assert!(v["notes"][0].as_str().unwrap().contains("pack kubernetes@1.0.0 has no job `no-such-job`"), "{v}");
}

#[test]
fn diagnose_file_bad_input_exits_2_with_json_errors() {
    let dir = temp_dir(&[
        ("bad.yaml", "failure:\n  pack: kubernetes\n  jbo: x\n"),
        ("other.yaml", "failure:\n  pack: nosuchpack\n  job: x\n"),
    ]);
    let cases = [
        (dir.join("missing.yaml").display().to_string(), "missing_file"),
        (dir.join("bad.yaml").display().to_string(), "invalid_document"),
        (dir.join("other.yaml").display().to_string(), "unknown_pack"),
    ];
    for (file, code) in cases {
        let json = opsgraph(&["diagnose", &file, "-o", "json"]);
        assert_eq!(json.code, 2, "{}", json.render());
        let v: serde_json::Value = serde_json::from_str(&json.out).unwrap();
        assert_eq!((v["outcome"].as_str(), v["error"]["code"].as_str()), (Some("bad_input"), Some(code)), "{v}");
        let schema = opsgraph::remedy_cmd::diagnosis_schema();
        crate::corpus::fits(&v, &schema["$defs"]["bad_input"]).unwrap();
        crate::corpus::fits(&v["error"], &schema["$defs"]["bad_input"]["properties"]["error"]).unwrap();
        let text = opsgraph(&["diagnose", &file]);
        assert_eq!(text.code, 2, "{}", text.render());
        assert!(text.err.contains("error: "), "{}", text.render());
    }
    let missing = opsgraph(&["diagnose", &dir.join("missing.yaml").display().to_string()]);
    assert!(missing.err.contains("missing.yaml: no such file"), "{}", missing.render());
}
