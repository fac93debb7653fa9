"""`vaultd doctor`'s checks of the installation and the index, each saying how to fix what is
wrong: one module per concern, each check a function of exactly what it looks at, returning a
`report.Check` with its remedy; `checks` registers them in the order they are reported and
runs them (`diagnose`). Doctor looks and never repairs; `cli/doctor.py` only renders.

Beside `daemon/` and `ui/`, above `api/`: imports `api` and below (it asks a daemon over the
socket, or reads the index on disk), never `daemon`, `ui` or `cli`.
"""
