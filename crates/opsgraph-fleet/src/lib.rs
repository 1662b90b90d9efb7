//! A fleet of real Debian 12 hosts on this machine, for running packs for real (docs/fleet.md).
//!
//! Each host is a root filesystem from `debootstrap` (built once, cached, then overlaid per host)
//! booted with systemd as PID 1 in its own PID, mount, UTS, IPC, cgroup and network namespaces,
//! with its own cgroup subtree, a private `/dev`, read-only kernel knobs, an address on a bridge
//! of its own (`ogfleet0`, 10.213.0.0/24, no route off the machine), sshd with a fleet key and
//! pinned host keys, and apt through `apt-cacher-ng` listening only on the bridge address.
//!
//! The fleet's state is one JSON file in the fleet directory, written after every step of `up`,
//! so `down` removes exactly what was made, also after an interrupted `up`. The orchestration is
//! `std::process::Command` over the machine's tools (`ip`, `unshare`, `nsenter`, `ssh-keygen`,
//! `debootstrap`, `apt-cacher-ng`); the host's boot is `boot.sh`, embedded.

mod agent;
mod host;
mod inventory;
mod light;
mod net;
mod rootfs;
mod state;
mod sys;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use agent::{AgentOptions, BINARY as AGENT_BINARY, TOKEN as AGENT_TOKEN, UNIT as AGENT_UNIT};
pub use inventory::inventory;
pub use light::{
    ansible_inventory as light_ansible_inventory, inventory as light_inventory, light_address, light_down,
    light_status, light_up, LightHealth, LightHost, LightOptions, LightState, LightSummary, Sysctl, LIGHT_BRIDGE,
    LIGHT_MAX, LIGHT_STATE_FILE,
};
pub use state::{HostState, State};

/// The bridge every fleet host is attached to; one fleet per machine.
pub const BRIDGE: &str = "ogfleet0";
/// The first three octets of the fleet's /24: the bridge is `.1`, hosts `.11` onwards.
pub const NET: &str = "10.213.0";
/// Where the package cache listens, on the bridge address: not apt-cacher-ng's default 3142, so
/// a cache the machine itself runs on all addresses is neither used nor in the way.
pub const CACHE_PORT: u16 = 3143;
/// The most hosts one fleet has (addresses .11 to .210).
pub const MAX_HOSTS: usize = 200;

/// The state file's name in the fleet directory.
pub const STATE_FILE: &str = "fleet.json";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the fleet needs root (namespaces, mounts, a bridge): run it as root")]
    NotRoot,
    #[error("failed to {what}: {command} exited with {status}: {stderr}")]
    Command { what: String, command: String, status: String, stderr: String },
    #[error("failed to {what}: cannot run {command}")]
    Spawn {
        what: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to {what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to {what}: gave up after {seconds} s")]
    Timeout { what: String, seconds: u64 },
    #[error("{0}")]
    Refused(String),
}

impl Error {
    /// A stable code for each kind of failure (docs/errors.md).
    pub fn code(&self) -> &'static str {
        match self {
            Error::NotRoot => "fleet_needs_root",
            Error::Command { .. } | Error::Spawn { .. } => "fleet_command_failed",
            Error::Io { .. } => "fleet_io",
            Error::Timeout { .. } => "fleet_timeout",
            Error::Refused(_) => "fleet_refused",
        }
    }
}

/// What `up` builds.
#[derive(Debug, Clone)]
pub struct Options {
    /// The fleet directory: state, keys, inventory, per-host directories.
    pub dir: PathBuf,
    pub hosts: usize,
    /// The cache directory (`~/.cache/opsgraph`): the root filesystem and the package cache.
    pub cache: PathBuf,
    /// The `environment` of the inventory's resources.
    pub environment: String,
}

/// A host's health as `status` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub name: String,
    pub address: String,
    pub pid: u32,
    /// `systemctl is-system-running` inside the host (`running`, `degraded`, …), or `dead`.
    pub systemd: String,
    /// sshd answered with an SSH banner on port 22.
    pub sshd: bool,
    /// The agent `lab fleet agent` installed, and its unit's state (`systemctl is-active`).
    pub agent: Option<AgentHealth>,
}

/// A host's agent as `status` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentHealth {
    pub name: String,
    /// `active`, `failed`, `inactive`, … or `unknown` when the host does not answer.
    pub unit: String,
}

impl Health {
    /// systemd up, sshd answering, and the agent's unit active where there is one.
    pub fn healthy(&self) -> bool {
        matches!(self.systemd.as_str(), "running" | "degraded")
            && self.sshd
            && self.agent.as_ref().is_none_or(|a| a.unit == "active")
    }
}

/// Paths `up` wrote, for the caller to print.
#[derive(Debug, Clone)]
pub struct Summary {
    pub state: State,
    pub inventory: PathBuf,
    pub key: PathBuf,
    pub known_hosts: PathBuf,
    /// Whether the fleet existed and was healthy already (nothing was built).
    pub existed: bool,
    /// Whether the root filesystem was built by this call (not taken from the cache).
    pub built_rootfs: bool,
    pub rootfs_seconds: f64,
}

pub fn inventory_path(dir: &Path) -> PathBuf {
    dir.join("inventory")
}

/// Builds the fleet, or reports the one already up in `opts.dir` when it is healthy.
pub fn up(opts: &Options, log: &mut dyn Write) -> Result<Summary, Error> {
    if !sys::is_root() {
        return Err(Error::NotRoot);
    }
    if opts.hosts == 0 || opts.hosts > MAX_HOSTS {
        return Err(Error::Refused(format!("--hosts must be 1 to {MAX_HOSTS}, not {}", opts.hosts)));
    }
    let dir = absolute(&opts.dir)?;
    let key = dir.join("id_ed25519");
    let known_hosts = dir.join("known_hosts");
    if let Some(state) = State::load(&dir)? {
        let health = status_of(&state);
        let healthy = health.iter().filter(|h| h.healthy()).count();
        if healthy == state.hosts.len() && state.hosts.len() == opts.hosts {
            return Ok(Summary {
                inventory: inventory_path(&dir),
                key,
                known_hosts,
                state,
                existed: true,
                built_rootfs: false,
                rootfs_seconds: 0.0,
            });
        }
        return Err(Error::Refused(format!(
            "a fleet of {} hosts ({healthy} healthy) is already up in {}: run `opsgraph lab fleet down --dir {}` first",
            state.hosts.len(),
            dir.display(),
            dir.display()
        )));
    }
    net::check_free()?;
    std::fs::create_dir_all(&dir).map_err(sys::io(format!("create {}", dir.display())))?;

    let started = Instant::now();
    let (rootfs, built_rootfs) = rootfs::ensure(&opts.cache.join("rootfs"), log)?;
    let rootfs_seconds = started.elapsed().as_secs_f64();

    let mut state = State::new(&dir, &rootfs);
    state.environment = opts.environment.clone();
    state.save()?;
    let result = build(&mut state, opts, &key, &known_hosts, log);
    if let Err(e) = result {
        let _ = writeln!(log, "fleet up failed ({e}); removing what it made");
        let _ = down(&dir, log);
        return Err(e);
    }
    Ok(Summary {
        inventory: inventory_path(&dir),
        key,
        known_hosts,
        state,
        existed: false,
        built_rootfs,
        rootfs_seconds,
    })
}

fn build(state: &mut State, opts: &Options, key: &Path, known_hosts: &Path, log: &mut dyn Write) -> Result<(), Error> {
    let dir = state.dir.clone();
    host::fleet_key(key)?;
    let boot_sh = dir.join("boot.sh");
    write_mode(&boot_sh, include_str!("boot.sh"), 0o700)?;

    net::bridge_up(&dir)?;
    state.bridge = true;
    state.save()?;
    let cache = net::cache_start(&dir, &opts.cache.join("apt-cacher-ng"))?;
    state.cache_pid = Some(cache);
    state.save()?;
    let _ = writeln!(log, "bridge {BRIDGE} {NET}.1/24, package cache on {NET}.1:{CACHE_PORT} (pid {cache})");

    let names: Vec<(String, String)> =
        (1..=opts.hosts).map(|i| (format!("fleet-{i}"), format!("{NET}.{}", 10 + i))).collect();
    let mut pins = String::new();
    for (i, (name, address)) in names.iter().enumerate() {
        let t = Instant::now();
        let mut h = HostState {
            name: name.clone(),
            address: address.clone(),
            veth: format!("ogf-{}", i + 1),
            dir: dir.join("hosts").join(name),
            launcher_pid: 0,
            pid: 0,
            cgroups: Vec::new(),
            boot_ms: 0,
            agent: None,
        };
        let host_key = host::prepare(&h, &key.with_extension("pub"), &names)?;
        pins.push_str(&format!("{address} {host_key}\n"));
        h.cgroups = sys::make_cgroups(&host::cgroup_name(&h))?;
        state.hosts.push(h.clone());
        state.save()?;
        let (launcher, pid) = host::boot(&boot_sh, &h, &state.rootfs)?;
        h.launcher_pid = launcher;
        h.pid = pid;
        *state.hosts.last_mut().expect("pushed above") = h.clone();
        state.save()?;
        net::veth_up(&h)?;
        host::wait_ready(&h, Duration::from_secs(90))?;
        h.boot_ms = t.elapsed().as_millis() as u64;
        *state.hosts.last_mut().expect("pushed above") = h.clone();
        state.save()?;
        let _ = writeln!(log, "{name} {address} up in {:.1} s (pid {pid})", h.boot_ms as f64 / 1000.0);
    }
    write_mode(known_hosts, &pins, 0o644)?;
    write_inventory(state)
}

fn write_inventory(state: &State) -> Result<(), Error> {
    let inv = inventory_path(&state.dir);
    std::fs::create_dir_all(&inv).map_err(sys::io(format!("create {}", inv.display())))?;
    let text = inventory(state, &state.dir.join("id_ed25519"), &state.dir.join("known_hosts"), &state.environment);
    write_mode(&inv.join("fleet.yaml"), &text, 0o644)
}

/// The fleet in `dir` and its host `name`, or why not.
fn find(dir: &Path, name: &str) -> Result<(State, usize), Error> {
    let dir = absolute(dir)?;
    let state = State::load(&dir)?.ok_or_else(|| Error::Refused(format!("no fleet in {}", dir.display())))?;
    let i = state.hosts.iter().position(|h| h.name == name).ok_or_else(|| {
        let names: Vec<&str> = state.hosts.iter().map(|h| h.name.as_str()).collect();
        Error::Refused(format!("no host {name:?} in the fleet in {} (hosts: {})", dir.display(), names.join(", ")))
    })?;
    Ok((state, i))
}

/// Installs `opsgraph agent` on host `name` as a systemd unit and turns its inventory entry to
/// `access: {agent: NAME}`; returns the binary's version as the host ran it.
pub fn agent(dir: &Path, name: &str, opts: &AgentOptions) -> Result<String, Error> {
    if !sys::is_root() {
        return Err(Error::NotRoot);
    }
    let (mut state, i) = find(dir, name)?;
    let version = agent::install(&state.hosts[i], opts)?;
    state.hosts[i].agent = Some(opts.name.clone());
    state.save()?;
    write_inventory(&state)?;
    Ok(version)
}

/// Brings host `name` back with the same disk (its upper layer): kills it if it is still
/// running, then boots it again, with a new veth, and waits until it is ready. A host whose
/// machine died (its systemd killed) comes back as after a power cycle.
pub fn restart(dir: &Path, name: &str, log: &mut dyn Write) -> Result<HostState, Error> {
    if !sys::is_root() {
        return Err(Error::NotRoot);
    }
    let (mut state, i) = find(dir, name)?;
    let t = Instant::now();
    let mut h = state.hosts[i].clone();
    host::kill(&h)?;
    h.cgroups = sys::make_cgroups(&host::cgroup_name(&h))?;
    h.pid = 0;
    h.launcher_pid = 0;
    state.hosts[i] = h.clone();
    state.save()?;
    let (launcher, pid) = host::boot(&state.dir.join("boot.sh"), &h, &state.rootfs)?;
    h.launcher_pid = launcher;
    h.pid = pid;
    state.hosts[i] = h.clone();
    state.save()?;
    net::veth_up(&h)?;
    host::wait_ready(&h, Duration::from_secs(90))?;
    h.boot_ms = t.elapsed().as_millis() as u64;
    state.hosts[i] = h.clone();
    state.save()?;
    let _ = writeln!(log, "{name} {} back in {:.1} s (pid {pid})", h.address, h.boot_ms as f64 / 1000.0);
    Ok(h)
}

/// A name of the form the documents' ids take: lowercase letters, digits and `-`, `_`, `.`.
pub(crate) fn is_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'))
}

/// The fleet in `dir`, host by host; `None` when no fleet is there.
pub fn status(dir: &Path) -> Result<Option<(State, Vec<Health>)>, Error> {
    let dir = absolute(dir)?;
    let Some(state) = State::load(&dir)? else { return Ok(None) };
    let health = status_of(&state);
    Ok(Some((state, health)))
}

fn status_of(state: &State) -> Vec<Health> {
    state.hosts.iter().map(|h| host::health(h, agent::UNIT)).collect()
}

/// What `down` removed.
#[derive(Debug, Default, Clone)]
pub struct DownReport {
    pub hosts: usize,
    pub found: bool,
}

/// Kills the hosts and removes their cgroups, veths, directories, the bridge, the package cache
/// process and the state. Safe to run again; refuses to delete a directory something is mounted in.
pub fn down(dir: &Path, log: &mut dyn Write) -> Result<DownReport, Error> {
    if !sys::is_root() {
        return Err(Error::NotRoot);
    }
    let dir = absolute(dir)?;
    let Some(state) = State::load(&dir)? else { return Ok(DownReport::default()) };
    for h in &state.hosts {
        host::kill(h)?;
        let _ = writeln!(log, "{} stopped", h.name);
    }
    if let Some(pid) = state.cache_pid {
        // Only the cache this fleet started (its configuration directory on its command line).
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let conf = dir.join("acng").display().to_string();
        if sys::alive(pid) && String::from_utf8_lossy(&cmdline).split('\0').any(|a| a == conf) {
            sys::kill(pid);
            sys::wait_until(Duration::from_secs(10), || !sys::alive(pid));
        }
    }
    if state.bridge {
        net::bridge_down()?;
    }
    let mounted: Vec<String> = sys::mounts().into_iter().filter(|m| Path::new(m).starts_with(&dir)).collect();
    if !mounted.is_empty() {
        return Err(Error::Refused(format!(
            "something is still mounted under {}: {}; unmount it, then run down again",
            dir.display(),
            mounted.join(", ")
        )));
    }
    for h in &state.hosts {
        if h.dir.starts_with(&dir) && h.dir.exists() {
            std::fs::remove_dir_all(&h.dir).map_err(sys::io(format!("remove {}", h.dir.display())))?;
        }
    }
    for name in ["hosts", "inventory", "acng", "boot.sh", "known_hosts", "id_ed25519", "id_ed25519.pub"] {
        let p = dir.join(name);
        let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
    }
    std::fs::remove_file(dir.join(STATE_FILE)).map_err(sys::io("remove the fleet state file"))?;
    let _ = std::fs::remove_dir(&dir);
    Ok(DownReport { hosts: state.hosts.len(), found: true })
}

/// Runs a command inside a host (all its namespaces), for tests and operators.
pub fn exec(h: &HostState, argv: &[&str]) -> std::process::Command {
    host::nsenter(h, argv)
}

fn absolute(dir: &Path) -> Result<PathBuf, Error> {
    std::path::absolute(dir).map_err(sys::io(format!("resolve {}", dir.display())))
}

fn write_mode(path: &Path, text: &str, mode: u32) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).map_err(sys::io(format!("write {}", path.display())))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(sys::io(format!("chmod {}", path.display())))
}

/// The cached root filesystem's directory name under `CACHE/rootfs/`.
pub fn rootfs_key() -> String {
    rootfs::key()
}

/// Whether this process may build a fleet (root).
pub fn can_run() -> bool {
    sys::is_root()
}
