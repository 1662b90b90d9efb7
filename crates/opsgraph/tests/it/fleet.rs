//! The fleet (`opsgraph lab fleet`, docs/fleet.md): real Debian 12 hosts on this machine, with
//! systemd, sshd behind pinned host keys, apt through the fleet's package cache, and nothing
//! left behind by `down`. These tests need root and `OPSGRAPH_FLEET=1` (`.ci/run` sets it as
//! root); otherwise they say that they skipped. One fleet per machine: the tests that build
//! one take `FLEET` first.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use expect_test::{expect, Expect};

use crate::support::{opsgraph, path, printed, temp_dir, Run};

/// One fleet at a time on a machine (one bridge, one range).
pub(crate) static FLEET: Mutex<()> = Mutex::new(());

/// Why fleet tests cannot run here, if they cannot.
pub(crate) fn unavailable() -> Option<&'static str> {
    if std::env::var("OPSGRAPH_FLEET").as_deref() != Ok("1") {
        return Some("needs root and OPSGRAPH_FLEET=1 (.ci/run sets it as root)");
    }
    if !opsgraph_fleet::can_run() {
        return Some("needs root (OPSGRAPH_FLEET=1 is set, but this is not root)");
    }
    None
}

/// The start of a fleet test: `None` (saying the test is skipped, and why) where fleets cannot
/// run, else the machine's one fleet, held until the guard is dropped.
pub(crate) fn claim(test: &str) -> Option<std::sync::MutexGuard<'static, ()>> {
    if let Some(why) = unavailable() {
        eprintln!("SKIPPED {test}: {why}");
        return None;
    }
    Some(FLEET.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The machine's view the fleet must leave as it found it: /dev, mount points, links,
/// cgroups named for fleet hosts. Not the kernel's own automounts (tracefs, debugfs: mounted the
/// first time anything on the machine looks there, `perf` say, while a test runs).
pub(crate) fn machine() -> String {
    let mut dev: Vec<String> =
        std::fs::read_dir("/dev").unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    dev.sort();
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|l| l.split(' ').nth(4).unwrap().to_owned())
        .filter(|m| !AUTOMOUNTS.contains(&m.as_str()))
        .collect();
    mounts.sort();
    let links = String::from_utf8(Command::new("ip").args(["-o", "link", "show"]).output().unwrap().stdout).unwrap();
    let mut links: Vec<&str> = links.lines().filter_map(|l| l.split(": ").nth(1)).collect();
    links.sort();
    let cgroups = String::from_utf8(
        Command::new("find")
            .args(["/sys/fs/cgroup", "-maxdepth", "4", "-name", "opsgraph-fleet-*"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    format!("dev: {dev:?}\nmounts: {mounts:?}\nlinks: {links:?}\ncgroups: {cgroups}")
}

/// Where the kernel mounts its own file systems on first access.
const AUTOMOUNTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Runs `opsgraph ARGS` and compares exit, stdout and stderr with pids and times masked.
fn check(args: &[&str], fleet_dir: &Path, expect: Expect) -> Run {
    let run = opsgraph(args);
    expect.assert_eq(&mask(&run.render(), fleet_dir));
    run
}

fn mask(text: &str, fleet_dir: &Path) -> String {
    // PIDs vary in width: the status table's column is masked with its padding.
    let pid = regex::Regex::new(r"pid \d+").unwrap();
    let column = regex::Regex::new(r"(?m)^(fleet-\d+ +\S+) +\d+  ").unwrap();
    let secs = regex::Regex::new(r"in \d+\.\d s").unwrap();
    let t = text.replace(&fleet_dir.display().to_string(), "FLEET");
    let t = pid.replace_all(&t, "pid PID");
    let t = column.replace_all(&t, "$1 PID  ");
    secs.replace_all(&t, "in N s").into_owned()
}

/// `ssh` with the inventory's key and pinned host keys, as the SSH executor runs it.
pub(crate) fn ssh(fleet_dir: &Path, address: &str, known_hosts: &Path, script: &str) -> std::process::Output {
    Command::new("ssh")
        .arg("-i")
        .arg(fleet_dir.join("id_ed25519"))
        .args(["-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o"])
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args(["-o", "ConnectTimeout=10", &format!("root@{address}"), script])
        .output()
        .unwrap()
}

#[test]
fn without_root_the_fleet_says_so_and_exits_2() {
    // As an unprivileged user (setpriv drops root), the real binary refuses before doing anything.
    let bin = env!("CARGO_BIN_EXE_opsgraph");
    let dir = temp_dir(&[]);
    let mut cmd = if opsgraph_fleet::can_run() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
        c
    } else {
        Command::new(bin)
    };
    for args in [
        &["up", "--hosts", "3"][..],
        &["status"],
        &["down"],
        &["light", "up", "--count", "3"],
        &["light", "status"],
        &["light", "down"],
    ] {
        let out = cmd_output(&mut cmd, args, dir.path());
        assert_eq!(
            out,
            "exit 2: error[fleet_needs_root]: the fleet needs root (namespaces, mounts, a bridge): run it as root\n",
            "{args:?}"
        );
    }
    assert!(!dir.join("fleet").exists(), "a refused fleet command made its directory");
    assert!(!dir.join("light").exists(), "a refused light command made its directory");
}

fn cmd_output(cmd: &mut Command, args: &[&str], data: &Path) -> String {
    let mut c = Command::new(cmd.get_program());
    c.args(cmd.get_args()).args(["--data-dir"]).arg(data).args(["lab", "fleet"]).args(args);
    let o = c.output().unwrap();
    format!("exit {}: {}", o.status.code().unwrap_or(-1), printed(&o))
}

#[test]
fn fleet_of_three_hosts_up_ssh_apt_down() {
    let Some(_one) = claim("fleet_of_three_hosts_up_ssh_apt_down") else { return };
    let tmp = temp_dir(&[]);
    let dir = tmp.join("fleet");
    let d = dir.display().to_string();
    let before = machine();

    let fleet = Fleet::up(&dir, 3);
    check(
        &["lab", "fleet", "status", "--dir", &d],
        &dir,
        expect![[r#"
            exit: 0
            --- stdout
            HOST       ADDRESS            PID  SYSTEMD      SSHD     AGENT                    HEALTH
            fleet-1    10.213.0.11 PID  running      answers  -                        healthy
            fleet-2    10.213.0.12 PID  running      answers  -                        healthy
            fleet-3    10.213.0.13 PID  running      answers  -                        healthy
        "#]],
    );
    // Up again: reported, not rebuilt.
    let again = opsgraph(&["lab", "fleet", "up", "--hosts", "3", "--dir", &d]);
    assert_eq!(again.code, 0, "{}", again.render());
    assert!(again.out.starts_with("fleet of 3 hosts is already up in "), "{}", again.out);
    // Another fleet beside it: refused, nothing made.
    let other = tmp.join("other");
    check(
        &["lab", "fleet", "up", "--hosts", "1", "--dir", &other.display().to_string()],
        &dir,
        expect![[r#"
            exit: 1
            --- stderr
            error[fleet_refused]: the bridge ogfleet0 exists already (opsgraph-fleet FLEET): another fleet is up; run `opsgraph lab fleet down --dir DIR` for it
        "#]],
    );
    assert!(!other.exists());

    // The inventory loads as is: three compute nodes reached over SSH with pinned host keys.
    let inventory = std::fs::read_to_string(dir.join("inventory/fleet.yaml")).unwrap();
    assert_eq!(inventory.matches("type: compute_node").count(), 3, "{inventory}");
    let known_hosts = dir.join("known_hosts");

    // SSH into each with the pinned keys: its own name, machine id and host key; systemd is
    // PID 1; only the fleet's range is routed.
    let mut ids = Vec::new();
    for (i, name) in ["fleet-1", "fleet-2", "fleet-3"].iter().enumerate() {
        let address = format!("10.213.0.{}", 11 + i);
        let o = ssh(&dir, &address, &known_hosts, "hostname; cat /etc/machine-id; cat /proc/1/comm; ip -4 route show; ip route get 192.0.2.1 2>&1 || echo unreachable");
        assert!(o.status.success(), "{name}: {}", printed(&o));
        let out = String::from_utf8(o.stdout).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], *name, "{out}");
        assert_eq!(lines[1].len(), 32, "{out}");
        ids.push(lines[1].to_owned());
        assert_eq!(lines[2], "systemd", "{out}");
        assert_eq!(lines[3], format!("10.213.0.0/24 dev eth0 proto kernel scope link src {address} "), "{out}");
        assert_eq!(lines.len(), 6, "one route only, nothing off the machine: {out}");
        assert!(lines[4].contains("Network is unreachable") && lines[5] == "unreachable", "{out}");
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "machine ids must differ");
    // The pin is real: another host key file (empty) refuses the connection.
    let empty = tmp.join("empty_known_hosts");
    std::fs::write(&empty, "").unwrap();
    let o = ssh(&dir, "10.213.0.11", &empty, "true");
    assert!(!o.status.success() && printed(&o).contains("Host key verification failed"), "{}", printed(&o));

    // apt works inside, through the cache on the bridge; the cache serves Debian only.
    for address in ["10.213.0.11", "10.213.0.12", "10.213.0.13"] {
        let o = ssh(
            &dir,
            address,
            &known_hosts,
            "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get -q update >/dev/null; \
             apt-get install -y -q --no-install-recommends jq >/dev/null; jq -n 1+1",
        );
        assert!(o.status.success() && String::from_utf8_lossy(&o.stdout) == "2\n", "{address}: {}", printed(&o));
    }
    let o = ssh(
        &dir,
        "10.213.0.11",
        &known_hosts,
        "python3 -c 'import urllib.request as u\ntry:\n u.urlopen(\"http://10.213.0.1:3143/apt.postgresql.org/pub/repos/apt/dists/bookworm-pgdg/Release\", timeout=20)\nexcept Exception as e: print(e)'",
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "HTTP Error 403: Forbidden file type or location\n",
        "{}",
        printed(&o)
    );

    drop(fleet);
    check(
        &["lab", "fleet", "status", "--dir", &d],
        &dir,
        expect![[r#"
        exit: 1
        --- stderr
        no fleet in FLEET
    "#]],
    );
    assert!(!dir.exists(), "down leaves the fleet directory");
    assert_eq!(machine(), before, "down leaves the machine as it found it");
}

/// The CLI on one data directory over the bundled packs and a fleet's inventory, as a person at
/// the fleet uses it: `apply` an intent file (in `files`) without asking, `answer` a gate with
/// `proceed` as alice.
pub(crate) struct Operator {
    data: String,
    packs: String,
    inventory: String,
    files: std::path::PathBuf,
}

impl Operator {
    pub(crate) fn new(files: &Path, data: &str, fleet_dir: &Path) -> Operator {
        Operator {
            data: data.to_owned(),
            packs: path("packs"),
            inventory: fleet_dir.join("inventory").display().to_string(),
            files: files.to_owned(),
        }
    }

    pub(crate) fn apply(&self, file: &str) -> Run {
        let f = self.files.join(file).display().to_string();
        opsgraph(&[
            "--data-dir",
            &self.data,
            "apply",
            "-f",
            &f,
            "--packs",
            &self.packs,
            "--inventory",
            &self.inventory,
            "--yes",
        ])
    }

    /// `apply` of `file`, which stops at the destructive gate `gate`; alice proceeds and the
    /// operation completes. The apply's run and the answer's.
    pub(crate) fn confirmed(&self, file: &str, gate: &str) -> (Run, Run) {
        let applied = self.apply(file);
        assert!(applied.out.contains(gate), "{}", applied.render());
        let done = self.answer(&applied.operation_id(), gate);
        assert_eq!(done.code, 0, "{}", done.render());
        assert!(done.out.contains("operation running -> completed"), "{}", done.render());
        (applied, done)
    }

    pub(crate) fn answer(&self, op: &str, gate: &str) -> Run {
        let data = &self.data;
        opsgraph(&[
            "--data-dir",
            data,
            "gate",
            "answer",
            gate,
            "--operation",
            op,
            "--option",
            "proceed",
            "--as",
            "alice",
        ])
    }
}

/// `read()` every 200 ms until it returns something, 50 times at the most: what it returned last.
pub(crate) fn until_nonempty(read: impl Fn() -> String) -> String {
    let mut text = String::new();
    for _ in 0..50 {
        text = read();
        if !text.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    text
}

/// Takes the fleet down when dropped, also when an assertion failed.
pub(crate) struct Fleet {
    pub(crate) dir: std::path::PathBuf,
}

impl Fleet {
    /// `opsgraph lab fleet up` of `hosts` hosts in `dir`, which must succeed: taken down again
    /// when the value is dropped.
    pub(crate) fn up(dir: &std::path::Path, hosts: usize) -> Fleet {
        let up = opsgraph(&["lab", "fleet", "up", "--hosts", &hosts.to_string(), "--dir", &dir.display().to_string()]);
        assert_eq!(up.code, 0, "{}", up.render());
        Fleet { dir: dir.to_path_buf() }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let down = opsgraph(&["lab", "fleet", "down", "--dir", &self.dir.display().to_string()]);
        if down.code != 0 {
            if std::thread::panicking() {
                eprintln!("fleet down failed (while the test was failing): {}", down.render());
            } else {
                panic!("fleet down failed: {}", down.render());
            }
        }
    }
}

#[test]
fn a_failed_up_removes_what_it_made() {
    let Some(_one) = claim("a_failed_up_removes_what_it_made") else { return };
    // A cache whose root filesystem is not one: its "systemd" is there (so it counts as built)
    // but there is no /proc to mount. The bridge and the package cache come up, the host does not.
    let tmp = temp_dir(&[]);
    let cache = tmp.join("cache");
    let fake = cache.join("rootfs").join(opsgraph_fleet::rootfs_key());
    std::fs::create_dir_all(fake.join("lib/systemd")).unwrap();
    std::fs::write(fake.join("lib/systemd/systemd"), "#!/bin/sh\nexit 1\n").unwrap();
    let dir = tmp.join("fleet");
    let before = machine();
    let run = opsgraph(&[
        "lab",
        "fleet",
        "up",
        "--hosts",
        "2",
        "--dir",
        &dir.display().to_string(),
        "--cache",
        &cache.display().to_string(),
    ]);
    let text = mask(&run.render(), &dir).replace(&cache.display().to_string(), "CACHE");
    let text: Vec<&str> = text.lines().filter(|l| !l.starts_with("mount: ") && !l.contains("dmesg")).collect();
    expect![[r#"
        exit: 1
        --- stderr
        bridge ogfleet0 10.213.0.1/24, package cache on 10.213.0.1:3143 (pid PID)
        fleet up failed (fleet-1 did not boot: mount: FLEET/hosts/fleet-1/root/proc: mount point does not exist.
        fleet-1 stopped
        error[fleet_refused]: fleet-1 did not boot: mount: FLEET/hosts/fleet-1/root/proc: mount point does not exist.
    "#]]
    .assert_eq(&(text.join("\n") + "\n"));
    assert_eq!(run.code, 1);
    assert!(!dir.exists(), "a failed up leaves its directory");
    assert_eq!(machine(), before, "a failed up leaves the machine as it found it");
}
