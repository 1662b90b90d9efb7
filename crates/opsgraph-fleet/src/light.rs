//! Light hosts (`opsgraph lab fleet light`, docs/fleet.md): hundreds of cheap SSH hosts for
//! fan-out at scale (issue [N] 3). Each is a network namespace with an address on a bridge of
//! its own and one `sshd` — the machine's `/usr/sbin/sshd` with the host's own configuration,
//! host key and the fleet key authorized — in a UTS namespace of its own (its hostname). It
//! shares the machine's root filesystem, processes and users, with a home of its own over
//! `/root` (a mount namespace): no systemd, no debootstrap root, no package cache, no cgroup. What a host costs is one listening `sshd` (about 9 MB resident,
//! 2.6 MB proportional: its pages are the machine's binary's).
//!
//! The state (`light.json`) is written before anything is made and after each step, so `down`
//! removes exactly what `up` made, also after an interrupted `up`: the processes inside each
//! host's network namespace (found by the namespace's inode, so nothing else is touched), the
//! veths, the namespaces, the bridge, and the neighbour-table limits it raised.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::inventory::compute_nodes;
use crate::state::{load_file, save_file};
use crate::sys::{self, io, ip};
use crate::Error;

/// The light hosts' bridge; one set of light hosts per machine, beside the fleet's.
pub const LIGHT_BRIDGE: &str = "oglight0";
/// The most light hosts (addresses 10.214.0.11 to 10.214.3.242 in the bridge's /22).
pub const LIGHT_MAX: usize = 1000;
/// The state file's name in the light hosts' directory.
pub const LIGHT_STATE_FILE: &str = "light.json";
/// The first two octets of the light hosts' /22; the bridge is `.0.1`.
const NET: [u8; 2] = [10, 214];
const PREFIX: u8 = 22;
const SSHD: &str = "/usr/sbin/sshd";
/// What runs in the host's new UTS and mount namespaces, before it becomes its sshd: the
/// hostname (`$0`), and the host's own home over `/root` (`$3`), so a login reads the host's
/// empty shell startup files, not the machine's root's (which may start anything: this
/// machine's runs `pyenv init`, 0.2 s of every login), and what a session writes in its home
/// (Ansible's `~/.ansible/tmp`) stays the host's.
const BOOT: &str = r#"hostname "$0" && mount --bind "$3" /root && exec "$1" -D -e -f "$2""#;
const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";
/// The neighbour-table limits of the machine's namespace (one entry per host it talks to).
const GC_THRESH: [&str; 3] = [
    "/proc/sys/net/ipv4/neigh/default/gc_thresh1",
    "/proc/sys/net/ipv4/neigh/default/gc_thresh2",
    "/proc/sys/net/ipv4/neigh/default/gc_thresh3",
];

/// Host `i` (from 1): `10.214.0.0 + 10 + i`.
pub fn light_address(i: usize) -> Ipv4Addr {
    let n = 10 + i as u32;
    Ipv4Addr::new(NET[0], NET[1], (n >> 8) as u8, (n & 0xff) as u8)
}

fn bridge_address() -> String {
    format!("{}.{}.0.1/{PREFIX}", NET[0], NET[1])
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LightState {
    pub dir: PathBuf,
    /// The `environment` of the inventory's resources.
    pub environment: String,
    /// Whether this set made the bridge (so `down` removes it).
    pub bridge: bool,
    /// What of `/run/netns` this set made: `ip netns add` makes the directory and mounts it on
    /// itself the first time on a machine, so `down` unmounts (and removes) it once it is empty.
    #[serde(default)]
    pub netns_root: NetnsRoot,
    pub hosts: Vec<LightHost>,
    /// Kernel settings `up` raised, with the values they had.
    pub sysctls: Vec<Sysctl>,
}

/// What `/run/netns` was before `up`: what `down` has to take away to leave the machine as it was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetnsRoot {
    /// A mount point already (another tool's namespaces, or an earlier set): left alone.
    #[default]
    Found,
    /// A directory, not a mount point: `down` unmounts it.
    Directory,
    /// Absent: `down` unmounts and removes it.
    Absent,
}

impl NetnsRoot {
    const PATH: &str = "/run/netns";

    fn now() -> NetnsRoot {
        if sys::mounts().iter().any(|m| m == Self::PATH) {
            NetnsRoot::Found
        } else if Path::new(Self::PATH).is_dir() {
            NetnsRoot::Directory
        } else {
            NetnsRoot::Absent
        }
    }

    /// Undoes what `up` made of `/run/netns`, once no namespace is left in it.
    fn restore(self) -> Result<(), Error> {
        let empty = std::fs::read_dir(Self::PATH).is_ok_and(|mut d| d.next().is_none());
        if self == NetnsRoot::Found || !empty {
            return Ok(());
        }
        if sys::mounts().iter().any(|m| m == Self::PATH) {
            sys::run("unmount /run/netns", Command::new("umount").arg(Self::PATH))?;
        }
        if self == NetnsRoot::Absent {
            std::fs::remove_dir(Self::PATH).map_err(io("remove /run/netns"))?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LightHost {
    pub name: String,
    pub address: String,
    /// Its network namespace (`ip netns`, `/run/netns/NAME`).
    pub netns: String,
    /// The machine's end of its veth pair (the host's end is `eth0`).
    pub veth: String,
    /// Its listening `sshd` (0 before it started).
    pub pid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sysctl {
    pub path: String,
    pub was: String,
    pub set: String,
}

/// What `light up` builds.
#[derive(Debug, Clone)]
pub struct LightOptions {
    pub dir: PathBuf,
    pub count: usize,
    pub environment: String,
}

/// What `light up` made, for the caller to print.
#[derive(Debug, Clone)]
pub struct LightSummary {
    pub state: LightState,
    /// The opsgraph inventory (a directory with `light.yaml`).
    pub inventory: PathBuf,
    /// The same hosts for Ansible (INI).
    pub ansible_inventory: PathBuf,
    pub key: PathBuf,
    pub known_hosts: PathBuf,
    pub existed: bool,
    pub seconds: f64,
}

/// A light host as `light status` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LightHealth {
    pub name: String,
    pub address: String,
    pub pid: u32,
    /// Its sshd is alive and answers with an SSH banner.
    pub sshd: bool,
    /// The listening sshd's resident and proportional set sizes, in KiB (0 when gone).
    pub rss_kib: u64,
    pub pss_kib: u64,
}

impl LightState {
    fn load(dir: &Path) -> Result<Option<LightState>, Error> {
        load_file(&dir.join(LIGHT_STATE_FILE), "a light hosts' state file")
    }

    fn save(&self) -> Result<(), Error> {
        save_file(&self.dir, LIGHT_STATE_FILE, self)
    }
}

/// Builds `count` light hosts in `opts.dir`, or reports the set already up there when it is
/// healthy and of that size.
pub fn light_up(opts: &LightOptions, log: &mut dyn Write) -> Result<LightSummary, Error> {
    if !sys::is_root() {
        return Err(Error::NotRoot);
    }
    if opts.count == 0 || opts.count > LIGHT_MAX {
        return Err(Error::Refused(format!("--count must be 1 to {LIGHT_MAX}, not {}", opts.count)));
    }
    let dir = std::path::absolute(&opts.dir).map_err(io(format!("resolve {}", opts.dir.display())))?;
    let shown = dir.display().to_string();
    // The path goes into sshd's and Ansible's configuration unquoted.
    if !shown.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b)) {
        return Err(Error::Refused(format!(
            "the directory {shown:?} holds characters other than letters, digits and `/._-`"
        )));
    }
    let started = Instant::now();
    let summary = |state: LightState, existed| LightSummary {
        inventory: dir.join("inventory"),
        ansible_inventory: dir.join("ansible.ini"),
        key: dir.join("id_ed25519"),
        known_hosts: dir.join("known_hosts"),
        state,
        existed,
        seconds: started.elapsed().as_secs_f64(),
    };
    if let Some(state) = LightState::load(&dir)? {
        let healthy = health_of(&state).iter().filter(|h| h.sshd).count();
        if healthy == state.hosts.len() && state.hosts.len() == opts.count {
            return Ok(summary(state, true));
        }
        return Err(Error::Refused(format!(
            "{} light hosts ({healthy} healthy) are already up in {shown}: run `opsgraph lab fleet light down --dir {shown}` first",
            state.hosts.len()
        )));
    }
    if !Path::new(SSHD).exists() {
        return Err(Error::Refused(format!("{SSHD} does not exist (apt-get install openssh-server)")));
    }
    check_free()?;
    std::fs::create_dir_all(&dir).map_err(io(format!("create {shown}")))?;
    let mut state = LightState {
        dir: dir.clone(),
        environment: opts.environment.clone(),
        bridge: false,
        netns_root: NetnsRoot::Found,
        hosts: (1..=opts.count)
            .map(|i| LightHost {
                name: format!("light-{i}"),
                address: light_address(i).to_string(),
                netns: format!("oglight-{i}"),
                veth: format!("ogl-{i}"),
                pid: 0,
            })
            .collect(),
        sysctls: Vec::new(),
    };
    state.save()?;
    if let Err(e) = build(&mut state, log) {
        let _ = writeln!(log, "light up failed ({e}); removing what it made");
        let _ = light_down(&dir, log);
        return Err(e);
    }
    Ok(summary(state, false))
}

/// Refuses when the bridge exists or the range is routed already.
fn check_free() -> Result<(), Error> {
    if ip("show the bridge", &["-o", "link", "show", "dev", LIGHT_BRIDGE]).is_ok() {
        return Err(Error::Refused(format!(
            "the bridge {LIGHT_BRIDGE} exists already: light hosts are up; run `opsgraph lab fleet light down --dir DIR` for them"
        )));
    }
    let routes = ip("list routes", &["-4", "route", "show"])?;
    let net = format!("{}.{}.", NET[0], NET[1]);
    if let Some(r) = routes.lines().find(|r| r.starts_with(&net)) {
        return Err(Error::Refused(format!("the light hosts' range {net}0.0/{PREFIX} is in use on this machine: {r}")));
    }
    Ok(())
}

fn build(state: &mut LightState, log: &mut dyn Write) -> Result<(), Error> {
    let dir = state.dir.clone();
    let key = dir.join("id_ed25519");
    crate::host::fleet_key(&key)?;
    // sshd refuses to start without its privilege separation directory.
    std::fs::create_dir_all("/run/sshd").map_err(io("create /run/sshd"))?;
    state.sysctls = raise_neighbour_limits(state.hosts.len())?;
    state.save()?;
    for s in &state.sysctls {
        let _ = writeln!(log, "{} raised from {} to {} (restored by down)", s.path, s.was, s.set);
    }

    let t = Instant::now();
    state.bridge = true;
    state.netns_root = NetnsRoot::now();
    state.save()?;
    let mut batch = vec![
        format!("link add {LIGHT_BRIDGE} type bridge"),
        format!("addr add {} dev {LIGHT_BRIDGE}", bridge_address()),
        format!("link set dev {LIGHT_BRIDGE} up"),
    ];
    for h in &state.hosts {
        batch.push(format!("netns add {}", h.netns));
        batch.push(format!("link add {} type veth peer name eth0 netns {}", h.veth, h.netns));
        batch.push(format!("link set dev {} master {LIGHT_BRIDGE} up", h.veth));
    }
    ip_batch("make the bridge, namespaces and veths", &[], &batch)?;
    let alias = format!("opsgraph-light {}", dir.display());
    ip("name the bridge's owner", &["link", "set", "dev", LIGHT_BRIDGE, "alias", &alias])?;
    for h in &state.hosts {
        let inside = [
            "link set dev lo up".to_owned(),
            format!("addr add {}/{PREFIX} dev eth0", h.address),
            "link set dev eth0 up".into(),
        ];
        ip_batch(&format!("address {}", h.name), &["-n", &h.netns], &inside)?;
    }
    let _ = writeln!(
        log,
        "bridge {LIGHT_BRIDGE} {}, {} namespaces addressed in {:.1} s",
        bridge_address(),
        state.hosts.len(),
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let authorized = std::fs::read_to_string(key.with_extension("pub")).map_err(io("read the fleet key"))?;
    let mut pins = String::new();
    for h in &state.hosts {
        pins.push_str(&format!("{} {}\n", h.address, prepare(&dir, h, &authorized)?));
    }
    write_mode(&dir.join("known_hosts"), &pins, 0o644)?;
    for i in 0..state.hosts.len() {
        let h = &state.hosts[i];
        let hd = host_dir(&dir, h);
        let pid = sys::spawn_logged(
            Command::new("nsenter")
                .arg(format!("--net=/run/netns/{}", h.netns))
                .args(["unshare", "--uts", "--mount", "--propagation", "private", "/bin/sh", "-c", BOOT])
                .arg(&h.name)
                .arg(SSHD)
                .arg(hd.join("sshd_config"))
                .arg(hd.join("root"))
                .env_clear()
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            &hd.join("sshd.log"),
            "the host's sshd log",
            format!("start sshd for {}", h.name),
            "nsenter, unshare, /usr/sbin/sshd",
        )?;
        state.hosts[i].pid = pid;
    }
    state.save()?;
    wait_answering(state, Duration::from_secs(30 + state.hosts.len() as u64 / 10))?;
    let _ = writeln!(log, "{} sshd started and answering in {:.1} s", state.hosts.len(), t.elapsed().as_secs_f64());
    let inv = dir.join("inventory");
    std::fs::create_dir_all(&inv).map_err(io(format!("create {}", inv.display())))?;
    write_mode(&inv.join("light.yaml"), &inventory(state), 0o644)?;
    write_mode(&dir.join("ansible.ini"), &ansible_inventory(state), 0o644)
}

fn host_dir(dir: &Path, h: &LightHost) -> PathBuf {
    dir.join("hosts").join(&h.name)
}

/// The host's directory: sshd's configuration, a fresh host key (its public half returned for
/// known_hosts) and the fleet key authorized.
fn prepare(dir: &Path, h: &LightHost, authorized: &str) -> Result<String, Error> {
    use std::os::unix::fs::PermissionsExt as _;
    let hd = host_dir(dir, h);
    let home = hd.join("root");
    std::fs::create_dir_all(home.join(".ssh")).map_err(io(format!("create {}", home.display())))?;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).map_err(io("chmod the host's /root"))?;
    write_mode(&hd.join("authorized_keys"), authorized, 0o600)?;
    write_mode(&hd.join("sshd_config"), &sshd_config(&hd, &h.address), 0o644)?;
    let key = hd.join("ssh_host_ed25519_key");
    sys::host_key(&h.name, &key)
}

/// One host's sshd: its address only, its own host key and authorized keys, keys only, no PAM
/// (the machine's PAM stack would write its lastlog and print its motd), no DNS.
fn sshd_config(hd: &Path, address: &str) -> String {
    let hd = hd.display();
    let sftp = if Path::new(SFTP_SERVER).exists() { format!("Subsystem sftp {SFTP_SERVER}\n") } else { String::new() };
    format!(
        "# written by opsgraph lab fleet light up: one light host's sshd\n\
         ListenAddress {address}\n\
         Port 22\n\
         HostKey {hd}/ssh_host_ed25519_key\n\
         AuthorizedKeysFile {hd}/authorized_keys\n\
         PidFile none\n\
         PermitRootLogin prohibit-password\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         UseDNS no\n\
         PrintMotd no\n\
         PrintLastLog no\n\
         # The directory may be under /tmp, whose mode StrictModes refuses; up writes the files 0600.\n\
         StrictModes no\n\
         MaxStartups 200:30:400\n\
         MaxSessions 200\n\
         {sftp}"
    )
}

/// Raises the neighbour-table limits of the machine's namespace to hold one entry per host
/// (the defaults, 128/512/1024, start collecting at 512 entries); returns what it changed.
fn raise_neighbour_limits(count: usize) -> Result<Vec<Sysctl>, Error> {
    let mut changed = Vec::new();
    for (k, path) in GC_THRESH.iter().enumerate() {
        let want = (count as u64) * (2 << k) + 256;
        let now = std::fs::read_to_string(path).map_err(io(format!("read {path}")))?.trim().to_owned();
        if now.parse::<u64>().is_ok_and(|v| v >= want) {
            continue;
        }
        std::fs::write(path, want.to_string()).map_err(io(format!("write {path}")))?;
        changed.push(Sysctl { path: (*path).to_owned(), was: now, set: want.to_string() });
    }
    Ok(changed)
}

/// `ip [GLOBAL] -batch -` with `lines` on its standard input.
fn ip_batch(what: &str, global: &[&str], lines: &[String]) -> Result<(), Error> {
    sys::run_with_input(what, Command::new("ip").args(global).args(["-batch", "-"]), lines.join("\n") + "\n").map(drop)
}

/// Waits until every host's sshd answers with its banner; fails naming a host whose sshd died,
/// with its log.
fn wait_answering(state: &LightState, limit: Duration) -> Result<(), Error> {
    let start = Instant::now();
    let mut waiting: Vec<&LightHost> = state.hosts.iter().collect();
    while !waiting.is_empty() {
        if let Some(dead) = waiting.iter().find(|h| !sys::alive(h.pid)) {
            let log = std::fs::read_to_string(host_dir(&state.dir, dead).join("sshd.log")).unwrap_or_default();
            return Err(Error::Refused(format!("{}'s sshd exited: {}", dead.name, log.trim())));
        }
        waiting.retain(|h| !crate::host::banner(&h.address));
        if start.elapsed() > limit {
            return Err(Error::Timeout {
                what: format!("wait for {} sshd to answer (first: {})", waiting.len(), waiting[0].name),
                seconds: limit.as_secs(),
            });
        }
        if !waiting.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

/// The light hosts in `dir`, host by host; `None` when none are there.
pub fn light_status(dir: &Path) -> Result<Option<(LightState, Vec<LightHealth>)>, Error> {
    let dir = std::path::absolute(dir).map_err(io(format!("resolve {}", dir.display())))?;
    let Some(state) = LightState::load(&dir)? else { return Ok(None) };
    let health = health_of(&state);
    Ok(Some((state, health)))
}

fn health_of(state: &LightState) -> Vec<LightHealth> {
    state
        .hosts
        .iter()
        .map(|h| {
            let alive = h.pid != 0 && sys::alive(h.pid) && sys::comm(h.pid).as_deref() == Some("sshd");
            let kib = |file: &str, field: &str| -> u64 {
                std::fs::read_to_string(format!("/proc/{}/{file}", h.pid))
                    .ok()
                    .and_then(|t| {
                        t.lines().find_map(|l| l.strip_prefix(field)?.split_whitespace().next()?.parse().ok())
                    })
                    .unwrap_or(0)
            };
            LightHealth {
                name: h.name.clone(),
                address: h.address.clone(),
                pid: h.pid,
                sshd: alive && crate::host::banner(&h.address),
                rss_kib: if alive { kib("status", "VmRSS:") } else { 0 },
                pss_kib: if alive { kib("smaps_rollup", "Pss:") } else { 0 },
            }
        })
        .collect()
}

/// Stops every process inside the hosts' network namespaces, removes the veths, namespaces and
/// bridge, restores the limits `up` raised and removes the directory's files. Safe to run again.
pub fn light_down(dir: &Path, log: &mut dyn Write) -> Result<crate::DownReport, Error> {
    if !sys::is_root() {
        return Err(Error::NotRoot);
    }
    let dir = std::path::absolute(dir).map_err(io(format!("resolve {}", dir.display())))?;
    let Some(state) = LightState::load(&dir)? else { return Ok(crate::DownReport::default()) };
    let pids = processes_in(&state);
    for pid in &pids {
        sys::kill(*pid);
    }
    if !sys::wait_until(Duration::from_secs(20), || pids.iter().all(|p| !sys::alive(*p))) {
        return Err(Error::Timeout {
            what: format!("stop the {} processes of the light hosts", pids.len()),
            seconds: 20,
        });
    }
    let _ = writeln!(log, "{} processes in {} light hosts stopped", pids.len(), state.hosts.len());
    let links = ip("list links", &["-o", "link", "show"])?;
    let links: std::collections::HashSet<&str> =
        links.lines().filter_map(|l| l.split(": ").nth(1)?.split('@').next()).collect();
    let mut batch = Vec::new();
    for h in &state.hosts {
        if links.contains(h.veth.as_str()) {
            batch.push(format!("link del dev {}", h.veth));
        }
        if Path::new("/run/netns").join(&h.netns).exists() {
            batch.push(format!("netns del {}", h.netns));
        }
    }
    if state.bridge && links.contains(LIGHT_BRIDGE) {
        batch.push(format!("link del dev {LIGHT_BRIDGE}"));
    }
    if !batch.is_empty() {
        ip_batch("remove the light hosts' veths, namespaces and bridge", &[], &batch)?;
    }
    state.netns_root.restore()?;
    for s in &state.sysctls {
        // Only a value still as `up` set it: another change since is someone else's.
        if std::fs::read_to_string(&s.path).is_ok_and(|v| v.trim() == s.set) {
            std::fs::write(&s.path, &s.was).map_err(io(format!("restore {}", s.path)))?;
        }
    }
    for name in ["hosts", "inventory", "ansible.ini", "known_hosts", "id_ed25519", "id_ed25519.pub"] {
        let p = dir.join(name);
        let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
    }
    std::fs::remove_file(dir.join(LIGHT_STATE_FILE)).map_err(io("remove the light hosts' state file"))?;
    let _ = std::fs::remove_dir(&dir);
    Ok(crate::DownReport { hosts: state.hosts.len(), found: true })
}

/// Every process whose network namespace is one of the hosts' (by the namespace's inode).
fn processes_in(state: &LightState) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let inodes: std::collections::HashSet<u64> = state
        .hosts
        .iter()
        .filter_map(|h| std::fs::metadata(Path::new("/run/netns").join(&h.netns)).ok())
        .map(|m| m.ino())
        .collect();
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    procs
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/net"))
                .ok()
                .and_then(|l| l.to_str()?.strip_prefix("net:[")?.strip_suffix(']')?.parse::<u64>().ok())
                .is_some_and(|ino| inodes.contains(&ino))
        })
        .collect()
}

fn write_mode(path: &Path, text: &str, mode: u32) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).map_err(io(format!("write {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io(format!("chmod {}", path.display())))
}

/// The opsgraph inventory: one `compute_node` per host, reached over SSH as root with the fleet
/// key and the pinned host keys.
pub fn inventory(state: &LightState) -> String {
    let dir = state.dir.display();
    let header = format!(
        "# Written by `opsgraph lab fleet light up` for the light hosts in {dir} (docs/fleet.md).\n\
         # Gone after `opsgraph lab fleet light down`.\n"
    );
    let hosts = state.hosts.iter().map(|h| {
        let rest = format!(
            "\x20 provides: [linux.host, ssh.access]\n\
             \x20 access:\n\
             \x20   ssh: {{host: {}, port: 22, user: root, key: {dir}/id_ed25519, known_hosts: {dir}/known_hosts}}\n",
            h.address
        );
        (h.name.as_str(), rest)
    });
    compute_nodes(header, &state.environment, "light", hosts)
}

/// The same hosts for Ansible: its own known_hosts checked strictly, the fleet key.
pub fn ansible_inventory(state: &LightState) -> String {
    let dir = state.dir.display();
    let mut out = format!("# Written by `opsgraph lab fleet light up` for the light hosts in {dir}.\n[light]\n");
    for h in &state.hosts {
        out.push_str(&format!("{} ansible_host={}\n", h.name, h.address));
    }
    out.push_str(&format!(
        "\n[light:vars]\n\
         ansible_user=root\n\
         ansible_ssh_private_key_file={dir}/id_ed25519\n\
         ansible_ssh_common_args='-o UserKnownHostsFile={dir}/known_hosts -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes'\n\
         ansible_python_interpreter=/usr/bin/python3\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use expect_test::expect;

    use super::{LightHost, LightState};

    fn state(n: usize) -> LightState {
        LightState {
            dir: PathBuf::from("/var/light"),
            environment: "bench".into(),
            bridge: true,
            netns_root: super::NetnsRoot::Found,
            hosts: (1..=n)
                .map(|i| LightHost {
                    name: format!("light-{i}"),
                    address: super::light_address(i).to_string(),
                    netns: format!("oglight-{i}"),
                    veth: format!("ogl-{i}"),
                    pid: 0,
                })
                .collect(),
            sysctls: Vec::new(),
        }
    }

    #[test]
    fn addresses_run_through_the_slash_22() {
        let got: Vec<String> = [1, 245, 246, 1000].iter().map(|i| super::light_address(*i).to_string()).collect();
        expect![[r#"["10.214.0.11", "10.214.0.255", "10.214.1.0", "10.214.3.242"]"#]].assert_eq(&format!("{got:?}"));
    }

    #[test]
    fn inventories_for_opsgraph_and_ansible() {
        let s = state(2);
        expect![[r#"
            # Written by `opsgraph lab fleet light up` for the light hosts in /var/light (docs/fleet.md).
            # Gone after `opsgraph lab fleet light down`.
            resource:
              type: compute_node
              name: light-1
              environment: bench
              labels: {fleet: light}
              provides: [linux.host, ssh.access]
              access:
                ssh: {host: 10.214.0.11, port: 22, user: root, key: /var/light/id_ed25519, known_hosts: /var/light/known_hosts}
            ---
            resource:
              type: compute_node
              name: light-2
              environment: bench
              labels: {fleet: light}
              provides: [linux.host, ssh.access]
              access:
                ssh: {host: 10.214.0.12, port: 22, user: root, key: /var/light/id_ed25519, known_hosts: /var/light/known_hosts}
        "#]]
        .assert_eq(&super::inventory(&s));
        expect![[r#"
            # Written by `opsgraph lab fleet light up` for the light hosts in /var/light.
            [light]
            light-1 ansible_host=10.214.0.11
            light-2 ansible_host=10.214.0.12

            [light:vars]
            ansible_user=root
            ansible_ssh_private_key_file=/var/light/id_ed25519
            ansible_ssh_common_args='-o UserKnownHostsFile=/var/light/known_hosts -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes'
            ansible_python_interpreter=/usr/bin/python3
        "#]]
        .assert_eq(&super::ansible_inventory(&s));
    }
}
