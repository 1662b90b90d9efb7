//! Servers for the tests that need a real socket: the API served in-process from an [`Api`]'s
//! state, and `opsgraph serve` as a process of its own; both end when dropped. And the waits on
//! what they drive: an operation until its state, a resource until its status.

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use opsgraph_store::Store;
use serde_json::Value;

use crate::server::Api;
use crate::server_stream::http;
use crate::support::{opsgraph, Run};

/// The API of an [`Api`]'s state on a loopback port, served by a thread of this process. Dropped,
/// it stops the server and (unless the test already failed) asserts that it ended cleanly.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), opsgraph_server::Error>>>,
}

impl Server {
    pub(crate) fn start(api: &Api) -> Server {
        let listener = opsgraph_server::Listener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let state = api.state.clone();
        let thread = std::thread::spawn(move || listener.serve(state, Some(stopped)));
        Server { addr, stop: Some(stop), thread: Some(thread) }
    }

    /// `http://ADDR`, what `--server` and a browser are given.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Runs the CLI (in-process) as this server's client, with the token in `token_file`.
    pub(crate) fn opsgraph(&self, token_file: &Path, args: &[&str]) -> Run {
        let (url, token) = (self.url(), token_file.display().to_string());
        opsgraph(&[&["--server", url.as_str(), "--token-file", token.as_str()], args].concat())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.take().unwrap().send(());
        let result = self.thread.take().unwrap().join();
        if !std::thread::panicking() {
            result.unwrap().unwrap();
        }
    }
}

/// `opsgraph serve` as a process of its own, killed (and waited for) when dropped.
pub(crate) struct Process {
    pub(crate) child: Child,
    /// Where it serves the API (from its `serving the API on http://…` line).
    pub(crate) addr: SocketAddr,
    /// The admin token it printed before that line, when it made one.
    pub(crate) admin: Option<String>,
}

impl Process {
    /// Starts `command` (an `opsgraph … serve` on a loopback port) with its standard error in the
    /// file `log`, and reads its standard output up to the line with its address; standard output
    /// is read on after that, so that the server never writes into a closed pipe.
    pub(crate) fn start(command: &mut Command, log: &Path) -> Process {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("opsgraph serve starts");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut admin, mut addr) = (None, None);
        for line in lines.by_ref().map_while(Result::ok) {
            if line.starts_with("og_") {
                admin = Some(line);
            } else if let Some(rest) = line.strip_prefix("serving the API on http://") {
                addr = rest.split('/').next().and_then(|a| a.parse().ok());
                break;
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        let Some(addr) = addr else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("opsgraph serve did not start: {}", std::fs::read_to_string(log).unwrap_or_default());
        };
        Process { child, addr, admin }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The operation through the API, once its detail or state is `want` (within 30 s).
pub(crate) fn wait_for(addr: SocketAddr, id: &str, token: &str, want: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let op = http(addr, "GET", &format!("/api/v1/operations/{id}"), token, &[], "").json();
        if op["detail"] == want || op["state"] == want {
            return op;
        }
        assert!(Instant::now() < deadline, "never {want}: {op}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The operation in the store, once it is terminal (or `timeout` is up): its state and detail.
pub(crate) fn wait_terminal(store: &dyn Store, id: &str, timeout: Duration, every: Duration) -> (String, String) {
    let deadline = Instant::now() + timeout;
    loop {
        let op = store.operation(id).unwrap().unwrap();
        let v = opsgraph_api::views::operation_summary(&op);
        let state = opsgraph_core::plan::lifecycle::state_name(v.state).to_string();
        if matches!(state.as_str(), "completed" | "failed" | "cancelled") || Instant::now() > deadline {
            return (state, v.detail);
        }
        std::thread::sleep(every);
    }
}

/// `opsgraph describe resource ID -o json` on the data directory `data`: the document.
pub(crate) fn describe_resource(data: &str, id: &str) -> Value {
    let described = opsgraph(&["--data-dir", data, "describe", "resource", id, "-o", "json"]);
    assert_eq!(described.code, 0, "{}", described.render());
    serde_json::from_str(&described.out).unwrap_or_else(|e| panic!("{e}: {}", described.render()))
}

/// The resource's document once its status is `want`, polled every `every` for at most `limit`;
/// with how long that took.
pub(crate) fn status_within(data: &str, id: &str, want: &str, limit: Duration, every: Duration) -> (Duration, Value) {
    let start = Instant::now();
    loop {
        let r = describe_resource(data, id);
        if r["resource"]["status"] == want {
            return (start.elapsed(), r);
        }
        assert!(start.elapsed() < limit, "not {want} within {limit:?}: {r:#}");
        std::thread::sleep(every);
    }
}
