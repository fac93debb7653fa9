"""Everything vaultd keeps on disk for an index: the manifest database (`manifest`, the source
of truth), the Chroma vector store (`vectors`), the store's health probe (`probe`) and the
data directory's lock (`lock`).

The only code that opens `vaultd.db` or the Chroma directory. Imports only the foundation.
"""
