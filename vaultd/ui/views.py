"""What the page adds to the daemon's answers before they reach the browser: a hit's snippet
with its match ranges marked, a note's passages rendered as Obsidian shows them, the passage
that ties a related note or a mention cut at a sentence or a word.

The daemon's answers stay the API's (the CLI, scripts and MCP read them as they are); the
rendering is the page's alone, and it is done here, on the server, so that what reaches the
browser is already sanitized (vaultd.ui.render) and the page's script never parses Markdown.
Links resolve as the daemon resolved them: a note's own `links` say where each target goes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from vaultd.ui import render

#: How long a related note's or a mention's tying passage may be on the page.
TIE_CHARS = 220

_NOTE = re.compile(r"/v1/notes/(?P<path>.+?)(?P<part>/related|/mentions|/backlinks|/outline)?")


def enrich(method: str, route: str, data: Any) -> Any:
    """`data`, the daemon's JSON answer to `method route`, with what the page shows added."""
    if not isinstance(data, dict):
        return data
    if method == "POST" and route == "/v1/search":
        for hit in data.get("hits") or ():
            text = hit.get("snippet") if hit.get("snippet") is not None else hit.get("text", "")
            hit["snippet_html"] = render.snippet(text or "", hit.get("highlights") or ())
        return data
    found = _NOTE.fullmatch(route.split("?", 1)[0]) if method == "GET" else None
    if found is None:
        return data
    part = found.group("part")
    if part is None:
        resolve = resolver(data.get("links") or ())
        for chunk in data.get("chunks") or ():
            chunk["html"] = render.passage(chunk.get("text") or "", resolve)
            headings = chunk.get("headings") or ()
            if headings:
                # What a `[[#heading]]` link in the note points at: its section's passages.
                chunk["anchor"] = "heading-" + render.slug(str(headings[-1]))
    elif part == "/related":
        for note in data.get("related") or ():
            passage = note.get("target") or note.get("source") or {}
            note["tie"] = tie(passage.get("text") or "")
    elif part == "/mentions":
        for mention in data.get("mentions") or ():
            mention["tie"] = tie(mention.get("text") or "")
    return data


def tie(text: str) -> str:
    """A passage as a short plain line: its Markdown made plain, cut at a sentence or word."""
    shown, _ = render.plain(text)
    return render.cut(" ".join(shown.split()), TIE_CHARS)


def resolver(links: Any) -> Callable[[str], str | None]:
    """Where each link target of a note goes, as the daemon resolved it (`links[].path`)."""
    paths: dict[str, str] = {}
    for link in links:
        if isinstance(link, Mapping) and link.get("path") and link.get("target"):
            paths.setdefault(str(link["target"]), str(link["path"]))

    def resolve(target: str) -> str | None:
        for name in (target, unquote(target), target.split("#", 1)[0]):
            if name in paths:
                return paths[name]
            if name.endswith(".md") and name[:-3] in paths:
                return paths[name[:-3]]
        return None

    return resolve
