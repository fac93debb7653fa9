"""Resident memory of vaultd processes and the size of its store over time."""
