//! The accept loop: connections are admitted under `limits.connections` (in total) and
//! `limits.connections_per_peer` (per IP address) before anything reads them, and served by
//! hyper's HTTP/1.1 connection with `limits.header_read_timeout`. A connection beyond a limit is
//! closed at once, with a `503 too_many_connections` written only if the socket takes it without
//! waiting: it never gets a task that reads it, nor a handler thread.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;

use crate::{router, AppState, Error};

/// Who may connect now: the open connections, in total and per peer.
#[derive(Debug)]
pub(crate) struct Admission {
    total: usize,
    per_peer: usize,
    open: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// Why a connection was not admitted: the limit it hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    Total(usize),
    Peer(usize),
}

impl Full {
    fn message(self) -> String {
        match self {
            Full::Total(max) => {
                format!("{max} connections are open, the most limits.connections allows; try again later")
            }
            Full::Peer(max) => format!(
                "{max} connections from this address are open, the most limits.connections_per_peer allows; reuse one"
            ),
        }
    }

    fn limit(self) -> (&'static str, usize) {
        match self {
            Full::Total(max) => ("connections", max),
            Full::Peer(max) => ("connections_per_peer", max),
        }
    }
}

impl Admission {
    pub(crate) fn new(total: usize, per_peer: usize) -> Admission {
        Admission { total, per_peer, open: 0, by_peer: HashMap::new() }
    }

    /// Counts a new connection from `peer`, or says which limit it is beyond.
    pub(crate) fn admit(&mut self, peer: IpAddr) -> Result<(), Full> {
        let mine = self.by_peer.get(&peer).copied().unwrap_or(0);
        if mine >= self.per_peer {
            return Err(Full::Peer(self.per_peer));
        }
        if self.open >= self.total {
            return Err(Full::Total(self.total));
        }
        self.open += 1;
        *self.by_peer.entry(peer).or_insert(0) += 1;
        Ok(())
    }

    /// A connection from `peer` closed.
    pub(crate) fn release(&mut self, peer: IpAddr) {
        self.open = self.open.saturating_sub(1);
        if let Some(n) = self.by_peer.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.by_peer.remove(&peer);
            }
        }
    }
}

/// An admitted connection's place, given back when its task ends.
struct Ticket {
    admission: Arc<Mutex<Admission>>,
    peer: IpAddr,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.lock().unwrap_or_else(|e| e.into_inner()).release(self.peer);
    }
}

/// The most connections this process can hold: `limits.connections`, but at most half of its
/// open-file limit, so that store connections, files and event streams still find descriptors.
fn total_connections(configured: usize) -> usize {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, _)) => {
            let half = usize::try_from(soft / 2).unwrap_or(usize::MAX).max(1);
            configured.min(half)
        }
        Err(_) => configured,
    }
}

/// A bound listener: its address is known before it serves (port 0 picks one).
pub struct Listener {
    listener: std::net::TcpListener,
}

impl Listener {
    pub fn bind(addr: SocketAddr) -> Result<Listener, Error> {
        let listener = std::net::TcpListener::bind(addr).map_err(|source| Error::Bind { addr, source })?;
        listener.set_nonblocking(true).map_err(|source| Error::Bind { addr, source })?;
        Ok(Listener { listener })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves the API until the process ends (or `shutdown` resolves), on a tokio runtime of its
    /// own; blocks the calling thread. At shutdown, event streams end, requests in progress are
    /// answered, and then it returns.
    pub fn serve(self, state: AppState, shutdown: Option<tokio::sync::oneshot::Receiver<()>>) -> Result<(), Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(Error::Runtime)?;
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(self.listener).map_err(Error::Serve)?;
            accept(listener, state, shutdown).await;
            Ok(())
        })
    }
}

async fn accept(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: Option<tokio::sync::oneshot::Receiver<()>>,
) {
    let limits = state.0.limits.clone();
    let total = total_connections(limits.connections);
    tracing::info!(
        connections = total,
        per_peer = limits.connections_per_peer,
        header_read_timeout_ms = limits.header_read_timeout.as_millis() as u64,
        "accepting connections"
    );
    let admission = Arc::new(Mutex::new(Admission::new(total, limits.connections_per_peer)));
    let service = TowerToHyperService::new(router(state.clone()));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).keep_alive(true);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let shutdown = async move {
        match shutdown {
            Some(rx) => {
                let _ = rx.await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors (EMFILE, ENFILE) or a connection gone before it was
                // accepted: the loop goes on, after a pause when the process is short of files.
                tracing::warn!(error = %e, "failed to accept a connection");
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::Interrupted
                ) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                continue;
            }
        };
        let peer = peer.ip().to_canonical();
        let admitted = admission.lock().unwrap_or_else(|e| e.into_inner()).admit(peer);
        if let Err(full) = admitted {
            refuse(&stream, full);
            state.0.refused.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let ticket = Ticket { admission: admission.clone(), peer };
        let _ = stream.set_nodelay(true);
        let connection = http.serve_connection(TokioIo::new(stream), service.clone());
        let mut stopping = stopping.clone();
        connections.spawn(async move {
            let _ticket = ticket;
            tokio::pin!(connection);
            let result = tokio::select! {
                result = connection.as_mut() => result,
                _ = stopping.changed() => {
                    // Answers what is in progress, then closes.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(peer = %peer, error = %e, "connection ended with an error");
            }
        });
    }
    // Open event streams end, so that their connections close.
    state.0.closing.store(true, Ordering::SeqCst);
    let _ = stop.send(true);
    while connections.join_next().await.is_some() {}
}

/// Closes a connection beyond a limit: a 503 naming the limit if the socket takes it at once
/// (the request is not read), then the end.
fn refuse(stream: &tokio::net::TcpStream, full: Full) {
    let (limit, max) = full.limit();
    let body = serde_json::json!({"error": {
        "code": "too_many_connections",
        "message": full.message(),
        "details": {"limit": limit, "max": max},
    }})
    .to_string();
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};

    use super::Admission;

    /// Connections opened (`+ip`) and closed (`-ip`) in order, under `total` and `per_peer`:
    /// what each opening got.
    fn check(total: usize, per_peer: usize, steps: &str, expect: Expect) {
        let mut admission = Admission::new(total, per_peer);
        let mut out = Vec::new();
        for step in steps.split_whitespace() {
            let (op, ip) = step.split_at(1);
            let ip = ip.parse().unwrap();
            match op {
                "+" => out.push(match admission.admit(ip) {
                    Ok(()) => format!("{step} ok"),
                    Err(full) => format!("{step} {full:?}"),
                }),
                _ => admission.release(ip),
            }
        }
        expect.assert_eq(&out.join("\n"));
    }

    #[test]
    fn connections_are_admitted_per_peer_and_in_total() {
        check(
            3,
            2,
            "+10.0.0.1 +10.0.0.1 +10.0.0.1 +10.0.0.2 +10.0.0.3 -10.0.0.1 +10.0.0.3 +10.0.0.1 -10.0.0.2 +10.0.0.1",
            expect![[r#"
                +10.0.0.1 ok
                +10.0.0.1 ok
                +10.0.0.1 Peer(2)
                +10.0.0.2 ok
                +10.0.0.3 Total(3)
                +10.0.0.3 ok
                +10.0.0.1 Total(3)
                +10.0.0.1 ok"#]],
        );
        // A peer's count is given back whole: after closing all, it may open its share again.
        check(
            10,
            1,
            "+::1 +::1 -::1 +::1 +127.0.0.1",
            expect![[r#"
                +::1 ok
                +::1 Peer(1)
                +::1 ok
                +127.0.0.1 ok"#]],
        );
    }
}
