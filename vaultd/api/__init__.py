"""The local API: the HTTP server on a Unix socket, its OpenAPI schema, the client and how a
client finds the right daemon (`locate`).

Imports `index` and below; never `daemon` or `cli`. The client and `locate` import only the
foundation, so a client starts without the model or the store.
"""
