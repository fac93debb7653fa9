"""The OpenAPI 3.0 description of the socket API (served at /openapi.json)."""

from __future__ import annotations

from typing import Any

from vaultd import __version__
from vaultd.api.limits import MAX_BODY, MAX_TAGS
from vaultd.errors import LEFT_OUT_KINDS
from vaultd.query import (
    MAX_CONDITIONS,
    MAX_IN_VALUES,
    MAX_K,
    MAX_PER_NOTE,
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    MODES,
)

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}

_PASSAGE = {
    "type": "object",
    "required": ["start_line", "end_line", "section", "text"],
    "properties": {
        "start_line": {"type": "integer", "minimum": 1},
        "end_line": {"type": "integer", "minimum": 1},
        "section": {"type": "string"},
        "text": {"type": "string"},
    },
}

_RELATED = {
    "type": "object",
    "required": ["path", "related"],
    "properties": {
        "path": {"type": "string"},
        "related": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "title", "score", "similarity", "linked", "source", "target"],
                "properties": {
                    "path": {"type": "string"},
                    "title": {"type": "string"},
                    "score": {"type": "number", "description": "what ranks it, higher first"},
                    "similarity": {"type": "number", "description": "the tying pair's cosine"},
                    "linked": {"type": "boolean"},
                    "source": _PASSAGE,
                    "target": _PASSAGE,
                },
            },
        },
    },
}


_PATH_PARAM = {
    "name": "path",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "The vault-relative path, URL-encoded",
}

_MENTIONS = {
    "type": "object",
    "required": ["path", "mentions"],
    "properties": {
        "path": {"type": "string"},
        "mentions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "title", "start_line", "end_line", "text", "name"],
                "properties": {
                    "path": {"type": "string"},
                    "title": {"type": "string"},
                    "start_line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1},
                    "text": {"type": "string", "description": "the line, the name **marked**"},
                    "name": {"type": "string", "description": "the title or alias found"},
                },
            },
        },
    },
}

_OUTLINE = {
    "type": "object",
    "required": ["path", "headings"],
    "properties": {
        "path": {"type": "string"},
        "headings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["level", "text", "start_line", "end_line"],
                "properties": {
                    "level": {"type": "integer", "minimum": 1, "maximum": 6},
                    "text": {"type": "string"},
                    "start_line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1},
                },
            },
        },
    },
}

_TAGS = {
    "type": "object",
    "required": ["tags"],
    "properties": {
        "tags": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["tag", "notes"],
                "properties": {"tag": {"type": "string"}, "notes": {"type": "integer"}},
            },
        }
    },
}

_RECENT = {
    "type": "object",
    "required": ["notes"],
    "properties": {
        "notes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "title", "modified", "tags"],
                "properties": {
                    "path": {"type": "string"},
                    "title": {"type": "string"},
                    "modified": {"type": "string", "description": "UTC, ISO 8601"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
    },
}


def _query_param(name: str, kind: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": {"type": kind}, "description": description}


_HIT = {
    "type": "object",
    "required": ["path", "title", "section", "start_line", "end_line", "score", "tags"],
    "properties": {
        "path": {"type": "string"},
        "title": {"type": "string"},
        "section": {"type": "string"},
        "start_line": {"type": "integer", "minimum": 1},
        "end_line": {"type": "integer", "minimum": 1},
        "score": {"type": "number"},
        "text": {"type": "string", "description": "the passage (absent with snippets)"},
        "snippet": {
            "type": "string",
            "description": "with snippets: a short part of the passage, terms **marked**",
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "id": {"type": "string"},
        "indexed": {
            "type": "boolean",
            "description": "false while the note awaits its vectors (the first index): found by "
            "its words only, so far",
        },
        "explain": {
            "type": "object",
            "description": "Score parts: keyword (rank, BM25 score), vector (rank, cosine "
            "similarity), fusion (each retriever's RRF contribution, k, total), note (what the "
            "note adds in hybrid search: lead, its rank by its first passage and that term; "
            "second, a share of its second-best passage; length, its passages and the factor "
            "the score is multiplied by), phrase (exact match and its tier), merged (the chunk "
            "ids of a merged hit).",
            "properties": {
                "keyword": {"type": "object"},
                "vector": {"type": "object"},
                "fusion": {"type": "object"},
                "note": {"type": "object"},
                "phrase": {"type": "object"},
                "merged": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}

_SEARCH_REQUEST = {
    "type": "object",
    "required": ["query"],
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_QUERY_CHARS,
            "description": f"Not empty or only whitespace; at most {MAX_QUERY_CHARS} characters "
            f"and {MAX_QUERY_TERMS} keyword terms (distinct words other than stop words, quoted "
            "phrases, pairs of characters of text in scripts written without spaces); "
            "otherwise 400.",
        },
        "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 10},
        "mode": {"type": "string", "enum": list(MODES), "default": "hybrid"},
        "tags": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": MAX_TAGS,
            "description": "Only notes with all of these tags; nested tags match their parents.",
        },
        "tags_any": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": MAX_TAGS,
            "description": "Only notes with at least one of these tags.",
        },
        "path_prefix": {
            "type": "string",
            "description": "Only notes under this folder, or this one note's path: a vault "
            "path (400 when absolute or with a `..` component).",
        },
        "where": {
            "type": "object",
            "description": (
                "Frontmatter conditions, all of which must hold: a plain value means equality "
                '(strings case-insensitive); an object holds operators: "$eq", "$in" (a list), '
                '"$gt", "$gte", "$lt", "$lte" (a number or an ISO date). A list-valued field '
                'passes when any item does. Example: {"status": "done", "year": {"$gte": 2020}}.'
            ),
            "additionalProperties": {
                "oneOf": [
                    {"type": "string"},
                    {"type": "number"},
                    {"type": "boolean"},
                    {
                        "type": "object",
                        "properties": {
                            "$eq": {},
                            "$in": {"type": "array", "maxItems": MAX_IN_VALUES},
                            "$gt": {},
                            "$gte": {},
                            "$lt": {},
                            "$lte": {},
                        },
                        "additionalProperties": False,
                    },
                ],
            },
            "maxProperties": MAX_CONDITIONS,
        },
        "modified_since": {
            "oneOf": [{"type": "string"}, {"type": "number", "minimum": 0}],
            "description": "Only notes changed at or after this ISO date or time (local time "
            "when it has no offset) or epoch seconds.",
        },
        "per_note": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_PER_NOTE,
            "description": "At most this many hits from one note (0: no cap); default: "
            "[search] per_note.",
        },
        "merge": {
            "type": "boolean",
            "description": "Merge neighbouring passages of one note into one hit; default: "
            "[search] merge.",
        },
        "explain": {"type": "boolean", "description": "Add each hit's score parts."},
        "snippets": {
            "type": "boolean",
            "description": "Give each hit a short snippet with the query's terms marked "
            "**like this** (keyword and phrase matches, unspaced scripts included) instead of "
            "its whole text; the line range stays the passage's.",
        },
        "wait_for": {
            "type": "string",
            "minLength": 1,
            "description": 'A vault path, or "idle": answer once it is indexed (400 for a path '
            "out of the vault).",
        },
        "timeout": {"type": "number", "minimum": 0, "maximum": 60, "default": 10},
    },
}

#: A note set aside after failing `attempts` times on the same content (status "quarantined").
_QUARANTINED = {
    "type": "object",
    "required": ["path", "reason", "attempts", "since"],
    "properties": {
        "path": {"type": "string"},
        "reason": {"type": "string"},
        "attempts": {"type": "integer", "minimum": 1},
        "since": {"type": "number", "description": "When it was last tried (epoch seconds)"},
    },
}

_LEFT_OUT = {
    "type": "object",
    "description": "A file that is no note vaultd can index; not a failure",
    "required": ["path", "kind", "reason", "since"],
    "properties": {
        "path": {"type": "string"},
        "kind": {"type": "string", "enum": list(LEFT_OUT_KINDS)},
        "reason": {"type": "string"},
        "since": {"type": "number", "description": "when it was last found so (epoch seconds)"},
    },
}

_GOVERNOR = {
    "type": "object",
    "description": "How bulk work is paced",
    "properties": {
        "cpu_budget": {"type": "number"},
        "yield_above": {"type": "number"},
        "yielding": {"type": "boolean"},
        "waiting_for_busy_machine": {
            "type": "boolean",
            "description": "a full pass holds back while other programs keep the machine busy",
        },
        "busy_since": {"type": "number", "nullable": True},
        "others_share": {"type": "number", "nullable": True},
    },
}

_NULLABLE_NUMBER = {"type": "number", "nullable": True}

_FILE_ID = {
    "type": "object",
    "nullable": True,
    "required": ["device", "inode"],
    "properties": {"device": {"type": "integer"}, "inode": {"type": "integer"}},
}

_IDENTITY_CHECK = {
    "type": "object",
    "required": ["state", "reason", "expected", "found", "checked_at"],
    "properties": {
        "state": {
            "type": "string",
            "enum": [
                *("ok", "missing", "unreachable", "symlink"),
                *("not_directory", "unmounted", "replaced"),
            ],
        },
        "reason": {"type": "string", "nullable": True},
        "expected": _FILE_ID,
        "found": _FILE_ID,
        "checked_at": {"type": "number"},
    },
}

#: `GET /v1/status`: vaultd.index.status.DaemonStatus as JSON. Every key is described here and
#: no other is sent (a test holds the daemon's answers to this).
_STATUS = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "status",
        "reasons",
        "vault",
        "notes",
        "chunks",
        "queue_depth",
        "failed",
        "quarantined",
        "left_out",
        "lag_seconds",
        "model",
        "store",
        "version",
        "governor",
        "watch",
    ],
    "properties": {
        "status": {"type": "string", "enum": ["starting", "ok", "degraded"]},
        "reasons": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "why the daemon is degraded, by part",
        },
        "indexing": {"type": "string", "description": "what the worker has in hand"},
        "last_reconcile": {"type": "object", "nullable": True},
        "last_reconcile_at": _NULLABLE_NUMBER,
        "lag_seconds": {
            "type": "object",
            "description": "save-to-searchable lag of recent edits",
            "properties": {
                "p50": _NULLABLE_NUMBER,
                "p95": _NULLABLE_NUMBER,
                "samples": {"type": "integer"},
            },
        },
        "version": {"type": "string"},
        "vault": {"type": "string"},
        "notes": {"type": "integer", "description": "notes searchable (by their words at least)"},
        "chunks": {"type": "integer"},
        "found": {"type": "integer", "description": "note files found in the vault"},
        "embedded": {
            "type": "integer",
            "description": "notes fully indexed: every chunk has its vector",
        },
        "awaiting": {"type": "integer", "description": "chunks awaiting vectors"},
        "failed": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "reason", "attempts"],
                "properties": {
                    "path": {"type": "string"},
                    "reason": {"type": "string"},
                    "attempts": {"type": "integer", "minimum": 1},
                },
            },
        },
        "quarantined": {"type": "array", "items": _QUARANTINED},
        "left_out": {"type": "array", "items": _LEFT_OUT},
        "kinds": {"type": "object", "description": "files recorded by kind, then by status"},
        "not_indexed": {"type": "object", "description": "files of kinds not indexed, by kind"},
        "model": {"type": "string"},
        "languages": {
            "type": "object",
            "description": "what the vault is written in, from a sample of its notes measured "
            "when the index was last opened for indexing: letters, each script's share, the "
            "share of English, and a summary such as '80% Han, 20% Latin (not English)'",
            "properties": {
                "letters": {"type": "integer"},
                "shares": {"type": "object", "additionalProperties": {"type": "number"}},
                "english": {"type": "number"},
                "summary": {"type": "string"},
            },
        },
        "store": {
            "type": "object",
            "properties": {
                "data_dir": {"type": "string"},
                "chroma": {"type": "string", "description": "the Chroma directory or server"},
                "moved_aside": {"type": "object", "nullable": True},
                "loaded": {"type": "boolean"},
            },
        },
        "queue_depth": {"type": "integer"},
        "governor": _GOVERNOR,
        "progress": {
            "type": "object",
            "nullable": True,
            "description": "how far the full pass in hand has come, and the time left",
            "properties": {
                "phase": {"type": "string"},
                "done": {"type": "integer"},
                "total": {"type": "integer"},
                "unit": {"type": "string"},
                "percent": _NULLABLE_NUMBER,
                "elapsed_s": {"type": "number"},
                "eta_s": _NULLABLE_NUMBER,
            },
        },
        "watch": {
            "type": "object",
            "properties": {
                "mode": {"type": "string"},
                "fallback_reason": {"type": "string", "nullable": True},
            },
        },
        "embedded_total": {"type": "integer"},
        "notes_read_total": {"type": "integer"},
        "model_loaded": {"type": "boolean"},
        "rss_mb": _NULLABLE_NUMBER,
        "identity": {
            "type": "object",
            "description": "the last checks that the vault root and vaultd.db are still what "
            "the daemon took on (by 'vault_root' and 'manifest'); a state other than 'ok' "
            "degrades the daemon, and a lost vaultd.db stops it (exit 78)",
            "additionalProperties": _IDENTITY_CHECK,
        },
        "skipped": {
            "type": "array",
            "description": "files and folders left out that a user would want to hear about "
            "(a name that is not UTF-8, a link out of the vault...): the last full walk's and "
            "those the watcher met since",
            "items": {
                "type": "object",
                "required": ["path", "reason"],
                "properties": {"path": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
    },
}

_NOTE = {
    "type": "object",
    "required": ["path", "title", "aliases", "tags", "links", "backlinks", "chunks"],
    "properties": {
        "path": {"type": "string"},
        "title": {"type": "string"},
        "aliases": {"type": "array", "items": {"type": "string"}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "links": {"type": "array", "items": {"type": "object"}},
        "backlinks": {"type": "array", "items": {"type": "string"}},
        "frontmatter": {"type": "object"},
        "sha256": {"type": "string"},
        "status": {"type": "string", "enum": ["ok", "failed", "quarantined", "left_out"]},
        "error": {"type": "string", "nullable": True},
        "chunks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "index", "section", "start_line", "end_line", "text"],
                "properties": {
                    "id": {"type": "string"},
                    "index": {"type": "integer"},
                    "section": {"type": "string"},
                    "headings": {"type": "array", "items": {"type": "string"}},
                    "start_line": {"type": "integer"},
                    "end_line": {"type": "integer"},
                    "tokens": {"type": "integer"},
                    "text": {"type": "string"},
                },
            },
        },
    },
}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR_NAMES = {
    400: "Bad input: a malformed request (request line, an HTTP version other than 1.x, a "
    "Content-Length that is not one header of plain digits), a body that is not a JSON object, "
    "a field of the wrong type or out of range, or a path out of the vault",
    404: "Unknown note or route",
    405: "The route does not take this method; the Allow header lists those it takes",
    411: "Length required: a body sent chunked",
    422: "The note on disk cannot be parsed (binary, not UTF-8 text)",
    413: f"Body over {MAX_BODY} bytes",
    414: "Request line too long",
    431: "Header lines too long, or too many of them",
    503: "Not ready (starting), timed out (wait_for), a store error, or busy (too many requests)",
}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _json(_ERROR, _ERROR_NAMES[c]) for c in codes}


#: Any route answers these, whatever its operation: the request's framing is judged first.
_FRAMING = (400, 411, 413, 414, 431, 503)

_DESCRIPTION = (
    "The local API of the vaultd daemon, served on a Unix socket. Every error is "
    '{"error": {"code", "message"}}. A known route asked with a method it does not take '
    "(HEAD, OPTIONS, PUT, ...) answers 405 with an Allow header; an unknown route 404; a "
    "malformed request 400 (the connection is closed after it). 500 is only ever a bug."
)


def schema() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "vaultd",
            "version": __version__,
            "description": _DESCRIPTION,
        },
        "components": {
            "responses": {
                "MethodNotAllowed": {
                    **_json(_ERROR, _ERROR_NAMES[405]),
                    "headers": {
                        "Allow": {
                            "description": "The methods the route takes, e.g. `GET`",
                            "schema": {"type": "string"},
                        }
                    },
                }
            }
        },
        "paths": {
            "/v1/health": {
                "get": {
                    "summary": "Liveness and readiness",
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["status"],
                                "properties": {
                                    "status": {
                                        "type": "string",
                                        "enum": ["ok", "degraded", "starting"],
                                    },
                                    "reason": {"type": "string"},
                                    "version": {"type": "string"},
                                },
                            },
                            "The daemon's state",
                        ),
                        **_errors(*_FRAMING),
                    },
                }
            },
            "/v1/status": {
                "get": {
                    "summary": "Counts, queue, failures, freshness and where things are",
                    "responses": {
                        "200": _json(_STATUS, "Status"),
                        **_errors(*_FRAMING),
                    },
                }
            },
            "/v1/search": {
                "post": {
                    "summary": "Search the index",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _SEARCH_REQUEST}},
                    },
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "required": ["hits"],
                                "properties": {"hits": {"type": "array", "items": _HIT}},
                            },
                            "Ranked hits",
                        ),
                        **_errors(*_FRAMING),
                    },
                }
            },
            "/v1/notes/{path}": {
                "get": {
                    "summary": "One indexed note with its links, backlinks and chunks",
                    "parameters": [
                        {
                            "name": "path",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                            "description": "The vault-relative path, URL-encoded; 400 when "
                            "absolute or with a `..` component",
                        }
                    ],
                    "responses": {
                        "200": _json(_NOTE, "The note"),
                        **_errors(404, *_FRAMING),
                    },
                }
            },
            "/v1/notes/{path}/related": {
                "get": {
                    "summary": "The notes nearest this one by meaning, from the stored vectors",
                    "description": "Each related note comes with its score, whether the two "
                    "are linked already, and the pair of passages that ties them. 503 "
                    "not_ready while the note awaits its vectors.",
                    "parameters": [
                        {
                            "name": "path",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                            "description": "The vault-relative path, URL-encoded",
                        },
                        _query_param("k", "integer", "how many (default 10)"),
                        _query_param(
                            "how", "string", "fused (default), coverage, passages, centroid, words"
                        ),
                        _query_param(
                            "exclude_linked", "boolean", "leave out notes linked either way"
                        ),
                        _query_param("start_line", "integer", "only the passages from this line"),
                        _query_param("end_line", "integer", "only the passages to this line"),
                        _query_param("tag", "string", "related notes with this tag (repeatable)"),
                        _query_param("tag_any", "string", "with any of these tags (repeatable)"),
                        _query_param("path_prefix", "string", "under this folder"),
                        _query_param("modified_since", "string", "modified since (ISO date)"),
                    ],
                    "responses": {
                        "200": _json(_RELATED, "Related notes, nearest first"),
                        **_errors(404, *_FRAMING),
                    },
                }
            },
            "/v1/notes/{path}/mentions": {
                "get": {
                    "summary": "Unlinked mentions: passages naming this note without a link",
                    "description": "A note is named by its title, file name or an alias, as a "
                    "whole phrase; notes linking to it already are left out.",
                    "parameters": [
                        _PATH_PARAM,
                        _query_param("k", "integer", "at most this many (default 50)"),
                    ],
                    "responses": {
                        "200": _json(_MENTIONS, "Mentions, by path and line"),
                        **_errors(404, *_FRAMING),
                    },
                }
            },
            "/v1/notes/{path}/outline": {
                "get": {
                    "summary": "The note's headings, each with its section's line range",
                    "description": "Read from the note as it is on disk now.",
                    "parameters": [_PATH_PARAM],
                    "responses": {
                        "200": _json(_OUTLINE, "The headings, in order"),
                        **_errors(404, 422, *_FRAMING),
                    },
                }
            },
            "/v1/tags": {
                "get": {
                    "summary": "Every tag with how many notes hold it, most used first",
                    "description": "A nested tag's notes count for its parents too.",
                    "parameters": [
                        _query_param("prefix", "string", "only this tag and those below it")
                    ],
                    "responses": {"200": _json(_TAGS, "The tags"), **_errors(*_FRAMING)},
                }
            },
            "/v1/recent": {
                "get": {
                    "summary": "The notes modified most recently, newest first",
                    "parameters": [
                        _query_param("k", "integer", "how many (default 20, at most 500)"),
                        _query_param("since", "string", "modified since (ISO date, epoch s)"),
                    ],
                    "responses": {"200": _json(_RECENT, "The notes"), **_errors(*_FRAMING)},
                }
            },
            "/v1/reindex": {
                "post": {
                    "summary": "Queue notes, or the whole vault, for a fresh comparison",
                    "description": (
                        "Every note named (every note, without paths) is read and hashed, "
                        "whatever its size and times say. A quarantined note named in paths "
                        "gets one more try."
                    ),
                    "requestBody": {
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "properties": {
                                        "paths": {
                                            "type": "array",
                                            "items": {"type": "string", "minLength": 1},
                                        }
                                    },
                                }
                            }
                        }
                    },
                    "responses": {
                        "202": _json(
                            {
                                "type": "object",
                                "required": ["accepted"],
                                "properties": {"accepted": {"type": "boolean"}, "paths": {}},
                            },
                            "Queued",
                        ),
                        **_errors(*_FRAMING),
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This document",
                    "responses": {
                        "200": _json({"type": "object"}, "The OpenAPI document"),
                        **_errors(*_FRAMING),
                    },
                }
            },
        },
    }
