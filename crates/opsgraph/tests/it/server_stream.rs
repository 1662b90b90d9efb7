//! The API's live and operator-facing parts: server-sent events over a real socket (resumed with
//! `Last-Event-ID` without loss or duplicates), Prometheus metrics after a real operation, and
//! what the server loaded (packs, providers, policies). Secrets through the API:
//! `server_secrets.rs`.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use serde_json::{json, Value};
use tower::ServiceExt as _;

use crate::serve::{wait_for, Server};
use crate::server::{intent, Api};
use crate::support::temp_dir;

/// A raw HTTP/1.1 answer: status, header lines (lower-cased names) and the body, de-chunked.
pub(crate) struct Raw {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Raw {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// The body of a chunked transfer, as far as it has arrived whole.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}

pub(crate) fn parse(text: &str) -> Raw {
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    Raw { status, body: if chunked { dechunk(body) } else { body.to_string() }, headers }
}

pub(crate) fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n");
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    s
}

/// One request over a real socket, read to its end.
pub(crate) fn http(addr: SocketAddr, method: &str, path: &str, token: &str, extra: &[(&str, &str)], body: &str) -> Raw {
    let mut s = send(addr, method, path, token, extra, body);
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    parse(&String::from_utf8_lossy(&bytes))
}

/// Reads a stream that does not end until `done` holds for what has arrived; then hangs up.
pub(crate) fn read_until(addr: SocketAddr, path: &str, token: &str, done: impl Fn(&[Sse]) -> bool) -> Vec<Sse> {
    let mut s = send(addr, "GET", path, token, &[("Accept", "text/event-stream")], "");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).unwrap();
        bytes.extend_from_slice(&buf[..n]);
        let events = events(&parse(&String::from_utf8_lossy(&bytes)).body);
        if done(&events) || n == 0 {
            return events;
        }
        assert!(Instant::now() < deadline, "the stream never held what was expected: {events:?}");
    }
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sse {
    pub(crate) id: Option<i64>,
    pub(crate) event: Option<String>,
    pub(crate) data: Value,
}

/// The events of a stream's text; comments (keep-alives) are left out.
pub(crate) fn events(body: &str) -> Vec<Sse> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut e = Sse { id: None, event: None, data: Value::Null };
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    e.id = Some(v.trim().parse().unwrap());
                } else if let Some(v) = line.strip_prefix("event:") {
                    e.event = Some(v.trim().to_string());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.strip_prefix(' ').unwrap_or(v));
                }
            }
            (!data.is_empty()).then(|| Sse { data: serde_json::from_str(&data).unwrap(), ..e })
        })
        .collect()
}

/// The whole stream of one operation (it ends once the operation is terminal).
pub(crate) fn stream(addr: SocketAddr, path: &str, token: &str, extra: &[(&str, &str)]) -> (Raw, Vec<Sse>) {
    let raw = http(addr, "GET", path, token, &[&[("Accept", "text/event-stream")], extra].concat(), "");
    let events = events(&raw.body);
    (raw, events)
}

pub(crate) fn ids(events: &[Sse]) -> Vec<i64> {
    events.iter().filter_map(|e| e.id).collect()
}

#[test]
fn events_stream_live_and_resume_without_loss_or_duplicates() {
    let api = Api::new("");
    let [sam, bob] = api.tokens([("sam", "operator"), ("bob", "sre")]);
    let server = Server::start(&api);
    let addr = server.addr;

    let created = http(addr, "POST", "/api/v1/operations", &sam, &[], &intent("h1")).json();
    let id = created["id"].as_str().unwrap().to_string();
    let op = wait_for(addr, &id, &sam, "paused: waiting for gate approve-hello");

    // Live: a client follows the operation from before the gate is answered to its end.
    let live = {
        let (id, sam) = (id.clone(), sam.clone());
        std::thread::spawn(move || stream(addr, &format!("/api/v1/operations/{id}/events"), &sam, &[]))
    };
    std::thread::sleep(Duration::from_millis(400));
    let answer = json!({"option": "approve", "revision": op["plan_revision"]}).to_string();
    let r = http(addr, "POST", &format!("/api/v1/operations/{id}/gates/approve-hello/answer"), &bob, &[], &answer);
    assert_eq!(r.status, 200, "{}", r.body);
    let (raw, live) = live.join().unwrap();
    assert_eq!(raw.status, 200, "{}", raw.body);
    assert_eq!(raw.header("content-type"), Some("text/event-stream"));
    assert_eq!(raw.header("cache-control"), Some("no-cache"));

    // Every timeline entry once, in order, in the timeline's own shape (plus its operation), then
    // `end` with the terminal state.
    let timeline = http(addr, "GET", &format!("/api/v1/operations/{id}/timeline"), &sam, &[], "").json();
    let entries = timeline["timeline"].as_array().unwrap().clone();
    let seqs: Vec<i64> = entries.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let (end, sent) = live.split_last().unwrap();
    assert_eq!(ids(sent), seqs, "{live:#?}");
    for (e, entry) in sent.iter().zip(&entries) {
        let mut want = entry.clone();
        want["operation"] = json!(id);
        assert_eq!(e.data, want);
        assert_eq!(e.event, None);
    }
    assert!(sent.iter().any(|e| e.data["to"] == "completed"), "{live:#?}");
    assert_eq!(end.event.as_deref(), Some("end"));
    assert_eq!(end.data, json!({"operation": id, "state": "completed", "last_event_id": seqs.last()}));
    assert!(seqs.len() >= 5, "{seqs:?}");

    // Resuming after any event gets exactly the ones after it: by Last-Event-ID, by `after`, and
    // the header wins over the query (a reconnecting EventSource sends both).
    let path = format!("/api/v1/operations/{id}/events");
    for (i, seq) in seqs.iter().enumerate() {
        let (_, resumed) = stream(addr, &path, &sam, &[("Last-Event-ID", &seq.to_string())]);
        assert_eq!(ids(&resumed), seqs[i + 1..], "after {seq}");
        assert_eq!(resumed.last().unwrap().event.as_deref(), Some("end"));
    }
    let (_, resumed) = stream(addr, &format!("{path}?after={}", seqs[2]), &sam, &[]);
    assert_eq!(ids(&resumed), seqs[3..]);
    let (_, resumed) =
        stream(addr, &format!("{path}?after={}", seqs[3]), &sam, &[("Last-Event-ID", &seqs[1].to_string())]);
    assert_eq!(ids(&resumed), seqs[2..]);
    let bad = http(addr, "GET", &path, &sam, &[("Last-Event-ID", "x")], "");
    assert_eq!((bad.status, bad.json()["error"]["code"].as_str()), (400, Some("invalid_header")));
    let bad = http(addr, "GET", &format!("{path}?after=-1"), &sam, &[], "");
    assert_eq!((bad.status, bad.json()["error"]["code"].as_str()), (400, Some("invalid_parameter")));
    let none = http(addr, "GET", "/api/v1/operations/op-none/events", &sam, &[], "");
    assert_eq!((none.status, none.json()["error"]["code"].as_str()), (404, Some("no_operation")));

    // All operations: a second operation's entries arrive on the same stream, after the first's.
    let id2 =
        http(addr, "POST", "/api/v1/operations", &sam, &[], &intent("h2")).json()["id"].as_str().unwrap().to_string();
    wait_for(addr, &id2, &sam, "paused: waiting for gate approve-hello");
    let timeline2 = http(addr, "GET", &format!("/api/v1/operations/{id2}/timeline"), &sam, &[], "").json();
    let seqs2: Vec<i64> =
        timeline2["timeline"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let last = *seqs2.last().unwrap();
    let all = read_until(addr, "/api/v1/events", &sam, |e| e.iter().any(|e| e.id == Some(last)));
    let mine: Vec<i64> = all.iter().filter(|e| e.data["operation"] == id).filter_map(|e| e.id).collect();
    let theirs: Vec<i64> = all.iter().filter(|e| e.data["operation"] == id2.as_str()).filter_map(|e| e.id).collect();
    assert_eq!((mine, theirs), (seqs.clone(), seqs2.clone()));
    let all_ids = ids(&all);
    assert!(all_ids.windows(2).all(|w| w[0] < w[1]), "{all_ids:?}");
    let after = read_until(addr, &format!("/api/v1/events?after={}", seqs.last().unwrap()), &sam, |e| {
        e.iter().any(|e| e.id == Some(last))
    });
    assert_eq!(ids(&after), seqs2);

    // A viewer may follow; an unknown token may not.
    let viewer = api.token("vera", &["viewer"]);
    let (raw, _) = stream(addr, &format!("/api/v1/operations/{id}/events"), &viewer, &[]);
    assert_eq!(raw.status, 200);
    let raw = http(addr, "GET", "/api/v1/events", "og_nope", &[], "");
    assert_eq!(raw.status, 401);
    drop(server); // returns although a stream of all operations was open (streams end at shutdown)
}

#[test]
fn event_streams_are_limited_and_end_when_the_server_shuts_down() {
    let api = Api::with_limits(opsgraph_server::Limits { event_streams: 1, ..Default::default() });
    let sam = api.token("sam", &["viewer"]);
    let server = Server::start(&api);
    let mut first = send(server.addr, "GET", "/api/v1/events", &sam, &[], "");
    let mut head = [0u8; 12];
    first.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let second = http(server.addr, "GET", "/api/v1/events", &sam, &[], "");
    assert_eq!((second.status, second.json()["error"]["code"].as_str()), (429, Some("too_many_streams")));
    assert_eq!(second.json()["error"]["details"], json!({"limit": "event_streams", "max": 1}));
    drop(server);
    let mut rest = Vec::new();
    first.read_to_end(&mut rest).unwrap(); // the server closed it
}

/// `limits.event_stream_duration`: a stream that lasts that long is ended by the server, cleanly
/// (an `event: reconnect` naming the last id sent, then the chunked body's last chunk), and a
/// client that reconnects with `Last-Event-ID` each time gets every entry once, in order, across
/// as many reconnections as it takes; the slots of ended streams are given back.
#[test]
fn a_stream_ends_cleanly_at_its_maximum_duration_and_resumes_without_loss_or_duplicates() {
    let limit = Duration::from_millis(700);
    let api = Api::with_limits(opsgraph_server::Limits { event_stream_duration: limit, ..Default::default() });
    let [sam, bob, admin] = api.tokens([("sam", "operator"), ("bob", "sre"), ("ada", "platform_admin")]);
    let server = Server::start(&api);
    let addr = server.addr;
    let id =
        http(addr, "POST", "/api/v1/operations", &sam, &[], &intent("d1")).json()["id"].as_str().unwrap().to_string();
    let op = wait_for(addr, &id, &sam, "paused: waiting for gate approve-hello");
    let path = format!("/api/v1/operations/{id}/events");

    // One connection: the entries so far, then `reconnect` once the limit is reached, then the
    // end of the body (not a reset).
    let started = Instant::now();
    let mut s = send(addr, "GET", &path, &sam, &[("Accept", "text/event-stream")], "");
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let took = started.elapsed();
    assert!(took >= limit && took < limit + Duration::from_secs(5), "{took:?}");
    let text = String::from_utf8_lossy(&bytes).to_string();
    assert!(text.ends_with("\r\n0\r\n\r\n"), "the body ends with its last chunk: {text:?}");
    let first = events(&parse(&text).body);
    let (reconnect, sent) = first.split_last().unwrap();
    assert_eq!(reconnect.event.as_deref(), Some("reconnect"), "{first:#?}");
    assert_eq!((reconnect.id, &reconnect.data["last_event_id"]), (None, &json!(sent.last().unwrap().id.unwrap())));
    assert!(reconnect.data["reason"].as_str().unwrap().contains("limits.event_stream_duration"), "{reconnect:?}");
    assert!(sent.iter().all(|e| e.event.is_none() && e.id.is_some()), "{first:#?}");

    // A client that follows the operation to its end: the gate is answered while it reconnects,
    // once it has reconnected twice (not after a fixed time: on a loaded machine two streams
    // and their set-ups may outlast any sleep).
    let answer = || {
        let body = json!({"option": "approve", "revision": op["plan_revision"]}).to_string();
        http(addr, "POST", &format!("/api/v1/operations/{id}/gates/approve-hello/answer"), &bob, &[], &body)
    };
    let mut seen = ids(sent);
    let mut reconnections = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let last = seen.last().unwrap().to_string();
        let (raw, got) = stream(addr, &path, &sam, &[("Last-Event-ID", &last)]);
        assert_eq!(raw.status, 200, "{}", raw.body);
        let (tail, entries) = got.split_last().unwrap();
        seen.extend(ids(entries));
        match tail.event.as_deref() {
            Some("reconnect") => {
                assert_eq!(tail.data["last_event_id"], json!(seen.last().unwrap()), "{got:#?}");
                reconnections += 1;
                if reconnections == 2 {
                    assert_eq!(answer().status, 200);
                }
            }
            Some("end") => break,
            other => panic!("a stream ended with {other:?}: {got:#?}"),
        }
        assert!(Instant::now() < deadline, "the operation never ended: {seen:?}");
    }
    assert!(reconnections >= 2, "{reconnections}");
    let timeline = http(addr, "GET", &format!("/api/v1/operations/{id}/timeline"), &sam, &[], "").json();
    let seqs: Vec<i64> = timeline["timeline"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seen, seqs, "every entry once, in order, across {reconnections} reconnections");

    // The stream of all operations has the limit too; every ended stream gave its slot back.
    let (raw, all) = stream(addr, "/api/v1/events", &sam, &[]);
    assert_eq!(raw.status, 200);
    assert_eq!(ids(&all[..all.len() - 1]), seqs);
    assert_eq!(all.last().unwrap().event.as_deref(), Some("reconnect"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !http(addr, "GET", "/metrics", &admin, &[], "").body.contains("\nopsgraph_event_streams 0\n") {
        assert!(Instant::now() < deadline, "the streams' slots were not given back");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
}

/// A client that stops reading fills the stream's buffers; the server gives up on it at
/// `limits.event_stream_duration` all the same, so its thread and slot are given back. What was
/// already sent still arrives when the client reads again, and it resumes after the last id.
#[test]
fn a_client_that_stops_reading_does_not_hold_a_stream_past_its_duration() {
    let api = Api::with_limits(opsgraph_server::Limits {
        event_stream_duration: Duration::from_millis(1000),
        ..Default::default()
    });
    let [sam, admin] = api.tokens([("sam", "operator"), ("ada", "platform_admin")]);
    let server = Server::start(&api);
    let addr = server.addr;
    let id =
        http(addr, "POST", "/api/v1/operations", &sam, &[], &intent("s1")).json()["id"].as_str().unwrap().to_string();
    wait_for(addr, &id, &sam, "paused: waiting for gate approve-hello");
    // About 10 MiB of timeline, more than the socket buffers (about 4 MiB here) and the stream's
    // hold, so the stream's thread waits for a reader.
    let padding = "x".repeat(4096);
    let writes: Vec<opsgraph_store::Write> = (0..2500)
        .map(|i| {
            opsgraph_store::Write::Timeline(opsgraph_store::TimelineEntry {
                seq: 0,
                operation: id.clone(),
                at: "2026-01-01T00:00:00Z".into(),
                actor: "test".into(),
                event: "note".into(),
                from: None,
                to: None,
                reason: format!("{i} {padding}"),
                data: json!(null),
            })
        })
        .collect();
    api.state.store().unwrap().commit(&writes).unwrap();
    let streams = || {
        let text = http(addr, "GET", "/metrics", &admin, &[], "").body;
        text.lines().find_map(|l| l.strip_prefix("opsgraph_event_streams ")).unwrap().to_string()
    };

    let started = Instant::now();
    let mut stuck = send(addr, "GET", "/api/v1/events", &sam, &[("Accept", "text/event-stream")], "");
    let mut head = [0u8; 12];
    stuck.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(streams(), "1", "the stream is open while the client does not read");
    while streams() != "0" {
        assert!(started.elapsed() < Duration::from_secs(10), "a client that does not read holds its stream");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(started.elapsed() >= Duration::from_millis(1000), "{:?}", started.elapsed());

    // It reads again: what was sent, then the end of the body; then it resumes. Every entry once.
    let mut bytes = head.to_vec();
    stuck.read_to_end(&mut bytes).unwrap();
    let first = events(&parse(&String::from_utf8_lossy(&bytes)).body);
    let mut seen = ids(&first);
    assert!(!seen.is_empty());
    loop {
        let last = seen.last().unwrap().to_string();
        let (_, more) = stream(addr, "/api/v1/events", &sam, &[("Last-Event-ID", &last)]);
        let got = ids(&more);
        if got.is_empty() {
            break;
        }
        seen.extend(got);
    }
    let timeline = http(addr, "GET", &format!("/api/v1/operations/{id}/timeline"), &sam, &[], "").json();
    let seqs: Vec<i64> = timeline["timeline"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seen, seqs);
    drop(server);
}

/// A cancelled run's attempts are stopped and recorded (`job_cancelled`) after the operation's
/// own `cancel` entry: its stream ends only once they are sent, so a follower sees the job
/// cancelled too, not still running.
#[test]
fn the_stream_of_a_cancelled_run_ends_after_its_stopped_jobs() {
    let api = Api::over(temp_dir(crate::ui::STEPS)).packs(&["steps"]).build();
    let sam = api.token("sam", &["operator"]);
    let server = Server::start(&api);
    let addr = server.addr;
    let intent = "intent:\n  target_resource_type: steps.app\n  action: run\n  name: c1\n  environment: dev\n";
    let id = http(addr, "POST", "/api/v1/operations", &sam, &[], intent).json()["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while http(addr, "GET", &format!("/api/v1/operations/{id}"), &sam, &[], "").json()["jobs"][0]["state"] != "running"
    {
        assert!(Instant::now() < deadline, "the job never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let live = {
        let (id, sam) = (id.clone(), sam.clone());
        std::thread::spawn(move || stream(addr, &format!("/api/v1/operations/{id}/events"), &sam, &[]))
    };
    std::thread::sleep(Duration::from_millis(300));
    let r = http(addr, "POST", &format!("/api/v1/operations/{id}/cancel"), &sam, &[], "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    let (_, live) = live.join().unwrap();
    let (end, sent) = live.split_last().unwrap();
    assert_eq!((end.event.as_deref(), &end.data["state"]), (Some("end"), &json!("cancelled")), "{live:#?}");
    let events: Vec<&str> = sent.iter().map(|e| e.data["event"].as_str().unwrap()).collect();
    let cancel = events.iter().position(|e| *e == "cancel").expect("the cancel entry");
    assert!(events[cancel..].contains(&"job_cancelled"), "{events:?}");
    let timeline = http(addr, "GET", &format!("/api/v1/operations/{id}/timeline"), &sam, &[], "").json();
    let seqs: Vec<i64> = timeline["timeline"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(ids(sent), seqs);
    let op = http(addr, "GET", &format!("/api/v1/operations/{id}"), &sam, &[], "").json();
    assert_eq!(op["jobs"][0]["state"], "cancelled", "{op}");
    drop(server);
}

/// Each line of a text exposition: a comment, or `name{labels} value` with a valid name, quoted
/// label values and a number. Returns the samples.
fn prometheus(text: &str) -> Vec<(String, Value, f64)> {
    let mut samples = Vec::new();
    let mut typed = std::collections::BTreeSet::new();
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !n.starts_with(|c: char| c.is_ascii_digit())
    };
    for line in text.lines() {
        if let Some(c) = line.strip_prefix("# ") {
            let mut words = c.split(' ');
            match (words.next(), words.next(), words.next()) {
                (Some("HELP"), Some(n), Some(_)) => assert!(name_ok(n), "{line}"),
                (Some("TYPE"), Some(n), Some(t)) => {
                    assert!(
                        name_ok(n) && ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                        "{line}"
                    );
                    typed.insert(n.to_string());
                }
                _ => panic!("not a HELP or TYPE comment: {line}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("not a number: {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("labels not closed: {line}"));
                let mut labels = serde_json::Map::new();
                for pair in body.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("bad label: {line}"));
                    assert!(name_ok(k), "{line}");
                    labels.insert(k.to_string(), json!(v.trim_end_matches('"')));
                }
                (n, Value::Object(labels))
            }
            None => (series, json!({})),
        };
        assert!(name_ok(name), "{line}");
        let family = ["_bucket", "_sum", "_count", "_total"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
        assert!(typed.contains(name) || typed.contains(family), "sample before its TYPE: {line}");
        samples.push((name.to_string(), labels, value));
    }
    samples
}

#[test]
fn metrics_are_valid_prometheus_text_and_count_a_real_operation() {
    let api = Api::new("roles:\n  scraper: [metrics]\n");
    let [sam, bob, scraper] = api.tokens([("sam", "operator"), ("bob", "sre"), ("prometheus", "scraper")]);
    let id = api.post("/api/v1/operations", &sam, &intent("h1")).body["id"].as_str().unwrap().to_string();
    api.idle();
    let rev = api.get(&format!("/api/v1/operations/{id}"), &sam).body["plan_revision"].clone();
    let answer = json!({"option": "approve", "revision": rev}).to_string();
    assert_eq!(api.post(&format!("/api/v1/operations/{id}/gates/approve-hello/answer"), &bob, &answer).status, 200);
    api.idle();
    assert_eq!(api.get(&format!("/api/v1/operations/{id}"), &sam).body["state"], "completed");

    let scrape = |token: &str| {
        let req =
            Request::get("/metrics").header("authorization", format!("Bearer {token}")).body(Body::empty()).unwrap();
        let response = api.rt.block_on(opsgraph_server::router(api.state.clone()).oneshot(req)).unwrap();
        let status = response.status().as_u16();
        let kind = response.headers().get("content-type").map(|v| v.to_str().unwrap().to_string());
        let bytes = api.rt.block_on(axum::body::to_bytes(response.into_body(), usize::MAX)).unwrap();
        (status, kind, String::from_utf8(bytes.to_vec()).unwrap())
    };
    let (status, kind, text) = scrape(&scraper);
    assert_eq!(status, 200, "{text}");
    assert_eq!(kind.as_deref(), Some("text/plain; version=0.0.4; charset=utf-8"));
    let samples = prometheus(&text);
    let value = |name: &str, labels: Value| {
        samples
            .iter()
            .find(|(n, l, _)| n == name && *l == labels)
            .map(|s| s.2)
            .unwrap_or_else(|| panic!("no {name} {labels}:\n{text}"))
    };
    assert_eq!(value("opsgraph_operations", json!({"state": "completed"})), 1.0);
    assert_eq!(value("opsgraph_operations", json!({"state": "running"})), 0.0);
    assert_eq!(value("opsgraph_jobs", json!({"state": "succeeded"})), 1.0);
    assert_eq!(value("opsgraph_jobs", json!({"state": "failed"})), 0.0);
    assert_eq!(value("opsgraph_queue_depth", json!({})), 0.0);
    assert_eq!(value("opsgraph_job_duration_milliseconds_count", json!({})), 1.0);
    assert!(value("opsgraph_job_duration_milliseconds_sum", json!({})) > 0.0);
    let buckets: Vec<f64> =
        samples.iter().filter(|(n, _, _)| n == "opsgraph_job_duration_milliseconds_bucket").map(|s| s.2).collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "buckets are cumulative: {buckets:?}");
    assert_eq!(value("opsgraph_job_duration_milliseconds_bucket", json!({"le": "+Inf"})), 1.0);
    assert_eq!(value("opsgraph_job_duration_milliseconds_bucket", json!({"le": "1800000"})), 1.0);
    let requests = |method: &str, route: &str, status: &str| {
        value("opsgraph_http_requests_total", json!({"method": method, "route": route, "status": status}))
    };
    assert_eq!(requests("POST", "/api/v1/operations", "201"), 1.0);
    assert_eq!(requests("GET", "/api/v1/operations/{id}", "200"), 2.0);
    assert_eq!(requests("POST", "/api/v1/operations/{id}/gates/{gate}/answer", "200"), 1.0);
    // The scraper reads metrics and nothing else; a viewer does not read metrics.
    assert_eq!(api.get("/api/v1/operations", &scraper).status, 403);
    let viewer = api.token("vera", &["viewer"]);
    let (status, _, text) = scrape(&viewer);
    assert_eq!(status, 403, "{text}");
}

#[test]
fn packs_providers_and_policies_show_what_the_server_loaded() {
    let api = Api::new("");
    let vera = api.token("vera", &["viewer"]);
    let list = api.get("/api/v1/packs", &vera).body;
    let hello = &list["packs"][0];
    assert_eq!(
        (hello["reference"].as_str(), hello["jobs"].clone()),
        (Some("hello@1.0.0"), json!(["say-hello"])),
        "{list}"
    );
    assert!(hello["digest"].as_str().unwrap().starts_with("sha256:"), "{hello}");
    assert_eq!(hello["templates"], json!([{"id": "hello.install", "action": "install"}]));
    for id in ["hello", "hello@1.0.0"] {
        let r = api.get(&format!("/api/v1/packs/{id}"), &vera);
        assert_eq!(r.status, 200, "{}", r.body);
        let v = &r.body["versions"][0];
        assert!(v["jobs"]["say-hello"]["run"]["command"].to_string().contains("OPSGRAPH_PARAM_WORD"), "{v}");
        assert_eq!(v["templates"][0]["gates"][0]["id"], "approve-hello");
    }
    let r = api.get("/api/v1/packs/hello@9.9.9", &vera);
    assert_eq!((r.status, r.code()), (404, "no_pack"));
    assert_eq!(api.get("/api/v1/providers", &vera).body, json!({"providers": []}));
    assert_eq!(api.get("/api/v1/policies", &vera).body, json!({"capability_policy": {}, "operations_policy": {}}));
}
