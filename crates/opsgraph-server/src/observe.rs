//! Watching the server: timelines as server-sent events, and Prometheus metrics.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::http::StatusCode;
use opsgraph_store::JobState;

use crate::error::ApiError;
use crate::handlers::{Content, Ctx, Reply};
use crate::media::PROMETHEUS;
use crate::stream;

/// Where a stream resumes: `Last-Event-ID` (what a reconnecting client sends) wins over `?after=`;
/// neither is the beginning.
fn resume_point(ctx: &Ctx) -> Result<i64, ApiError> {
    if let Some(v) = ctx.headers.get("last-event-id") {
        let text = v.to_str().unwrap_or_default().trim();
        return text.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
            ApiError::bad_request("invalid_header", "Last-Event-ID is the id of an event received: a whole number")
        });
    }
    after(ctx, "the id of an event received")
}

/// The `after` query parameter: a whole number from 0 to 2^63-1 (the range the OpenAPI document
/// declares, shared by event ids and log offsets), 0 when absent.
fn after(ctx: &Ctx, what: &str) -> Result<i64, ApiError> {
    match ctx.query.get("after") {
        None => Ok(0),
        Some(v) => v.trim().parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_parameter",
                format!("`after` is {what}: a whole number from 0 to {}", i64::MAX),
            )
        }),
    }
}

/// Who opens a stream: its identity's actor, and the token it showed (re-read while it streams).
fn caller(ctx: &Ctx) -> Result<stream::Caller, ApiError> {
    let unauthenticated = || ApiError::unauthorized("unauthenticated", "an event stream needs a token");
    let who = ctx.who.as_ref().ok_or_else(unauthenticated)?;
    let token = crate::auth::bearer(&ctx.headers).ok_or_else(unauthenticated)?;
    Ok(stream::Caller { actor: who.actor(), token_hash: crate::auth::token_hash(&token) })
}

pub(crate) fn operation_events(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    let after = resume_point(ctx)?;
    Ok(Reply::stream(stream::start(&ctx.state, caller(ctx)?, Some(op.id), after)?))
}

pub(crate) fn all_events(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let after = resume_point(ctx)?;
    Ok(Reply::stream(stream::start(&ctx.state, caller(ctx)?, None, after)?))
}

/// Operation states always reported (0 when none), so that dashboards see every series.
const OPERATION_STATES: &[&str] =
    &["waiting_for_input", "waiting_for_approval", "running", "paused", "failed", "completed", "cancelled"];
const JOB_STATES: &[JobState] = &JobState::ALL;

/// A label value, escaped as the text format wants.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_string()
    } else {
        format!("{v}")
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn by_state(out: &mut String, name: &str, known: &[&str], counts: &BTreeMap<String, u64>) {
    let mut all: BTreeMap<&str, u64> = known.iter().map(|s| (*s, 0)).collect();
    for (k, n) in counts {
        all.insert(k, *n);
    }
    for (state, n) in all {
        let _ = writeln!(out, "{name}{{state=\"{}\"}} {n}", label(state));
    }
}

/// `GET /metrics`: the Prometheus text exposition format 0.0.4.
pub(crate) fn metrics(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let stats = ctx.store.stats()?;
    let mut out = String::new();
    header(&mut out, "opsgraph_operations", "gauge", "Operations by state.");
    by_state(&mut out, "opsgraph_operations", OPERATION_STATES, &stats.operations);
    header(&mut out, "opsgraph_jobs", "gauge", "Job instances by state, across operations.");
    let job_states: Vec<&str> = JOB_STATES.iter().map(|s| s.as_str()).collect();
    by_state(&mut out, "opsgraph_jobs", &job_states, &stats.jobs);
    header(&mut out, "opsgraph_queue_depth", "gauge", "Pending job instances of running operations.");
    let _ = writeln!(out, "opsgraph_queue_depth {}", stats.queue_depth);
    let name = "opsgraph_job_duration_milliseconds";
    header(&mut out, name, "histogram", "Durations of finished job attempts (the last attempt of each job).");
    for (le, n) in &stats.duration_buckets {
        let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {n}", number(*le));
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", stats.duration_count);
    let _ = writeln!(out, "{name}_sum {}", number(stats.duration_sum_ms));
    let _ = writeln!(out, "{name}_count {}", stats.duration_count);
    header(&mut out, "opsgraph_event_streams", "gauge", "Server-sent event streams open now.");
    let open = ctx.state.0.streams.load(std::sync::atomic::Ordering::SeqCst);
    let _ = writeln!(out, "opsgraph_event_streams {open}");
    let name = "opsgraph_connections_refused_total";
    header(&mut out, name, "counter", "Connections closed at once: limits.connections or connections_per_peer.");
    let refused = ctx.state.0.refused.load(std::sync::atomic::Ordering::Relaxed);
    let _ = writeln!(out, "{name} {refused}");
    header(&mut out, "opsgraph_http_requests_total", "counter", "Requests answered since the server started.");
    let requests = ctx.state.0.requests.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for ((method, route, status), n) in requests {
        let _ = writeln!(
            out,
            "opsgraph_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {n}",
            label(route)
        );
    }
    Ok(Reply::with(
        StatusCode::OK,
        Content::Bytes { content_type: PROMETHEUS, bytes: out.into_bytes(), no_store: false },
    ))
}

/// `GET /operations/{id}/jobs/{job}/log?after=`: the job's latest attempt's live output from byte
/// `after` on while it runs (the driver's live log, `opsgraph_runtime::live_log`), its final log
/// once it ended.
pub(crate) fn job_log(ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let op = ctx.operation_record()?;
    let job = ctx.param("job");
    let after = after(ctx, "a byte offset of the live log")? as u64;
    let (store, blobs, data_dir) = (&*ctx.store, &*ctx.state.0.blobs, &ctx.state.0.data_dir);
    let log = opsgraph_api::views::job_log(store, blobs, data_dir, &op.id, &job, after)?
        .ok_or_else(|| ApiError::not_found("no_job", format!("operation `{}` has no job `{job}`", op.id)))?;
    Reply::ok(serde_json::json!(log))
}
