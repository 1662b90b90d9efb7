//! How `--server` follows an operation the server drives: by the server's event stream
//! (`GET /events?after=`), each timeline entry as it is committed, of the operation and its
//! sub-operations (at any depth; a new operation id met on the stream is looked up once in the
//! list), instead of reading the operation, the list and each timeline again every 200 ms (what
//! a 10,000-job operation made megabytes a poll). The operation's document is read once the
//! follower saw it change state and nothing of its family came for [`SETTLE`] (done, paused,
//! failed, waiting at a gate), or when nothing came for [`CHECK`]. Without a slot for a stream
//! (429 `too_many_streams`) it reads as before, every 200 ms.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::bail;
use opsgraph_api::{Client, OperationView, TimelineView};
use opsgraph_store::TimelineEntry;
use serde::Deserialize;

/// The quiet after a state transition, and between polls without a stream.
const SETTLE: Duration = Duration::from_millis(200);
/// The longest a stream that says nothing goes unchecked (a driver that died says nothing).
const CHECK: Duration = Duration::from_secs(2);
/// The longest line of an event the follower reads.
const MAX_LINE: usize = 16 << 20;

/// One event of a stream, as the server writes them (docs/api.md, "Server-sent events").
#[derive(Debug, PartialEq)]
pub(crate) enum Frame {
    /// A timeline entry (its `data`) of an operation.
    Entry(Box<Event>),
    /// (The stream of one operation) it is terminal and every entry was sent.
    End,
    /// The stream is as old as the server lets one be: open another after the last id.
    Reconnect,
    /// The token the stream was opened with no longer holds.
    Revoked,
    /// A comment (`: keep-alive`): the reader learns whether anyone still reads.
    Alive,
}

/// An event's `data`: the entry as the timeline shows it, and its operation.
#[derive(Debug, PartialEq, Deserialize)]
pub(crate) struct Event {
    #[serde(flatten)]
    pub view: TimelineView,
    pub operation: String,
}

/// The events of `r`, in order; a comment as `Alive`, unknown events skipped.
pub(crate) fn frames<R: Read>(r: R) -> impl Iterator<Item = std::io::Result<Frame>> {
    let mut r = BufReader::new(r);
    let (mut event, mut data, mut comment) = (String::new(), String::new(), false);
    std::iter::from_fn(move || loop {
        let mut line = Vec::new();
        match (&mut r).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut line) {
            Ok(0) => return None,
            Ok(_) if line.len() > MAX_LINE => {
                return Some(Err(std::io::Error::other(format!("an event line over {MAX_LINE} bytes"))))
            }
            Ok(_) => {}
            Err(e) => return Some(Err(e)),
        }
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end_matches(['\n', '\r']);
        if !line.is_empty() {
            if line.starts_with(':') {
                comment = true;
            } else if let Some(v) = line.strip_prefix("event:") {
                event = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
            continue;
        }
        let (name, text, comment) =
            (std::mem::take(&mut event), std::mem::take(&mut data), std::mem::take(&mut comment));
        let frame = match name.as_str() {
            "" if text.is_empty() && comment => Frame::Alive,
            "" | "message" if !text.is_empty() => match serde_json::from_str::<Event>(&text) {
                Ok(v) => Frame::Entry(Box::new(v)),
                Err(e) => return Some(Err(std::io::Error::other(format!("an event that is no timeline entry: {e}")))),
            },
            "end" => Frame::End,
            "reconnect" => Frame::Reconnect,
            "revoked" => Frame::Revoked,
            _ => continue,
        };
        return Some(Ok(frame));
    })
}

/// What the follower needs of the HTTP client.
pub(crate) trait Streams: Client {
    /// The event stream of every operation after `after`; `Ok(None)` when the server has no
    /// slot for it.
    fn events(&self, after: i64) -> anyhow::Result<Option<Box<dyn Read + Send>>>;
}

/// Operation `id` and its sub-operations at any depth, as the server lists them now.
fn family(client: &dyn Client, id: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(opsgraph_api::family(&client.operations()?, id))
}

/// Hands `seen` each entry of `id` and its sub-operations after `after` as the server commits
/// it; returns the operation's document once it stopped moving.
pub(crate) fn follow(
    client: &dyn Streams,
    id: &str,
    after: i64,
    seen: &mut dyn FnMut(&TimelineEntry),
    moving: fn(&OperationView) -> bool,
) -> anyhow::Result<OperationView> {
    let mut after = after;
    let mut family = family(client, id)?;
    // Operations met on the stream that are not of the family (looked up once).
    let mut strangers = BTreeSet::new();
    loop {
        let Some(body) = client.events(after)? else {
            return poll(client, id, after, seen, moving);
        };
        // The stream is read on a thread of its own (the follower waits with a timeout); it ends
        // at the next event or keep-alive (15 s) after the follower is done, closing the stream.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for f in frames(body) {
                let stop = f.is_err();
                if tx.send(f).is_err() || stop {
                    return;
                }
            }
        });
        // A transition of the family was seen (the operation may have stopped); when the family
        // last said something; when the operation was last looked at.
        let (mut transition, mut heard, mut checked) = (false, Instant::now(), Instant::now());
        loop {
            match rx.recv_timeout(SETTLE) {
                Ok(Ok(Frame::Entry(ev))) => {
                    let Event { view, operation } = *ev;
                    after = after.max(view.seq);
                    if !family.contains(&operation) && !strangers.contains(&operation) {
                        family = self::family(client, id)?;
                        if !family.contains(&operation) {
                            strangers.insert(operation.clone());
                        }
                    }
                    if family.contains(&operation) {
                        transition |= operation == id && view.to.is_some();
                        heard = Instant::now();
                        seen(&view.entry(&operation));
                    }
                }
                Ok(Ok(Frame::End)) => return client.operation(id),
                Ok(Ok(Frame::Alive)) => {}
                Ok(Ok(Frame::Revoked)) => bail!("the server ended the event stream: the token no longer holds"),
                // The stream ended (its age, the server going away): another, after the last id.
                Ok(Ok(Frame::Reconnect)) | Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if (transition && heard.elapsed() >= SETTLE) || checked.elapsed() >= CHECK {
                let op = client.operation(id)?;
                if !moving(&op) {
                    return Ok(op);
                }
                (transition, checked) = (false, Instant::now());
            }
        }
        std::thread::sleep(SETTLE);
    }
}

/// Without a stream: the operation and its new entries read every [`SETTLE`] until it stopped
/// moving and two reads agree (its last entries are in).
fn poll(
    client: &dyn Client,
    id: &str,
    after: i64,
    seen: &mut dyn FnMut(&TimelineEntry),
    moving: fn(&OperationView) -> bool,
) -> anyhow::Result<OperationView> {
    let mut cursor = opsgraph_api::Cursor::new(after);
    let mut quiet = 0;
    loop {
        let op = client.operation(id)?;
        cursor.advance(client, id, seen)?;
        if !moving(&op) {
            quiet += 1;
            if quiet > 1 {
                return Ok(op);
            }
        } else {
            quiet = 0;
        }
        std::thread::sleep(SETTLE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expect: &[&str]) {
        let got: Vec<String> = frames(text.as_bytes())
            .map(|f| match f {
                Ok(Frame::Entry(v)) => format!("entry {} {}", v.view.seq, v.view.event),
                Ok(other) => format!("{other:?}"),
                Err(e) => format!("error: {e}"),
            })
            .collect();
        assert_eq!(got, expect, "{text:?}");
    }

    const ENTRY: &str = r#"{"seq":42,"at":"2026-12-06T00:00:00.000Z","actor":"runtime","event":"job_started","from":null,"to":null,"reason":"r","data":{},"operation":"op-1"}"#;

    #[test]
    fn an_event_names_its_operation() {
        let Some(Ok(Frame::Entry(e))) = frames(format!("id: 42\ndata: {ENTRY}\n\n").as_bytes()).next() else {
            panic!("no entry")
        };
        assert_eq!((e.operation.as_str(), e.view.seq, e.view.entry("op-1").operation.as_str()), ("op-1", 42, "op-1"));
    }

    #[test]
    fn events_are_read_as_the_server_writes_them() {
        check(&format!("id: 42\ndata: {ENTRY}\n\n"), &["entry 42 job_started"]);
        check(&format!(": keep-alive\n\nid: 42\r\ndata: {ENTRY}\r\n\r\n"), &["Alive", "entry 42 job_started"]);
        check(
            &format!("id: 42\ndata: {ENTRY}\n\nevent: end\ndata: {{\"state\":\"completed\"}}\n\n"),
            &["entry 42 job_started", "End"],
        );
        check("event: reconnect\ndata: {\"last_event_id\":7}\n\n", &["Reconnect"]);
        check("event: revoked\ndata: {}\n\n", &["Revoked"]);
        check("event: something_new\ndata: {}\n\n", &[]);
        // A stream cut in the middle of an event: the part is not an event.
        check(&format!("id: 42\ndata: {ENTRY}\n"), &[]);
        check(
            "id: 1\ndata: {\"seq\":\n\n",
            &["error: an event that is no timeline entry: EOF while parsing a value at line 1 column 7"],
        );
    }

    #[test]
    fn an_overlong_line_is_an_error_not_memory() {
        let long = format!("data: {}\n\n", "x".repeat(MAX_LINE + 10));
        check(&long, &[&format!("error: an event line over {MAX_LINE} bytes")]);
    }
}
