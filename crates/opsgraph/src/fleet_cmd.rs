//! `opsgraph lab fleet up|status|down|restart|agent|light`: real Debian hosts on this machine (`opsgraph-fleet`,
//! docs/fleet.md). Exit codes: 0 done (status: every host healthy), 1 failed or unhealthy,
//! 2 not root.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::args::FleetCommand;
use crate::render::Output;

pub fn run(data_dir: &Path, command: FleetCommand, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    let dir = |d: Option<PathBuf>| d.unwrap_or_else(|| data_dir.join("fleet"));
    if !opsgraph_fleet::can_run() {
        writeln!(err, "error[fleet_needs_root]: {}", opsgraph_fleet::Error::NotRoot)?;
        return Ok(2);
    }
    let result = match command {
        FleetCommand::Up { hosts, fleet, environment, cache } => {
            let opts = opsgraph_fleet::Options {
                dir: dir(fleet.dir),
                hosts: hosts.into(),
                cache: cache.unwrap_or_else(default_cache),
                environment,
            };
            opsgraph_fleet::up(&opts, err).map(|s| {
                let verb = if s.existed { "is already up" } else { "is up" };
                let _ = writeln!(out, "fleet of {} hosts {verb} in {}", s.state.hosts.len(), s.state.dir.display());
                if s.built_rootfs {
                    let _ = writeln!(
                        out,
                        "root filesystem built in {:.0} s: {}",
                        s.rootfs_seconds,
                        s.state.rootfs.display()
                    );
                }
                let _ = print_hosts(
                    out,
                    &s.state.hosts.iter().map(|h| (h.name.as_str(), h.address.as_str())).collect::<Vec<_>>(),
                );
                let _ = writeln!(out, "inventory:   {}", s.inventory.display());
                let _ = writeln!(
                    out,
                    "ssh:         ssh -i {} -o UserKnownHostsFile={} root@{}",
                    s.key.display(),
                    s.known_hosts.display(),
                    s.state.hosts[0].address
                );
                let _ = writeln!(out, "tear down:   opsgraph lab fleet down --dir {}", s.state.dir.display());
                0
            })
        }
        FleetCommand::Status { fleet, output } => {
            let d = dir(fleet.dir);
            match opsgraph_fleet::status(&d) {
                Ok(None) => {
                    writeln!(err, "no fleet in {}", d.display())?;
                    Ok(1)
                }
                Ok(Some((_, health))) => {
                    status(&health, output, out)?;
                    Ok(if health.iter().all(|h| h.healthy()) { 0 } else { 1 })
                }
                Err(e) => Err(e),
            }
        }
        FleetCommand::Down { fleet } => {
            let d = dir(fleet.dir);
            opsgraph_fleet::down(&d, err).map(|r| {
                let _ = if r.found {
                    writeln!(out, "fleet in {} removed ({} hosts)", d.display(), r.hosts)
                } else {
                    writeln!(out, "no fleet in {}", d.display())
                };
                0
            })
        }
        FleetCommand::Restart { host, fleet } => opsgraph_fleet::restart(&dir(fleet.dir), &host, err).map(|h| {
            let _ = writeln!(out, "{} {} is back (pid {})", h.name, h.address, h.pid);
            0
        }),
        FleetCommand::Light { command } => return crate::fleet_light_cmd::run(data_dir, command, out, err),
        FleetCommand::Agent { host, server, token_file, name, resources, binary, fleet } => {
            let binary = match binary {
                Some(b) => b,
                None => std::env::current_exe()?,
            };
            let opts = opsgraph_fleet::AgentOptions { binary, server, token_file, name, resources };
            opsgraph_fleet::agent(&dir(fleet.dir), &host, &opts).map(|version| {
                let _ = writeln!(
                    out,
                    "{host}: {version} runs as {} (agent {}, server {}); its inventory entry says access: {{agent: {}}}",
                    opsgraph_fleet::AGENT_UNIT,
                    opts.name,
                    opts.server,
                    opts.name
                );
                0
            })
        }
    };
    crate::render::fleet_exit(result, err)
}

fn print_hosts(out: &mut dyn Write, hosts: &[(&str, &str)]) -> std::io::Result<()> {
    for (name, address) in hosts {
        writeln!(out, "  {name:<10} {address}")?;
    }
    Ok(())
}

fn status(health: &[opsgraph_fleet::Health], output: Output, out: &mut dyn Write) -> anyhow::Result<()> {
    match output {
        Output::Json | Output::Yaml => {
            let rows: Vec<serde_json::Value> = health
                .iter()
                .map(|h| {
                    let agent = h.agent.as_ref().map(|a| serde_json::json!({"name": a.name, "unit": a.unit}));
                    serde_json::json!({"name": h.name, "address": h.address, "pid": h.pid,
                        "systemd": h.systemd, "sshd": h.sshd, "agent": agent, "healthy": h.healthy()})
                })
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        }
        Output::Text | Output::Dot => {
            writeln!(
                out,
                "{:<10} {:<13} {:>8}  {:<12} {:<8} {:<24} HEALTH",
                "HOST", "ADDRESS", "PID", "SYSTEMD", "SSHD", "AGENT"
            )?;
            for h in health {
                let sshd = if h.sshd { "answers" } else { "silent" };
                let agent = h.agent.as_ref().map_or_else(|| "-".to_owned(), |a| format!("{} ({})", a.name, a.unit));
                let ok = if h.healthy() { "healthy" } else { "unhealthy" };
                writeln!(
                    out,
                    "{:<10} {:<13} {:>8}  {:<12} {:<8} {agent:<24} {ok}",
                    h.name, h.address, h.pid, h.systemd, sshd
                )?;
            }
        }
    }
    Ok(())
}

/// `$XDG_CACHE_HOME/opsgraph`, else `~/.cache/opsgraph`.
pub fn default_cache() -> PathBuf {
    match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x).join("opsgraph"),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache/opsgraph"),
    }
}
