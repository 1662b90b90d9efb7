//! A small HTTP/1.1 client over `TcpStream`: one request per connection, `http://` only (no TLS),
//! no redirects, no proxies. Enough for health endpoints, webhooks and evidence.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::capture::Capture;
use crate::duration::format_duration;
use crate::spec::CANCEL_POLL;
use crate::{Cancel, Error, Executor, Outcome, Output, Program, Run, Spec};

/// Connecting gives up after this long when the run has no timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Status line and headers may not be longer than this.
const MAX_HEAD: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Path and query, as sent.
    pub(crate) target: String,
    /// `Host:` header value.
    pub(crate) authority: String,
}

pub(crate) fn parse_url(url: &str) -> Result<Url, Error> {
    let error = |reason| Error::InvalidUrl { url: url.to_owned(), reason };
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(error(if url.starts_with("https://") {
            "https is not supported: this client has no TLS"
        } else {
            "expected http://host[:port]/path"
        }));
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let (authority, target) = match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
        Some(i) => (&rest[..i], rest[i..].to_owned()),
        None => (rest, "/".to_owned()),
    };
    if authority.contains('@') {
        return Err(error("credentials in urls are not supported"));
    }
    if target.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(error("the path holds spaces or control characters"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| error("unclosed `[` in the host"))?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(|| error("expected `:port` after `]`"))?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(error("the host is empty"));
    }
    let port = match port {
        None => 80,
        Some(p) => p.parse().map_err(|_| error("the port is not a number from 1 to 65535"))?,
    };
    Ok(Url { host: host.to_owned(), port, target, authority: authority.to_owned() })
}

pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    pub(crate) truncated: bool,
}

/// Why no complete response came back.
pub(crate) enum Failure {
    /// Nothing was sent: the name did not resolve or nobody accepted the connection.
    Connect(String),
    TimedOut,
    Cancelled,
    /// The request was sent (in part or whole) but the response did not arrive whole.
    Lost(String),
}

/// One request, reading the whole response (the body capped at `body_cap`, head and tail).
pub(crate) fn request(
    method: &str,
    url: &Url,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Option<Duration>,
    body_cap: usize,
    cancel: &Cancel,
) -> Result<Response, Failure> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let left = |d: Option<Instant>| d.map(|d| d.saturating_duration_since(Instant::now()));
    if cancel.is_cancelled() {
        return Err(Failure::Cancelled);
    }
    let addrs: Vec<SocketAddr> = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| Failure::Connect(format!("failed to resolve {}: {e}", url.host)))?
        .collect();
    let mut stream = None;
    let mut last_error = format!("{} resolved to no address", url.host);
    for addr in addrs {
        let budget = left(deadline).unwrap_or(CONNECT_TIMEOUT).min(CONNECT_TIMEOUT);
        if budget.is_zero() {
            return Err(Failure::TimedOut);
        }
        match TcpStream::connect_timeout(&addr, budget) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut && left(deadline).is_some_and(|l| l.is_zero()) => {
                return Err(Failure::TimedOut)
            }
            Err(e) => last_error = format!("failed to connect to {addr}: {e}"),
        }
    }
    let mut stream = stream.ok_or(Failure::Connect(last_error))?;
    let _ = stream.set_nodelay(true);

    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: opsgraph\r\nConnection: close\r\n",
        url.target, url.authority
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || !matches!(method, "GET" | "HEAD" | "DELETE" | "OPTIONS") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let _ = stream.set_write_timeout(Some(left(deadline).unwrap_or(CONNECT_TIMEOUT).max(Duration::from_millis(1))));
    stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body)).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Failure::TimedOut,
        _ => Failure::Lost(format!("failed to send the request: {e}")),
    })?;

    // Read until the response is complete, the server closes, the deadline or a cancel.
    let mut raw = Vec::new();
    let mut parsed: Option<Head> = None;
    let mut buf = vec![0u8; 32 * 1024];
    let max_raw = body_cap.saturating_mul(2).saturating_add(MAX_HEAD).max(1 << 20);
    let mut truncated = false;
    loop {
        if let Some(h) = &parsed {
            if h.complete(&raw[h.len..], method) {
                break;
            }
        }
        if raw.len() > max_raw {
            truncated = true;
            break;
        }
        if cancel.is_cancelled() {
            return Err(Failure::Cancelled);
        }
        let slice = match left(deadline) {
            Some(l) if l.is_zero() => return Err(Failure::TimedOut),
            Some(l) => l.min(CANCEL_POLL),
            None => CANCEL_POLL,
        };
        let _ = stream.set_read_timeout(Some(slice));
        match stream.read(&mut buf) {
            Ok(0) => {
                if parsed.as_ref().is_some_and(|h| h.ends_at_close()) {
                    break;
                }
                return Err(Failure::Lost(
                    "the server closed the connection before the response was complete".to_owned(),
                ));
            }
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if parsed.is_none() {
                    parsed = parse_head(&raw).map_err(Failure::Lost)?;
                    if parsed.is_none() && raw.len() > MAX_HEAD {
                        return Err(Failure::Lost("the response head is longer than 64 KiB".to_owned()));
                    }
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(Failure::Lost(format!("failed to read the response: {e}"))),
        }
    }
    let head = parsed.ok_or_else(|| Failure::Lost("no response".to_owned()))?;
    let payload = &raw[head.len..];
    let body = if head.chunked {
        match dechunk(payload) {
            Some(body) => body,
            None if truncated => payload.to_vec(),
            None => return Err(Failure::Lost("the chunked body is malformed".to_owned())),
        }
    } else {
        match head.content_length {
            Some(n) => payload[..payload.len().min(n)].to_vec(),
            None => payload.to_vec(),
        }
    };
    let mut capture = Capture::new(body_cap);
    capture.push(&body);
    Ok(Response { status: head.status, body: capture.bytes(), truncated: truncated || capture.truncated() })
}

struct Head {
    status: u16,
    /// Bytes of status line and headers, with the blank line.
    len: usize,
    content_length: Option<usize>,
    chunked: bool,
}

impl Head {
    fn no_body(&self, method: &str) -> bool {
        method == "HEAD" || self.status == 204 || self.status == 304 || (100..200).contains(&self.status)
    }

    fn complete(&self, payload: &[u8], method: &str) -> bool {
        if self.no_body(method) {
            return true;
        }
        if self.chunked {
            return dechunk(payload).is_some();
        }
        self.content_length.is_some_and(|n| payload.len() >= n)
    }

    fn ends_at_close(&self) -> bool {
        !self.chunked && self.content_length.is_none()
    }
}

/// The head, once the blank line after the headers arrived.
fn parse_head(raw: &[u8]) -> Result<Option<Head>, String> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&raw[..end]);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let status = parts.next().and_then(|s| s.parse::<u16>().ok());
    let (true, Some(status)) = (version.starts_with("HTTP/1."), status) else {
        return Err(format!("not an http/1.x response: `{status_line}`"));
    };
    let mut head = Head { status, len: end + 4, content_length: None, chunked: false };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            head.content_length = Some(value.parse().map_err(|_| format!("bad content-length `{value}`"))?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            head.chunked = value.to_ascii_lowercase().split(',').any(|v| v.trim() == "chunked");
        }
    }
    Ok(Some(head))
}

/// The body of a complete chunked payload; `None` while it is incomplete or malformed.
fn dechunk(mut payload: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = payload.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&payload[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        payload = &payload[line_end + 2..];
        if size == 0 {
            // Trailers end with a blank line; most servers send none.
            return payload.windows(2).position(|w| w == b"\r\n").map(|_| body);
        }
        if payload.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&payload[..size]);
        payload = &payload[size + 2..];
    }
}

/// Sends one HTTP request ([`Program::Http`]): 2xx is `Exited { code: 0 }`, any other status
/// [`Outcome::HttpStatus`]; the body is the run's stdout and `http_status` the status. An
/// unreachable server could not start; a response cut off is lost. `env` and `workdir` do not
/// apply; redirects are not followed.
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpExecutor;

impl Executor for HttpExecutor {
    fn run(&self, spec: &Spec, cancel: &Cancel) -> Run {
        let Program::Http { method, url, headers, body } = &spec.program else {
            return Run::could_not_start("the http executor sends http requests, it does not run programs");
        };
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase() || b == b'-') {
            return Run::could_not_start(format!("invalid http method `{method}`"));
        }
        let bad_header = headers.iter().find(|(name, value)| {
            name.is_empty()
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b))
                || value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
        });
        if let Some((name, _)) = bad_header {
            return Run::could_not_start(format!("invalid http header `{name}`"));
        }
        let url = match parse_url(url) {
            Ok(url) => url,
            Err(e) => return Run::could_not_start(e.to_string()),
        };
        let start = Instant::now();
        let result = request(method, &url, headers, body, spec.timeout, spec.output_cap, cancel);
        let mut output = Output { duration: start.elapsed(), ..Output::default() };
        let (outcome, http_status) = match result {
            Ok(response) => {
                output.stdout = response.body;
                output.truncated = response.truncated;
                let outcome = if (200..300).contains(&response.status) {
                    Outcome::Exited { code: 0 }
                } else {
                    Outcome::HttpStatus { status: response.status }
                };
                (outcome, Some(response.status))
            }
            Err(Failure::Connect(error)) => (Outcome::CouldNotStart { error }, None),
            Err(Failure::TimedOut) => {
                (Outcome::TimedOut { after: spec.timeout.unwrap_or(CONNECT_TIMEOUT), killed: false }, None)
            }
            Err(Failure::Cancelled) => (Outcome::Cancelled, None),
            Err(Failure::Lost(reason)) => (Outcome::Lost { reason }, None),
        };
        Run { outcome, output, http_status, leaked: false, remote_stop: None }
    }
}

impl Failure {
    /// For evidence: what was observed instead of a response.
    pub(crate) fn observed(&self, timeout: Duration) -> String {
        match self {
            Failure::Connect(e) => e.clone(),
            Failure::TimedOut => format!("no response within {}", format_duration(timeout)),
            Failure::Cancelled => "cancelled".to_owned(),
            Failure::Lost(reason) => reason.clone(),
        }
    }
}
