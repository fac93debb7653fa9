"""An open index and the work done on it: the indexer (the one place the stages meet), the
store writer, search, link resolution, export and `inspect`'s preview; `open` is the
composition root that builds one and closes it in order.

Imports the foundation, `embedding`, `pipeline` and `storage`; never `api`, `daemon` or `cli`.
"""
