//! Light hosts (`opsgraph lab fleet light`, docs/fleet.md): a network namespace and one sshd
//! each, for fan-out at scale (issue [N] 3). Needs root and `OPSGRAPH_FLEET=1`, as the fleet.

use crate::fleet::{claim, machine};
use crate::support::{opsgraph, temp_dir};

const PACK: &[(&str, &str)] = &[
    (
        "pack/pack.yaml",
        "scenario_pack:
  id: whoami
  version: 0.1.0
  resource_types: [whoami.report]
  actions: [report]
  plan_templates:
    - {id: whoami.report, entrypoint: say, action: report}
",
    ),
    (
        "pack/jobs.yaml",
        "job:
  id: say
  type: diagnostic
  scope: {resources: [compute_node], target: target_nodes}
  run: {command: [sh, -c, 'echo \"$(hostname) $(ip -4 -o addr show dev eth0 | tr -s \" \" | cut -d \" \" -f 4)\"']}
",
    ),
    (
        "pack/templates.yaml",
        "plan_template:
  id: whoami.report
  action: report
  scopes:
    target_nodes: {resource_type: compute_node, from: targets.target_nodes, min: 1}
  stages: [{id: all, name: All, jobs: [say]}]
  jobs: [say]
",
    ),
];

/// `light-i` answered `light-i 10.214.0.(10+i)/22`: what every host must say, and what they said.
fn check(said: &serde_json::Value, n: usize) {
    let mut got: Vec<String> = said
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {said}"))
        .iter()
        .map(|l| format!("{} -> {}", l["job"].as_str().unwrap(), l["output"].as_str().unwrap().trim()))
        .collect();
    got.sort();
    let mut want: Vec<String> =
        (1..=n).map(|i| format!("say@light-{i} -> light-{i} {}/22", opsgraph_fleet::light_address(i))).collect();
    want.sort();
    assert_eq!(got.join("\n"), want.join("\n"));
}

#[test]
fn twenty_light_hosts_each_answer_as_itself_then_nothing_is_left() {
    let Some(_fleet) = claim("twenty_light_hosts_each_answer_as_itself_then_nothing_is_left") else { return };
    let n = 20;
    let tmp = temp_dir(PACK);
    let dir = tmp.join("light").display().to_string();
    let data = tmp.join("data").display().to_string();
    // Whatever fails below, the hosts go (before the directory holding their state does).
    struct Down<'a>(&'a str);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = opsgraph(&["lab", "fleet", "light", "down", "--dir", self.0]);
        }
    }
    let before = machine();
    let thresh = || std::fs::read_to_string("/proc/sys/net/ipv4/neigh/default/gc_thresh1").unwrap();
    let thresh_before = thresh();

    let up = opsgraph(&["lab", "fleet", "light", "up", "--count", &n.to_string(), "--dir", &dir]);
    let _down = Down(&dir);
    assert_eq!(up.code, 0, "{}", up.render());
    assert!(up.out.contains("20 light hosts are up in"), "{}", up.render());
    let again = opsgraph(&["lab", "fleet", "light", "up", "--count", "20", "--dir", &dir]);
    assert!(again.out.contains("20 light hosts are already up"), "{}", again.render());
    let other = opsgraph(&["lab", "fleet", "light", "up", "--count", "3", "--dir", &dir]);
    assert_eq!(other.code, 1, "{}", other.render());
    assert!(
        other.err.contains("error[fleet_refused]: 20 light hosts (20 healthy) are already up"),
        "{}",
        other.render()
    );
    let status = opsgraph(&["lab", "fleet", "light", "status", "--dir", &dir]);
    assert_eq!(status.code, 0, "{}", status.render());
    assert!(status.out.contains("20 of 20 answer; sshd memory:"), "{}", status.render());

    let targets: Vec<String> = (1..=n).map(|i| format!("compute_node/light-{i}")).collect();
    std::fs::write(
        tmp.join("intent.yaml"),
        format!(
            "intent:\n  target_resource_type: whoami.report\n  action: report\n  name: who\n  environment: dev\n  targets:\n    target_nodes: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let intent = tmp.join("intent.yaml").display().to_string();
    let pack = tmp.join("pack").display().to_string();
    let inventory = format!("{dir}/inventory");
    let apply = opsgraph(&[
        "--data-dir",
        &data,
        "apply",
        "--yes",
        "-f",
        &intent,
        "--packs",
        &pack,
        "--inventory",
        &inventory,
        "--concurrency",
        "20",
    ]);
    assert_eq!(apply.code, 0, "{}", apply.render());
    let op = apply.operation_id();
    let logs = opsgraph(&["--data-dir", &data, "logs", &op, "-o", "json"]);
    check(&serde_json::from_str(&logs.out).unwrap_or_else(|e| panic!("{e}: {}", logs.render())), n);
    // The Ansible inventory names the same hosts at the same addresses.
    let ini = std::fs::read_to_string(format!("{dir}/ansible.ini")).unwrap();
    for i in 1..=n {
        assert!(ini.contains(&format!("light-{i} ansible_host={}\n", opsgraph_fleet::light_address(i))), "{ini}");
    }

    let down = opsgraph(&["lab", "fleet", "light", "down", "--dir", &dir]);
    assert_eq!(down.code, 0, "{}", down.render());
    assert!(down.out.contains("removed (20 hosts)"), "{}", down.render());
    assert!(!std::path::Path::new(&dir).exists(), "down left {dir}");
    let namespaces: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!namespaces.iter().any(|n| n.starts_with("oglight-")), "{namespaces:?}");
    assert_eq!(thresh(), thresh_before, "down restores the neighbour-table limits");
    assert_eq!(machine(), before);
}
