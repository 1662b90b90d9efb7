//! `opsgraph verify RESOURCE` ([I]): runs the resource's verification now, through either
//! client (the local runtime, or `POST /api/v1/verifications`), and prints it one way.

use std::io::Write;

use opsgraph_core::model::ResourceStatus;
use opsgraph_runtime::{Repair, VerifyReport};

use crate::render::Output;

/// Verifies `resource` through `ctl`. Exit 0 when it is running, 1 when a check failed.
pub fn verify(
    ctl: &mut dyn opsgraph_api::Control,
    resource: &str,
    output: Output,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let report = ctl.verify(resource)?;
    match output {
        Output::Json => crate::render::document(&serde_json::to_value(&report)?, "json", out)?,
        Output::Yaml => crate::render::document(&serde_json::to_value(&report)?, "yaml", out)?,
        Output::Text | Output::Dot => print(&report, out)?,
    }
    // A repair the policy started is followed until it stops (driven here, or by the server).
    if let Some(Repair::Created { operation, state }) = &report.repair {
        if state == "running" {
            let view = ctl.follow(operation, 0, &mut |_| {})?;
            if output == Output::Text {
                writeln!(out, "repair operation {operation}: {}", view.summary.detail)?;
            }
        }
    }
    Ok(if report.status == ResourceStatus::Running { 0 } else { 1 })
}

fn print(r: &VerifyReport, out: &mut dyn Write) -> anyhow::Result<()> {
    let was = match r.before {
        Some(before) if before != r.status => format!(" (was {})", before.as_str()),
        _ => String::new(),
    };
    let passed = r.checks.iter().filter(|c| c.passed).count();
    writeln!(
        out,
        "{}: {}{was}; {passed}/{} checks passed (against operation {})",
        r.resource,
        r.status.as_str(),
        r.checks.len(),
        r.operation
    )?;
    for c in &r.checks {
        if c.passed {
            writeln!(out, "  ok     {} on {}: {}", c.check, c.on, c.observed)?;
        } else {
            writeln!(out, "  FAILED {} on {}: expected {}, observed {}", c.check, c.on, c.expected, c.observed)?;
        }
    }
    match &r.repair {
        Some(Repair::Off { reason }) => writeln!(out, "repair: none ({reason})")?,
        Some(Repair::NotPlanned { reason }) => writeln!(out, "repair: not planned ({reason})")?,
        Some(Repair::Created { operation, state }) => writeln!(out, "repair: operation {operation} created ({state})")?,
        None => {}
    }
    if !r.observed.is_empty() {
        let values: Vec<String> = r.observed.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(out, "observed: {}", values.join(", "))?;
    }
    Ok(())
}
