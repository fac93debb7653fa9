"""Small frozen records passed between the pipeline stages.

Stages import this module and never each other: a parsed `Note` goes from the parser to the
chunker, `Chunk`s go from the chunker to the embedder and the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

BlockKind = Literal[
    "heading", "paragraph", "list", "code", "table", "quote", "html", "math", "rule", "other"
]


@dataclass(frozen=True, slots=True)
class Link:
    """One outgoing link: `[[target#heading|alias]]`, `![[embed]]` or `[text](note.md)`."""

    target: str
    heading: str | None = None
    block: str | None = None
    alias: str | None = None
    embed: bool = False
    #: The 1-based file line it is written on; None in front matter (it belongs to the note).
    #: Where a link is written does not make it another link.
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Block:
    """A top-level Markdown block with its 1-based, inclusive line range in the file."""

    kind: BlockKind
    start_line: int
    end_line: int
    text: str
    #: Heading level (1-6) for headings, 0 otherwise.
    level: int = 0
    #: The heading's text for headings; the fence info string (language) for code.
    info: str = ""


@dataclass(frozen=True, slots=True)
class Note:
    """A parsed note: what a file says, with no index state attached."""

    path: str
    title: str
    aliases: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    links: tuple[Link, ...] = ()
    #: JSON-safe frontmatter (dates become ISO strings).
    frontmatter: Mapping[str, Any] = field(default_factory=dict)
    body: str = ""
    #: The line of the file on which `body` starts (after any frontmatter block).
    body_start_line: int = 1
    blocks: tuple[Block, ...] = ()
    #: Problems found while parsing; the note is still usable.
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Chunk:
    """The unit that is embedded and returned by search."""

    id: str
    index: int
    section: str
    headings: tuple[str, ...]
    start_line: int
    end_line: int
    text: str
    #: What the embedder sees: `context` (the `title > section` line), a blank line, `text`.
    embed_text: str
    #: Tokens in `embed_text` as counted by the model's tokenizer, special tokens included.
    tokens: int
    #: SHA-256 of `embed_text`: equal hashes can share one vector.
    hash: str
    #: The `title > section` line, as cut to fit (`embed_text` begins with it).
    context: str = ""


@dataclass(frozen=True, slots=True)
class FileState:
    """What a stat of one note says: enough to skip unchanged files without reading them.

    The size and mtime alone can be kept by an edit (`touch -r`, or two saves of one size
    within a coarse filesystem's timestamp); the ctime and the inode cannot be set by a user.
    """

    #: Vault-relative POSIX path, Unicode NFC.
    path: str
    size: int
    mtime_ns: int
    ctime_ns: int = 0
    inode: int = 0
    #: For the stat a note's bytes were read under: the wall clock (ns) taken before the stat
    #: and the read, which the manifest records as when the content was hashed. 0 otherwise.
    hashed_ns: int = 0

    @property
    def changed_ns(self) -> int:
        """The last time the file's content or its times were set, as far as its stat says.

        The later of the two: the mtime can be set back, and where the ctime is no change time
        (a creation time on Windows, one a filesystem does not keep) the mtime is all there is.
        An mtime in the future keeps the note racy, so read on every pass, until it is past.
        """
        return max(self.mtime_ns, self.ctime_ns)


@dataclass(frozen=True, slots=True)
class KnownNote:
    """What the manifest remembers of a note: enough to decide whether to read it again."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    ok: bool
    attempts: int
    #: Failed `attempts` times on this content (`sha256`): not tried again until it changes or
    #: the user asks for it by name.
    quarantined: bool = False
    ctime_ns: int = 0
    inode: int = 0
    #: When the recorded content was hashed (the wall clock before the read, ns; 0 unknown):
    #: a stat recorded within the filesystem's timestamp granularity of it proves nothing.
    hashed_ns: int = 0


#: "verified": read again with the stat as recorded (not trusted, or due a check), and the
#: bytes are those recorded; only the new time of the hash (and a new ctime) is kept.
ChangeKind = Literal["created", "modified", "touched", "verified", "moved", "deleted"]


@dataclass(frozen=True, slots=True)
class Change:
    """One note's difference between the vault and the manifest."""

    kind: ChangeKind
    path: str
    #: The path it had before, for moves.
    old_path: str | None = None
    size: int = 0
    mtime_ns: int = 0
    sha256: str = ""
    ctime_ns: int = 0
    inode: int = 0
    #: When the bytes of `sha256` were read (see `FileState.hashed_ns`).
    hashed_ns: int = 0

    @classmethod
    def of(
        cls, kind: ChangeKind, state: FileState, sha256: str, old_path: str | None = None
    ) -> Change:
        """The change `kind` to the note whose bytes, read under `state`, hash to `sha256`."""
        return cls(
            kind,
            state.path,
            old_path,
            state.size,
            state.mtime_ns,
            sha256,
            state.ctime_ns,
            state.inode,
            state.hashed_ns,
        )

    @property
    def state(self) -> FileState:
        """The stat the change's bytes were read under."""
        return FileState(
            self.path, self.size, self.mtime_ns, self.ctime_ns, self.inode, self.hashed_ns
        )


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: a passage of a note with its 1-based line range."""

    id: str
    path: str
    title: str
    section: str
    start_line: int
    end_line: int
    score: float
    text: str
    tags: tuple[str, ...] = ()
    #: Score parts by retriever (rank and raw score), for `--explain`.
    parts: Mapping[str, Any] = field(default_factory=dict)
    #: False while the note's chunks await vectors: found by its words only, so far.
    indexed: bool = True
    #: When asked for: a short part of `text` with the query's terms marked `**like this**`.
    snippet: str | None = None

    def as_json(self, explain: bool = False) -> dict[str, Any]:
        """The hit as the CLI's `--json` and the socket API print it."""
        out: dict[str, Any] = {
            "path": self.path,
            "title": self.title,
            "section": self.section,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "score": self.score,
            "text": self.text,
            "tags": list(self.tags),
            "id": self.id,
            "indexed": self.indexed,
        }
        if self.snippet is not None:
            # Instead of the whole passage: the line range still says where it is.
            del out["text"]
            out["snippet"] = self.snippet
        if explain:
            out["explain"] = dict(self.parts)
        return out

    @classmethod
    def from_json(cls, item: Mapping[str, Any]) -> Hit:
        return cls(
            id=item.get("id", ""),
            path=item["path"],
            title=item["title"],
            section=item["section"],
            start_line=item["start_line"],
            end_line=item["end_line"],
            score=item["score"],
            text=item.get("text", ""),
            tags=tuple(item.get("tags", ())),
            parts=item.get("explain", {}),
            indexed=bool(item.get("indexed", True)),
            snippet=item.get("snippet"),
        )


def chunk_json(chunk: Any) -> dict[str, Any]:
    """A chunk (parsed or stored) as `inspect --json` and `GET /v1/notes/...` show it."""
    return {
        "id": chunk.id,
        "index": chunk.index,
        "section": chunk.section,
        "headings": list(chunk.headings),
        "start_line": chunk.start_line,
        "end_line": chunk.end_line,
        "tokens": chunk.tokens,
        "text": chunk.text,
    }


@dataclass(frozen=True, slots=True)
class Correction:
    """A query word the vault does not hold (or holds far more rarely than a close neighbour),
    also searched as a term of the words index within one or two edits of it."""

    #: As typed.
    word: str
    #: The words index's term (a stem) it was also searched as.
    term: str
    #: Edits between the two (a swap of two letters is one).
    edits: int
    #: The term as the notes on the page spell it, for "showing results for ..."; empty when
    #: no passage on the page held it.
    shown: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"word": self.word, "term": self.term, "edits": self.edits, "shown": self.shown}


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A page of hits with what the search did to the query to find them."""

    hits: tuple[Hit, ...]
    #: Every correction applied (each adds matches, never removes any).
    corrections: tuple[Correction, ...] = ()
    #: The query as searched, when a correction decided the first hit; None otherwise.
    showing: str | None = None

    def as_json(self, explain: bool = False) -> dict[str, Any]:
        return {
            "hits": [h.as_json(explain) for h in self.hits],
            "corrections": [c.as_json() for c in self.corrections],
            "showing": self.showing,
        }
