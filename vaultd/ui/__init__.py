"""`vaultd ui`: a page in the browser over a vault's running daemon (search as you type, a note
with its connections, the daemon's health live), served on 127.0.0.1 by a light client that
opens no index.

Beside `daemon/`, above `api/`: imports `api` and below, never `daemon` or `cli`. The page's
assets (`static/`) ship in the package: no build step, nothing vendored.
"""
