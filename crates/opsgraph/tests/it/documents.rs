//! Documents: the seed's examples are valid as they stand; bad input gets every problem at once,
//! each with file:line:column, what was expected and a hint.

use expect_test::{expect, Expect};

use crate::support::{opsgraph, path, printed, temp_dir};

/// Validates `yaml` as a file named `doc.yaml` and compares the whole outcome.
fn check(yaml: &str, expect: Expect) {
    let dir = temp_dir(&[("doc.yaml", yaml)]);
    let run = opsgraph(&["validate", &dir.join("doc.yaml").display().to_string()]);
    let text = run.render().replace(&dir.display().to_string(), "$TMP");
    expect.assert_eq(&text);
}

#[test]
fn seed_examples_are_valid_documents() {
    let dir = path("crates/opsgraph/tests/it/fixtures/seed");
    let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    names.sort();
    assert_eq!(names.len(), 9, "one fixture per seed section: §5 §6 §8 §9 §10 §12 §13 §14 §15");
    let mut summary = String::new();
    for file in names {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let parsed = opsgraph_core::pack::parse_file(&name, &text);
        assert!(parsed.diagnostics.is_empty(), "{name}: {:?}", parsed.diagnostics);
        assert_eq!(parsed.docs.len(), 1, "{name}");
        let doc = &parsed.docs[0].doc;
        // Round trip: the normal form reads back as the same value.
        let json = serde_json::to_value(doc).unwrap();
        let back: opsgraph_core::model::Document = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(&back, doc, "{name}");
        summary.push_str(&format!("{name}: {json}\n"));
    }
    expect![[r#"
        s05-constraints.yaml: {"requires":[{"capability":"object_storage.s3","constraints":{"access_mode":"dedicated","encryption":"required","environment":"prod","min_capacity_gb":500,"region":"same-as-workload"}}]}
        s06-policy.yaml: {"capability_policy":{"object_storage.s3":{"dev":{"allowed_providers":["shared_minio"]},"prod":{"allowed_providers":["aws_s3","dedicated_minio"],"require_encryption":true,"require_approval":true},"stage":{"allowed_providers":["shared_minio","dedicated_minio"],"default_provider":"shared_minio"}}}}
        s08-job.yaml: {"job":{"id":"install-container-runtime","title":"Install container runtime","type":"automation","scope":{"resources":["compute_node"]},"inputs":{"parameters":{"runtime":"containerd","version":"1.7.x"},"requires":{"capabilities":[{"capability":"linux.host","scope":"target_nodes"},{"capability":"ssh.access","scope":"target_nodes"},{"capability":"package.manager.apt","scope":"target_nodes"},{"capability":"network.registry_access","scope":"target_nodes"}],"artifacts":["node_inventory","registry_mirror_config"]}},"outputs":{"provides":{"capabilities":[{"capability":"container.runtime.containerd","scope":"target_nodes"}]},"artifacts":["containerd_config_snapshot","package_install_report"],"evidence":["containerd_service_active","crictl_works"]},"controls":{"retry_policy":{"max_attempts":2},"idempotency":{"key":"install-containerd:{node_id}:{version}"},"rollback":{"supported":"partial"},"manual_intervention":{"allowed":true}}}}
        s09-artifact.yaml: {"artifact":{"id":"kubeconfig.admin","type":"kubeconfig.admin","sensitivity":"secret","storage":"secret_ref","visible_to_roles":["sre","platform_admin"]}}
        s10-evidence.yaml: {"evidence":[{"id":"containerd_service_active","source":"systemd","command":{"line":"systemctl is-active containerd"},"expected":"active"},{"id":"crictl_works","source":"command","command":{"line":"crictl info"},"expected_exit_code":0}]}
        s12-gate.yaml: {"gate":{"id":"approve-dedicated-minio","type":"approval","reason":"Tempo requires object_storage.s3 and no existing prod provider matches.","options":["create dedicated MinIO","bind external S3","cancel operation"],"required_roles":["sre","platform_admin"]}}
        s13-intervention.yaml: {"intervention":{"type":"manually_fixed","target_stage":"join-workers","actor":"user","note":"Fixed DNS resolver on worker-3 and restarted kubelet.","requires_verification":["kubelet_ready","node_registered"]}}
        s14-plan-patch.yaml: {"plan_patch":{"author":"ai-agent:sre","reason":"kubeadm init failed because images cannot be pulled from registry-1.docker.io.","changes":[{"insert_after":{"anchor":"install-container-runtime","jobs":["configure-containerd-registry-mirror","restart-containerd","pre-pull-kubernetes-images"]}},{"retry":{"job":"init-control-plane","with_descendants":false}}],"approval":{"required":true,"roles":["sre"]}}}
        s15-scenario-pack.yaml: {"scenario_pack":{"id":"tempo","version":"1.0.0","resource_types":["tempo.instance"],"actions":["install","upgrade","scale","repair","uninstall"],"requires":[{"capability":"kubernetes.cluster"},{"capability":"object_storage.s3"},{"capability":"secret.store"}],"provides":[{"capability":"observability.tracing"}],"plan_templates":[{"id":"tempo.install","entrypoint":"install-tempo"}],"editable":{"advanced_mode":true},"risk":{"default_level":"medium"}}}
    "#]]
    .assert_eq(&summary);
}

#[test]
fn validate_reports_ok() {
    let run = opsgraph(&["validate", &path("crates/opsgraph/tests/it/fixtures/seed")]);
    expect![[r#"
        exit: 0
        --- stdout
        ok: 9 documents valid
    "#]]
    .assert_eq(&run.render());
}

#[test]
fn broken_yaml() {
    check(
        "gate:\n  id: a\n  options: [x,\n",
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/doc.yaml:4:1: error[E001]: invalid YAML: while parsing a node, did not find expected node content
            1 error, 0 warnings
        "#]],
    );
}

#[test]
fn every_problem_of_a_file_at_once() {
    check(
        r#"gate:
  id: Approve Dedicated
  type: aproval
  reason: needs a person
  option: [create dedicated MinIO]
  required_roles: sre
---
resource:
  type: cluster
  name: prod-k8s
  health: fine
  provides:
    - capability: kubernetes.cluster
      atributes: {}
---
artifact:
  type: kubeconfig.admin
  sensitivity: topsecret
---
job:
  id: install
  controls:
    retry_policy: {max_attempts: 0, backoff: 10}
    manual_intervention: {allowed: yes}
  run: {command: [apt-get, install], script: scripts/install.sh}
"#,
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/doc.yaml:2:7: error[E007]: `Approve Dedicated` is not a valid id
              = expected: an id: lowercase letters, digits, `.`, `_`, `-`, starting with a letter or digit
              = hint: did you mean `approve-dedicated`?
            $TMP/doc.yaml:3:9: error[E006]: unknown value `aproval`
              = expected: one of `approval`, `provider_selection`, `destructive_action`, `policy_exception`, `missing_input`, `cost_confirmation`
              = hint: did you mean `approval`?
            $TMP/doc.yaml:5:3: error[E003]: unknown key `option` in gate
              = expected: one of `id`, `type`, `reason`, `options`, `required_roles`, `before`
              = hint: did you mean `options`?
            $TMP/doc.yaml:6:19: error[E005]: found a string
              = expected: a list of ids
            $TMP/doc.yaml:11:11: error[E006]: unknown value `fine`
              = expected: one of `healthy`, `degraded`, `error`, `unknown`
            $TMP/doc.yaml:14:7: error[E003]: unknown key `atributes` in provided capability
              = expected: one of `capability`, `attributes`
              = hint: did you mean `attributes`?
            $TMP/doc.yaml:18:16: error[E006]: unknown value `topsecret`
              = expected: one of `public`, `internal`, `confidential`, `secret`
              = hint: did you mean `secret`?
            $TMP/doc.yaml:23:34: error[E006]: 0 is out of range
              = expected: an integer >= 1
            $TMP/doc.yaml:23:46: error[E006]: `10` has no unit
              = expected: a duration such as `30s`, `10m`, `1h`
              = hint: write `10s` for seconds
            $TMP/doc.yaml:24:36: error[E005]: `yes` is not a boolean in YAML 1.2
              = expected: true or false
              = hint: write `true`
            $TMP/doc.yaml:25:8: error[E004]: a run needs exactly one of `command`, `script`, `url`
              = expected: `command: [argv...]`, `script: scripts/x.sh`, or `url:` with `executor: http`
            11 errors, 0 warnings
        "#]],
    );
}

#[test]
fn document_roots() {
    check(
        "gate: {id: a, reason: b}\njob: {id: c}\n---\nGate: {id: a}\n---\n- a\n---\nresource:\n  type: host\n  name: a\n  name: b\n",
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/doc.yaml:11:3: error[E001]: invalid YAML: duplicate key `name` (first at line 10)
            1 error, 0 warnings
        "#]],
    );
    check(
        "gate: {id: a, reason: b}\njob: {id: c}\n---\nGate: {id: a}\n---\n- a\n",
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/doc.yaml:1:1: error[E002]: a document has one root key; found gate, job
              = expected: exactly one of resource, provider, capability_policy, operations_policy, intent, scenario_pack, plan_template, job, evidence, artifact, gate, intervention, plan_patch, remedy, failure, requires
              = hint: separate documents with a line `---`
            $TMP/doc.yaml:4:1: error[E002]: unknown document kind `Gate`
              = expected: one of resource, provider, capability_policy, operations_policy, intent, scenario_pack, plan_template, job, evidence, artifact, gate, intervention, plan_patch, remedy, failure, requires
              = hint: did you mean `gate`?
            $TMP/doc.yaml:6:1: error[E002]: a document must be a mapping, found a list
              = expected: a mapping with one root key: resource, provider, capability_policy, operations_policy, intent, scenario_pack, plan_template, job, evidence, artifact, gate, intervention, plan_patch, remedy, failure, requires
            3 errors, 0 warnings
        "#]],
    );
}

#[test]
fn rules_across_fields() {
    check(
        r#"evidence:
  - {id: api, source: http, expected: ok}
  - {id: port, source: tcp, host: db, port: 70000}
  - {id: conf, source: file, url: "http://x"}
---
plan_patch:
  changes:
    - insert_after: init
    - retry: init
      jobs: [a]
    - {skip: {job: a, reason: flaky}, add_gate: {id: g, reason: r}}
    - frobnicate: x
---
capability_policy:
  object_storage.s3:
    stage: {allowed_providers: [shared_minio], default_provider: dedicated_minio}
"#,
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/doc.yaml:2:5: error[E004]: a `http` evidence check needs `url`
              = expected: `url` beside `source: http`
            $TMP/doc.yaml:3:45: error[E006]: 70000 is out of range
              = expected: an integer from 1 to 65535
            $TMP/doc.yaml:4:5: error[E004]: a `file` evidence check needs `path`
              = expected: `path` beside `source: file`
            $TMP/doc.yaml:4:35: error[E006]: `url` belongs to `source: http` checks, not `file`
            $TMP/doc.yaml:8:7: error[E004]: an insert needs `jobs`
              = expected: `jobs: [job-id, ...]` beside `insert_after` or `insert_before`
            $TMP/doc.yaml:10:13: error[E003]: `jobs` goes only with `insert_after` or `insert_before`
            $TMP/doc.yaml:11:7: error[E004]: change takes only one of `skip`, `add_gate`
              = expected: exactly one of `insert_after`, `insert_before`, `retry`, `skip`, `set_parameters`, `add_gate`
            $TMP/doc.yaml:12:7: error[E004]: change needs one of `insert_after`, `insert_before`, `retry`, `skip`, `set_parameters`, `add_gate`
              = expected: exactly one of `insert_after`, `insert_before`, `retry`, `skip`, `set_parameters`, `add_gate`
            $TMP/doc.yaml:12:7: error[E003]: unknown key `frobnicate` in change
              = expected: one of `insert_after`, `insert_before`, `jobs`, `retry`, `skip`, `set_parameters`, `add_gate`
            $TMP/doc.yaml:16:66: error[E006]: default provider `dedicated_minio` is not among the allowed providers of stage
              = expected: one of shared_minio
            10 errors, 0 warnings
        "#]],
    );
}

#[test]
fn bad_ids_and_keys() {
    check(
        "resource:\n  type: Compute Node\n  name: w1\n  provides: [Object-Storage.S3, object_storage..s3]\n  access: {ssh: {hots: 10.0.0.1}}\n",
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/doc.yaml:2:9: error[E007]: `Compute Node` is not a valid id
              = expected: an id: lowercase letters, digits, `.`, `_`, `-`, starting with a letter or digit
              = hint: did you mean `compute-node`?
            $TMP/doc.yaml:4:14: error[E007]: `Object-Storage.S3` is not a valid capability key
              = expected: a dotted capability key such as `object_storage.s3`
              = hint: did you mean `object-storage.s3`?
            $TMP/doc.yaml:4:33: error[E007]: `object_storage..s3` is not a valid capability key
              = expected: a dotted capability key such as `object_storage.s3`
            $TMP/doc.yaml:5:17: error[E004]: ssh access is missing `host`
              = expected: `host`: host name or address
            $TMP/doc.yaml:5:18: error[E003]: unknown key `hots` in ssh access
              = expected: one of `host`, `port`, `user`, `key`, `known_hosts`
              = hint: did you mean `host`?
            5 errors, 0 warnings
        "#]],
    );
}

#[test]
fn schema_for_editors() {
    let run = opsgraph(&["schema", "gate"]);
    assert_eq!(run.code, 0);
    expect![[r##"
        {
          "$schema": "https://json-schema.org/draft/2020-12/schema",
          "$id": "https://opsgraph.dev/schema/gate.json",
          "title": "Opsgraph gate",
          "type": "object",
          "properties": {
            "gate": {
              "$ref": "#/$defs/gate"
            }
          },
          "required": [
            "gate"
          ],
          "additionalProperties": false,
          "$defs": {
            "gate": {
              "type": "object",
              "description": "A DAG node that waits for a person (seed §12).",
              "properties": {
                "id": {
                  "type": "string",
                  "pattern": "^[a-z0-9][a-z0-9._-]*$",
                  "description": "the gate id"
                },
                "type": {
                  "enum": [
                    "approval",
                    "provider_selection",
                    "destructive_action",
                    "policy_exception",
                    "missing_input",
                    "cost_confirmation"
                  ],
                  "description": "approval | provider_selection | destructive_action | policy_exception | missing_input | cost_confirmation"
                },
                "reason": {
                  "type": [
                    "string",
                    "number",
                    "boolean"
                  ],
                  "description": "why it exists"
                },
                "options": {
                  "type": "array",
                  "items": {
                    "type": [
                      "string",
                      "number",
                      "boolean"
                    ]
                  },
                  "description": "the answers a person may give"
                },
                "required_roles": {
                  "type": "array",
                  "items": {
                    "type": "string",
                    "pattern": "^[a-z0-9][a-z0-9._-]*$"
                  },
                  "description": "who may answer"
                },
                "before": {
                  "type": "array",
                  "items": {
                    "type": "string",
                    "pattern": "^[a-z0-9][a-z0-9._-]*$"
                  },
                  "description": "the jobs that wait for it"
                }
              },
              "additionalProperties": false,
              "required": [
                "id",
                "reason"
              ]
            }
          }
        }
    "##]]
    .assert_eq(&run.out);
    for kind in opsgraph_core::pack::kinds() {
        let run = opsgraph(&["schema", kind]);
        let schema: serde_json::Value = serde_json::from_str(&run.out).unwrap();
        assert_eq!(schema["required"][0], kind);
    }
    let all: serde_json::Value = serde_json::from_str(&opsgraph(&["schema"]).out).unwrap();
    assert_eq!(all["oneOf"].as_array().unwrap().len(), 16);
}

/// Validates a pack directory made of `files` and compares the whole outcome.
fn check_pack(files: &[(&str, &str)], expect: Expect) {
    let dir = temp_dir(files);
    let run = opsgraph(&["pack", "validate", &dir.join("demo").display().to_string()]);
    expect.assert_eq(&run.render().replace(&dir.display().to_string(), "$TMP"));
}

/// Evidence that cannot fail is a warning, at the command or in the script it runs; the pack
/// stays valid (exit 0).
#[test]
fn pack_evidence_lint() {
    check_pack(
        &[
            (
                "demo/pack.yaml",
                "scenario_pack:\n  id: demo\n  version: 1.0.0\n  resource_types: [demo.thing]\n  actions: [check]\n  plan_templates: [{id: demo.check}]\n",
            ),
            (
                "demo/templates.yaml",
                "plan_template:\n  id: demo.check\n  action: check\n  stages: [{id: one, name: One, jobs: [verify]}]\n  jobs: [verify]\n",
            ),
            (
                "demo/jobs.yaml",
                "job:\n  id: verify\n  outputs: {evidence: [nodes_ready, swap_off, unit_up, scripted, captured]}\n  run: {command: [true]}\n",
            ),
            (
                "demo/evidence.yaml",
                "evidence:\n  - id: nodes_ready\n    source: command\n    command: >-\n      kubectl get nodes --no-headers\n      | awk '$2 != \"Ready\" {n++} END {print n + 0}'\n    expected: \"0\"\n  - id: swap_off\n    source: command\n    command: [bash, -o, pipefail, -c, 'swapon --show | wc -l']\n    expected: \"0\"\n  - id: unit_up\n    source: systemd\n    command: systemctl is-active demo || true\n  - id: scripted\n    source: command\n    command: sh scripts/check.sh\n  - id: captured\n    source: command\n    command: out=$(kubectl get nodes) && printf '%s\\n' \"$out\" | grep -c Ready\n    matches: '^[1-9]'\n",
            ),
            ("demo/scripts/check.sh", "#!/bin/sh\nset -eu\ndemo status | grep -q up\ndemo ping\ntrue\n"),
        ],
        expect![[r#"
            exit: 0
            --- stdout
            ok: pack demo@1.0.0 sha256:ad83586ddb28620b0058d8a489684c03692cc55326db19a918f5b3f1cdfd9624 (1 templates, 1 jobs, 5 evidence checks, 0 artifacts, 0 remedies)
            --- stderr
            $TMP/demo/evidence.yaml:5:7: warning[W001]: evidence `nodes_ready`: a pipeline without pipefail: its status is its last stage's, so `kubectl` failing or missing goes unnoticed
              = hint: capture first: `out=$(tool …) && printf '%s\n' "$out" | …` (Debian's sh has no pipefail), or run the line with `bash -o pipefail -c`
            $TMP/demo/evidence.yaml:14:14: warning[W002]: evidence `unit_up`: `|| true` turns a failure into success
              = hint: let the command's status decide; to accept a known failure, test for it (`[ … ] ||`) instead
            $TMP/demo/scripts/check.sh:3:13: warning[W001]: evidence `scripted` runs this script: a pipeline without pipefail: its status is its last stage's, so `demo` failing or missing goes unnoticed
              = hint: capture first: `out=$(tool …) && printf '%s\n' "$out" | …` (Debian's sh has no pipefail), or run the line with `bash -o pipefail -c`
            $TMP/demo/scripts/check.sh:4:10: warning[W002]: evidence `scripted` runs this script: a final `true` makes the whole command succeed whatever came before
              = hint: remove it: the status of the last real command is the check's
            0 errors, 4 warnings
        "#]],
    );
}

#[test]
fn pack_cross_references() {
    check_pack(
        &[
            (
                "demo/pack.yaml",
                "scenario_pack:\n  id: demo\n  version: 1.0.0\n  resource_types: [demo.thing]\n  actions: [install, upgrade]\n  provides: [{capability: demo.installed, credentials: demo_key}]\n  plan_templates:\n    - {id: demo.install, entrypoint: instal}\n    - {id: demo.upgrade}\n",
            ),
            (
                "demo/templates.yaml",
                "plan_template:\n  id: demo.install\n  action: install\n  stages:\n    - {id: one, name: One, jobs: [install, configure]}\n    - {id: two, name: Two, jobs: [install]}\n  jobs: [install, configure, verify, ghost]\n  gates:\n    - {id: ok, reason: r, before: [verfy]}\n",
            ),
            (
                "demo/jobs.yaml",
                "job:\n  id: install\n  outputs:\n    provides: {capabilities: [demo.installed]}\n    artifacts: [install_log]\n  run: {script: scripts/install.sh}\n---\njob:\n  id: configure\n  inputs: {requires: {artifacts: [install_logs]}}\n  outputs: {evidence: [configured]}\n  run: {script: ../outside.sh}\n  controls: {rollback: {supported: full, job: unconfigure}}\n---\njob:\n  id: verify\n  outputs: {evidence: [demo_ok]}\n  run: {command: [true]}\n---\njob:\n  id: verify\n",
            ),
            ("demo/evidence.yaml", "evidence:\n  - {id: demo_ok, source: command, command: [demo, status], expected: ok}\n"),
            ("demo/artifacts.yaml", "artifact: {id: install_log, type: log, sensitivity: internal}\n"),
            (
                "demo/remedies.yaml",
                "remedy:\n  id: retry-it\n  applies_to: [instal]\n  signature: {output_matches: ['timeout']}\n  diagnosis: it timed out\n  plan_patch:\n    changes:\n      - insert_after: install\n        jobs: [warm-cache]\n      - retry: {job: configure}\n",
            ),
            ("demo/scripts/other.sh", "#!/bin/sh\n"),
        ],
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/demo/jobs.yaml:1:1: warning[E010]: job `install` provides a capability but declares no evidence
              = hint: evidence decides success: add a check under outputs.evidence
            $TMP/demo/jobs.yaml:6:17: error[E009]: script `scripts/install.sh` does not exist
              = expected: a file under $TMP/demo
            $TMP/demo/jobs.yaml:10:35: error[E009]: unknown artifact `install_logs`
              = expected: an artifact declared in this pack, with its sensitivity
              = hint: did you mean `install_log`?
            $TMP/demo/jobs.yaml:11:24: error[E009]: unknown evidence check `configured`
              = expected: one of demo_ok
            $TMP/demo/jobs.yaml:12:17: error[E006]: script `../outside.sh` is outside the pack
              = expected: a path inside the pack directory, such as scripts/install.sh
            $TMP/demo/jobs.yaml:13:47: error[E009]: unknown rollback job `unconfigure`
              = hint: did you mean `configure`?
            $TMP/demo/jobs.yaml:21:7: error[E008]: job `verify` is declared twice
              = hint: first declared at $TMP/demo/jobs.yaml:16:7
            $TMP/demo/pack.yaml:5:12: warning[E010]: action `upgrade` has no plan template yet; intents for it cannot be planned
            $TMP/demo/pack.yaml:6:56: error[E009]: unknown artifact `demo_key` for the credentials of demo.installed
              = expected: an artifact declared in this pack, produced by one of its jobs
            $TMP/demo/pack.yaml:8:38: error[E009]: unknown entrypoint job `instal`
              = hint: did you mean `install`?
            $TMP/demo/pack.yaml:9:12: error[E009]: unknown plan template `demo.upgrade`
              = expected: one of demo.install
            $TMP/demo/remedies.yaml:3:16: error[E009]: unknown job `instal`
              = hint: did you mean `install`?
            $TMP/demo/remedies.yaml:8:9: error[E009]: remedy `retry-it` inserts job `warm-cache`, which is not in the pack's job library
              = hint: add a `job:` document with id `warm-cache`
            $TMP/demo/templates.yaml:6:35: error[E008]: job `install` is in stage `one` and in stage `two`
            $TMP/demo/templates.yaml:7:30: error[E010]: job `verify` is in no stage
              = hint: every job belongs to one stage: people see stages, the protocol runs jobs
            $TMP/demo/templates.yaml:7:38: error[E009]: unknown job `ghost`
              = expected: one of configure, install, verify
            $TMP/demo/templates.yaml:9:36: error[E009]: unknown job of this template `verfy`
              = hint: did you mean `verify`?
            15 errors, 2 warnings
        "#]],
    );
}

#[test]
fn limits_stop_hostile_documents_before_they_cost_anything() {
    let deep = format!("intent: {}{}\n", "[".repeat(70), "]".repeat(70));
    check(
        &deep,
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/doc.yaml:1:72: error[E011]: nesting deeper than 64 levels (limit: depth of a document)
            1 error, 0 warnings
        "#]],
    );
    // "Billion laughs": each level doubles the one before; expanded, it would be 2^40 nodes.
    let mut laughs = String::from("a0: &a0 [lol, lol]\n");
    for i in 1..40 {
        laughs.push_str(&format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
    }
    let text = format!("intent:\n  parameters:\n{}", laughs.lines().map(|l| format!("    {l}\n")).collect::<String>());
    let dir = temp_dir(&[("doc.yaml", &text)]);
    let run = opsgraph(&["validate", &dir.join("doc.yaml").display().to_string()]);
    assert!(run.err.contains("error[E011]: more than 1000000 nodes with aliases expanded"), "{}", run.render());
    let big = format!("# {}\nintent: {{target_resource_type: x, action: y}}\n", "x".repeat(1 << 20));
    check(
        &big,
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/doc.yaml:1:1: error[E011]: the file is 1048624 bytes; the limit is 1048576 bytes (1 MiB) per file
              = hint: split it into several files
            1 error, 0 warnings
        "#]],
    );
}

/// Runs the real binary with `args`; it must finish within 20 s (a FIFO must not hang a read).
fn bounded(args: &[&str]) -> String {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_opsgraph"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("opsgraph {args:?} hung");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    format!("exit: {}\n{}", out.status.code().unwrap_or(-1), printed(&out))
}

#[test]
fn special_files_links_out_of_the_tree_and_oversized_files_are_refused_before_reading() {
    let intent = "intent: {target_resource_type: x, action: y}\n";
    let dir = temp_dir(&[("docs/a.yaml", intent), ("outside/secret.yaml", intent)]);
    let docs = dir.join("docs");
    let run = |cmd: &str| {
        assert!(
            std::process::Command::new("sh").arg("-c").arg(cmd).current_dir(&docs).status().unwrap().success(),
            "{cmd}"
        )
    };
    run("mkfifo fifo.yaml");
    run("ln -s ../outside/secret.yaml out.yaml && ln -s a.yaml in.yaml && ln -s /etc out-dir && ln -s . loop");
    run("ln -s nowhere.yaml dangling.yaml && truncate -s 2M big.yaml");
    let _socket = std::os::unix::net::UnixListener::bind(docs.join("socket.yaml")).unwrap();
    let show = |text: String| text.replace(&dir.display().to_string(), "$TMP");
    // A directory: every problem with its path, the link inside the tree read, the loop once.
    expect![[r#"
        exit: 1
        $TMP/docs/big.yaml:1:1: error[E011]: the file is 2097152 bytes; the limit is 1048576 bytes (1 MiB) per file
          = hint: split it into several files
        $TMP/docs/dangling.yaml: error[E012]: cannot read: a symbolic link to nothing (No such file or directory (os error 2))
        $TMP/docs/fifo.yaml: error[E012]: refused: a FIFO; only regular files are read
        $TMP/docs/out.yaml: error[E012]: refused: a symbolic link leaving the tree (to $TMP/outside/secret.yaml)
        $TMP/docs/socket.yaml: error[E012]: refused: a socket; only regular files are read
        $TMP/docs/a.yaml:1:1: warning[E009]: parameters not checked: no loaded pack manages resource type `x` (managed types: etcd.cluster, cluster, lab.cluster, lab.database, minio.instance, postgresql.instance, postgresql.local, tempo.instance) (P001)
          = hint: name the pack directory with --packs, or install the pack
        $TMP/docs/in.yaml:1:1: warning[E009]: parameters not checked: no loaded pack manages resource type `x` (managed types: etcd.cluster, cluster, lab.cluster, lab.database, minio.instance, postgresql.instance, postgresql.local, tempo.instance) (P001)
          = hint: name the pack directory with --packs, or install the pack
        5 errors, 2 warnings
    "#]]
    .assert_eq(&show(bounded(&["validate", &docs.display().to_string()])));
    // Named one by one: the same, and a device too.
    let named: Vec<String> =
        ["fifo.yaml", "big.yaml", "missing.yaml"].iter().map(|f| docs.join(f).display().to_string()).collect();
    let mut args = vec!["validate"];
    args.extend(named.iter().map(String::as_str));
    args.push("/dev/zero");
    expect![[r#"
        exit: 1
        $TMP/docs/fifo.yaml: error[E012]: refused: a FIFO; only regular files are read
        $TMP/docs/big.yaml:1:1: error[E011]: the file is 2097152 bytes; the limit is 1048576 bytes (1 MiB) per file
          = hint: split it into several files
        $TMP/docs/missing.yaml: error[E012]: cannot read: No such file or directory (os error 2)
        /dev/zero: error[E012]: refused: a device; only regular files are read
        4 errors, 0 warnings
    "#]]
    .assert_eq(&show(bounded(&args)));
    // An intent given to `plan -f` and packs given with `--packs`.
    expect![[r#"
        exit: 1
        $TMP/docs/fifo.yaml: error[E012]: refused: a FIFO; only regular files are read
        1 error, 0 warnings
    "#]]
    .assert_eq(&show(bounded(&["plan", "-f", &docs.join("fifo.yaml").display().to_string()])));
    expect![[r#"
        exit: 1
        $TMP/docs/big.yaml:1:1: error[E011]: the file is 2097152 bytes; the limit is 1048576 bytes (1 MiB) per file
          = hint: split it into several files
        $TMP/docs/dangling.yaml: error[E012]: cannot read: a symbolic link to nothing (No such file or directory (os error 2))
        $TMP/docs/fifo.yaml: error[E012]: refused: a FIFO; only regular files are read
        $TMP/docs/out-dir: error[E012]: refused: a symbolic link leaving the tree (to /etc)
        $TMP/docs/out.yaml: error[E012]: refused: a symbolic link leaving the tree (to $TMP/outside/secret.yaml)
        $TMP/docs/socket.yaml: error[E012]: refused: a socket; only regular files are read
        $TMP/docs: error[E010]: no pack here: no pack.yaml in it or in its subdirectories
        7 errors, 0 warnings
    "#]].assert_eq(&show(bounded(&["pack", "validate", &docs.display().to_string()])));
}

/// `validate` checks an intent's parameters against the template it picks, as `plan` does, each
/// problem at the value's file:line:column ([O] 5); an intent no pack takes is a warning.
#[test]
fn validate_checks_intent_parameters_as_plan_does() {
    check(
        "intent:\n  target_resource_type: tempo.instance\n  action: install\n  name: t1\n  environment: dev\n  parameters:\n    retention_days: two weeks\n    retension: 3\n    namespace: [a]\n",
        expect![[r#"
            exit: 1
            --- stderr
            $TMP/doc.yaml:7:21: error[P003]: parameter `retention_days` must be a integer, found "two weeks"
            $TMP/doc.yaml:8:16: error[P003]: template `tempo.install` has no parameter `retension` (parameters: bucket, chart_version, mc_image, namespace, release_name, retention_days, s3_endpoint, wal_storage_size)
            $TMP/doc.yaml:9:16: error[P003]: parameter `namespace` must be a string, found ["a"]
            3 errors, 0 warnings
        "#]],
    );
    check(
        "intent:\n  target_resource_type: tempo.instance\n  action: install\n  name: t1\n  environment: dev\n  parameters: {retention_days: 7}\n",
        expect![[r#"
            exit: 0
            --- stdout
            ok: 1 document valid
        "#]],
    );
    check(
        "intent:\n  target_resource_type: nothing.here\n  action: install\n  name: t1\n  environment: dev\n  parameters: {x: 1}\n",
        expect![[r#"
            exit: 0
            --- stdout
            ok: 1 document valid
            --- stderr
            $TMP/doc.yaml:1:1: warning[E009]: parameters not checked: no loaded pack manages resource type `nothing.here` (managed types: etcd.cluster, cluster, lab.cluster, lab.database, minio.instance, postgresql.instance, postgresql.local, tempo.instance) (P001)
              = hint: name the pack directory with --packs, or install the pack
            0 errors, 1 warning
        "#]],
    );
}
