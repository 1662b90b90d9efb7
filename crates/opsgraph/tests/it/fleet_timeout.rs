//! A job over SSH that times out or is cancelled stops on a real Debian host (docs/reliability.md):
//! the fleet's `apt-get update` that hung, timed out, and kept the apt lock so that the retry
//! failed on it. Here the hung command holds a lock with `flock` as apt does; after the timeout
//! the lock is free and the command's pid is gone on the host. A cancelled command that ignores
//! SIGTERM is killed. Through the SSH executor, multiplexed, as the runtime uses it. And a driver
//! killed while its job runs there: the driver that takes over stops the job on the host first.

use std::time::Duration;

use opsgraph_exec::{Cancel, Executor, Outcome, Program, Spec, SshExecutor};

use crate::fleet::{claim, machine, Fleet};
use crate::support::{opsgraph, temp_dir};

fn shell(line: &str) -> Spec {
    Spec::new(Program::Shell(line.to_owned()))
}

/// The sentence of the remote stop with the group id replaced by `N`.
fn stop(run: &opsgraph_exec::Run) -> String {
    let text = run.remote_stop.clone().unwrap_or_default();
    regex::Regex::new(r"group \d+").unwrap().replace(&text, "group N").into_owned()
}

#[test]
fn fleet_ssh_timeout_and_cancel_stop_the_remote_command() {
    let Some(_one) = claim("fleet_ssh_timeout_and_cancel_stop_the_remote_command") else { return };
    let tmp = temp_dir(&[]);
    let dir = tmp.join("fleet");
    let before = machine();
    {
        let _fleet = Fleet::up(&dir, 1);
        let host = opsgraph_fleet::status(&dir).unwrap().unwrap().0.hosts[0].clone();
        let exec = SshExecutor {
            host: host.address.clone(),
            port: 22,
            user: Some("root".into()),
            key: Some(dir.join("id_ed25519")),
            known_hosts: Some(dir.join("known_hosts")),
            control_dir: Some(tmp.join("ctl")),
        };
        let run = |spec: &Spec| exec.run(spec, &Cancel::new());
        let lock_free = || run(&shell("flock -n /root/apt.lock true")).outcome;
        assert_eq!(lock_free(), Outcome::Exited { code: 0 });

        // The hung command: holds the lock, runs 600 s, times out after 2 s.
        let mut hung = shell("echo $$ > /root/hung.pid; exec flock /root/apt.lock sleep 600");
        hung.timeout = Some(Duration::from_secs(2));
        let r = run(&hung);
        assert_eq!(r.outcome, Outcome::TimedOut { after: Duration::from_secs(2), killed: false }, "{r:?}");
        assert_eq!(stop(&r), format!("the remote process group N on {} was terminated (SIGTERM)", host.address));
        // The retry's view: the lock is free, and the command's pid is gone.
        assert_eq!(lock_free(), Outcome::Exited { code: 0 }, "the timed-out command still holds the lock");
        let gone = run(&shell("! kill -0 \"$(cat /root/hung.pid)\" 2>/dev/null"));
        assert_eq!(gone.outcome, Outcome::Exited { code: 0 }, "the timed-out command still runs on the host");

        // Cancelled, ignoring SIGTERM: killed after the grace.
        let cancel = Cancel::new();
        let mut stubborn = shell("trap '' TERM; echo $$ > /root/stubborn.pid; flock /root/apt.lock sleep 600");
        stubborn.grace = Duration::from_millis(500);
        let r = std::thread::scope(|s| {
            let c = cancel.clone();
            s.spawn(move || {
                std::thread::sleep(Duration::from_secs(2));
                c.cancel();
            });
            exec.run(&stubborn, &cancel)
        });
        assert_eq!(r.outcome, Outcome::Cancelled, "{r:?}");
        assert_eq!(
            stop(&r),
            format!("the remote process group N on {} was killed (SIGKILL after SIGTERM and the grace)", host.address)
        );
        assert_eq!(lock_free(), Outcome::Exited { code: 0 }, "the cancelled command still holds the lock");
        let gone = run(&shell("! kill -0 \"$(cat /root/stubborn.pid)\" 2>/dev/null"));
        assert_eq!(gone.outcome, Outcome::Exited { code: 0 }, "the cancelled command still runs on the host");

        // The driver killed mid-job (SIGKILL: no cancel, no stop sent): the job goes on on the
        // host, until the driver that takes over stops it through the mark recorded with the
        // attempt, before it checks the job's evidence.
        let sleeping = || {
            let any =
                "for p in /proc/[0-9]*; do [ \"$(cat \"$p/comm\" 2>/dev/null)\" = sleep ] && exit 0; done; exit 1";
            run(&shell(any)).outcome == Outcome::Exited { code: 0 }
        };
        assert!(!sleeping(), "a `sleep` runs on the host before the operation");
        let id = killed_mid_job(&tmp, &dir);
        std::thread::sleep(Duration::from_millis(300));
        assert!(sleeping(), "the premise: the job's `sleep 600` outlives its dead driver");
        let (data, packs, inventory) = (
            tmp.join("data").display().to_string(),
            tmp.join("packs").display().to_string(),
            dir.join("inventory").display().to_string(),
        );
        let resumed = opsgraph(&["--data-dir", &data, "resume", &id, "--packs", &packs, "--inventory", &inventory]);
        assert!(resumed.out.contains("a person decides"), "{}", resumed.render());
        let store = opsgraph_store_sqlite::SqliteStore::open(
            &tmp.join("data").join("opsgraph.db"),
            opsgraph_store_sqlite::Durability::Full,
        )
        .unwrap();
        let stops: Vec<String> = opsgraph_store::Store::timeline(&store, &id)
            .unwrap()
            .into_iter()
            .filter(|e| e.event == "job_remote_leftovers")
            .map(|e| regex::Regex::new(r"group \d+").unwrap().replace(&e.reason, "group N").into_owned())
            .collect();
        assert_eq!(
            stops,
            [format!("hang@fleet-1: the remote process group N on {} was terminated (SIGTERM)", host.address)]
        );
        assert!(!sleeping(), "the job's `sleep 600` still runs on the host after the takeover");
        exec.close();
    }
    assert_eq!(machine(), before, "the fleet left something behind");
}

/// A one-job pack whose job sleeps 600 s on the fleet's host, driven by `opsgraph apply`, which
/// is killed with SIGKILL once the job has started there: the operation's id. The fleet's hosts
/// share this machine's kernel, so their processes are visible here, and recovery's local stop
/// (by `OPSGRAPH_OPERATION_ID`/`OPSGRAPH_JOB_ID` in the environment) would find the job: its
/// `sleep` runs without those variables, as invisible from here as on a host of its own.
fn killed_mid_job(tmp: &crate::support::TempDir, dir: &std::path::Path) -> String {
    let files = [
        ("packs/hang/pack.yaml", "scenario_pack:\n  id: hang\n  version: 1.0.0\n  resource_types: [hang.run]\n  actions: [run]\n  plan_templates: [{id: hang.run}]\n"),
        ("packs/hang/templates.yaml", "plan_template:\n  id: hang.run\n  action: run\n  scopes: {nodes: {resource_type: compute_node, from: targets.nodes}}\n  stages: [{id: all, name: All, jobs: [hang]}]\n  jobs: [hang]\n"),
        ("packs/hang/jobs.yaml", "job:\n  id: hang\n  scope: {target: nodes}\n  run: {executor: ssh, command: 'echo $$ > /root/hang.pid; exec env -u OPSGRAPH_OPERATION_ID -u OPSGRAPH_JOB_ID sleep 600'}\n"),
        ("intent.yaml", "intent: {target_resource_type: hang.run, action: run, name: hang, environment: dev, targets: {nodes: [compute_node/fleet-1]}}\n"),
    ];
    for (path, text) in files {
        let path = tmp.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let [data, intent, packs, inventory] =
        [tmp.join("data"), tmp.join("intent.yaml"), tmp.join("packs"), dir.join("inventory")]
            .map(|p| p.display().to_string());
    let mut driver = std::process::Command::new(env!("CARGO_BIN_EXE_opsgraph"))
        .args(["--data-dir", &data, "apply", "-f", &intent, "--packs", &packs, "--inventory", &inventory, "--yes"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let host = opsgraph_fleet::status(dir).unwrap().unwrap().0.hosts[0].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !opsgraph_fleet::exec(&host, &["test", "-s", "/root/hang.pid"]).status().unwrap().success() {
        assert!(std::time::Instant::now() < deadline, "the job did not start on the host");
        std::thread::sleep(Duration::from_millis(100));
    }
    driver.kill().unwrap();
    driver.wait().unwrap();
    let ops: serde_json::Value =
        serde_json::from_str(&opsgraph(&["--data-dir", &data, "get", "operations", "-o", "json"]).out).unwrap();
    ops[0]["id"].as_str().unwrap().to_owned()
}
