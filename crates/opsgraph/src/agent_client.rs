//! The agent's HTTP client (`opsgraph agent`): one pool of keep-alive connections to the
//! server, every call's answer as a typed value, retries with backoff, and the log chunks a job
//! streams (used by the claim loop, `agent_cmd`, and the runner's side thread, `agent_side`).

use std::time::Duration;

use opsgraph_exec::Cancel;
use serde_json::{json, Value};

/// One HTTP client for the agent's calls (clones share its keep-alive connections).
#[derive(Clone)]
pub(crate) struct Client {
    base: String,
    auth: String,
    http: ureq::Agent,
}

/// How a call ended.
pub(crate) enum Answer<T = Value> {
    Ok(T),
    /// The server answered with an error (status, code, message).
    Refused(u16, String, String),
    /// No answer (the server is down or restarting).
    Unreachable(String),
}

impl Client {
    pub(crate) fn new(base: &str, token: &str) -> Client {
        let http: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Client { base: base.trim_end_matches('/').to_string(), auth: format!("Bearer {token}"), http }
    }

    pub(crate) fn post(&self, path: &str, body: &Value) -> Answer {
        match self.post_as::<Value>(path, body) {
            Answer::Ok(Parsed::Typed(v) | Parsed::Tree(v)) => Answer::Ok(v),
            Answer::Refused(status, code, message) => Answer::Refused(status, code, message),
            Answer::Unreachable(why) => Answer::Unreachable(why),
        }
    }

    /// A call whose answer is read straight into `T` (no JSON tree first), or into a tree when it
    /// is not a `T` to this build (a server of another version): the caller reads that as before.
    pub(crate) fn post_as<T: serde::de::DeserializeOwned>(&self, path: &str, body: &Value) -> Answer<Parsed<T>> {
        let url = format!("{}{path}", self.base);
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let result = self
            .http
            .post(&url)
            .header("Authorization", &self.auth)
            .header("Content-Type", "application/json")
            .send(&bytes[..]);
        let mut resp = match result {
            Ok(r) => r,
            Err(e) => return Answer::Unreachable(e.to_string()),
        };
        let status = resp.status().as_u16();
        let text = match resp.body_mut().with_config().limit(64 << 20).read_to_string() {
            Ok(t) => t,
            Err(e) => return Answer::Unreachable(e.to_string()),
        };
        if (200..300).contains(&status) {
            if let Ok(typed) = serde_json::from_str::<T>(&text) {
                return Answer::Ok(Parsed::Typed(typed));
            }
        }
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if (200..300).contains(&status) {
            return Answer::Ok(Parsed::Tree(value));
        }
        let code = value["error"]["code"].as_str().unwrap_or("error").to_string();
        let message = value["error"]["message"].as_str().unwrap_or_default().to_string();
        // A proxy's or a restarting server's 5xx: try again.
        if status >= 500 {
            return Answer::Unreachable(format!("{status} {code}: {message}"));
        }
        Answer::Refused(status, code, message)
    }
}

/// A successful answer: read as the type asked for, or as a JSON tree.
pub(crate) enum Parsed<T> {
    Typed(T),
    Tree(Value),
}

/// Backoff between retries: 100 ms doubling to 5 s.
pub(crate) struct Backoff(Duration);

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff(Duration::from_millis(100))
    }
    pub(crate) fn sleep(&mut self) {
        std::thread::sleep(self.0);
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
    }
}

/// Sends a log chunk; retried while the server is unreachable (dropped when the lease is gone).
pub(crate) fn send_log(client: &Client, id: &str, lease: &str, text: String, cancel: &Cancel, patient: bool) {
    let body = json!({"task": id, "lease": lease, "text": text});
    let mut backoff = Backoff::new();
    for _ in 0..if patient { 50 } else { 3 } {
        match client.post("/api/v1/agent/log", &body) {
            Answer::Ok(_) => return,
            Answer::Refused(409, ..) => {
                cancel.cancel();
                return;
            }
            Answer::Refused(..) => return,
            Answer::Unreachable(_) => backoff.sleep(),
        }
    }
}
