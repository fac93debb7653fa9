"""`[mcp] exclude`'s rules: which files AI tools and `vaultd export` are not given.

A rule is a glob (gitignore-style, from the vault root: `Private/**`), a `#tag` (the tag and
the tags nested in it) or a `kind:KIND` (`kind:image`); vaultd.config validates them. Where
they are applied: vaultd.cli.mcp_exclude (every MCP tool's answer) and vaultd.index.export.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pathspec


@dataclass(frozen=True, slots=True)
class Exclusion:
    """The rules of `[mcp] exclude`, split by what they match."""

    globs: tuple[str, ...] = ()
    #: Without `#`, lower-case, as the index keeps tags.
    tags: tuple[str, ...] = ()
    kinds: frozenset[str] = frozenset()
    _spec: pathspec.GitIgnoreSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_spec", pathspec.GitIgnoreSpec.from_lines(self.globs))

    @classmethod
    def of(cls, rules: Iterable[str]) -> Exclusion | None:
        """The rules as config.McpSection validated them; None for none."""
        rules = list(rules)
        if not rules:
            return None
        return cls(
            globs=tuple(r for r in rules if not r.startswith(("#", "kind:"))),
            tags=tuple(r[1:].lower() for r in rules if r.startswith("#")),
            kinds=frozenset(r[5:] for r in rules if r.startswith("kind:")),
        )

    @property
    def by_note(self) -> bool:
        """Whether a rule needs the note's tags or kind, not its path alone."""
        return bool(self.tags or self.kinds)

    def tag_excluded(self, tag: str) -> bool:
        tag = tag.lstrip("#").lower()
        return any(tag == rule or tag.startswith(rule + "/") for rule in self.tags)

    def excludes(self, path: str, tags: Sequence[str] = (), kind: str | None = None) -> bool:
        if self._spec.match_file(path):
            return True
        return kind in self.kinds or any(self.tag_excluded(t) for t in tags)
