//! Server-sent events: a timeline, live. A blocking thread polls `Store::timeline_after` and
//! feeds a bounded channel; the response body reads it. Each event carries its timeline `seq` as
//! its id, so a client that reconnects with `Last-Event-ID` gets exactly what it missed: seqs are
//! assigned in commit order by the one writer, so nothing commits behind an id already sent.
//! A stream lasts at most `limits.event_stream_duration`: then it ends cleanly with an
//! `event: reconnect` naming the last id sent, and the client resumes from there.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use opsgraph_plan::lifecycle::{is_terminal, state_name};
use opsgraph_store::{JobState, OperationRecord, Store};
use serde_json::json;
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::{views, AppState};

/// How often the store is asked for new entries when the last answer had none to spare.
const POLL: Duration = Duration::from_millis(200);
/// The most entries read (and sent) per query.
const BATCH: usize = 500;
/// Events buffered for a slow client before the reader waits for it.
const BUFFER: usize = 64;
/// A comment line sent when nothing happened for this long, so proxies keep the connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A slot among `limits.event_streams`, given back when the stream ends.
pub(crate) struct Slot(AppState);

impl Slot {
    pub(crate) fn take(state: &AppState) -> Result<Slot, ApiError> {
        let max = state.0.limits.event_streams;
        let taken = state.0.streams.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1));
        match taken {
            Ok(_) => Ok(Slot(state.clone())),
            Err(_) => Err(ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "too_many_streams",
                format!("{max} event streams are open, the most limits.event_streams allows; try again later"),
            )
            .with_details(json!({"limit": "event_streams", "max": max}))),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0 .0.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The body side: events as the channel delivers them; ends when the reader thread does.
struct Events(mpsc::Receiver<Event>);

impl futures_core::Stream for Events {
    type Item = Result<Event, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|e| e.map(Ok))
    }
}

/// Starts streaming the timeline of `operation` (or of all operations) after `after`; called on
/// a blocking thread by a handler whose route and operation were checked.
pub(crate) fn start(state: &AppState, operation: Option<String>, after: i64) -> Result<Response, ApiError> {
    let slot = Slot::take(state)?;
    let (tx, rx) = mpsc::channel(BUFFER);
    let state = state.clone();
    std::thread::Builder::new()
        .name("event stream".into())
        .spawn(move || {
            let _slot = slot;
            feed(&state, operation.as_deref(), after, &tx);
        })
        .map_err(|e| ApiError::internal("failed to start an event stream thread", &e))?;
    let sse = Sse::new(Events(rx)).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"));
    let mut response = sse.into_response();
    // Proxies that buffer would hold events back.
    response.headers_mut().insert("x-accel-buffering", axum::http::HeaderValue::from_static("no"));
    Ok(response)
}

/// Reads new timeline entries and sends them until the client goes away, the server shuts down,
/// (one operation) the operation is terminal and every entry was sent, or the stream is as old
/// as `limits.event_stream_duration` (then `event: reconnect`, whose `last_event_id` is the id
/// to resume after).
fn feed(state: &AppState, operation: Option<&str>, mut after: i64, tx: &mpsc::Sender<Event>) {
    let limit = state.0.limits.event_stream_duration;
    let deadline = Instant::now() + limit;
    let store = match state.store() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "event stream: the store does not open");
            return;
        }
    };
    loop {
        if tx.is_closed() || state.0.closing.load(Ordering::SeqCst) {
            return;
        }
        // The state and the jobs are read before the entries: when the operation is terminal and
        // settled here, its last entry is in what the next queries return.
        let terminal = match operation {
            Some(id) => match store.operation(id) {
                Ok(Some(op)) => {
                    (is_terminal(&op.state) && settled(state, &*store, &op)).then(|| state_name(op.state.kind()))
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(operation = id, error = %e, "event stream: reading the operation failed");
                    return;
                }
            },
            None => None,
        };
        let batch = match store.timeline_after(operation, after, BATCH) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "event stream: reading the timeline failed");
                return;
            }
        };
        let full = batch.len() == BATCH;
        for entry in &batch {
            let mut data = views::timeline_entry(entry);
            data["operation"] = json!(entry.operation);
            let event = Event::default().id(entry.seq.to_string()).data(data.to_string());
            if !send(state, tx, event, deadline) {
                return;
            }
            after = entry.seq;
        }
        if !full {
            if let (Some(id), Some(last_state)) = (operation, terminal) {
                let end = json!({"operation": id, "state": last_state, "last_event_id": after});
                send(state, tx, Event::default().event("end").data(end.to_string()), deadline);
                return;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            // No id: the client's last id stays the last entry it got.
            let data = json!({
                "reason": format!("the stream is {} s old, the most limits.event_stream_duration allows: reconnect with Last-Event-ID", limit.as_secs_f64()),
                "last_event_id": after,
            });
            // A second to say so, even to a slow client; then the stream ends either way.
            send(state, tx, Event::default().event("reconnect").data(data.to_string()), now + Duration::from_secs(1));
            return;
        }
        if !full {
            std::thread::sleep(POLL.min(deadline - now));
        }
    }
}

/// Hands `event` to the response body; false when the client went away, or when it has read
/// nothing until `deadline` (the buffer stays full): a client that stops reading does not hold
/// the thread past `limits.event_stream_duration`. What it was sent is still delivered if it
/// reads again, and it resumes after the last id it got. Nor does it hold a server that shuts
/// down.
fn send(state: &AppState, tx: &mpsc::Sender<Event>, event: Event, deadline: Instant) -> bool {
    let mut event = event;
    loop {
        match tx.try_send(event) {
            Ok(()) => return true,
            Err(mpsc::error::TrySendError::Closed(_)) => return false,
            Err(mpsc::error::TrySendError::Full(back)) => {
                if Instant::now() >= deadline || state.0.closing.load(Ordering::SeqCst) {
                    return false;
                }
                event = back;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Whether nothing more will be written about a terminal operation. A cancelled run's attempts
/// are stopped after its `cancel` entry, each then recorded with a `job_cancelled` entry (in the
/// transaction of its job record): until then the stream goes on. An attempt left `running` by
/// a crash stays so, and nobody drives its operation: then it is settled too.
fn settled(state: &AppState, store: &dyn Store, op: &OperationRecord) -> bool {
    match store.jobs(&op.id) {
        Ok(jobs) if jobs.iter().all(|j| j.state != JobState::Running) => true,
        Ok(_) => !driven(state, store, op),
        Err(e) => {
            tracing::warn!(operation = %op.id, error = %e, "event stream: reading the jobs failed");
            true
        }
    }
}

/// Whether a driver of this server runs the operation: its own, or the one of an operation it
/// belongs to (sub-operations are driven by their root's driver).
fn driven(state: &AppState, store: &dyn Store, op: &OperationRecord) -> bool {
    let mut id = Some(op.id.clone());
    let mut parent = op.parent.clone();
    for _ in 0..64 {
        let Some(this) = id else { return false };
        if state.0.drivers.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&this) {
            return true;
        }
        id = parent.take();
        parent = match &id {
            Some(p) => store.operation(p).ok().flatten().and_then(|o| o.parent),
            None => None,
        };
    }
    false
}
