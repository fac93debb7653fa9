"""What one request to the socket API may ask for: the server enforces these caps and the
OpenAPI schema states them, so both read them here."""

from __future__ import annotations

#: The largest request body read, in bytes.
MAX_BODY = 1024 * 1024
#: The longest a search waits for `wait_for`, in seconds; a client wanting longer asks again.
MAX_WAIT = 60.0
#: Tag filters per search; each one is a sub-query, and SQLite's expression depth is finite.
MAX_TAGS = 64
