"""Everything vaultd keeps on disk for an index: the manifest database, the Chroma vector store
(`vectors`), the store's health probe (`probe`) and the data directory's lock (`lock`).

The manifest (`vaultd.db`, the source of truth) is `manifest.Manifest`, which every caller
uses: a unit of work over the file (`connection`) with one controller per concern, each in the
module owning its tables (`manifest.notes` in `notes`, `.links`, `.filters`, `.vectors` in
`embeddings`, `.keyword`, `.failures` in `quarantine`), over `schema` (tables, version,
migrations) and `conditions` (frontmatter conditions as SQL); none imports `manifest`. `view`
is doctor's read-only look at the file, beside the manifest rather than through it.

The only code that opens `vaultd.db` or the Chroma directory. Imports only the foundation.
"""
