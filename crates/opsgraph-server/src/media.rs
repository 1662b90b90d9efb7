//! The media types the API answers with, and the web UI's content security policy.

/// The media type of most routes.
pub const JSON: &str = "application/json";
/// Server-sent events: the handler answers with a stream that a blocking thread feeds.
pub const EVENT_STREAM: &str = "text/event-stream";
/// Bytes as stored (artifacts).
pub const OCTETS: &str = "application/octet-stream";
/// The web UI's page.
pub const HTML: &str = "text/html; charset=utf-8";
/// The Prometheus text exposition format 0.0.4.
pub const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Only this origin's files: no inline script or style, no other origin to talk to.
pub(crate) const CSP: &str = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";
