//! The server's edge under hostile and careless clients, over real sockets: a revoked token's
//! event streams end within a second, one identity cannot hold every stream, keep-alive stays
//! correct after a request refused before its body was read, and slow or idle clients (300
//! connections trickling their headers into the real `opsgraph serve` under
//! `prlimit --nofile=256`) do not keep `/api/v1/health` from answering.

use std::io::{BufRead as _, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use expect_test::{expect, Expect};
use serde_json::json;

use crate::serve::{Process, Server};
use crate::server::Api;
use crate::server_stream::{events, http, parse, send, Raw};
use crate::support::temp_dir;

/// Opens an event stream (of no events yet: `after` the end) and reads its head; the stream
/// stays open.
fn open_stream(addr: SocketAddr, token: &str) -> TcpStream {
    let path = "/api/v1/events?after=999999";
    let mut s = send(addr, "GET", path, token, &[("Accept", "text/event-stream")], "");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    s
}

/// A stream request that must be refused: its whole answer, read within 5 s (a stream that was
/// not refused fails here rather than running on).
fn refused(addr: SocketAddr, token: &str) -> Raw {
    let mut s = send(addr, "GET", "/api/v1/events", token, &[], "");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).expect("a refusal, not a stream");
    parse(&String::from_utf8_lossy(&bytes))
}

fn token_id(api: &Api, name: &str) -> String {
    let tokens = api.state.store().unwrap().tokens().unwrap();
    tokens.into_iter().find(|t| t.name == name).unwrap().id
}

#[test]
fn a_revoked_tokens_event_streams_end_within_a_second() {
    let api = Api::new("");
    let [sam, vera, admin] = api.tokens([("sam", "viewer"), ("vera", "viewer"), ("ada", "platform_admin")]);
    let server = Server::start(&api);
    let addr = server.addr;
    let mut streams = [open_stream(addr, &sam), open_stream(addr, &sam)];
    let mut other = open_stream(addr, &vera);
    std::thread::sleep(Duration::from_millis(300));

    let revoked = http(addr, "DELETE", &format!("/api/v1/tokens/{}", token_id(&api, "sam")), &admin, &[], "");
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let at = Instant::now();
    for s in &mut streams {
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        let took = at.elapsed();
        assert!(took < Duration::from_secs(1), "a revoked token's stream stayed open {took:?}");
        let text = format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{}", String::from_utf8_lossy(&rest));
        let last = events(&parse(&text).body).pop().unwrap();
        assert_eq!((last.event.as_deref(), &last.data["code"]), (Some("revoked"), &json!("token_revoked")));
    }
    // Another identity's stream goes on.
    other.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut buf = [0u8; 256];
    let err = other.read(&mut buf).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "vera's stream ended");

    // Revoked from another process (the CLI, on the data directory) works alike.
    let mut stream = open_stream(addr, &vera);
    std::thread::sleep(Duration::from_millis(300));
    let data = api.dir.join("data");
    opsgraph::serve_cmd::token_revoke(&data, &token_id(&api, "vera"), &mut Vec::new()).unwrap();
    let at = Instant::now();
    let mut rest = Vec::new();
    stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    stream.read_to_end(&mut rest).unwrap();
    assert!(at.elapsed() < Duration::from_secs(1), "{:?}", at.elapsed());
    let mut rest = Vec::new();
    other.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    other.read_to_end(&mut rest).unwrap();
    drop(server);
}

#[test]
fn one_identity_cannot_hold_every_event_stream() {
    let api = Api::new("limits: {event_streams: 3, event_streams_per_identity: 2}\n");
    let [sam, sam2, bob] = api.tokens([("sam", "viewer"), ("sam-laptop", "viewer"), ("bob", "viewer")]);
    let server = Server::start(&api);
    let addr = server.addr;
    let first = open_stream(addr, &sam);
    let _second = open_stream(addr, &sam);
    let third = refused(addr, &sam);
    assert_eq!((third.status, third.json()["error"]["code"].as_str()), (429, Some("too_many_streams")));
    assert_eq!(third.json()["error"]["details"], json!({"limit": "event_streams_per_identity", "max": 2}));
    expect![[r#""user:sam has 2 event streams open, the most limits.event_streams_per_identity (2) allows; close one or try again later""#]]
        .assert_eq(&third.json()["error"]["message"].to_string());
    // Another token of another name is another identity; the server's own limit still holds.
    let _bobs = open_stream(addr, &bob);
    let full = refused(addr, &sam2);
    assert_eq!(full.json()["error"]["details"], json!({"limit": "event_streams", "max": 3}));
    // A stream that ends gives its identity's slot back (once its thread sees the client gone).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = send(addr, "GET", "/api/v1/events?after=999999", &sam, &[], "");
        let mut head = [0u8; 12];
        again.read_exact(&mut head).unwrap();
        if &head == b"HTTP/1.1 200" {
            break;
        }
        assert!(Instant::now() < deadline, "the slot of an ended stream was not given back");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(server);
}

/// One response off a connection that may stay open: status line, headers, `Content-Length`
/// bytes of body. `None` when the connection is closed (or reset) before a status line.
fn response(s: &mut std::io::BufReader<TcpStream>) -> Option<Raw> {
    let mut line = String::new();
    if s.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status = line.split(' ').nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        s.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    Some(Raw { status, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

/// Two requests on one connection: `first` (its head, then after its answer arrived or 300 ms,
/// its body) and then `GET /api/v1/health`. Says what the first got (status, code, whether it
/// said `Connection: close`) and what became of the second.
fn check_keep_alive(addr: SocketAddr, head: &str, body: &str, expect: Expect) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
    // The body follows the head a moment later, as a client that does not wait for
    // `100 Continue` sends it: by then the server may have answered.
    std::thread::sleep(Duration::from_millis(300));
    let _ = s.write_all(body.as_bytes());
    let first = response(&mut reader).expect("an answer to the first request");
    let (status, code) = (first.status, first.json()["error"]["code"].clone());
    let close = first.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    let _ = s.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: t\r\n\r\n");
    let second = match response(&mut reader) {
        Some(r) => format!("{} {}", r.status, r.body),
        None => "closed".to_string(),
    };
    let got = format!("{status} {code} connection-close={close}; then: {second}");
    expect.assert_eq(&got);
}

#[test]
fn keep_alive_stays_correct_after_a_request_refused_before_its_body_was_read() {
    let api = Api::new("limits: {body_bytes: 64}\n");
    let viewer = api.token("vera", &["viewer"]);
    let server = Server::start(&api);
    let addr = server.addr;
    let body = r#"{"kind": "Intent", "this": "is never read"}"#;
    let head = |token: &str, len: usize| {
        format!("POST /api/v1/operations HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n")
    };
    // Refused before the body is read: the answer says so, and the connection closes after it.
    check_keep_alive(
        addr,
        &head("og_nope", body.len()),
        body,
        expect![[r#"401 "invalid_token" connection-close=true; then: closed"#]],
    );
    check_keep_alive(
        addr,
        &head(&viewer, body.len()),
        body,
        expect![[r#"403 "forbidden" connection-close=true; then: closed"#]],
    );
    let big = "x".repeat(100);
    check_keep_alive(
        addr,
        &head(&viewer, big.len()).replace("/api/v1/operations", "/api/v1/plans"),
        &big,
        expect![[r#"413 "body_too_large" connection-close=true; then: closed"#]],
    );
    check_keep_alive(
        addr,
        &head(&viewer, body.len()).replace("POST /api/v1/operations", "POST /api/v1/nowhere"),
        body,
        expect![[r#"404 "no_route" connection-close=true; then: closed"#]],
    );
    // A body that was read keeps the connection: the second request is answered on it.
    check_keep_alive(
        addr,
        &head(&viewer, 2).replace("/api/v1/operations", "/api/v1/plans"),
        "{}",
        expect![[r#"422 "invalid_document" connection-close=false; then: 200 {"status":"ok"}"#]],
    );
    // An agent route's small body is read before its token is checked (one trip to the
    // blocking pool for the token and the handler): refused, the connection stays.
    check_keep_alive(
        addr,
        &head("og_nope", 2).replace("/api/v1/operations", "/api/v1/agent/heartbeat"),
        "{}",
        expect![[r#"401 "invalid_token" connection-close=false; then: 200 {"status":"ok"}"#]],
    );
    check_keep_alive(
        addr,
        "GET /api/v1/me HTTP/1.1\r\nHost: t\r\n\r\n",
        "",
        expect![[r#"401 "unauthenticated" connection-close=false; then: 200 {"status":"ok"}"#]],
    );
    drop(server);
}

/// Starts `opsgraph serve` on a loopback port under `prlimit --nofile=NOFILE`, with this
/// `config.yaml` and an admin token read from a file.
fn serve_binary(data: &std::path::Path, nofile: u32, config: &str, token: &str, log: &std::path::Path) -> Process {
    std::fs::create_dir_all(data).unwrap();
    std::fs::write(data.join("config.yaml"), config).unwrap();
    let token_file = data.join("admin.token");
    std::fs::write(&token_file, token).unwrap();
    Process::start(
        std::process::Command::new("prlimit")
            .arg(format!("--nofile={nofile}"))
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_opsgraph"))
            .args(["--data-dir", &data.display().to_string(), "serve", "--listen", "127.0.0.1:0"])
            .env("OPSGRAPH_ADMIN_TOKEN_FILE", &token_file)
            .env("OPSGRAPH_MASTER_KEY", "a".repeat(64))
            .env_remove("OPSGRAPH_LOG"),
        log,
    )
}

/// Whether the server still holds a connection open (nothing to read yet, no end, no reset).
fn held(mut s: &TcpStream) -> bool {
    let mut buf = [0u8; 512];
    matches!(s.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// `GET /api/v1/health` on a new connection from 127.0.0.1: its status and how long it took.
fn health(addr: SocketAddr) -> (u16, Duration) {
    let at = Instant::now();
    let raw = http(addr, "GET", "/api/v1/health", "-", &[], "");
    (raw.status, at.elapsed())
}

/// Slowloris: 300 connections from one peer (127.0.0.2) trickle a request head, a byte every
/// 200 ms, into the real server limited to 256 open files. It holds `connections_per_peer` of
/// them and closes the rest at once (a 503 naming the limit), `/api/v1/health` answers promptly
/// from another address all along, and the held ones are dropped at `header_read_timeout`
/// although they keep sending. An idle keep-alive connection is closed at the same timeout.
/// The test is bounded: about 10 s, every wait with a deadline.
#[test]
fn trickling_clients_under_a_file_limit_do_not_stop_health_from_answering() {
    const CLIENTS: usize = 300;
    let dir = temp_dir(&[]);
    let token = format!("og_{}", "e".repeat(43));
    let log = dir.join("serve.log");
    let server = serve_binary(&dir.join("data"), 256, "limits: {header_read_timeout: 4}\n", &token, &log);
    let addr = server.addr;
    assert_eq!(health(addr).0, 200);

    let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    let started = Instant::now();
    let clients: Vec<TcpStream> = rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(([127, 0, 0, 2], 0).into()).unwrap();
            clients.push(socket.connect(addr).await.unwrap().into_std().unwrap());
        }
        clients
    });
    let head = format!("GET /api/v1/health HTTP/1.1\r\nHost: slow\r\nX-Pad: {}", "a".repeat(200));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = {
        let stop = stop.clone();
        let writers: Vec<TcpStream> = clients.iter().map(|c| c.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            let mut writers = writers;
            for byte in head.bytes().cycle() {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                for w in &mut writers {
                    let _ = w.write(&[byte]);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };

    // While they trickle: one peer holds its share, health answers at once, again and again.
    std::thread::sleep(Duration::from_millis(800));
    let mut answers = Vec::new();
    for _ in 0..5 {
        answers.push(health(addr));
        std::thread::sleep(Duration::from_millis(100));
    }
    let held_now = clients.iter().filter(|c| held(c)).count();
    assert!(started.elapsed() < Duration::from_millis(3800), "too slow to tell: {:?}", started.elapsed());
    assert_eq!(held_now, 64, "the server holds limits.connections_per_peer (64) of one peer's connections");
    for (status, took) in &answers {
        assert_eq!(*status, 200);
        assert!(*took < Duration::from_millis(500), "health took {took:?} while clients trickled");
    }

    // At header_read_timeout the held ones are dropped, although they keep sending.
    let deadline = started + Duration::from_secs(8);
    while clients.iter().any(held) {
        assert!(Instant::now() < deadline, "half-sent heads were held past limits.header_read_timeout");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(started.elapsed() >= Duration::from_millis(3900), "dropped before the timeout: {:?}", started.elapsed());
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    trickle.join().unwrap();
    assert_eq!(health(addr).0, 200);

    // The refusals are counted; the limit on all connections is half the file limit.
    let metrics = http(addr, "GET", "/metrics", &token, &[], "").body;
    let refused = metrics.lines().find_map(|l| l.strip_prefix("opsgraph_connections_refused_total ")).unwrap();
    assert_eq!(refused, (CLIENTS - 64).to_string());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("connections=128 per_peer=64 header_read_timeout_ms=4000"), "{text}");

    // An idle keep-alive connection is closed at the same timeout.
    let mut idle = TcpStream::connect(addr).unwrap();
    idle.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut reader = std::io::BufReader::new(idle.try_clone().unwrap());
    assert_eq!(response(&mut reader).unwrap().status, 200);
    let at = Instant::now();
    idle.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    let took = at.elapsed();
    assert!(took >= Duration::from_millis(3900) && took < Duration::from_secs(6), "idle for {took:?}");
    drop(server);
}

/// Requests borrow store connections from the server's pool: requests one after another open
/// one connection between them (authentication and handler included), not two each; requests at
/// once open more. Opening one cost more than answering a small request (docs/benchmarks.md).
#[test]
fn requests_borrow_store_connections_from_a_pool() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let api = Api::new("");
    let admin = api.token("admin", &["platform_admin"]);
    let data = api.dir.join("data");
    let opens = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&opens);
    let opener = opsgraph::storage::opener(&data);
    let open = move || {
        counted.fetch_add(1, Ordering::SeqCst);
        opener()
    };
    let world = api.state.world().as_ref().clone();
    let state = opsgraph_server::AppState::new(Box::new(open), world, api.state.config().clone(), api.dir.join("data"));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let get = |state: opsgraph_server::AppState| {
        let req = axum::http::Request::builder()
            .uri("/api/v1/operations")
            .header("authorization", format!("Bearer {admin}"))
            .body(axum::body::Body::empty())
            .unwrap();
        async move { tower::ServiceExt::oneshot(opsgraph_server::router(state), req).await.unwrap().status().as_u16() }
    };
    for _ in 0..5 {
        assert_eq!(rt.block_on(get(state.clone())), 200);
    }
    assert_eq!(opens.load(Ordering::SeqCst), 1, "five requests one after another");
    let at_once: Vec<u16> = rt.block_on(async {
        let tasks: Vec<_> = (0..8).map(|_| tokio::spawn(get(state.clone()))).collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    });
    assert_eq!(at_once, vec![200; 8]);
    assert!(opens.load(Ordering::SeqCst) <= 16, "at most two per request at once: {}", opens.load(Ordering::SeqCst));
}

/// `GET /operations/{id}` is answered from what was read until the store's next commit
/// (`reads.rs`): a commit through this server, or through any other connection to the store (the
/// CLI, another replica), shows in the next answer.
#[test]
fn the_kept_operation_view_shows_every_commit_at_once() {
    let api = Api::new("");
    let admin = api.token("admin", &["platform_admin"]);
    let created = api.post("/api/v1/operations", &admin, &crate::server::intent("kept"));
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    api.idle();
    let path = format!("/api/v1/operations/{id}");
    let first = api.get(&path, &admin);
    assert_eq!(first.status, 200);
    assert_eq!(api.get(&path, &admin).body, first.body, "nothing was committed");
    let entries = |r: &crate::server::Reply| r.body["timeline"].as_array().unwrap().len();
    // Another connection commits, as the CLI would.
    let mut other = api.state.store().unwrap();
    let entry = opsgraph_store::TimelineEntry {
        seq: 0,
        operation: id.clone(),
        at: opsgraph_store::now(),
        actor: "cli".into(),
        event: "note".into(),
        from: None,
        to: None,
        reason: "written beside the server".into(),
        data: serde_json::Value::Null,
    };
    other.commit(&[opsgraph_store::Write::Timeline(entry)]).unwrap();
    let noted = api.get(&path, &admin);
    assert_eq!(entries(&noted), entries(&first) + 1, "{}", noted.body["timeline"]);
    assert_eq!(noted.body["timeline"].as_array().unwrap().last().unwrap()["reason"], "written beside the server");
    // This server commits.
    let cancelled = api.post(&format!("{path}/cancel"), &admin, &json!({"reason": "enough"}).to_string());
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    api.idle();
    let after = api.get(&path, &admin);
    assert_eq!(after.body["state"], "cancelled", "{}", after.body);
    // An unknown operation is still a 404.
    assert_eq!(api.get("/api/v1/operations/op-nope", &admin).status, 404);
}
