//! The HTTP executor against a real HTTP server, and evidence checks against real processes, that
//! server, sockets and files: every source, retries until a check settles, what each result says.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use expect_test::{expect, Expect};
use opsgraph_core::model::{Command, Evidence, EvidenceSource};

use crate::testing::{closed_port, HttpServer, TempDir};
use crate::tests::render;
use crate::{check_evidence, Cancel, EvidenceResult, Executor, HttpExecutor, LocalExecutor, Outcome, Program, Spec};

// ---------------------------------------------------------------------------------------------
// HTTP executor

fn http_server() -> HttpServer {
    HttpServer::start(|req| match req.path.as_str() {
        "/health" => HttpServer::response(200, "ok"),
        "/down" => HttpServer::response(503, "maintenance"),
        "/echo" => HttpServer::response(201, &format!("{} {}", req.method, String::from_utf8_lossy(&req.body))),
        "/chunked" => {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n6\r\npedia \r\n0\r\n\r\n".to_vec()
        }
        "/until-close" => b"HTTP/1.1 200 OK\r\n\r\nno length".to_vec(),
        "/cut" => b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort".to_vec(),
        "/garbage" => b"SSH-2.0-OpenSSH\r\n\r\n".to_vec(),
        "/slow" => {
            thread::sleep(Duration::from_millis(1500));
            HttpServer::response(200, "late")
        }
        _ => HttpServer::response(404, "not found"),
    })
}

fn http(method: &str, url: &str, body: &str) -> Spec {
    Spec::new(Program::Http {
        method: method.into(),
        url: url.into(),
        headers: vec![("X-Test".into(), "1".into())],
        body: body.as_bytes().to_vec(),
    })
}

#[test]
fn http_executor() {
    let server = http_server();
    let mut out = String::new();
    for (method, path, body) in [
        ("GET", "/health", ""),
        ("GET", "/down", ""),
        ("POST", "/echo", "{\"a\":1}"),
        ("GET", "/chunked", ""),
        ("GET", "/until-close", ""),
        ("GET", "/cut", ""),
        ("GET", "/garbage", ""),
        ("GET", "/missing", ""),
    ] {
        let run = HttpExecutor.run(&http(method, &server.url(path), body), &Cancel::new());
        write!(out, "{method} {path}: {}", render(&run)).unwrap();
    }
    let mut slow = http("GET", &server.url("/slow"), "");
    slow.timeout = Some(Duration::from_millis(200));
    write!(out, "slow: {}", render(&HttpExecutor.run(&slow, &Cancel::new()))).unwrap();
    let closed_port = closed_port();
    let closed = format!("http://127.0.0.1:{}/", closed_port.port);
    let run = HttpExecutor.run(&http("GET", &closed, ""), &Cancel::new());
    write!(out, "closed port: {}", render(&run).replace(&closed[7..closed.len() - 1], "ADDR")).unwrap();
    for (method, url) in
        [("GET", "https://example.com/"), ("GET", "ftp://x/"), ("get", "http://x/"), ("GET", "http://a b/")]
    {
        write!(out, "{method} {url}: {}", render(&HttpExecutor.run(&http(method, url, ""), &Cancel::new()))).unwrap();
    }
    write!(out, "argv: {}", render(&HttpExecutor.run(&Spec::argv(["true"]), &Cancel::new()))).unwrap();
    expect![[r#"
        GET /health: Exited { code: 0 }
        stdout: "ok"
        http status 200
        GET /down: HttpStatus { status: 503 }
        stdout: "maintenance"
        http status 503
        POST /echo: Exited { code: 0 }
        stdout: "POST {\"a\":1}"
        http status 201
        GET /chunked: Exited { code: 0 }
        stdout: "Wikipedia "
        http status 200
        GET /until-close: Exited { code: 0 }
        stdout: "no length"
        http status 200
        GET /cut: Lost { reason: "the server closed the connection before the response was complete" }
        GET /garbage: Lost { reason: "not an http/1.x response: `SSH-2.0-OpenSSH`" }
        GET /missing: HttpStatus { status: 404 }
        stdout: "not found"
        http status 404
        slow: TimedOut { after: 200ms, killed: false }
        closed port: CouldNotStart { error: "failed to connect to ADDR: Connection refused (os error 111)" }
        GET https://example.com/: CouldNotStart { error: "invalid url `https://example.com/`: https is not supported: this client has no TLS" }
        GET ftp://x/: CouldNotStart { error: "invalid url `ftp://x/`: expected http://host[:port]/path" }
        get http://x/: CouldNotStart { error: "invalid http method `get`" }
        GET http://a b/: CouldNotStart { error: "failed to resolve a b: failed to lookup address information: Name or service not known" }
        argv: CouldNotStart { error: "the http executor sends http requests, it does not run programs" }
    "#]]
    .assert_eq(&out);
}

#[test]
fn http_cancel() {
    let server = http_server();
    let cancel = Cancel::new();
    let c = cancel.clone();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        c.cancel();
    });
    let run = HttpExecutor.run(&http("GET", &server.url("/slow"), ""), &cancel);
    t.join().unwrap();
    assert_eq!(run.outcome, Outcome::Cancelled);
    assert!(run.output.duration < Duration::from_secs(1), "{:?}", run.output.duration);
}

// ---------------------------------------------------------------------------------------------
// Evidence

fn ev(source: EvidenceSource) -> Evidence {
    Evidence::new("e", source)
}

fn render_evidence(r: &EvidenceResult) -> String {
    format!(
        "{} ({} attempt{})\n  expected: {}\n  observed: {}\n  detail: {}\n",
        if r.passed { "passed" } else { "FAILED" },
        r.attempts,
        if r.attempts == 1 { "" } else { "s" },
        r.expected,
        r.observed,
        r.detail
    )
}

/// Runs each check on the local executor and renders the results, one after another.
fn check_evidences(cases: Vec<(&str, Evidence)>, replace: &[(&str, &str)], expect: Expect) {
    let mut out = String::new();
    let env = BTreeMap::from([("OPSGRAPH_PARAM_UNIT".to_owned(), "containerd".to_owned())]);
    for (name, e) in cases {
        let r = check_evidence(&e, &LocalExecutor, &env, &Cancel::new());
        write!(out, "{name}: {}", render_evidence(&r)).unwrap();
    }
    for (from, to) in replace {
        out = out.replace(from, to);
    }
    expect.assert_eq(&out);
}

fn line(s: &str) -> Option<Command> {
    Some(Command::Line(s.to_owned()))
}

#[test]
fn evidence_command_and_systemd() {
    let with = |source, command: &str, f: &dyn Fn(&mut Evidence)| {
        let mut e = ev(source);
        e.command = line(command);
        f(&mut e);
        e
    };
    use EvidenceSource::{Command as Cmd, Systemd};
    check_evidences(
        vec![
            ("systemd active", with(Systemd, "echo active", &|e| e.expected = Some("active".into()))),
            (
                "systemd inactive",
                with(Systemd, "sh -c 'echo inactive; exit 3'", &|e| e.expected = Some("active".into())),
            ),
            ("exit 0 by default", with(Cmd, "true", &|_| {})),
            ("exit 0 by default, failing", with(Cmd, "sh -c 'echo no such cluster; exit 1'", &|_| {})),
            ("exit code given", with(Cmd, "sh -c 'exit 3'", &|e| e.expected_exit_code = Some(3))),
            (
                "exit code and contains",
                with(Cmd, "printf 'STATUS: deployed\\nREVISION: 2'", &|e| {
                    e.expected_exit_code = Some(0);
                    e.contains = Some("STATUS: deployed".into());
                }),
            ),
            (
                "contains, failing",
                with(Cmd, "echo 'STATUS: failed'", &|e| e.contains = Some("STATUS: deployed".into())),
            ),
            (
                "contains, but the command failed",
                with(Cmd, "sh -c 'echo STATUS: deployed; exit 1'", &|e| e.contains = Some("STATUS: deployed".into())),
            ),
            (
                "expected 0, the awk of a missing tool's empty output",
                with(Cmd, "no-such-kubectl get nodes | awk '{n++} END {print n + 0}'; exit 127", &|e| {
                    e.expected = Some("0".into())
                }),
            ),
            ("matches", with(Cmd, "echo v1.7.13", &|e| e.matches = Some(r"^v1\.7\.\d+".into()))),
            ("matches, failing", with(Cmd, "echo v2.0.0", &|e| e.matches = Some(r"^v1\.7\.\d+".into()))),
            (
                "param env reaches the command",
                with(Cmd, "printf %s \"$OPSGRAPH_PARAM_UNIT\"", &|e| e.expected = Some("containerd".into())),
            ),
            ("empty output", with(Cmd, "true", &|e| e.expected = Some("1".into()))),
            ("not found", with(Cmd, "no-such-tool info", &|_| {})),
            (
                "timeout",
                with(Cmd, "sleep 5", &|e| {
                    e.timeout = Some("100ms".into());
                }),
            ),
            ("bad regex", with(Cmd, "true", &|e| e.matches = Some("(".into()))),
            ("bad interval", with(Cmd, "true", &|e| e.interval = Some("soon".into()))),
            ("no command", ev(Cmd)),
        ],
        &[],
        expect![[r#"
            systemd active: passed (1 attempt)
              expected: active
              observed: active
              detail: command `echo active`
            systemd inactive: FAILED (1 attempt)
              expected: active
              observed: inactive
              detail: command `sh -c 'echo inactive; exit 3'`
            exit 0 by default: passed (1 attempt)
              expected: exit code 0
              observed: exit code 0
              detail: command `true`
            exit 0 by default, failing: FAILED (1 attempt)
              expected: exit code 0
              observed: exit code 1, output no such cluster
              detail: command `sh -c 'echo no such cluster; exit 1'`
            exit code given: passed (1 attempt)
              expected: exit code 3
              observed: exit code 3
              detail: command `sh -c 'exit 3'`
            exit code and contains: passed (1 attempt)
              expected: exit code 0; output containing `STATUS: deployed`
              observed: exit code 0; STATUS: deployed
            REVISION: 2
              detail: command `printf 'STATUS: deployed\nREVISION: 2'`
            contains, failing: FAILED (1 attempt)
              expected: output containing `STATUS: deployed`
              observed: STATUS: failed

              detail: command `echo 'STATUS: failed'`
            contains, but the command failed: FAILED (1 attempt)
              expected: exit code 0
              observed: exit code 1, output STATUS: deployed
              detail: command `sh -c 'echo STATUS: deployed; exit 1'`
            expected 0, the awk of a missing tool's empty output: FAILED (1 attempt)
              expected: exit code 0
              observed: exit code 127, output 0
              detail: command `no-such-kubectl get nodes | awk '{n++} END {print n + 0}'; exit 127`; stderr: /bin/sh: 1: no-such-kubectl: not found
            matches: passed (1 attempt)
              expected: output matching /^v1\.7\.\d+/
              observed: v1.7.13

              detail: command `echo v1.7.13`
            matches, failing: FAILED (1 attempt)
              expected: output matching /^v1\.7\.\d+/
              observed: v2.0.0

              detail: command `echo v2.0.0`
            param env reaches the command: passed (1 attempt)
              expected: containerd
              observed: containerd
              detail: command `printf %s "$OPSGRAPH_PARAM_UNIT"`
            empty output: FAILED (1 attempt)
              expected: 1
              observed: (empty output)
              detail: command `true`
            not found: FAILED (1 attempt)
              expected: exit code 0
              observed: could not start: failed to start `no-such-tool`: No such file or directory (os error 2)
              detail: command `no-such-tool info`
            timeout: FAILED (1 attempt)
              expected: exit code 0
              observed: timed out after 100ms
              detail: command `sleep 5`
            bad regex: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: invalid regex `(`: regex parse error:
                (
                ^
            error: unclosed group
              detail: evidence `e`: invalid regex `(`: regex parse error:
                (
                ^
            error: unclosed group
            bad interval: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: interval: invalid duration `soon`: expected a number, like `30s`, `500ms` or `10m`
              detail: evidence `e`: interval: invalid duration `soon`: expected a number, like `30s`, `500ms` or `10m`
            no command: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: a command check needs `command`
              detail: evidence `e`: a command check needs `command`
        "#]],
    );
}

#[test]
fn evidence_retries_until_it_settles() {
    let dir = TempDir::new();
    let counter = dir.join("count");
    let mut e = ev(EvidenceSource::Command);
    // Passes on the third attempt.
    e.command = line(&format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; test $n -ge 3",
        c = counter.display()
    ));
    e.retries = Some(5);
    e.interval = Some("10ms".into());
    let r = check_evidence(&e, &LocalExecutor, &BTreeMap::new(), &Cancel::new());
    assert!(r.passed, "{}", render_evidence(&r));
    assert_eq!(r.attempts, 3);
    // Never passes: every attempt is used, and the detail says so.
    e.command = line("false");
    e.retries = Some(2);
    let r = check_evidence(&e, &LocalExecutor, &BTreeMap::new(), &Cancel::new());
    expect![[r#"
        FAILED (3 attempts)
          expected: exit code 0
          observed: exit code 1
          detail: 3 attempts, 10ms apart; the last: command `false`
    "#]]
    .assert_eq(&render_evidence(&r));
    // Cancelled while waiting between attempts.
    e.interval = Some("10m".into());
    let cancel = Cancel::new();
    let c = cancel.clone();
    let t = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        c.cancel();
    });
    let start = Instant::now();
    let r = check_evidence(&e, &LocalExecutor, &BTreeMap::new(), &cancel);
    t.join().unwrap();
    assert!(!r.passed);
    assert_eq!(r.attempts, 1);
    assert!(r.detail.starts_with("cancelled"), "{}", render_evidence(&r));
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn evidence_http() {
    let server = http_server();
    let with = |path: &str, f: &dyn Fn(&mut Evidence)| {
        let mut e = ev(EvidenceSource::Http);
        e.url = Some(server.url(path));
        f(&mut e);
        e
    };
    let closed_port = closed_port();
    let closed = closed_port.port;
    check_evidences(
        vec![
            ("200", with("/health", &|_| {})),
            ("200 and body", with("/health", &|e| e.expected = Some("ok".into()))),
            ("503", with("/down", &|_| {})),
            ("503 expected", with("/down", &|e| e.expected_status = Some(503))),
            ("body contains, failing", with("/health", &|e| e.contains = Some("ready".into()))),
            ("body matches", with("/chunked", &|e| e.matches = Some("^Wiki".into()))),
            ("cut off", with("/cut", &|_| {})),
            ("slow", with("/slow", &|e| e.timeout = Some("200ms".into()))),
            ("closed", {
                let mut e = ev(EvidenceSource::Http);
                e.url = Some(format!("http://127.0.0.1:{closed}/"));
                e
            }),
            ("https", {
                let mut e = ev(EvidenceSource::Http);
                e.url = Some("https://example.com/".into());
                e
            }),
        ],
        &[(&server.port.to_string(), "PORT"), (&closed.to_string(), "CLOSED")],
        expect![[r#"
            200: passed (1 attempt)
              expected: status 200
              observed: status 200
              detail: GET http://127.0.0.1:PORT/health
            200 and body: passed (1 attempt)
              expected: status 200; ok
              observed: status 200; ok
              detail: GET http://127.0.0.1:PORT/health
            503: FAILED (1 attempt)
              expected: status 200
              observed: status 503
              detail: GET http://127.0.0.1:PORT/down; body: maintenance
            503 expected: passed (1 attempt)
              expected: status 503
              observed: status 503
              detail: GET http://127.0.0.1:PORT/down
            body contains, failing: FAILED (1 attempt)
              expected: body containing `ready`
              observed: ok
              detail: GET http://127.0.0.1:PORT/health
            body matches: passed (1 attempt)
              expected: status 200; body matching /^Wiki/
              observed: status 200; Wikipedia 
              detail: GET http://127.0.0.1:PORT/chunked
            cut off: FAILED (1 attempt)
              expected: status 200
              observed: the server closed the connection before the response was complete
              detail: GET http://127.0.0.1:PORT/cut
            slow: FAILED (1 attempt)
              expected: status 200
              observed: no response within 200ms
              detail: GET http://127.0.0.1:PORT/slow
            closed: FAILED (1 attempt)
              expected: status 200
              observed: failed to connect to 127.0.0.1:CLOSED: Connection refused (os error 111)
              detail: GET http://127.0.0.1:CLOSED/
            https: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: invalid url `https://example.com/`: https is not supported: this client has no TLS
              detail: evidence `e`: invalid url `https://example.com/`: https is not supported: this client has no TLS
        "#]],
    );
}

#[test]
fn evidence_tcp_and_file() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listener.local_addr().unwrap().port();
    let closed_port = closed_port();
    let closed = closed_port.port;
    let tcp = |port| {
        let mut e = ev(EvidenceSource::Tcp);
        e.host = Some("127.0.0.1".into());
        e.port = Some(port);
        e
    };
    let dir = TempDir::new();
    let path = dir.join("config.toml");
    std::fs::write(&path, "version = 2\n[plugins]\n").unwrap();
    let file = |p: &Path, f: &dyn Fn(&mut Evidence)| {
        let mut e = ev(EvidenceSource::File);
        e.path = Some(p.display().to_string());
        f(&mut e);
        e
    };
    check_evidences(
        vec![
            ("tcp open", tcp(open)),
            ("tcp closed", tcp(closed)),
            ("tcp without port", {
                let mut e = tcp(1);
                e.port = None;
                e
            }),
            ("file exists", file(&path, &|_| {})),
            ("file missing", file(&dir.join("missing"), &|_| {})),
            ("file contains", file(&path, &|e| e.contains = Some("[plugins]".into()))),
            ("file matches, failing", file(&path, &|e| e.matches = Some("^version = 3".into()))),
            ("file expected", file(&path, &|e| e.expected = Some("version = 2\n[plugins]".into()))),
        ],
        &[(&open.to_string(), "OPEN"), (&closed.to_string(), "CLOSED"), (&dir.path().display().to_string(), "DIR")],
        expect![[r#"
            tcp open: passed (1 attempt)
              expected: a tcp connection to 127.0.0.1:OPEN
              observed: connected
              detail: connect to 127.0.0.1:OPEN within 10s
            tcp closed: FAILED (1 attempt)
              expected: a tcp connection to 127.0.0.1:CLOSED
              observed: connection refused
              detail: connect to 127.0.0.1:CLOSED within 10s
            tcp without port: FAILED (0 attempts)
              expected: a valid check
              observed: invalid check: a tcp check needs `host` and `port`
              detail: evidence `e`: a tcp check needs `host` and `port`
            file exists: passed (1 attempt)
              expected: file DIR/config.toml exists
              observed: exists
              detail: read DIR/config.toml
            file missing: FAILED (1 attempt)
              expected: file DIR/missing exists
              observed: no such file
              detail: read DIR/missing
            file contains: passed (1 attempt)
              expected: content containing `[plugins]`
              observed: version = 2
            [plugins]

              detail: read DIR/config.toml
            file matches, failing: FAILED (1 attempt)
              expected: content matching /^version = 3/
              observed: version = 2
            [plugins]

              detail: read DIR/config.toml
            file expected: passed (1 attempt)
              expected: version = 2
            [plugins]
              observed: version = 2
            [plugins]
              detail: read DIR/config.toml
        "#]],
    );
    drop(listener);
}
