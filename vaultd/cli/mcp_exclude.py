"""`[mcp] exclude`: the files AI tools are not given, kept out of every answer `vaultd mcp` makes.

A screenshot's OCR text can hold a token; a folder can hold a diary. The user still searches
them (`vaultd search`, the page), but an assistant is never told they exist. The rules are
applied in the one place every MCP tool's answer passes through (`vaultd.cli.mcp_bridge.
Bridge.run`), with a daemon or without, so no tool can get round them:

- a tool asked about an excluded note (read it, its links, related notes, backlinks,
  mentions, outline) answers as for a note that is not indexed, before anything is asked;
- every note an answer names (a hit, a related note, a backlink, a mention, a link's target,
  a recent note) is dropped when excluded, and `tags` drops the tags named in the rules;
- a search's corrections are not told (a corrected word may be one only excluded notes hold).

The rules are vaultd.index.exclusion's. A tag or kind rule needs the note's
tags and kind: a hit carries them, any other note is looked up (once per call); a note that
cannot be looked up is treated as excluded, so an answer errs on the side of saying less.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vaultd.index.exclusion import Exclusion

#: (tags, kind) of an indexed note, or None when it cannot be told.
Lookup = Callable[[str], tuple[Sequence[str], str] | None]


class Screen:
    """One tool call's view of the rules: each note looked up at most once."""

    def __init__(self, exclusion: Exclusion, lookup: Lookup) -> None:
        self.exclusion = exclusion
        self._lookup = lookup
        self._known: dict[str, bool] = {}

    def excluded(
        self, path: str, tags: Sequence[str] | None = None, kind: str | None = None
    ) -> bool:
        """Whether the note at `path` is kept from AI tools (`tags` and `kind` when the
        answer gave them, else looked up when a rule needs them)."""
        rules = self.exclusion
        if rules.excludes(path, tags or (), kind):
            return True
        if not rules.by_note or (tags is not None and kind is not None):
            return False
        if path not in self._known:
            found = self._lookup(path)
            self._known[path] = found is None or rules.excludes(path, *found)
        return self._known[path]

    def answer(self, operation: str, found: dict[str, Any]) -> dict[str, Any]:
        """`found`, the answer to `operation`, without what names an excluded note."""
        out = dict(found)
        if operation == "search":
            out["hits"] = [
                hit
                for hit in found.get("hits", [])
                if not self.excluded(hit["path"], hit.get("tags", []), hit.get("kind"))
            ]
            # A correction is a word of the vault, which excluded notes alone may hold (a
            # token's neighbour, a secret plan's name): an assistant is told no correction.
            # Its hits are still those of the corrected search, screened like any others.
            for key, empty in (("corrections", []), ("showing", None), ("did_you_mean", None)):
                if key in out:
                    out[key] = empty
        for key in ("related", "mentions", "backlinks", "notes"):
            items = found.get(key)
            if operation != "note" and isinstance(items, list):
                out[key] = [item for item in items if not self.excluded(item["path"])]
        if operation == "note":
            # A note's links: a target excluded is left out, as are backlinks from one.
            out["links"] = [
                link
                for link in found.get("links", [])
                if not (isinstance(link, dict) and link.get("path") and self.excluded(link["path"]))
            ]
            out["backlinks"] = [p for p in found.get("backlinks", []) if not self.excluded(p)]
        if operation == "tags":
            out["tags"] = [
                t for t in found.get("tags", []) if not self.exclusion.tag_excluded(t["tag"])
            ]
        return out
