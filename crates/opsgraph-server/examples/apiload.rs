//! The API under load (issue [N] 4; docs/benchmarks.md, `bench/run` group g): a real
//! `opsgraph serve` on loopback, then
//!
//! - **get**: `GET /api/v1/operations/{id}` from C keep-alive connections for T seconds, for an
//!   operation of `small` jobs and one of `jobs` jobs: requests/s and latency p50/p99;
//! - **sse**: S subscribers to `/api/v1/operations/{id}/events` while an operation of `jobs`
//!   jobs (`/bin/true` each) runs: each event's delivery latency (its timeline `at`, written in
//!   the transaction that commits it, against the time the subscriber read it) p50/p99, and per
//!   subscriber the ids lost or received twice against the operation's timeline read afterwards;
//!   the bytes of event text read, and the CPU seconds from the resume to the last stream's end
//!   of the server (`/proc/PID/stat`), of this client, and of the whole machine (`/proc/stat`),
//!   so a run says how much of the cores the benchmark had; per thread name of the server and of
//!   the client, the seconds run and waited on a run queue (`/proc/PID/task/*/schedstat`); the
//!   delay by commit time in 250 ms windows; and with `OPSGRAPH_STREAM_STAGES=1` in the
//!   environment, the server's own stages (`src/stages.rs`). `clients=N` spreads the subscribers
//!   over N client threads with a runtime each (default: one runtime of 2 workers).
//!
//! ```sh
//! cargo build --release -p opsgraph && cargo build --release -p opsgraph-server --example apiload
//! target/release/examples/apiload opsgraph=target/release/opsgraph [conns=32 secs=5 small=10 jobs=2000 subscribers=1000 only=get|sse clients=0]
//! ```
//!
//! Every connection goes to 127.0.0.1; the server is killed and its directory removed at the end;
//! each phase has a time bound. The server's limits are raised for the run in its
//! `config.yaml` (`event_streams`, `event_streams_per_identity`, `connections`,
//! `connections_per_peer`: one identity opens every stream from one address). The client runs on
//! the same machine as the server (a 2-core machine shares them): its own CPU is in the figures.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Args {
    opsgraph: String,
    conns: usize,
    secs: f64,
    small: usize,
    jobs: usize,
    subscribers: usize,
    only: Option<String>,
    /// Subscribers spread over this many client threads, each with a single-threaded runtime
    /// (0: all on the client's one runtime of 2 workers).
    clients: usize,
}

fn args() -> Args {
    let mut a = Args {
        opsgraph: std::env::var("OPSGRAPH").unwrap_or_else(|_| "target/release/opsgraph".into()),
        conns: 32,
        secs: 5.0,
        small: 10,
        jobs: 2000,
        subscribers: 1000,
        only: None,
        clients: 0,
    };
    for arg in std::env::args().skip(1) {
        let (k, v) = arg.split_once('=').unwrap_or_else(|| panic!("arguments are key=value, not {arg}"));
        let n = || v.parse::<usize>().unwrap_or_else(|_| panic!("{k}= takes a whole number, not {v}"));
        match k {
            "opsgraph" => a.opsgraph = v.to_string(),
            "conns" => a.conns = n(),
            "secs" => a.secs = v.parse().expect("secs= takes seconds"),
            "small" => a.small = n(),
            "jobs" => a.jobs = n(),
            "subscribers" => a.subscribers = n(),
            "only" => a.only = Some(v.to_string()),
            "clients" => a.clients = n(),
            _ => panic!("unknown argument {k}= (opsgraph, conns, secs, small, jobs, subscribers, only, clients)"),
        }
    }
    a
}

/// A data directory with a pack of `big` no-op jobs and the running server; killed and removed on drop.
struct Server {
    dir: std::path::PathBuf,
    child: Child,
    port: u16,
    token: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A pack whose templates `small` and `big` run that many independent `/bin/true` jobs.
fn pack(root: &std::path::Path, small: usize, big: usize) {
    write(
        &root.join("pack.yaml"),
        "scenario_pack:\n  id: apiload\n  version: 1.0.0\n  title: API load\n  resource_types: [bench.thing]\n  actions: [small, big]\n  plan_templates:\n    - {id: apiload.small, entrypoint: j0, action: small}\n    - {id: apiload.big, entrypoint: j0, action: big}\n",
    );
    let n = small.max(big);
    let jobs: Vec<String> = (0..n)
        .map(|k| format!("job:\n  id: j{k}\n  type: noop\n  run: {{executor: local, command: [/bin/true]}}\n"))
        .collect();
    write(&root.join("jobs.yaml"), &jobs.join("---\n"));
    let ids = |m: usize| (0..m).map(|k| format!("j{k}")).collect::<Vec<_>>().join(", ");
    let template = |name: &str, m: usize| {
        format!(
            "plan_template:\n  id: apiload.{name}\n  action: {name}\n  stages:\n    - {{id: all, name: All, jobs: [{}]}}\n  jobs: [{}]\n",
            ids(m),
            ids(m)
        )
    };
    write(&root.join("templates.yaml"), &format!("{}---\n{}", template("small", small), template("big", big)));
}

fn start(a: &Args, streams: usize) -> Server {
    let dir = std::env::temp_dir().join(format!("opsgraph-apiload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.join("data");
    pack(&dir.join("packs/apiload"), a.small, a.jobs);
    let conns = streams + a.conns + 64;
    write(
        &data.join("config.yaml"),
        &format!(
            "limits: {{event_streams: {streams}, event_streams_per_identity: {streams}, connections: {conns}, connections_per_peer: {conns}}}\n"
        ),
    );
    let out = Command::new(&a.opsgraph)
        .args([
            "--data-dir",
            &data.display().to_string(),
            "token",
            "create",
            "--name",
            "apiload",
            "--role",
            "platform_admin",
        ])
        .output()
        .unwrap_or_else(|e| panic!("{} does not run: {e}", a.opsgraph));
    assert!(out.status.success(), "token create failed: {}", String::from_utf8_lossy(&out.stderr));
    let token = String::from_utf8(out.stdout).unwrap().lines().last().unwrap().trim().to_string();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let child = Command::new(&a.opsgraph)
        .args(["--data-dir", &data.display().to_string(), "--concurrency", "8", "serve"])
        .args(["--listen", &format!("127.0.0.1:{port}"), "--packs", &dir.join("packs").display().to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Server { dir, child, port, token }
}

/// One HTTP/1.1 connection with a read buffer (what is unread starts at `start`: taking a
/// piece off the front does not move the rest).
struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
    start: usize,
    /// Bytes read in all.
    bytes: usize,
}

struct Head {
    status: u16,
    length: Option<usize>,
    chunked: bool,
}

impl Conn {
    async fn open(port: u16) -> std::io::Result<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port)).await?;
        s.set_nodelay(true)?;
        Ok(Conn { s, buf: Vec::with_capacity(64 * 1024), start: 0, bytes: 0 })
    }

    /// The bytes read and not yet taken.
    fn unread(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn take(&mut self, n: usize) {
        self.start += n;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// Reads more, straight into the buffer (what was taken is dropped first when it is most of it).
    async fn fill(&mut self) -> std::io::Result<()> {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.reserve(64 * 1024);
        let n = self.s.read_buf(&mut self.buf).await?;
        self.bytes += n;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        Ok(())
    }

    async fn send(&mut self, method: &str, path: &str, token: &str, body: &str) -> std::io::Result<()> {
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.s.write_all(req.as_bytes()).await
    }

    async fn head(&mut self) -> std::io::Result<Head> {
        loop {
            if let Some(end) = self.unread().windows(4).position(|w| w == b"\r\n\r\n") {
                let text = String::from_utf8_lossy(&self.unread()[..end]).to_ascii_lowercase();
                self.take(end + 4);
                let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
                let header = |name: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(name).map(|v| v.trim_start_matches(':').trim().to_string()))
                };
                let length = header("content-length").and_then(|v| v.parse().ok());
                let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
                return Ok(Head { status, length, chunked });
            }
            self.fill().await?;
        }
    }

    /// The next piece of a chunked body appended to `out`; its size (0 at the body's end).
    async fn chunk(&mut self, out: &mut Vec<u8>) -> std::io::Result<usize> {
        let line_end = loop {
            if let Some(i) = self.unread().windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            self.fill().await?;
        };
        let size_text = String::from_utf8_lossy(&self.unread()[..line_end]).to_string();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
            .map_err(|_| std::io::Error::other(format!("bad chunk size {size_text:?}")))?;
        self.take(line_end + 2);
        while self.unread().len() < size + 2 {
            self.fill().await?;
        }
        out.extend_from_slice(&self.unread()[..size]);
        self.take(size + 2);
        Ok(size)
    }

    /// A whole response: status and body.
    async fn call(&mut self, method: &str, path: &str, token: &str, body: &str) -> std::io::Result<(u16, Vec<u8>)> {
        self.send(method, path, token, body).await?;
        let head = self.head().await?;
        if head.chunked {
            let mut all = Vec::new();
            while self.chunk(&mut all).await? > 0 {}
            return Ok((head.status, all));
        }
        let n = head.length.unwrap_or(0);
        while self.unread().len() < n {
            self.fill().await?;
        }
        let body = self.unread()[..n].to_vec();
        self.take(n);
        Ok((head.status, body))
    }
}

async fn call(port: u16, token: &str, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
    let mut c = Conn::open(port).await.expect("connect");
    let (status, body) = c.call(method, path, token, body).await.expect("request");
    (status, serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null))
}

async fn wait_up(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = Conn::open(server.port).await {
            if let Ok((200, _)) = c.call("GET", "/api/v1/health", "", "").await {
                return;
            }
        }
        assert!(Instant::now() < deadline, "the server did not start: see {}", server.dir.join("server.log").display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn create(server: &Server, action: &str) -> String {
    let intent = format!(
        "intent:\n  target_resource_type: bench.thing\n  action: {action}\n  name: apiload-{action}\n  environment: dev\n"
    );
    let (status, body) = call(server.port, &server.token, "POST", "/api/v1/operations", &intent).await;
    assert_eq!(status, 201, "creating the operation: {body}");
    body["id"].as_str().unwrap().to_string()
}

/// The operation's state once it is `want` (or any terminal state when `want` is empty).
async fn wait_state(server: &Server, id: &str, want: &str, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let (_, op) = call(server.port, &server.token, "GET", &format!("/api/v1/operations/{id}"), "").await;
        let state = op["state"].as_str().unwrap_or("").to_string();
        let done = if want.is_empty() {
            ["completed", "failed", "cancelled"].contains(&state.as_str())
        } else {
            state == want
        };
        if done {
            return state;
        }
        assert!(Instant::now() < deadline, "operation {id} not {want} within {limit:?}: {state} {}", op["detail"]);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// C connections requesting `path` as fast as they are answered for `secs`.
async fn hammer(server: &Server, path: &str, conns: usize, secs: f64) -> (usize, f64, Vec<f64>, usize, usize) {
    let stop = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (port, token, path) = (server.port, server.token.clone(), path.to_string());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let (mut errors, mut bytes) = (0usize, 0usize);
            let mut c = Conn::open(port).await.expect("connect");
            while Instant::now() < stop {
                let t = Instant::now();
                match c.call("GET", &path, &token, "").await {
                    Ok((200, body)) => {
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                        bytes = body.len();
                    }
                    Ok(_) => errors += 1,
                    Err(_) => {
                        errors += 1;
                        c = Conn::open(port).await.expect("reconnect");
                    }
                }
            }
            (lat, errors, bytes)
        }));
    }
    let t0 = Instant::now();
    let (mut all, mut errors, mut bytes) = (Vec::new(), 0, 0);
    for t in tasks {
        let (lat, e, b) = t.await.unwrap();
        all.extend(lat);
        errors += e;
        bytes = bytes.max(b);
    }
    let wall = t0.elapsed().as_secs_f64().max(secs);
    all.sort_by(|a, b| a.total_cmp(b));
    (all.len(), wall, all, errors, bytes)
}

async fn get_phase(server: &Server, a: &Args) {
    for (action, jobs) in [("small", a.small), ("big", a.jobs)] {
        let id = create(server, action).await;
        let state = wait_state(server, &id, "", Duration::from_secs(300)).await;
        let path = format!("/api/v1/operations/{id}");
        let (n, wall, lat, errors, bytes) = hammer(server, &path, a.conns, a.secs).await;
        println!(
            "get: GET /api/v1/operations/{{id}} ({jobs} jobs, {state}, {bytes} bytes), {} connections, {:.1} s: {:.0} requests/s, p50 {:.2} ms, p99 {:.2} ms, {errors} errors",
            a.conns,
            wall,
            n as f64 / wall,
            pct(&lat, 0.5),
            pct(&lat, 0.99)
        );
    }
}

fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1e3
}

/// What one subscriber saw: the ids in the order received, and per event its `at` and the time read.
#[derive(Default)]
struct Seen {
    ids: Vec<i64>,
    /// Per event: its `at` and when the client read it.
    times: Vec<(f64, f64)>,
    /// Body bytes read.
    bytes: usize,
    ended: bool,
    error: Option<String>,
}

/// The whole events at the front of `text` (server-sent event text: lines, an empty line after
/// each event): per event with an id, the id, and its `at` with `read`, into `seen`. Returns how
/// many bytes of whole events it read, and whether one of them was `event: end` (then the rest
/// is not read). One pass over the bytes; the data's JSON is not parsed:
/// `at` is found among its first bytes.
fn events(text: &[u8], read: f64, seen: &mut Seen) -> (usize, bool) {
    let (mut done, mut line) = (0, 0);
    let (mut id, mut at, mut end) = (None, None, false);
    while let Some(n) = text[line..].iter().position(|&b| b == b'\n') {
        let l = &text[line..line + n];
        line += n + 1;
        if l.is_empty() {
            done = line;
            if end {
                return (done, true);
            }
            if let Some(id) = id.take() {
                seen.ids.push(id);
                if let Some(at) = at.take() {
                    seen.times.push((at, read));
                }
            }
            at = None;
        } else if let Some(v) = l.strip_prefix(b"id:") {
            id = std::str::from_utf8(v).ok().and_then(|v| v.trim().parse::<i64>().ok());
        } else if let Some(v) = l.strip_prefix(b"data:") {
            let head = &v[..v.len().min(64)];
            at = head
                .windows(6)
                .position(|w| w == b"\"at\":\"")
                .and_then(|i| v.get(i + 6..))
                .and_then(|rest| rest.get(..rest.iter().position(|&b| b == b'"')?))
                .and_then(|s| std::str::from_utf8(s).ok())
                .and_then(opsgraph_store::parse_rfc3339)
                .map(|ms| ms as f64);
        } else if let Some(v) = l.strip_prefix(b"event:") {
            end = v.trim_ascii() == b"end";
        }
    }
    (done, false)
}

async fn subscribe(port: u16, token: String, path: String, ready: Arc<AtomicUsize>, deadline: Instant) -> Seen {
    let mut seen = Seen::default();
    let run = async {
        let mut c = Conn::open(port).await?;
        c.send("GET", &path, &token, "").await?;
        let head = c.head().await?;
        if head.status != 200 || !head.chunked {
            return Err(std::io::Error::other(format!("status {} (chunked {})", head.status, head.chunked)));
        }
        ready.fetch_add(1, Ordering::SeqCst);
        let mut text = Vec::new();
        loop {
            let size = c.chunk(&mut text).await?;
            seen.bytes += size;
            if size == 0 {
                return Ok(());
            }
            let (done, ended) = events(&text, now_ms(), &mut seen);
            if ended {
                seen.ended = true;
                return Ok(());
            }
            text.drain(..done);
        }
    };
    match tokio::time::timeout_at(deadline.into(), run).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => seen.error = Some(e.to_string()),
        Err(_) => seen.error = Some("timed out".into()),
    }
    seen
}

async fn sse_phase(server: &Server, a: &Args) {
    let id = create(server, "big").await;
    // Paused while the subscribers connect (a small operation may be done before: then every
    // event is history and no latency is measured).
    let (status, reply) = call(server.port, &server.token, "POST", &format!("/api/v1/operations/{id}/pause"), "").await;
    let paused = status == 200;
    if paused {
        wait_state(server, &id, "paused", Duration::from_secs(60)).await;
    } else {
        println!("sse: the operation could not be paused ({status}: {reply}); it ran while subscribers connected");
    }
    let ready = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(300);
    let t_open = Instant::now();
    let mut subs = Vec::new();
    let runtimes = client_runtimes(a.clients);
    for k in 0..a.subscribers {
        let path = format!("/api/v1/operations/{id}/events");
        let sub = subscribe(server.port, server.token.clone(), path, ready.clone(), deadline);
        subs.push(match runtimes.get(k % runtimes.len().max(1)) {
            Some(rt) => rt.spawn(sub),
            None => tokio::spawn(sub),
        });
    }
    while ready.load(Ordering::SeqCst) < a.subscribers {
        if t_open.elapsed() > Duration::from_secs(60) || subs.iter().any(|s| s.is_finished()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let open = ready.load(Ordering::SeqCst);
    println!("sse: {open} of {} subscribers connected in {:.2} s", a.subscribers, t_open.elapsed().as_secs_f64());
    // Entries committed from here on are delivered live (earlier ones were read as history).
    let resumed = now_ms() + 1.0;
    let t_run = Instant::now();
    let cpu0 = Cpu::now(server.child.id());
    let sched0 = (Sched::of(&server.child.id().to_string()), Sched::of("self"));
    if paused {
        let path = format!("/api/v1/operations/{id}/resume");
        let (status, reply) = call(server.port, &server.token, "POST", &path, "").await;
        assert_eq!(status, 200, "resume: {reply}");
    }
    let state = wait_state(server, &id, "", Duration::from_secs(300)).await;
    let run_secs = t_run.elapsed().as_secs_f64();
    let mut seen = Vec::new();
    for s in subs {
        seen.push(s.await.unwrap());
    }
    let all_read = t_run.elapsed().as_secs_f64();
    let cpu = Cpu::now(server.child.id()).since(&cpu0);
    let sched = (Sched::of(&server.child.id().to_string()).since(&sched0.0), Sched::of("self").since(&sched0.1));
    let (status, timeline) =
        call(server.port, &server.token, "GET", &format!("/api/v1/operations/{id}/timeline"), "").await;
    assert_eq!(status, 200);
    let want: Vec<i64> = timeline["timeline"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    let (mut lost, mut dup, mut errors, mut ended) = (0usize, 0usize, BTreeMap::<String, usize>::new(), 0usize);
    let mut lat = Vec::new();
    let (mut bytes, mut events) = (0usize, 0usize);
    for s in &seen {
        let mut count = BTreeMap::<i64, usize>::new();
        for i in &s.ids {
            *count.entry(*i).or_insert(0) += 1;
        }
        lost += want.iter().filter(|w| !count.contains_key(w)).count();
        dup += count.values().map(|c| c - 1).sum::<usize>();
        if let Some(e) = &s.error {
            *errors.entry(e.clone()).or_insert(0) += 1;
        }
        ended += s.ended as usize;
        lat.extend(s.times.iter().filter(|(at, _)| *at >= resumed).map(|(at, read)| read - at));
        bytes += s.bytes;
        events += s.ids.len();
    }
    // The delay by when the entry was committed (250 ms windows from the resume): a backlog that
    // grows through the run, or stalls.
    let mut windows = BTreeMap::<i64, Vec<f64>>::new();
    for s in &seen {
        for (at, read) in s.times.iter().filter(|(at, _)| *at >= resumed) {
            windows.entry(((at - resumed) / 250.0) as i64).or_default().push(read - at);
        }
    }
    let shape: Vec<String> = windows
        .iter_mut()
        .map(|(w, l)| {
            l.sort_by(|a, b| a.total_cmp(b));
            format!("{:.2}s {:.0}/{:.0}", *w as f64 * 0.25, pct(l, 0.5), pct(l, 0.99))
        })
        .collect();
    println!("sse: delivery p50/p99 ms by commit time: {}", shape.join(", "));
    lat.sort_by(|a, b| a.total_cmp(b));
    println!(
        "sse: {} subscribers, operation of {} jobs {state} in {run_secs:.2} s ({} timeline entries); every stream ended after {all_read:.2} s; {ended} saw `end`",
        a.subscribers,
        a.jobs,
        want.len()
    );
    println!(
        "sse: delivery latency over {} live events: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (timeline `at` has millisecond resolution)",
        lat.len(),
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "sse: {:.1} MB of event text read, {:.0} bytes per event; CPU from the resume to the last stream's end ({all_read:.2} s): server {:.2} s, client {:.2} s, whole machine busy {:.2} of {:.2} core-s",
        bytes as f64 / 1e6,
        bytes as f64 / events.max(1) as f64,
        cpu.server,
        cpu.client,
        cpu.busy,
        cpu.total
    );
    println!("sse: lost {lost} events, duplicated {dup}, over {} subscribers; errors: {errors:?}", seen.len());
    if std::env::var_os("OPSGRAPH_STREAM_STAGES").is_some() {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let log = std::fs::read_to_string(server.dir.join("server.log")).unwrap_or_default();
        for line in log.lines().filter(|l| l.starts_with("stream stages")) {
            println!("sse: server {line}");
        }
    }
    for (who, by) in [("server", &sched.0), ("client", &sched.1)] {
        let text: Vec<String> = by
            .iter()
            .map(|(name, (run, wait, n))| format!("{name} ×{n}: ran {run:.2} s, waited to run {wait:.2} s"))
            .collect();
        println!("sse: {who} threads from the resume to the last stream's end: {}", text.join("; "));
    }
}

/// Per thread of a process (`/proc/PID/task/TID/schedstat`): its name, the seconds it ran and
/// the seconds it waited on a run queue, by thread id.
struct Sched(BTreeMap<String, (String, f64, f64)>);

impl Sched {
    fn of(pid: &str) -> Sched {
        let mut all = BTreeMap::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let path = task.path();
            let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_string();
            let stat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
            let f: Vec<f64> = stat.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
            if f.len() >= 2 {
                all.insert(task.file_name().to_string_lossy().to_string(), (name, f[0] / 1e9, f[1] / 1e9));
            }
        }
        Sched(all)
    }

    /// By thread name: seconds run and waited since `before`, and how many threads.
    fn since(&self, before: &Sched) -> BTreeMap<String, (f64, f64, usize)> {
        let mut by = BTreeMap::<String, (f64, f64, usize)>::new();
        for (tid, (name, run, wait)) in &self.0 {
            let (r0, w0) = before.0.get(tid).map(|(_, r, w)| (*r, *w)).unwrap_or((0.0, 0.0));
            let e = by.entry(name.clone()).or_default();
            e.0 += run - r0;
            e.1 += wait - w0;
            e.2 += 1;
        }
        by
    }
}

/// `n` single-threaded runtimes, each driven by a thread of its own for the rest of the run.
fn client_runtimes(n: usize) -> Vec<tokio::runtime::Handle> {
    (0..n)
        .map(|k| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let handle = rt.handle().clone();
            std::thread::Builder::new()
                .name(format!("client {k}"))
                .spawn(move || rt.block_on(std::future::pending::<()>()))
                .unwrap();
            handle
        })
        .collect()
}

/// CPU seconds so far: the server process's (`/proc/PID/stat`), this client's,
/// and the whole machine's busy and total (`/proc/stat`).
struct Cpu {
    server: f64,
    client: f64,
    busy: f64,
    total: f64,
}

/// USER_HZ, the unit of `/proc`'s CPU times.
const TICK: f64 = 100.0;

impl Cpu {
    /// A process's user and system CPU seconds (`/proc/PID/stat`).
    fn process(pid: &str) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
        let fields: Vec<f64> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().map(|f| f.parse().unwrap_or(0.0)).collect())
            .unwrap_or_default();
        (fields.get(11).unwrap_or(&0.0) + fields.get(12).unwrap_or(&0.0)) / TICK
    }

    fn now(server: u32) -> Cpu {
        let tick = TICK;
        let server = Cpu::process(&server.to_string());
        let client = Cpu::process("self");
        let all = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let cpu: Vec<f64> = all
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0.0))
            .collect();
        let total: f64 = cpu.iter().take(8).sum::<f64>() / tick;
        let idle = (cpu.get(3).unwrap_or(&0.0) + cpu.get(4).unwrap_or(&0.0)) / tick;
        Cpu { server, client, busy: total - idle, total }
    }

    fn since(&self, before: &Cpu) -> Cpu {
        Cpu {
            server: self.server - before.server,
            client: self.client - before.client,
            busy: self.busy - before.busy,
            total: self.total - before.total,
        }
    }
}

fn main() {
    let a = args();
    let streams = a.subscribers + 8;
    let server = start(&a, streams);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        wait_up(&server).await;
        println!(
            "apiload: {} cores, load {}",
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .split(' ')
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
        if a.only.as_deref() != Some("sse") {
            get_phase(&server, &a).await;
        }
        if a.only.as_deref() != Some("get") {
            sse_phase(&server, &a).await;
        }
    });
    drop(server);
}
