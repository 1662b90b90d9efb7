//! The fleet's state file (`FLEET_DIR/fleet.json`): what `up` made, written after every step,
//! so `down` removes exactly that, also after an interrupted `up`.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::sys::io;
use crate::{Error, STATE_FILE};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub dir: PathBuf,
    /// The cached root filesystem every host overlays.
    pub rootfs: PathBuf,
    /// Whether this fleet made the bridge (so `down` removes it).
    pub bridge: bool,
    /// The package cache's process.
    pub cache_pid: Option<u32>,
    pub hosts: Vec<HostState>,
    /// The `environment` of the inventory's resources.
    #[serde(default = "dev")]
    pub environment: String,
}

fn dev() -> String {
    "dev".into()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostState {
    pub name: String,
    pub address: String,
    /// The machine's end of the host's veth pair (the host's end is `eth0`).
    pub veth: String,
    /// `root` (the overlay's mount point, inside the host only), `upper`, `work`, `boot.log`.
    pub dir: PathBuf,
    /// The `boot.sh outer` process, which became `unshare` (0 before it started).
    pub launcher_pid: u32,
    /// The host's systemd (PID 1 inside), as the machine sees it (0 before it started).
    pub pid: u32,
    /// The host's own cgroup in each hierarchy.
    pub cgroups: Vec<PathBuf>,
    /// From preparing its files to sshd answering.
    pub boot_ms: u64,
    /// The agent installed by `lab fleet agent` (the inventory then says `access: {agent: NAME}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

impl State {
    pub(crate) fn new(dir: &Path, rootfs: &Path) -> State {
        State {
            dir: dir.to_owned(),
            rootfs: rootfs.to_owned(),
            bridge: false,
            cache_pid: None,
            hosts: Vec::new(),
            environment: dev(),
        }
    }

    pub(crate) fn load(dir: &Path) -> Result<Option<State>, Error> {
        load_file(&dir.join(STATE_FILE), "a fleet state file")
    }

    pub(crate) fn save(&self) -> Result<(), Error> {
        save_file(&self.dir, STATE_FILE, self)
    }
}

/// A state file (this fleet's, the light hosts'): `None` when there is none; one that does not
/// parse is refused as not being `what`.
pub(crate) fn load_file<T: DeserializeOwned>(path: &Path, what: &str) -> Result<Option<T>, Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::Io { what: format!("read {}", path.display()), source: e }),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| Error::Refused(format!("{} is not {what}: {e}", path.display())))
}

/// `DIR/NAME`, written to a temporary file and renamed: a reader never sees half a state.
pub(crate) fn save_file<T: Serialize>(dir: &Path, name: &str, state: &T) -> Result<(), Error> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let text = serde_json::to_string_pretty(state).expect("the state serializes");
    std::fs::write(&tmp, text + "\n").map_err(io(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, &path).map_err(io(format!("rename {}", path.display())))
}
