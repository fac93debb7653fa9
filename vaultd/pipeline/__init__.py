"""The pure indexing stages: discover, detect, parse, chunk and watch.

Each stage turns files or frozen records (`vaultd.records`) into other frozen records. A stage
imports only the foundation (`errors`, `records`, `config`); stages never import one another,
and nothing here touches the model or the store: `vaultd.index` is where they meet.
"""
