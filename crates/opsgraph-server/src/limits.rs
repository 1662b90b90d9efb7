//! The server's documented limits (docs/api.md#limits) and the `limits:` section of
//! `DATA_DIR/config.yaml` that sets them. Each is enforced with an answer that names it.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::auth::{config_value, load_config, ConfigError};

/// Documented limits, enforced with 413, 422, 429 or 503 naming the limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// `limits.body_bytes`: the largest request body.
    pub body_bytes: usize,
    /// `limits.idempotency_key_bytes`: the longest `Idempotency-Key`.
    pub idempotency_key_bytes: usize,
    /// `limits.event_streams`: server-sent event streams open at once (each holds a blocking
    /// thread and a store connection).
    pub event_streams: usize,
    /// `limits.event_streams_per_identity`: event streams one identity (its actor, `user:NAME`)
    /// holds at once, so one viewer cannot take every slot.
    pub event_streams_per_identity: usize,
    /// `limits.archive_bytes`: the largest pack archive (`POST /api/v1/packs`), the registry's
    /// limit on the files of one pack.
    pub archive_bytes: usize,
    /// `limits.event_stream_duration`: how long one server-sent event stream stays open. Then
    /// the server ends it cleanly (an `event: reconnect` naming the last id sent, then the end
    /// of the body) and the client reconnects with `Last-Event-ID`; a stream's thread and store
    /// connection are never held for good by a client that never goes away.
    pub event_stream_duration: Duration,
    /// `limits.agent_report_bytes`: the largest agent report (`POST /api/v1/agent/report`),
    /// which carries the job's produced artifacts.
    pub agent_report_bytes: usize,
    /// `limits.header_read_timeout`: a request's head (request line and headers) arrives whole
    /// within this of the connection opening or of its previous response ending, or the
    /// connection is closed. So half-sent headers are dropped, and an idle keep-alive
    /// connection is closed after this long without a new request.
    pub header_read_timeout: Duration,
    /// `limits.connections`: connections open at once, in total. The server uses at most half
    /// of its open-file limit (`RLIMIT_NOFILE`) for them, whatever this says.
    pub connections: usize,
    /// `limits.connections_per_peer`: connections open at once from one IP address.
    pub connections_per_peer: usize,
    /// `limits.ai_requests_per_hour`: questions to the AI analyzer in the last hour, from
    /// everyone together (`ai_budget.rs`): each sends context off the machine and costs money.
    pub ai_requests_per_hour: usize,
    /// `limits.ai_requests_per_identity_per_hour`: questions one identity asks the AI analyzer
    /// in the last hour, so one client in a loop cannot take everyone's share.
    pub ai_requests_per_identity_per_hour: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            body_bytes: 1 << 20,
            idempotency_key_bytes: 255,
            event_streams: 64,
            event_streams_per_identity: 8,
            archive_bytes: 16 << 20,
            event_stream_duration: Duration::from_secs(600),
            agent_report_bytes: 16 << 20,
            header_read_timeout: Duration::from_secs(10),
            connections: 1024,
            connections_per_peer: 64,
            ai_requests_per_hour: 120,
            ai_requests_per_identity_per_hour: 30,
        }
    }
}

/// The keys of `limits:`, and whether each is a duration (seconds) or a count.
const KEYS: &[(&str, Kind)] = &[
    ("body_bytes", Kind::Count),
    ("idempotency_key_bytes", Kind::Count),
    ("event_streams", Kind::Count),
    ("event_streams_per_identity", Kind::Count),
    ("archive_bytes", Kind::Count),
    ("event_stream_duration", Kind::Seconds),
    ("agent_report_bytes", Kind::Count),
    ("header_read_timeout", Kind::Seconds),
    ("connections", Kind::Count),
    ("connections_per_peer", Kind::Count),
    ("ai_requests_per_hour", Kind::Count),
    ("ai_requests_per_identity_per_hour", Kind::Count),
];

#[derive(Clone, Copy)]
enum Kind {
    Count,
    Seconds,
}

impl Limits {
    /// The `limits:` of `DIR/config.yaml` over the defaults; a missing file or section is the
    /// defaults.
    pub fn load(data_dir: &Path) -> Result<Limits, ConfigError> {
        load_config(data_dir, Limits::parse)
    }

    /// Every key is checked: an unknown one, a count that is not a whole number above 0, or a
    /// duration that is not a number of seconds above 0 is refused, naming the key.
    pub fn parse(path: &str, text: &str) -> Result<Limits, ConfigError> {
        let value = config_value(path, text)?;
        let invalid = |message: String| ConfigError::Invalid { path: path.to_string(), message };
        let mut limits = Limits::default();
        let section = match &value["limits"] {
            Value::Null => return Ok(limits),
            Value::Object(section) => section,
            other => return Err(invalid(format!("`limits` must map limit names to values, not {other}"))),
        };
        for (key, v) in section {
            let Some((name, kind)) = KEYS.iter().find(|(k, _)| k == key) else {
                let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
                return Err(invalid(format!("unknown limit `limits.{key}`; expected one of {}", known.join(", "))));
            };
            match kind {
                Kind::Count => {
                    let n =
                        v.as_u64().filter(|n| *n > 0).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| {
                            invalid(format!("`limits.{name}` must be a whole number above 0, not {v}"))
                        })?;
                    *limits.count(name) = n;
                }
                Kind::Seconds => {
                    let secs = v.as_f64().filter(|s| s.is_finite() && *s > 0.0 && *s <= 1e9).ok_or_else(|| {
                        invalid(format!("`limits.{name}` must be a number of seconds above 0, not {v}"))
                    })?;
                    *limits.seconds(name) = Duration::from_secs_f64(secs);
                }
            }
        }
        Ok(limits)
    }

    fn count(&mut self, name: &str) -> &mut usize {
        match name {
            "body_bytes" => &mut self.body_bytes,
            "idempotency_key_bytes" => &mut self.idempotency_key_bytes,
            "event_streams" => &mut self.event_streams,
            "event_streams_per_identity" => &mut self.event_streams_per_identity,
            "archive_bytes" => &mut self.archive_bytes,
            "agent_report_bytes" => &mut self.agent_report_bytes,
            "connections" => &mut self.connections,
            "connections_per_peer" => &mut self.connections_per_peer,
            "ai_requests_per_hour" => &mut self.ai_requests_per_hour,
            "ai_requests_per_identity_per_hour" => &mut self.ai_requests_per_identity_per_hour,
            other => unreachable!("`{other}` is listed in KEYS as a count"),
        }
    }

    fn seconds(&mut self, name: &str) -> &mut Duration {
        match name {
            "event_stream_duration" => &mut self.event_stream_duration,
            "header_read_timeout" => &mut self.header_read_timeout,
            other => unreachable!("`{other}` is listed in KEYS as a duration"),
        }
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{expect, Expect};

    use super::Limits;

    /// The limits a `config.yaml` gives, as the fields that differ from the defaults, or the
    /// refusal.
    fn check(yaml: &str, expect: Expect) {
        let got = match Limits::parse("config.yaml", yaml) {
            Ok(limits) => {
                let (got, default) = (format!("{limits:#?}"), format!("{:#?}", Limits::default()));
                let changed: Vec<&str> =
                    got.lines().filter(|l| !default.lines().any(|d| d == *l)).map(str::trim).collect();
                changed.join("\n")
            }
            Err(e) => format!("error: {e}"),
        };
        expect.assert_eq(&got);
    }

    #[test]
    fn limits_come_from_config_yaml() {
        check("roles: {scraper: [metrics]}\n", expect![""]);
        check(
            "limits:\n  event_streams: 10\n  event_streams_per_identity: 2\n  header_read_timeout: 0.5\n  connections_per_peer: 3\n",
            expect![[r#"
                    event_streams: 10,
                    event_streams_per_identity: 2,
                    header_read_timeout: 500ms,
                    connections_per_peer: 3,"#]],
        );
        check("limits:\n  event_stream_duration: 30\n", expect!["event_stream_duration: 30s,"]);
        check(
            "limits: {streams: 3}\n",
            expect!["error: config.yaml: unknown limit `limits.streams`; expected one of body_bytes, idempotency_key_bytes, event_streams, event_streams_per_identity, archive_bytes, event_stream_duration, agent_report_bytes, header_read_timeout, connections, connections_per_peer, ai_requests_per_hour, ai_requests_per_identity_per_hour"],
        );
        check(
            "limits: {connections: 0}\n",
            expect!["error: config.yaml: `limits.connections` must be a whole number above 0, not 0"],
        );
        check(
            "limits: {connections_per_peer: 2.5}\n",
            expect!["error: config.yaml: `limits.connections_per_peer` must be a whole number above 0, not 2.5"],
        );
        check(
            "limits: {header_read_timeout: soon}\n",
            expect![[
                r#"error: config.yaml: `limits.header_read_timeout` must be a number of seconds above 0, not "soon""#
            ]],
        );
        check("limits: [1]\n", expect!["error: config.yaml: `limits` must map limit names to values, not [1]"]);
    }
}
