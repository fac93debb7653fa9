"""The long-running daemon (`vaultd run`): its lifecycle and signals, the indexing worker,
live state, the CPU governor, the scheduler, systemd notification and memory upkeep.

Imports `api` and below; never `cli`.
"""
