//! The fleet's network: one bridge on the machine with the fleet's /24, a veth per host, and
//! the package cache listening on the bridge address only. Hosts get no default route, and the
//! machine's forwarding and firewall are left alone: host traffic cannot leave the machine.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::state::HostState;
use crate::sys::{self, io, ip};
use crate::{Error, BRIDGE, CACHE_PORT, NET};

/// Refuses when the bridge exists (another fleet is up) or the fleet's range is routed already.
pub(crate) fn check_free() -> Result<(), Error> {
    if let Ok(out) = ip("show the bridge", &["-o", "link", "show", "dev", BRIDGE]) {
        let owner = out.split(" alias ").nth(1).map(str::trim).unwrap_or("unknown");
        return Err(Error::Refused(format!(
            "the bridge {BRIDGE} exists already ({owner}): another fleet is up; run `opsgraph lab fleet down --dir DIR` for it"
        )));
    }
    let routes = ip("list routes", &["-4", "route", "show"])?;
    if let Some(r) = routes.lines().find(|r| r.starts_with(&format!("{NET}."))) {
        return Err(Error::Refused(format!("the fleet's range {NET}.0/24 is in use on this machine: {r}")));
    }
    Ok(())
}

pub(crate) fn bridge_up(dir: &Path) -> Result<(), Error> {
    ip("create the bridge", &["link", "add", BRIDGE, "type", "bridge"])?;
    let alias = format!("opsgraph-fleet {}", dir.display());
    ip("name the bridge's fleet", &["link", "set", "dev", BRIDGE, "alias", &alias])?;
    ip("address the bridge", &["addr", "add", &format!("{NET}.1/24"), "dev", BRIDGE])?;
    ip("bring the bridge up", &["link", "set", "dev", BRIDGE, "up"])?;
    Ok(())
}

pub(crate) fn bridge_down() -> Result<(), Error> {
    if ip("show the bridge", &["link", "show", "dev", BRIDGE]).is_ok() {
        ip("remove the bridge", &["link", "del", "dev", BRIDGE])?;
    }
    Ok(())
}

/// The machine's end on the bridge, the host's end as `eth0` in its network namespace with the
/// host's address; no default route.
pub(crate) fn veth_up(h: &HostState) -> Result<(), Error> {
    let pid = h.pid.to_string();
    ip("create the host's veth", &["link", "add", &h.veth, "type", "veth", "peer", "name", "eth0", "netns", &pid])?;
    ip("attach the veth to the bridge", &["link", "set", "dev", &h.veth, "master", BRIDGE, "up"])?;
    let inside = |what: &str, args: &[&str]| {
        sys::run(what, Command::new("nsenter").arg("-t").arg(&pid).arg("-n").arg("ip").args(args))
    };
    inside("bring the host's loopback up", &["link", "set", "dev", "lo", "up"])?;
    inside("address the host", &["addr", "add", &format!("{}/24", h.address), "dev", "eth0"])?;
    inside("bring the host's eth0 up", &["link", "set", "dev", "eth0", "up"])?;
    Ok(())
}

/// Starts `apt-cacher-ng` on the bridge address with its own configuration (Debian's archive
/// and its security archive only: `ForceManaged`), its packages kept in `store` across fleets.
pub(crate) fn cache_start(dir: &Path, store: &Path) -> Result<u32, Error> {
    let conf = dir.join("acng");
    let logs = conf.join("log");
    std::fs::create_dir_all(&logs).map_err(io(format!("create {}", logs.display())))?;
    std::fs::create_dir_all(store).map_err(io(format!("create {}", store.display())))?;
    let text = format!(
        "# written by opsgraph lab fleet up: the fleet's package cache, on the bridge only\n\
         CacheDir: {store}\n\
         LogDir: {logs}\n\
         SupportDir: /usr/lib/apt-cacher-ng\n\
         SocketPath: {sock}\n\
         PidFile: {pid}\n\
         BindAddress: {NET}.1\n\
         Port: {CACHE_PORT}\n\
         Remap-debrep: /debian ; http://deb.debian.org/debian/\n\
         Remap-secdeb: /debian-security ; http://deb.debian.org/debian-security/\n\
         ForceManaged: 1\n\
         ExThreshold: 4\n",
        store = store.display(),
        logs = logs.display(),
        sock = conf.join("socket").display(),
        pid = conf.join("pid").display(),
    );
    std::fs::write(conf.join("acng.conf"), text).map_err(io("write the package cache's configuration"))?;
    let pid = sys::spawn_logged(
        Command::new("apt-cacher-ng").arg("-c").arg(&conf).arg("ForeGround=1"),
        &conf.join("stderr.log"),
        "the package cache's log",
        "start the package cache".into(),
        "apt-cacher-ng (apt-get install apt-cacher-ng)",
    )?;
    let addr: std::net::SocketAddr = format!("{NET}.1:{CACHE_PORT}").parse().expect("the fleet range is an address");
    let up = sys::wait_until(Duration::from_secs(15), || {
        sys::alive(pid) && std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
    });
    if !up {
        sys::kill(pid);
        let log = std::fs::read_to_string(conf.join("stderr.log")).unwrap_or_default();
        return Err(Error::Refused(format!("the package cache did not listen on {addr}: {}", log.trim())));
    }
    Ok(pid)
}
