//! Servers for the tests that need a real socket: the API served in-process from an [`Api`]'s
//! state, ended when dropped; and the wait on what it drives: an operation until its state.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

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
