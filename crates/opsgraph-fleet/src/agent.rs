//! An `opsgraph agent` on a fleet host (docs/fleet.md, "Agents on hosts"): the binary copied in,
//! its token in a 0600 file, a systemd unit that runs it against a server on the bridge, and the
//! host's inventory entry turned to `access: {agent: NAME}`. Everything goes in through the host's
//! own namespaces (`nsenter`), never by writing under a mounted overlay from outside.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::host::nsenter;
use crate::state::HostState;
use crate::sys;
use crate::{Error, NET};

/// Where things live inside the host.
pub const BINARY: &str = "/usr/local/bin/opsgraph";
pub const TOKEN: &str = "/etc/opsgraph/agent.token";
pub const UNIT: &str = "opsgraph-agent.service";

/// What `lab fleet agent` installs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The `opsgraph` binary to copy in (a build of this workspace; same glibc as Debian 12).
    pub binary: std::path::PathBuf,
    /// The server, on the bridge: `http://10.213.0.1:PORT`.
    pub server: String,
    /// A token of the `agent` role, on this machine; its name is the agent's name.
    pub token_file: std::path::PathBuf,
    /// The agent's name (the token's name), written into the inventory as `access: {agent: NAME}`.
    pub name: String,
    /// The resources it serves (`--resource`); all that name it when empty.
    pub resources: Vec<String>,
}

/// Refuses a server that is not on the bridge: a host reaches nothing else.
pub(crate) fn check_server(server: &str) -> Result<(), Error> {
    let rest = server.strip_prefix("http://").unwrap_or("");
    let host = rest.split(['/', ':']).next().unwrap_or("");
    if host != format!("{NET}.1") {
        return Err(Error::Refused(format!(
            "the agent's server must be on the fleet's bridge (http://{NET}.1:PORT, `opsgraph serve --listen {NET}.1:PORT`), not {server:?}"
        )));
    }
    Ok(())
}

/// The unit: restarted when it dies, after the network, with its work directory on the host.
pub(crate) fn unit(opts: &AgentOptions) -> String {
    let mut exec = format!(
        "{BINARY} --data-dir /var/lib/opsgraph --server {} --token-file {TOKEN} agent --work-dir /var/lib/opsgraph/agent",
        opts.server
    );
    for r in &opts.resources {
        exec.push_str(&format!(" --resource {r}"));
    }
    format!(
        "# Written by `opsgraph lab fleet agent` (docs/fleet.md).\n\
         [Unit]\n\
         Description=opsgraph agent {name}\n\
         After=network.target\n\
         \n\
         [Service]\n\
         ExecStart={exec}\n\
         Restart=always\n\
         RestartSec=1\n\
         \n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        name = opts.name
    )
}

/// Writes `path` inside the host from `input` with `mode` (through `install`, atomically enough:
/// written to a temporary name, then renamed).
fn put(h: &HostState, path: &str, mode: &str, input: Stdio) -> Result<(), Error> {
    let script = format!(
        "set -eu; umask 077; mkdir -p \"$(dirname {path})\"; cat > {path}.new; chmod {mode} {path}.new; mv -f {path}.new {path}"
    );
    let out = nsenter(h, &["sh", "-c", &script]).stdin(input).output().map_err(|source| Error::Spawn {
        what: format!("write {path} on {}", h.name),
        command: "nsenter".into(),
        source,
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            what: format!("write {path} on {}", h.name),
            command: "nsenter … sh -c 'cat > …'".into(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(())
}

fn file(path: &Path, what: &str) -> Result<Stdio, Error> {
    std::fs::File::open(path).map(Stdio::from).map_err(sys::io(format!("read {what} {}", path.display())))
}

/// Installs and starts the agent on `h`; returns the binary's `--version` as the host ran it.
pub(crate) fn install(h: &HostState, opts: &AgentOptions) -> Result<String, Error> {
    check_server(&opts.server)?;
    if !crate::is_id(&opts.name) {
        return Err(Error::Refused(format!(
            "the agent's name {:?} is not a name (lowercase letters, digits, `-`, `_`, `.`)",
            opts.name
        )));
    }
    put(h, BINARY, "0755", file(&opts.binary, "the opsgraph binary")?)?;
    let version = sys::run(&format!("run opsgraph on {}", h.name), &mut nsenter(h, &[BINARY, "--version"]))?;
    put(h, TOKEN, "0600", file(&opts.token_file, "the agent's token file")?)?;
    let unit_path = format!("/etc/systemd/system/{UNIT}");
    let text = unit(opts);
    let mut child =
        nsenter(h, &["sh", "-c", &format!("umask 022; cat > {unit_path}")]).stdin(Stdio::piped()).spawn().map_err(
            |source| Error::Spawn { what: "write the agent's unit".into(), command: "nsenter".into(), source },
        )?;
    std::io::Write::write_all(child.stdin.as_mut().expect("piped"), text.as_bytes())
        .map_err(sys::io("write the agent's unit"))?;
    drop(child.stdin.take());
    let status = child.wait().map_err(sys::io("write the agent's unit"))?;
    if !status.success() {
        return Err(Error::Refused(format!("could not write {unit_path} on {}", h.name)));
    }
    sys::run(
        &format!("start the agent on {}", h.name),
        &mut nsenter(h, &["sh", "-c", &format!("systemctl daemon-reload && systemctl enable --now {UNIT}")]),
    )?;
    let mut state = String::new();
    let active = sys::wait_until(Duration::from_secs(10), || {
        state = nsenter(h, &["systemctl", "is-active", UNIT])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        state == "active"
    });
    if !active {
        return Err(Error::Refused(format!("the agent's unit on {} is {state}, not active", h.name)));
    }
    Ok(version.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use expect_test::expect;

    use super::{check_server, unit, AgentOptions};

    #[test]
    fn the_unit_runs_the_agent_against_the_bridge() {
        let opts = AgentOptions {
            binary: "/x/opsgraph".into(),
            server: "http://10.213.0.1:8437".into(),
            token_file: "/x/token".into(),
            name: "fleet-agents".into(),
            resources: vec!["compute_node/fleet-2".into()],
        };
        expect![[r#"
            # Written by `opsgraph lab fleet agent` (docs/fleet.md).
            [Unit]
            Description=opsgraph agent fleet-agents
            After=network.target

            [Service]
            ExecStart=/usr/local/bin/opsgraph --data-dir /var/lib/opsgraph --server http://10.213.0.1:8437 --token-file /etc/opsgraph/agent.token agent --work-dir /var/lib/opsgraph/agent --resource compute_node/fleet-2
            Restart=always
            RestartSec=1

            [Install]
            WantedBy=multi-user.target
        "#]]
        .assert_eq(&unit(&opts));
    }

    #[test]
    fn a_server_off_the_bridge_is_refused() {
        let got: Vec<String> =
            ["http://10.213.0.1:8437", "http://127.0.0.1:8437", "https://10.213.0.1:1", "10.213.0.1:80"]
                .iter()
                .map(|s| {
                    format!("{s}: {}", check_server(s).map(|_| "ok".to_string()).unwrap_or_else(|e| e.to_string()))
                })
                .collect();
        expect![[r#"
            http://10.213.0.1:8437: ok
            http://127.0.0.1:8437: the agent's server must be on the fleet's bridge (http://10.213.0.1:PORT, `opsgraph serve --listen 10.213.0.1:PORT`), not "http://127.0.0.1:8437"
            https://10.213.0.1:1: the agent's server must be on the fleet's bridge (http://10.213.0.1:PORT, `opsgraph serve --listen 10.213.0.1:PORT`), not "https://10.213.0.1:1"
            10.213.0.1:80: the agent's server must be on the fleet's bridge (http://10.213.0.1:PORT, `opsgraph serve --listen 10.213.0.1:PORT`), not "10.213.0.1:80""#]]
        .assert_eq(&got.join("\n"));
    }
}
