//! The inventory `up` writes: one `compute_node` per host, reached over SSH as root with the
//! fleet key and the pinned host keys, that `opsgraph plan/apply --inventory` use as is.

use std::path::Path;

use crate::state::State;

/// The YAML documents (docs/documents.md, `resource`). Paths are absolute.
pub fn inventory(state: &State, key: &Path, known_hosts: &Path, environment: &str) -> String {
    let header = format!(
        "# Written by `opsgraph lab fleet up` for the fleet in {dir}: real Debian 12 hosts on this\n\
         # machine (docs/fleet.md). Gone after `opsgraph lab fleet down`.\n",
        dir = state.dir.display()
    );
    let dir = json(&state.dir.display().to_string());
    let hosts = state.hosts.iter().map(|h| {
        let access = match &h.agent {
            Some(agent) => format!("agent: {agent}"),
            None => format!(
                "ssh: {{host: {}, port: 22, user: root, key: {}, known_hosts: {}}}",
                h.address,
                json(&key.display().to_string()),
                json(&known_hosts.display().to_string())
            ),
        };
        let rest = format!(
            "\x20 attributes: {{os: debian-12, fleet_dir: {dir}}}\n\
             \x20 desired_state: fleet host\n\
             \x20 health: healthy\n\
             \x20 status: running\n\
             \x20 provides:\n\
             \x20   - linux.host\n\
             \x20   - ssh.access\n\
             \x20   - package.manager.apt\n\
             \x20 access:\n\
             \x20   {access}\n"
        );
        (h.name.as_str(), rest)
    });
    compute_nodes(header, environment, "opsgraph", hosts)
}

/// `header`, then one `compute_node` document per host, separated by `---`: its name, the
/// environment, the `fleet` label, then the host's other lines (`rest`, indented as fields).
pub(crate) fn compute_nodes<'a>(
    header: String,
    environment: &str,
    fleet: &str,
    hosts: impl Iterator<Item = (&'a str, String)>,
) -> String {
    let mut out = header;
    for (i, (name, rest)) in hosts.enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&format!(
            "resource:\n\
             \x20 type: compute_node\n\
             \x20 name: {name}\n\
             \x20 environment: {environment}\n\
             \x20 labels: {{fleet: {fleet}}}\n\
             {rest}"
        ));
    }
    out
}

/// A YAML flow scalar that stays one string whatever the path holds (JSON strings are YAML).
fn json(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use expect_test::expect;

    use crate::state::{HostState, State};

    #[test]
    fn one_compute_node_per_host() {
        let mut state = State::new(Path::new("/var/fleet"), Path::new("/cache/rootfs/bookworm-x"));
        for i in 1..=2 {
            state.hosts.push(HostState {
                name: format!("fleet-{i}"),
                address: format!("10.213.0.{}", 10 + i),
                veth: format!("ogf-{i}"),
                dir: format!("/var/fleet/hosts/fleet-{i}").into(),
                launcher_pid: 100 + i,
                pid: 200 + i,
                cgroups: Vec::new(),
                boot_ms: 1000,
                agent: (i == 2).then(|| "fleet-agents".to_string()),
            });
        }
        let got =
            super::inventory(&state, Path::new("/var/fleet/id_ed25519"), Path::new("/var/fleet/known_hosts"), "dev");
        expect![[r##"
            # Written by `opsgraph lab fleet up` for the fleet in /var/fleet: real Debian 12 hosts on this
            # machine (docs/fleet.md). Gone after `opsgraph lab fleet down`.
            resource:
              type: compute_node
              name: fleet-1
              environment: dev
              labels: {fleet: opsgraph}
              attributes: {os: debian-12, fleet_dir: "/var/fleet"}
              desired_state: fleet host
              health: healthy
              status: running
              provides:
                - linux.host
                - ssh.access
                - package.manager.apt
              access:
                ssh: {host: 10.213.0.11, port: 22, user: root, key: "/var/fleet/id_ed25519", known_hosts: "/var/fleet/known_hosts"}
            ---
            resource:
              type: compute_node
              name: fleet-2
              environment: dev
              labels: {fleet: opsgraph}
              attributes: {os: debian-12, fleet_dir: "/var/fleet"}
              desired_state: fleet host
              health: healthy
              status: running
              provides:
                - linux.host
                - ssh.access
                - package.manager.apt
              access:
                agent: fleet-agents
        "##]].assert_eq(&got);
    }
}
