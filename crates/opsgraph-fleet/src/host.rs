//! One host: its files (the overlay's upper layer), its boot, readiness, health and end.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::state::HostState;
use crate::sys::{self, io};
use crate::{Error, CACHE_PORT, NET};

/// The fleet's SSH key (ed25519, no passphrase), made once per fleet directory.
pub(crate) fn fleet_key(key: &Path) -> Result<(), Error> {
    if key.exists() {
        return Ok(());
    }
    sys::run(
        "make the fleet's SSH key",
        Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-C", "opsgraph-fleet", "-f"]).arg(key),
    )?;
    Ok(())
}

/// Writes the host's own files into its upper layer: hostname, machine id, hosts, apt through
/// the cache, the fleet key authorized for root, an sshd drop-in and a fresh host key, whose
/// public half (`ssh-ed25519 AAAA…`) is returned for known_hosts.
pub(crate) fn prepare(h: &HostState, fleet_pub: &Path, fleet: &[(String, String)]) -> Result<String, Error> {
    for sub in ["root", "upper", "work"] {
        let d = h.dir.join(sub);
        std::fs::create_dir_all(&d).map_err(io(format!("create {}", d.display())))?;
    }
    let up = h.dir.join("upper");
    let put = |rel: &str, text: &str, mode: u32| -> Result<(), Error> {
        let p = up.join(rel);
        let parent = p.parent().expect("a file in a directory");
        std::fs::create_dir_all(parent).map_err(io(format!("create {}", parent.display())))?;
        std::fs::write(&p, text).map_err(io(format!("write {}", p.display())))?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(io(format!("chmod {}", p.display())))
    };
    // Directories the layer adds keep the modes of the root filesystem's.
    std::fs::create_dir_all(up.join("root/.ssh")).map_err(io("create the host's /root/.ssh"))?;
    std::fs::set_permissions(up.join("root"), std::fs::Permissions::from_mode(0o700)).map_err(io("chmod /root"))?;
    std::fs::set_permissions(up.join("root/.ssh"), std::fs::Permissions::from_mode(0o700)).map_err(io("chmod .ssh"))?;

    put("etc/hostname", &format!("{}\n", h.name), 0o644)?;
    put("etc/machine-id", &format!("{}\n", machine_id()?), 0o444)?;
    let mut hosts = format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{NET}.1\tfleet-cache\n");
    for (name, address) in fleet {
        hosts.push_str(&format!("{address}\t{name}\n"));
    }
    put("etc/hosts", &hosts, 0o644)?;
    let cache = format!("http://{NET}.1:{CACHE_PORT}");
    put(
        "etc/apt/sources.list",
        &format!(
            "# opsgraph fleet: Debian through the fleet's package cache on the bridge (the only way out)\n\
             deb {cache}/debian bookworm main\n\
             deb {cache}/debian bookworm-updates main\n\
             deb {cache}/debian-security bookworm-security main\n"
        ),
        0o644,
    )?;
    let authorized = std::fs::read_to_string(fleet_pub).map_err(io(format!("read {}", fleet_pub.display())))?;
    put("root/.ssh/authorized_keys", &authorized, 0o600)?;
    put(
        "etc/ssh/sshd_config.d/opsgraph-fleet.conf",
        "# opsgraph fleet: the pinned host key only, keys only\n\
         HostKey /etc/ssh/ssh_host_ed25519_key\n\
         PermitRootLogin prohibit-password\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n",
        0o644,
    )?;
    // The console is a null device: no getty on it (it would fail and mark the host degraded).
    let getty = up.join("etc/systemd/system/console-getty.service");
    std::fs::create_dir_all(getty.parent().expect("in a directory")).map_err(io("create /etc/systemd/system"))?;
    let _ = std::fs::remove_file(&getty);
    std::os::unix::fs::symlink("/dev/null", &getty).map_err(io("mask console-getty.service"))?;
    let key = up.join("etc/ssh/ssh_host_ed25519_key");
    sys::host_key(&h.name, &key)
}

fn machine_id() -> Result<String, Error> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .map_err(io("read /dev/urandom"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Starts `boot.sh outer` in a process group of its own (a Ctrl-C of `up` does not reach the
/// host) and finds the host's systemd: the child of the `unshare` it becomes.
pub(crate) fn boot(boot_sh: &Path, h: &HostState, lower: &Path) -> Result<(u32, u32), Error> {
    let launcher = sys::spawn_logged(
        Command::new("/bin/sh")
            .arg(boot_sh)
            .arg("outer")
            .arg(&h.dir)
            .arg(lower)
            .args(&h.cgroups)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        &h.dir.join("boot.log"),
        "the host's boot log",
        format!("boot {}", h.name),
        "/bin/sh boot.sh",
    )?;
    let mut pid = 0;
    let found = sys::wait_until(Duration::from_secs(20), || {
        if !sys::alive(launcher) {
            return true;
        }
        pid = sys::children(launcher).into_iter().find(|c| sys::comm(*c).as_deref() == Some("systemd")).unwrap_or(0);
        pid != 0
    });
    if !found || pid == 0 {
        sys::kill(launcher);
        let log = std::fs::read_to_string(h.dir.join("boot.log")).unwrap_or_default();
        return Err(Error::Refused(format!("{} did not boot: {}", h.name, log.trim())));
    }
    Ok((launcher, pid))
}

/// Waits until sshd answers with its banner and systemd has finished starting.
pub(crate) fn wait_ready(h: &HostState, limit: Duration) -> Result<(), Error> {
    let mut last = String::new();
    let ok = sys::wait_until(limit, || {
        if !sys::alive(h.pid) {
            return true;
        }
        // Booted: systemd and sshd; an agent's unit is the caller's to check.
        let hh = crate::Health { agent: None, ..health(h, "") };
        last = format!("systemd {}, sshd {}", hh.systemd, if hh.sshd { "answers" } else { "silent" });
        hh.healthy()
    });
    if !ok || !sys::alive(h.pid) {
        let log = std::fs::read_to_string(h.dir.join("boot.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        return Err(Error::Refused(format!(
            "{} is not ready ({last}); the end of its console:\n{}",
            h.name,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )));
    }
    Ok(())
}

pub(crate) fn nsenter(h: &HostState, argv: &[&str]) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg("-t").arg(h.pid.to_string()).args(["-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w", "--"]).args(argv);
    cmd.env_clear().env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").env("LANG", "C.UTF-8");
    cmd
}

/// The host's health; `agent_unit` is the unit its agent runs as, when it has one.
pub(crate) fn health(h: &HostState, agent_unit: &str) -> crate::Health {
    let alive = h.pid != 0 && sys::alive(h.pid) && sys::comm(h.pid).as_deref() == Some("systemd");
    let systemd = if alive { systemctl_word(h, &["is-system-running"]) } else { "dead".into() };
    let agent = h.agent.as_ref().map(|name| crate::AgentHealth {
        name: name.clone(),
        unit: if alive { systemctl_word(h, &["is-active", agent_unit]) } else { "unknown".into() },
    });
    crate::Health {
        name: h.name.clone(),
        address: h.address.clone(),
        pid: h.pid,
        systemd,
        sshd: alive && banner(&h.address),
        agent,
    }
}

/// `systemctl ARGS` inside the host, for a state word (`is-system-running`, `is-active UNIT`):
/// the word it prints, whatever its exit status (non-zero for every state but the good one), or
/// `unknown`.
fn systemctl_word(h: &HostState, args: &[&str]) -> String {
    let mut argv = vec!["systemctl"];
    argv.extend_from_slice(args);
    nsenter(h, &argv)
        .stdin(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn banner(address: &str) -> bool {
    use std::io::Read as _;
    let Ok(addr) = format!("{address}:22").parse::<std::net::SocketAddr>() else { return false };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 8];
    s.read_exact(&mut buf).is_ok() && buf.starts_with(b"SSH-")
}

/// The host's cgroup, in every hierarchy, under the cgroup of whoever ran `up`.
pub(crate) fn cgroup_name(h: &HostState) -> String {
    format!("opsgraph-{}", h.name)
}

/// Kills the host (its systemd and so its whole PID namespace and mounts), then removes its
/// veth if it is still there and its cgroups.
pub(crate) fn kill(h: &HostState) -> Result<(), Error> {
    // Only processes in the host's own cgroup: after a reboot the recorded PIDs may be anyone's.
    let mine = |pid: u32| pid != 0 && sys::alive(pid) && sys::in_cgroup(pid, &cgroup_name(h));
    let pids: Vec<u32> = [h.pid, h.launcher_pid].into_iter().filter(|p| mine(*p)).collect();
    for pid in &pids {
        sys::kill(*pid);
    }
    for pid in pids {
        if !sys::wait_until(Duration::from_secs(20), || !sys::alive(pid)) {
            return Err(Error::Timeout { what: format!("stop {} (pid {pid})", h.name), seconds: 20 });
        }
    }
    // The kernel removes the veth with the host's network namespace, asynchronously: it may go
    // between the look and the delete, which is not a failure.
    if sys::ip("show the host's veth", &["link", "show", "dev", &h.veth]).is_ok() {
        if let Err(e) = sys::ip("remove the host's veth", &["link", "del", "dev", &h.veth]) {
            if sys::ip("show the host's veth", &["link", "show", "dev", &h.veth]).is_ok() {
                return Err(e);
            }
        }
    }
    for cg in &h.cgroups {
        sys::remove_cgroup(cg, Duration::from_secs(20))?;
    }
    Ok(())
}
