//! Server-sent events: a timeline, live. Each stream is a task that sends its history (read
//! from the store by `Store::timeline_after`), then what the hub of its operation broadcasts
//! (`hub.rs`: one reader per operation for all its streams), into a bounded channel the
//! response body reads. Each event carries its timeline `seq` as its id, so a client that
//! reconnects with `Last-Event-ID` gets exactly what it missed: seqs follow commit order, so
//! nothing commits behind an id already sent.
//! A stream lasts at most `limits.event_stream_duration`: then it ends cleanly with an
//! `event: reconnect` naming the last id sent, and the client resumes from there.
//! A stream is its caller's for as long as the token is good: the token is read again at least
//! every [`RECHECK`] (one read per token for all the streams that show it, [`token_holds`]) and
//! the stream ends (`event: revoked`) once it is revoked or gone.
//! One identity holds at most `limits.event_streams_per_identity` of the server's streams.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use crate::error::ApiError;
use crate::hub::{self, Frames, Msg};
use crate::AppState;

/// Entries read per query of a stream's own history (each read is one message of the channel).
const HISTORY_PAGE: usize = 100;
/// Messages buffered for a slow client before its stream waits for it (a message is the frames
/// of one read: of its history, at most [`HISTORY_PAGE`] entries; live, what the hub read at once).
const BUFFER: usize = 16;
/// A comment line sent when nothing happened for this long, so proxies keep the connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How often a stream's token is read again (and it looks at its client, its duration and the
/// server): a revoked token's streams end within twice this, well inside the second that
/// docs/api.md promises.
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
        if self.state.0.streams.fetch_sub(1, Ordering::SeqCst) == 1 {
            crate::stages::dump();
        }
    }
}

/// Whether the token with this hash still holds: read from the store at most every [`RECHECK`]
/// for all the streams that show it (a thousand streams of one token: one read each time), so a
/// token revoked from this server, another replica or the CLI ends its streams alike. False once
/// it is revoked or gone, or cannot be read (fail closed).
async fn token_holds(state: &AppState, hash: &str) -> bool {
    {
        let mut seen = state.0.token_checks.lock().unwrap_or_else(|e| e.into_inner());
        let known = seen.get(hash).copied();
        match known {
            Some((at, holds)) if at.elapsed() < RECHECK || !holds => return holds,
            _ => {}
        }
        // The streams that ask while this one reads go on with what was known.
        seen.insert(hash.to_string(), (Instant::now(), true));
        seen.retain(|_, (at, _)| at.elapsed() < RECHECK * 240);
    }
    let (read_state, read_hash) = (state.clone(), hash.to_string());
    let read = tokio::task::spawn_blocking(move || read_state.pooled()?.token_by_hash(&read_hash)).await;
    let holds = match read {
        Ok(Ok(Some(t))) => t.revoked_at.is_none(),
        Ok(Ok(None)) => false,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "event stream: reading the token failed; the stream ends");
            false
        }
        Err(e) => {
            tracing::warn!(error = %e, "event stream: reading the token failed; the stream ends");
            false
        }
    };
    state.0.token_checks.lock().unwrap_or_else(|e| e.into_inner()).insert(hash.to_string(), (Instant::now(), holds));
    holds
}

/// The body side: frames as the channel delivers them; ends when the stream's task does.
/// (With each: when it was handed over, for `stages.rs` when it counts.)
struct Chunks(mpsc::Receiver<(Bytes, Option<Instant>)>);

impl futures_core::Stream for Chunks {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|e| {
            e.map(|(b, at)| {
                if let Some(at) = at {
                    crate::stages::record(2, at.elapsed().as_secs_f64() * 1e3, 1);
                }
                Ok(b)
            })
        })
    }
}

/// An event with a name and no id: `event: NAME` and `data: JSON`.
fn named(name: &str, data: &serde_json::Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// Starts streaming the timeline of `operation` (or of all operations) after `after`; called on
/// a blocking thread by a handler whose route and operation were checked.
pub(crate) fn start(
    state: &AppState,
    caller: Caller,
    operation: Option<String>,
    after: i64,
) -> Result<Response, ApiError> {
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| ApiError::internal("failed to start an event stream outside the server's runtime", &e))?;
    let slot = Slot::take(state, &caller.actor)?;
    let (tx, rx) = mpsc::channel(BUFFER);
    let now = Instant::now();
    let stream = Stream {
        state: state.clone(),
        token_hash: caller.token_hash,
        operation,
        last: after,
        tx,
        deadline: now + state.0.limits.event_stream_duration,
        quiet_since: now,
    };
    runtime.spawn(async move {
        let _slot = slot;
        stream.run().await;
    });
    let mut response = Response::new(Body::from_stream(Chunks(rx)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies that buffer would hold events back.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// Why a stream stops before its operation's end.
enum Stop {
    /// The client went away, the server shuts down, or the store failed.
    Gone,
    /// The stream is as old as `limits.event_stream_duration` (or its client read nothing
    /// until then).
    Old,
    /// The caller's token was revoked.
    Revoked,
}

/// One stream: what it sent last, and where it sends.
struct Stream {
    state: AppState,
    token_hash: String,
    operation: Option<String>,
    /// The seq of the last entry sent (or the one it resumed after).
    last: i64,
    tx: mpsc::Sender<(Bytes, Option<Instant>)>,
    deadline: Instant,
    /// Since when nothing was sent (a keep-alive comment after [`KEEP_ALIVE`]).
    quiet_since: Instant,
}

impl Stream {
    /// Sends until the client goes away, the server shuts down, (one operation) the operation is
    /// terminal and every entry was sent (`event: end`), the stream is as old as
    /// `limits.event_stream_duration` (then `event: reconnect`, whose `last_event_id` is the id to
    /// resume after), or the caller's token is revoked (then `event: revoked`).
    async fn run(mut self) {
        match self.follow().await {
            Ok(()) | Err(Stop::Gone) => {}
            Err(Stop::Revoked) => {
                let data = json!({"reason": "the token of this stream was revoked", "code": "token_revoked"});
                // Said if the buffer has room; the stream ends either way.
                let _ = self.tx.try_send((named("revoked", &data), None));
            }
            Err(Stop::Old) => {
                let limit = self.state.0.limits.event_stream_duration;
                // No id: the client's last id stays the last entry it got.
                let data = json!({
                    "reason": format!("the stream is {} s old, the most limits.event_stream_duration allows: reconnect with Last-Event-ID", limit.as_secs_f64()),
                    "last_event_id": self.last,
                });
                // A second to say so, even to a slow client; then the stream ends either way.
                let _ =
                    tokio::time::timeout(Duration::from_secs(1), self.tx.send((named("reconnect", &data), None))).await;
            }
        }
    }

    async fn follow(&mut self) -> Result<(), Stop> {
        // History first, then the hub; then the store once more: what the hub had read before
        // this stream subscribed (`hub.rs`).
        self.catch_up().await?;
        // A hub that does not start was logged (`ApiError::internal`).
        let mut hub = hub::subscribe(&self.state, self.operation.as_deref(), self.last).map_err(|_| Stop::Gone)?;
        self.catch_up().await?;
        let start = tokio::time::Instant::now() + RECHECK;
        let mut tick = tokio::time::interval_at(start, RECHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    self.check().await?;
                    if self.quiet_since.elapsed() >= KEEP_ALIVE {
                        self.send(Bytes::from_static(b": keep-alive\n\n")).await?;
                    }
                }
                msg = hub.recv() => match msg {
                    Ok(Msg::Entries(frames)) => self.send_frames(&frames).await?,
                    Ok(Msg::End { state }) => {
                        let (id, last) = (self.operation.clone().unwrap_or_default(), self.last);
                        let end = json!({"operation": id, "state": state, "last_event_id": last});
                        return self.send(named("end", &end)).await;
                    }
                    // Fell behind the hub: what it missed is in the store.
                    Err(broadcast::error::RecvError::Lagged(_)) => self.catch_up().await?,
                    // The hub failed (its log says why) or the server shuts down.
                    Err(broadcast::error::RecvError::Closed) => return Err(Stop::Gone),
                },
            }
        }
    }

    /// Sends what the store has after the last entry sent, until it has no more.
    async fn catch_up(&mut self) -> Result<(), Stop> {
        loop {
            self.check_now()?;
            let (state, operation, last) = (self.state.clone(), self.operation.clone(), self.last);
            let read = tokio::task::spawn_blocking(move || {
                let page = state.pooled()?.timeline_after(operation.as_deref(), last, HISTORY_PAGE)?;
                Ok::<_, opsgraph_store::Error>((page.len(), Frames::write(&page)))
            })
            .await;
            let (read, frames) = match read {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "event stream: reading the timeline failed");
                    return Err(Stop::Gone);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "event stream: reading the timeline failed");
                    return Err(Stop::Gone);
                }
            };
            if frames.is_empty() {
                return Ok(());
            }
            self.send_frames(&frames).await?;
            if read < HISTORY_PAGE {
                return Ok(());
            }
        }
    }

    async fn send_frames(&mut self, frames: &Frames) -> Result<(), Stop> {
        if crate::stages::on() {
            let n = frames.count_after(self.last) as u64;
            crate::stages::record(1, frames.read.elapsed().as_secs_f64() * 1e3, n);
        }
        if let Some((bytes, last)) = frames.after(self.last) {
            self.send(bytes).await?;
            self.last = last;
        }
        Ok(())
    }

    /// Hands frames to the response body. A client that reads nothing until the stream's
    /// duration is over (the buffer stays full) does not hold the stream longer: what it was sent
    /// is still delivered if it reads again, and it resumes after the last id it got. Nor does it
    /// hold a server that shuts down, nor a stream whose token is revoked while it waits.
    async fn send(&mut self, bytes: Bytes) -> Result<(), Stop> {
        loop {
            tokio::select! {
                permit = self.tx.reserve() => {
                    permit.map_err(|_| Stop::Gone)?.send((bytes, crate::stages::on().then(Instant::now)));
                    self.quiet_since = Instant::now();
                    return Ok(());
                }
                _ = tokio::time::sleep(RECHECK) => self.check().await?,
            }
        }
    }

    /// What ends a stream without a read of the store.
    fn check_now(&self) -> Result<(), Stop> {
        if self.tx.is_closed() || self.state.0.closing.load(Ordering::SeqCst) {
            return Err(Stop::Gone);
        }
        if Instant::now() >= self.deadline {
            return Err(Stop::Old);
        }
        Ok(())
    }

    /// [`Stream::check_now`], and the token.
    async fn check(&self) -> Result<(), Stop> {
        self.check_now()?;
        if !token_holds(&self.state, &self.token_hash).await {
            return Err(Stop::Revoked);
        }
        Ok(())
    }
}
