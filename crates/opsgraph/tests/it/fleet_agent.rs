//! Agents on fleet hosts (issue [H] 5, docs/fleet.md "Agents on hosts"): `opsgraph serve` on the
//! bridge address, `opsgraph lab fleet agent` installing the real binary as a systemd unit on a
//! real host, and an operation whose jobs run through that agent over the bridge: the host's
//! sshd is stopped before the operation starts, and the ledger on the host's disk names the
//! agent as the job's parent. Needs root and OPSGRAPH_FLEET=1, like every fleet test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use opsgraph_store::Store;

use crate::fleet::{claim, machine, Fleet};
use crate::serve::wait_terminal;
use crate::support::{free_port, opsgraph, temp_dir, StepPack, TempDir};

/// The ledger on a host's disk: one line per run of a job (`OP JOB HOST PARENT`).
pub(crate) const LEDGER: &str = "/var/lib/fleet-ledger/ledger";

/// A pack of `jobs` jobs in a chain, each fanned out over the intent's nodes: the job appends to
/// the ledger on the host, writes `size_kb` KiB into `/var/lib/fleet-data` (the disk a fault can
/// fill), sleeps `sleep` seconds (the window a fault lands in), then proves itself with a marker
/// the evidence checks. `controls(k)` goes into job `k`. Its remedies name the two failures the
/// fault tests cause: a host that cannot be reached, a disk that is full.
pub(crate) fn pack(jobs: usize, controls: &dyn Fn(usize) -> String) -> Vec<(String, String)> {
    let pack = StepPack {
        id: "ledger",
        resource_type: "ledger.run",
        parameters: "    sleep: {type: string, default: \"0\"}\n    size_kb: {type: string, default: \"4\"}\n",
        done: "test -f \"/var/lib/fleet-ledger/$OPSGRAPH_OPERATION_ID.$OPSGRAPH_JOB_ID\"",
        step: STEP,
    };
    let mut files = pack.files(jobs, &|k| {
        let after = if k == 0 { String::new() } else { format!("after: [j{}], ", k - 1) };
        format!("{after}{}", controls(k))
    });
    let ids: Vec<String> = (0..jobs).map(|k| format!("j{k}")).collect();
    files.push(("packs/ledger/remedies.yaml".to_string(), REMEDIES.replace("JOBS", &ids.join(", "))));
    files
}

const STEP: &str = "mkdir -p /var/lib/fleet-ledger /var/lib/fleet-data
printf '%s %s %s %s start\\n' \"$OPSGRAPH_OPERATION_ID\" \"$OPSGRAPH_JOB_ID\" \"$(hostname)\" \"$(cat /proc/$PPID/comm)\" >> /var/lib/fleet-ledger/ledger
sync
dd if=/dev/zero of=\"/var/lib/fleet-data/$OPSGRAPH_JOB_ID\" bs=1024 count=\"$OPSGRAPH_PARAM_SIZE_KB\" status=none
sleep \"$OPSGRAPH_PARAM_SLEEP\"
touch \"/var/lib/fleet-ledger/$OPSGRAPH_OPERATION_ID.$OPSGRAPH_JOB_ID\"
printf '%s %s %s %s done\\n' \"$OPSGRAPH_OPERATION_ID\" \"$OPSGRAPH_JOB_ID\" \"$(hostname)\" \"$(cat /proc/$PPID/comm)\" >> /var/lib/fleet-ledger/ledger
sync
";

const REMEDIES: &str = "remedy:
  id: host-unreachable
  applies_to: [JOBS]
  signature:
    output_matches: ['(No route to host|Connection refused|Connection timed out|Timeout, server .* not responding|closed by remote host|kex_exchange_identification: .*Connection reset by peer)']
  diagnosis: The host could not be reached over SSH (it is down, its network is cut, or sshd is not running). Bring it back, then retry.
  plan_patch:
    reason: A person brings the host back, then the job runs again.
    changes:
      - retry: {job: j0}
---
remedy:
  id: disk-full
  applies_to: [JOBS]
  signature:
    output_matches: ['No space left on device']
  diagnosis: The host's data disk is full. Free or grow it, then retry.
  plan_patch:
    reason: A person frees the disk, then the job runs again.
    changes:
      - retry: {job: j0}
";

pub(crate) fn intent(nodes: &[&str], sleep: &str, size_kb: &str) -> String {
    let targets: Vec<String> = nodes.iter().map(|n| format!("compute_node/{n}")).collect();
    format!(
        "intent:\n  target_resource_type: ledger.run\n  action: run\n  name: ledger\n  environment: dev\n  parameters: {{sleep: \"{sleep}\", size_kb: \"{size_kb}\"}}\n  targets:\n    nodes: [{}]\n",
        targets.join(", ")
    )
}

/// The ledger's lines on a host: (operation, job) -> runs, with the parent of each run.
pub(crate) fn ledger(fleet_dir: &Path, host: usize) -> Vec<String> {
    let (state, _) = opsgraph_fleet::status(fleet_dir).unwrap().unwrap();
    let o = opsgraph_fleet::exec(&state.hosts[host], &["cat", LEDGER]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).lines().map(str::to_owned).collect()
}

/// `opsgraph serve` on the bridge address, killed on drop.
struct Server {
    child: Child,
    port: u16,
    admin: String,
    data: PathBuf,
    log: PathBuf,
}

/// The data directory's tokens: the admin's, and the agent's (named `fleet-agents`) in a file.
fn tokens(tmp: &TempDir) -> (String, PathBuf) {
    let data = tmp.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let (admin, agent) =
        crate::support::admin_and_agent_tokens(&mut *opsgraph::ops_cmd::open_store(&data).unwrap(), "fleet-agents");
    let token = tmp.join("agent.token");
    std::fs::write(&token, agent).unwrap();
    (admin, token)
}

impl Server {
    fn start(tmp: &TempDir, inventory: &Path, port: u16, admin: &str) -> Server {
        let data = tmp.join("data");
        let admin = admin.to_owned();
        let log = tmp.join("server.log");
        let child = Command::new(env!("CARGO_BIN_EXE_opsgraph"))
            .args(["--data-dir", &data.display().to_string(), "serve", "--listen", &format!("10.213.0.1:{port}")])
            .args(["--packs", &tmp.join("packs").display().to_string()])
            .args(["--inventory", &inventory.display().to_string()])
            .args(["--agent-lease", "5s", "--agent-claim-timeout", "60s"])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::OpenOptions::new().append(true).open(&log).unwrap())
            .spawn()
            .unwrap();
        let s = Server { child, port, admin, data, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.call("GET", "/api/v1/health", "").0 != 200 {
            assert!(Instant::now() < deadline, "the server did not start: {}", s.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        s
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn call(&self, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        use std::io::{Read as _, Write as _};
        let Ok(mut s) = std::net::TcpStream::connect(("10.213.0.1", self.port)) else { return (0, Default::default()) };
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.admin,
            body.len()
        );
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        (status, serde_json::from_str(body).unwrap_or_default())
    }

    /// Waits for the operation to end; its state and detail.
    fn wait(&self, id: &str, timeout: Duration) -> (String, String) {
        let store = opsgraph::ops_cmd::open_store(&self.data).unwrap();
        wait_terminal(&*store, id, timeout, Duration::from_millis(200))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_agent_on_a_fleet_host_runs_its_jobs_over_the_bridge_not_ssh() {
    let Some(_one) = claim("an_agent_on_a_fleet_host_runs_its_jobs_over_the_bridge_not_ssh") else { return };
    let started = Instant::now();
    let files = pack(2, &|_| String::new());
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let tmp = temp_dir(&refs);
    let dir = tmp.join("fleet");
    let d = dir.display().to_string();
    let before = machine();
    let fleet = Fleet::up(&dir, 1);
    let inventory = dir.join("inventory");

    // The agent first (it retries until its server answers), then the server on the bridge's
    // address (there once the fleet is up), reading the inventory that now says agent.
    let (admin, token) = tokens(&tmp);
    let port = free_port("10.213.0.1");
    let url = format!("http://10.213.0.1:{port}");
    let bin = env!("CARGO_BIN_EXE_opsgraph");
    let t = token.display().to_string();
    // `lab fleet agent fleet-1` with the agent's token, named `fleet-agents`, of `server`.
    let install = |server: &str, more: &[&str]| {
        let args = ["lab", "fleet", "agent", "fleet-1", "--dir", &d, "--server", server, "--token-file", &t];
        opsgraph(&[&args[..], &["--name", "fleet-agents"], more].concat())
    };
    let agent = install(&url, &["--binary", bin]);
    assert_eq!(agent.code, 0, "{}", agent.render());
    assert!(agent.out.starts_with("fleet-1: opsgraph "), "{}", agent.out);
    // The inventory now says the host is served by the agent; the token is root's alone.
    let inv = std::fs::read_to_string(inventory.join("fleet.yaml")).unwrap();
    assert!(inv.contains("  access:\n    agent: fleet-agents\n") && !inv.contains("ssh:"), "{inv}");
    let (state, _) = opsgraph_fleet::status(&dir).unwrap().unwrap();
    let h = &state.hosts[0];
    let stat = opsgraph_fleet::exec(h, &["stat", "-c", "%a %U", opsgraph_fleet::AGENT_TOKEN]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&stat.stdout), "600 root\n");
    // `status` shows the agent and its unit; a stopped agent makes the host unhealthy.
    let status = || opsgraph(&["lab", "fleet", "status", "--dir", &d]);
    let up = status();
    assert_eq!(up.code, 0, "{}", up.render());
    let row = |run: &crate::support::Run| {
        let line = run.out.lines().find(|l| l.starts_with("fleet-1 ")).unwrap();
        line.split_whitespace().rev().take(3).collect::<Vec<_>>().join(" ")
    };
    assert_eq!(row(&up), "healthy (active) fleet-agents", "{}", up.out);
    let stop = opsgraph_fleet::exec(h, &["systemctl", "stop", opsgraph_fleet::AGENT_UNIT]).status().unwrap();
    assert!(stop.success());
    let down = status();
    assert_eq!(down.code, 1, "{}", down.render());
    assert_eq!(row(&down), "unhealthy (inactive) fleet-agents", "{}", down.out);
    let start = opsgraph_fleet::exec(h, &["systemctl", "start", opsgraph_fleet::AGENT_UNIT]).status().unwrap();
    assert!(start.success());
    // A wrong server is refused before anything is copied.
    let bad = install("http://127.0.0.1:1", &[]);
    assert_eq!(bad.code, 1, "{}", bad.render());
    assert!(
        bad.err.starts_with("error[fleet_refused]: the agent's server must be on the fleet's bridge"),
        "{}",
        bad.err
    );

    // No SSH: sshd is stopped (and its socket) before the operation exists.
    let stop = opsgraph_fleet::exec(
        h,
        &["sh", "-c", "systemctl stop ssh.service ssh.socket 2>/dev/null; systemctl is-active ssh.service || true"],
    )
    .output()
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&stop.stdout).trim(), "inactive");
    let server = Server::start(&tmp, &inventory, port, &admin);
    let (status, body) = server.call("POST", "/api/v1/operations", &intent(&["fleet-1"], "1", "4"));
    assert_eq!(status, 201, "{body}\n{}", server.log());
    let id = body["id"].as_str().unwrap().to_owned();
    let (state_, detail) = server.wait(&id, Duration::from_secs(120));
    let journal = opsgraph_fleet::exec(h, &["journalctl", "-u", opsgraph_fleet::AGENT_UNIT, "--no-pager", "-n", "30"])
        .output()
        .unwrap();
    assert_eq!(state_, "completed", "{detail}\n{}\n{}", server.log(), String::from_utf8_lossy(&journal.stdout));

    // The ledger on the host's disk: each job once, on fleet-1, its parent the agent.
    let lines = ledger(&dir, 0);
    let want: Vec<String> = ["j0", "j1"]
        .iter()
        .flat_map(|j| ["start", "done"].map(|w| format!("{id} {j}@fleet-1 fleet-1 opsgraph {w}")))
        .collect();
    assert_eq!(lines, want);
    // The store: a task per job, each claimed once by the agent on fleet-1 (`agent:NAME/HOSTNAME/PID`).
    let store = opsgraph::ops_cmd::open_store(&server.data).unwrap();
    let tasks = store.agent_tasks(&id).unwrap();
    let claims: Vec<_> =
        tasks.iter().map(|t| (t.job.as_str(), t.claimed_by.as_deref().unwrap_or(""), t.claims)).collect();
    assert!(
        claims.len() == 2 && claims.iter().all(|(_, by, n)| by.starts_with("agent:fleet-agents/fleet-1/") && *n == 1),
        "{claims:?}"
    );
    let jobs = opsgraph(&["--data-dir", &server.data.display().to_string(), "get", "jobs", &id]);
    assert!(jobs.out.lines().skip(1).all(|l| l.contains("succeeded")), "{}", jobs.out);
    eprintln!("fleet agent test: {:.1} s", started.elapsed().as_secs_f64());

    drop(server);
    drop(fleet);
    assert_eq!(machine(), before, "down leaves the machine as it found it");
}
