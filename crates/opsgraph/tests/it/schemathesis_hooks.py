"""Schemathesis hooks for tests/it/schemathesis.rs: a pack archive (`application/gzip`, binary) is
sent as the bytes generated for it, as `application/octet-stream` bodies are."""

import schemathesis

schemathesis.serializer.alias("application/gzip", "application/octet-stream")
