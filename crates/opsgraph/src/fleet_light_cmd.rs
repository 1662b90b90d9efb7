//! `opsgraph lab fleet light up|status|down`: light hosts, a network namespace and one sshd each
//! (`opsgraph_fleet::light_*`, docs/fleet.md). Exit codes as `lab fleet`'s: 0 done (status: every
//! sshd answers), 1 failed or unhealthy, 2 not root.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::args::LightCommand;
use crate::render::Output;

pub fn run(data_dir: &Path, command: LightCommand, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    let dir = |d: Option<PathBuf>| d.unwrap_or_else(|| data_dir.join("light"));
    let result = match command {
        LightCommand::Up { count, light, environment } => {
            let opts = opsgraph_fleet::LightOptions { dir: dir(light.dir), count: count.into(), environment };
            opsgraph_fleet::light_up(&opts, err).map(|s| {
                let verb = if s.existed { "are already up" } else { "are up" };
                let d = s.state.dir.display();
                let _ = writeln!(out, "{} light hosts {verb} in {d} ({:.1} s)", s.state.hosts.len(), s.seconds);
                let (first, last) = (&s.state.hosts[0], &s.state.hosts[s.state.hosts.len() - 1]);
                let _ = writeln!(out, "hosts:       {} {} … {} {}", first.name, first.address, last.name, last.address);
                let _ = writeln!(out, "inventory:   {}", s.inventory.display());
                let _ = writeln!(out, "ansible:     {}", s.ansible_inventory.display());
                let _ = writeln!(
                    out,
                    "ssh:         ssh -i {} -o UserKnownHostsFile={} root@{}",
                    s.key.display(),
                    s.known_hosts.display(),
                    first.address
                );
                let _ = writeln!(out, "tear down:   opsgraph lab fleet light down --dir {d}");
                0
            })
        }
        LightCommand::Status { light, output } => {
            let d = dir(light.dir);
            match opsgraph_fleet::light_status(&d) {
                Ok(None) => {
                    writeln!(err, "no light hosts in {}", d.display())?;
                    Ok(1)
                }
                Ok(Some((_, health))) => {
                    status(&health, output, out)?;
                    Ok(if health.iter().all(|h| h.sshd) { 0 } else { 1 })
                }
                Err(e) => Err(e),
            }
        }
        LightCommand::Down { light } => {
            let d = dir(light.dir);
            opsgraph_fleet::light_down(&d, err).map(|r| {
                let _ = if r.found {
                    writeln!(out, "light hosts in {} removed ({} hosts)", d.display(), r.hosts)
                } else {
                    writeln!(out, "no light hosts in {}", d.display())
                };
                0
            })
        }
    };
    crate::render::fleet_exit(result, err)
}

/// One line per host, then the memory of all the sshd together.
fn status(health: &[opsgraph_fleet::LightHealth], output: Output, out: &mut dyn Write) -> anyhow::Result<()> {
    match output {
        Output::Json | Output::Yaml => {
            let rows: Vec<serde_json::Value> = health
                .iter()
                .map(|h| {
                    serde_json::json!({"name": h.name, "address": h.address, "pid": h.pid, "sshd": h.sshd,
                        "rss_kib": h.rss_kib, "pss_kib": h.pss_kib})
                })
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        }
        Output::Text | Output::Dot => {
            writeln!(
                out,
                "{:<11} {:<13} {:>8}  {:<8} {:>8} {:>8}",
                "HOST", "ADDRESS", "PID", "SSHD", "RSS KiB", "PSS KiB"
            )?;
            for h in health {
                let sshd = if h.sshd { "answers" } else { "silent" };
                writeln!(
                    out,
                    "{:<11} {:<13} {:>8}  {sshd:<8} {:>8} {:>8}",
                    h.name, h.address, h.pid, h.rss_kib, h.pss_kib
                )?;
            }
            let n = health.len().max(1) as u64;
            let (rss, pss): (u64, u64) =
                (health.iter().map(|h| h.rss_kib).sum(), health.iter().map(|h| h.pss_kib).sum());
            let answering = health.iter().filter(|h| h.sshd).count();
            writeln!(
                out,
                "{answering} of {} answer; sshd memory: {:.1} MiB resident ({} KiB a host), {:.1} MiB proportional ({} KiB a host)",
                health.len(),
                rss as f64 / 1024.0,
                rss / n,
                pss as f64 / 1024.0,
                pss / n
            )?;
        }
    }
    Ok(())
}
