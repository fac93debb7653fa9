"""vaultd keeps an Obsidian vault indexed for retrieval, continuously and locally."""

__version__ = "0.1.0"
