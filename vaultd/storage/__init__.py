"""Everything vaultd keeps on disk for an index: the manifest database, the Chroma vector store
(`vectors`), the store's health probe (`probe`) and the data directory's lock (`lock`).

The manifest (`vaultd.db`, the source of truth) is `manifest.Manifest`, which every caller
uses; it calls, from the bottom up, `schema` (tables, version, migrations), then `quarantine`
(the crash-and-quarantine policy), `keyword` (BM25 and substring search) and `conditions`
(frontmatter conditions as SQL), none of which imports `manifest`. `view` is doctor's
read-only look at the file, beside the manifest rather than through it.

The only code that opens `vaultd.db` or the Chroma directory. Imports only the foundation.
"""
