//! Server-sent events: a timeline, live. A blocking thread polls `Store::timeline_after` and
//! feeds a bounded channel; the response body reads it. Each event carries its timeline `seq` as
//! its id, so a client that reconnects with `Last-Event-ID` gets exactly what it missed: seqs are
//! assigned in commit order by the one writer, so nothing commits behind an id already sent.
//! A stream lasts at most `limits.event_stream_duration`: then it ends cleanly with an
//! `event: reconnect` naming the last id sent, and the client resumes from there.
//! A stream is its caller's for as long as the token is good: the thread re-reads the token at
//! least every [`RECHECK`] and ends the stream (`event: revoked`) once it is revoked or gone.
//! One identity holds at most `limits.event_streams_per_identity` of the server's streams.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use opsgraph_core::plan::lifecycle::{is_terminal, state_name};
use opsgraph_store::{JobState, OperationRecord, Store};
use serde_json::json;
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::AppState;
use opsgraph_api::views;

/// How often the store is asked for new entries when the last answer had none to spare.
const POLL: Duration = Duration::from_millis(200);
/// The most entries read (and sent) per query.
const BATCH: usize = 500;
/// Events buffered for a slow client before the reader waits for it.
const BUFFER: usize = 64;
/// A comment line sent when nothing happened for this long, so proxies keep the connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How often a stream's token is read again: a revoked token's streams end within this (plus a
/// poll), well inside the second that docs/api.md promises.
pub(crate) const RECHECK: Duration = Duration::from_millis(250);

/// Whose stream it is: the actor it counts against, and the hash of the token it was opened
/// with (read again every [`RECHECK`]).
pub(crate) struct Caller {
    pub(crate) actor: String,
    pub(crate) token_hash: String,
}

/// A slot among `limits.event_streams` and among its identity's
/// `limits.event_streams_per_identity`, given back when the stream ends.
pub(crate) struct Slot {
    state: AppState,
    actor: String,
}

impl Slot {
    pub(crate) fn take(state: &AppState, actor: &str) -> Result<Slot, ApiError> {
        let too_many = |message: String, limit: &str, max: usize| {
            ApiError::new(axum::http::StatusCode::TOO_MANY_REQUESTS, "too_many_streams", message)
                .with_details(json!({"limit": limit, "max": max}))
        };
        // The identity's count is checked and taken under one lock, so two streams of one
        // identity cannot both pass it; the server-wide slot is taken only once it passed.
        let per = state.0.limits.event_streams_per_identity;
        let mut mine = state.0.streams_by_actor.lock().unwrap_or_else(|e| e.into_inner());
        let open = mine.get(actor).copied().unwrap_or(0);
        if open >= per {
            return Err(too_many(
                format!("{actor} has {open} event streams open, the most limits.event_streams_per_identity ({per}) allows; close one or try again later"),
                "event_streams_per_identity",
                per,
            ));
        }
        let max = state.0.limits.event_streams;
        let taken = state.0.streams.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then_some(n + 1));
        if taken.is_err() {
            return Err(too_many(
                format!("{max} event streams are open, the most limits.event_streams allows; try again later"),
                "event_streams",
                max,
            ));
        }
        *mine.entry(actor.to_string()).or_insert(0) += 1;
        Ok(Slot { state: state.clone(), actor: actor.to_string() })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut mine = self.state.0.streams_by_actor.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = mine.get_mut(&self.actor) {
            *n -= 1;
            if *n == 0 {
                mine.remove(&self.actor);
            }
        }
        self.state.0.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether the caller's token still holds, read from the store at most every [`RECHECK`]: a
/// token revoked from this server, another replica or the CLI ends the stream alike.
struct Token<'a> {
    hash: &'a str,
    checked: Instant,
}

impl Token<'_> {
    /// False once the token is revoked or gone (or cannot be read: fail closed).
    fn holds(&mut self, store: &dyn Store) -> bool {
        if self.checked.elapsed() < RECHECK {
            return true;
        }
        self.checked = Instant::now();
        match store.token_by_hash(self.hash) {
            Ok(Some(t)) => t.revoked_at.is_none(),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(error = %e, "event stream: reading the token failed; the stream ends");
                false
            }
        }
    }
}

/// An event's data: the entry as the timeline route shows it, and its operation. Written
/// straight to text: every stream writes every entry, and building a `Value` first was most of a
/// stream's time (perf, 1,000 streams: allocation and map inserts).
#[derive(serde::Serialize)]
struct Streamed<'a> {
    #[serde(flatten)]
    entry: opsgraph_api::TimelineView,
    operation: &'a str,
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
pub(crate) fn start(
    state: &AppState,
    caller: Caller,
    operation: Option<String>,
    after: i64,
) -> Result<Response, ApiError> {
    let slot = Slot::take(state, &caller.actor)?;
    let (tx, rx) = mpsc::channel(BUFFER);
    let state = state.clone();
    std::thread::Builder::new()
        .name("event stream".into())
        .spawn(move || {
            let _slot = slot;
            feed(&state, &caller.token_hash, operation.as_deref(), after, &tx);
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
/// to resume after), or the caller's token is revoked (then `event: revoked`).
fn feed(state: &AppState, token_hash: &str, operation: Option<&str>, mut after: i64, tx: &mpsc::Sender<Event>) {
    let limit = state.0.limits.event_stream_duration;
    let deadline = Instant::now() + limit;
    let store = match state.store() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "event stream: the store does not open");
            return;
        }
    };
    // Checked before the first event too: the token was good a moment ago, in `dispatch`.
    let mut token = Token { hash: token_hash, checked: Instant::now() };
    let revoked = |tx: &mpsc::Sender<Event>| {
        let data = json!({"reason": "the token of this stream was revoked", "code": "token_revoked"});
        // Said if the buffer has room; the stream ends either way.
        let _ = tx.try_send(Event::default().event("revoked").data(data.to_string()));
    };
    loop {
        if tx.is_closed() || state.0.closing.load(Ordering::SeqCst) {
            return;
        }
        if !token.holds(&*store) {
            revoked(tx);
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
            let data = Streamed { entry: views::timeline_entry(entry), operation: &entry.operation };
            let data = serde_json::to_string(&data).unwrap_or_default();
            let event = Event::default().id(entry.seq.to_string()).data(data);
            match send(state, tx, event, deadline, &mut || token.holds(&*store)) {
                Sent::Yes => {}
                Sent::No => return,
                Sent::Revoked => {
                    revoked(tx);
                    return;
                }
            }
            after = entry.seq;
        }
        if !full {
            if let (Some(id), Some(last_state)) = (operation, terminal) {
                let end = json!({"operation": id, "state": last_state, "last_event_id": after});
                send(state, tx, Event::default().event("end").data(end.to_string()), deadline, &mut || true);
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
            let reconnect = Event::default().event("reconnect").data(data.to_string());
            send(state, tx, reconnect, now + Duration::from_secs(1), &mut || true);
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
/// down, nor a stream whose token is revoked while it waits (`holds`).
fn send(
    state: &AppState,
    tx: &mpsc::Sender<Event>,
    event: Event,
    deadline: Instant,
    holds: &mut dyn FnMut() -> bool,
) -> Sent {
    let mut event = event;
    loop {
        match tx.try_send(event) {
            Ok(()) => return Sent::Yes,
            Err(mpsc::error::TrySendError::Closed(_)) => return Sent::No,
            Err(mpsc::error::TrySendError::Full(back)) => {
                if Instant::now() >= deadline || state.0.closing.load(Ordering::SeqCst) {
                    return Sent::No;
                }
                if !holds() {
                    return Sent::Revoked;
                }
                event = back;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// What became of an event handed to the body.
enum Sent {
    Yes,
    /// The client went away, did not read in time, or the server shuts down.
    No,
    /// The caller's token was revoked while the event waited.
    Revoked,
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
