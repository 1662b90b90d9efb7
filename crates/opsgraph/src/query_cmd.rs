//! The commands that read operations — `get`, `describe operation`, `logs`, `audit` — written
//! once over a `Client`: the local one (`client.rs`) or `opsgraph serve` (`remote.rs`). The
//! documents and the renderer are shared, so local and remote output are the same bytes.

use std::io::Write;

use anyhow::{bail, Context as _};
use opsgraph_api::{Client, OperationQuery};
use opsgraph_store::AuditFilter;
use serde_json::{json, Value};

use crate::render::{document, print, to_yaml, Output};

/// `get operations [--state …] [--resource …] [--pack …] [--environment …]|resources|jobs OP`.
pub fn get(
    client: &dyn Client,
    what: &str,
    operation: Option<&str>,
    query: &OperationQuery,
    output: &str,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let operations = matches!(what, "operations" | "operation" | "ops");
    if !operations {
        if let Some((k, _)) = query.pairs().first() {
            bail!("--{k} narrows `get operations` only, not `get {what}`");
        }
    }
    let value: Value = match what {
        _ if operations => json!(client
            .operation_list(query)?
            .iter()
            .map(|i| {
                let o = &i.summary;
                json!({"id": o.id, "state": o.state, "resource": o.resource, "pack": i.pack, "environment": i.environment,
                       "actor": o.actor, "created_at": o.created_at, "detail": o.detail})
            })
            .collect::<Vec<_>>()),
        "resources" | "resource" => json!(client
            .resources()?
            .iter()
            .map(|r| json!({"id": r.id, "status": r.status, "health": r.health, "last_operation": r.last_operation, "observed_state": r.observed_state}))
            .collect::<Vec<_>>()),
        "jobs" | "job" => {
            let op = operation.context("`get jobs` needs an operation: opsgraph get jobs OP")?;
            json!(client
                .jobs(op)?
                .iter()
                .map(|j| json!({"id": j.id, "state": j.state.as_str(), "attempts": j.attempts, "outcome": j.outcome["outcome"], "failure": j.outcome["failure"]}))
                .collect::<Vec<_>>())
        }
        other => bail!("cannot get `{other}`: expected operations, resources or jobs"),
    };
    print(&value, output, out)?;
    Ok(0)
}

/// `describe operation|resource ID`: the document the API serves.
pub fn describe(client: &dyn Client, what: &str, id: &str, output: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    match what {
        "operation" | "op" => describe_operation(client, id, output, out),
        "resource" => {
            document(&serde_json::to_value(client.resource(id)?)?, output, out)?;
            Ok(0)
        }
        other => bail!("cannot describe `{other}`: expected operation or resource"),
    }
}

/// `describe operation ID`: the operation document the API serves.
pub fn describe_operation(client: &dyn Client, id: &str, output: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    document(&serde_json::to_value(client.operation(id)?)?, output, out)?;
    Ok(0)
}

/// `logs OP [JOB]`: the captured output of each attempt.
pub fn logs(
    client: &dyn Client,
    op: &str,
    job: Option<&str>,
    output: Output,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let list = client.logs(op, job)?;
    match output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?,
        Output::Yaml => write!(out, "{}", to_yaml(&serde_json::to_value(&list)?, 0))?,
        Output::Dot => bail!("`logs` prints text, json or yaml"),
        Output::Text => {
            for l in &list {
                writeln!(out, "==> {} attempt {} <==", l.job, l.attempt)?;
                match &l.output {
                    Some(text) => {
                        write!(out, "{text}")?;
                        if !text.ends_with('\n') && !text.is_empty() {
                            writeln!(out)?;
                        }
                    }
                    None => writeln!(out, "(no output)")?,
                }
            }
        }
    }
    Ok(0)
}

/// `logs OP JOB --follow`: the job's output as it arrives (its live log, masked by the runtime),
/// attempt by attempt; when an attempt ends, what its final log holds beyond what was printed
/// (the whole final log, after a line saying so, when it does not continue the printed text).
/// Ends once the job's last attempt has ended and the job will not run again: 0 when it ended
/// well, 1 when it failed or was cancelled.
pub fn follow_log(client: &dyn Client, op: &str, job: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    use opsgraph_core::model::JobState as S;
    let (mut shown, mut after, mut printed, mut whole, mut ended) = (0u32, 0u64, String::new(), true, false);
    loop {
        let log = client.job_log(op, job, after)?;
        if log.attempt > shown {
            (shown, after, whole, ended) = (log.attempt, 0, true, false);
            printed.clear();
            writeln!(out, "==> {} attempt {} <==", log.job, log.attempt)?;
            continue;
        }
        if log.running {
            if log.from > after {
                writeln!(out, "[… {} bytes no longer kept live]", log.from - after)?;
                whole = false;
            }
            write!(out, "{}", log.text)?;
            out.flush()?;
            printed.push_str(&log.text);
            after = log.next;
        } else if log.final_log && !ended {
            ended = true;
            let rest = match log.text.strip_prefix(printed.as_str()) {
                Some(rest) if whole => rest,
                _ => {
                    writeln!(
                        out,
                        "{}--- the attempt's final log ---",
                        if printed.ends_with('\n') || printed.is_empty() { "" } else { "\n" }
                    )?;
                    &log.text
                }
            };
            write!(out, "{rest}")?;
            if !log.text.is_empty() && !log.text.ends_with('\n') {
                writeln!(out)?;
            }
            out.flush()?;
        }
        let settled = !matches!(log.state, S::Pending | S::Running) && (ended || log.attempt == 0);
        // A failed attempt with retries left: the operation still runs, the next attempt follows.
        if settled
            && (log.state != S::Failed
                || client.operation(op)?.summary.state != opsgraph_core::model::OperationStateKind::Running)
        {
            return Ok(u8::from(matches!(log.state, S::Failed | S::Cancelled)));
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// `audit [--actor ..] [--operation ..] [--resource ..] [--since ..]`.
pub fn audit(client: &dyn Client, filter: &AuditFilter, output: &str, out: &mut dyn Write) -> anyhow::Result<u8> {
    let rows: Vec<Value> = client
        .audit(filter)?
        .iter()
        .map(|a| json!({"seq": a.seq, "at": a.at, "actor": a.actor, "action": a.action, "target": a.target, "operation": a.operation}))
        .collect();
    print(&Value::Array(rows), output, out)?;
    Ok(0)
}

/// `diagnose OP`: what the rules analyzer finds, printed; the findings are returned for
/// `--propose`, which each client does its own way (see `ops_cmd::diagnose`, `Remote::diagnose`).
pub fn diagnose(
    client: &dyn Client,
    op: &str,
    output: Output,
    out: &mut dyn Write,
) -> anyhow::Result<Vec<opsgraph_api::DiagnosisView>> {
    let found = client.diagnosis(op)?;
    if found.is_empty() {
        bail!("operation {op} has no failed job to diagnose");
    }
    match output {
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&found)?)?,
        Output::Yaml => write!(out, "{}", to_yaml(&serde_json::to_value(&found)?, 0))?,
        Output::Text | Output::Dot => {
            for d in &found {
                writeln!(out, "Diagnosis of {} ({} analyzer, confidence {:.1})", d.job, d.analyzer, d.confidence)?;
                writeln!(out, "  {}", d.summary)?;
                writeln!(out, "  cause: {}", d.cause)?;
                writeln!(out, "  based on: {}", d.evidence.join("; "))?;
                match &d.remedy {
                    Some(r) => match d.source {
                        Some(from) => writeln!(out, "  remedy: {r} ({})", from.as_str())?,
                        None => writeln!(out, "  remedy: {r}")?,
                    },
                    None => writeln!(out, "  no remedy applies: nothing is proposed")?,
                }
            }
        }
    }
    Ok(found)
}
