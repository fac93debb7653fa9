"""Small frozen records passed between the pipeline stages.

Stages import this module and never each other: a parsed `Note` goes from the parser to the
chunker, `Chunk`s go from the chunker to the embedder and the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

if TYPE_CHECKING:
    import numpy as np

#: A record the API answers with (vaultd.api.operations) sets this as `__pydantic_config__`:
#: pydantic then describes its fields by the docstrings under them.
DESCRIBED: Final[Mapping[str, Any]] = MappingProxyType({"use_attribute_docstrings": True})

BlockKind = Literal[
    "heading", "paragraph", "list", "code", "table", "quote", "html", "math", "rule", "other"
]

#: What a vault file is, and so which extractor turns its bytes into a `Note`: a Markdown
#: note, a JSON Canvas, a PDF's text layer, the text in an image, source code by symbol, or
#: an Excalidraw drawing's text. Every kind keeps the note's guarantees (see
#: vaultd/pipeline/__init__.py for the extractor contract).
NoteKind = Literal["note", "canvas", "pdf", "image", "code", "excalidraw"]
NOTE_KINDS: tuple[str, ...] = get_args(NoteKind)
#: A file name's ending -> its kind (the longest ending that matches wins, so a drawing's
#: `.excalidraw.md` is no plain note). Source code is chosen by `[attachments] code` globs.
KIND_SUFFIXES: dict[str, NoteKind] = {
    ".excalidraw.md": "excalidraw",
    ".excalidraw": "excalidraw",
    ".md": "note",
    ".canvas": "canvas",
    ".pdf": "pdf",
    ".png": "image",
    ".jpg": "image",
    ".jpeg": "image",
    ".webp": "image",
}


def kind_of(path: str) -> NoteKind | None:
    """The kind of file a vault path names by its ending (any case), or None for a file that
    no extractor reads (a source file is `code` only by the config's globs)."""
    name = path.rsplit("/", 1)[-1].lower()
    for suffix, kind in KIND_SUFFIXES.items():
        if name.endswith(suffix) and len(name) > len(suffix):
            return kind
    return None


@dataclass(frozen=True, slots=True)
class Location:
    """Where in a file that has no lines worth naming a passage is: beside the line range,
    which every block and chunk keeps (for a PDF or a canvas it counts lines of the text
    extracted, so it still orders and bounds passages). Pages are 1-based and inclusive.
    """

    __pydantic_config__ = DESCRIBED
    page: int | None = None
    """A PDF passage's first page."""
    page_end: int | None = None
    """A PDF passage's last page."""
    node: str | None = None
    """A canvas card's (or drawing element's) id."""
    symbol: str | None = None
    """A source passage's symbol, such as `class Indexer > def reconcile`."""

    @property
    def identity(self) -> bool:
        """Whether the passage is a unit of its own (a card, a symbol, a page), which the
        chunker never packs with its neighbours."""
        return self.node is not None or self.symbol is not None or self.page is not None

    def as_json(self) -> dict[str, Any]:
        """The fields that are set (a Markdown note's passages have none)."""
        return {
            k: v
            for k, v in (
                ("page", self.page),
                ("page_end", self.page_end),
                ("node", self.node),
                ("symbol", self.symbol),
            )
            if v is not None
        }


#: A passage without a location: a Markdown note's.
NOWHERE = Location()


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
    #: Where it is besides its lines: a PDF page range, a canvas card, a source symbol.
    #: A block with an identity (`Location.identity`) becomes chunks of its own.
    location: Location = NOWHERE
    #: The heading path an extractor gives the block directly (a canvas card's group label,
    #: a PDF outline's headings), instead of heading blocks before it; None for Markdown.
    headings: tuple[str, ...] | None = None


def lay_out(blocks: Iterable[Block]) -> tuple[str, tuple[Block, ...]]:
    """An extractor's passages as a body and blocks: the texts joined by blank lines, each
    block given its 1-based, inclusive line range in that body (whatever it had)."""
    laid: list[Block] = []
    texts: list[str] = []
    line = 1
    for block in blocks:
        text = block.text.strip("\n")
        if not text.strip():
            continue
        end = line + text.count("\n")
        laid.append(replace(block, start_line=line, end_line=end, text=text))
        texts.append(text)
        line = end + 2
    return "\n\n".join(texts), tuple(laid)


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
    #: What kind of file it came from (which extractor made it).
    kind: NoteKind = "note"


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
    #: Where it is besides its lines (see `Location`); `NOWHERE` for a Markdown note's chunks.
    location: Location = NOWHERE


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
    #: Why it is left out ("damaged", "encrypted", ...: `errors.LeftOutKind`), "" otherwise.
    left_out: str = ""


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


# What became of one note in a pass: the indexer makes one of these per note it tried, and
# the manifest records it as it is.


@dataclass(frozen=True, slots=True)
class NoteWritten:
    """A note indexed: what was made of the bytes read under `state`, which hash to `sha256`."""

    note: Note
    state: FileState
    sha256: str
    chunks: tuple[Chunk, ...]
    #: The package a source file belongs to (vaultd.pipeline.packages); None for other
    #: kinds, and for a file no manifest above names a package for.
    package: str | None = None

    @property
    def path(self) -> str:
        return self.state.path


@dataclass(frozen=True, slots=True)
class NoteFailed:
    """A note that could not be indexed; it keeps its last good chunks. `sha256` is "" when
    its bytes could not be read."""

    state: FileState
    sha256: str
    reason: str

    @property
    def path(self) -> str:
        return self.state.path


@dataclass(frozen=True, slots=True)
class NoteLeftOut:
    """A file that is no note vaultd can index (`errors.LeftOutKind`: too big, binary, not
    UTF-8 text, unreadable, ...); never quarantined, tried again on every pass."""

    state: FileState
    sha256: str
    kind: str
    reason: str

    @property
    def path(self) -> str:
        return self.state.path


NoteOutcome = NoteWritten | NoteFailed | NoteLeftOut


# What a pass hands on between its steps: the walk compared with the manifest, a note parsed
# (in the parser's process or a worker's), a note ready for the keyword phase's write, a chunk
# as the manifest recorded it, and a chunk as the vector store takes it.


@dataclass(frozen=True, slots=True)
class Scan:
    """The result of comparing one walk of the vault with the manifest."""

    seen: int = 0
    unchanged: int = 0
    #: Files whose content must be read and hashed.
    candidates: list[FileState] = field(default_factory=list)
    #: Of the candidates, those whose stat is as recorded: read because a stat so close to
    #: its hash proves nothing, or because they were due a check (`verify`).
    distrusted: int = 0
    #: Known paths the walk did not find.
    gone: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Parsed:
    """One note turned into its chunks, or why it could not be."""

    note: Note | None = None
    chunks: tuple[Chunk, ...] = ()
    #: Why the note cannot be indexed ("" when it was parsed).
    reason: str = ""
    #: A left-out file's kind (see LeftOutError), "" for a failure.
    kind: str = ""
    #: The traceback of a parser bug (an exception that is no NoteError), for the log.
    trace: str = ""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A note parsed and chunked, waiting for vectors and the write."""

    change: Change
    note: Note
    chunks: list[Chunk]
    #: The chunks recorded at its path, and at the path it moved from.
    old_ids: list[str]
    moved_ids: list[str]
    #: Vectors looked up already for its chunks' texts (a move's), by text hash.
    vectors: dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """A chunk as recorded: the `Chunk` the chunker made, as it is, and the note it belongs to
    (its path and title, which search and the store need beside it)."""

    path: str
    title: str
    chunk: Chunk


@dataclass(frozen=True, slots=True)
class Record:
    """A chunk as the vector store takes it: its id, its note's path, its text, and its
    metadata in the store's one shape of a chunk (`storage/metadata.py`)."""

    id: str
    path: str
    document: str
    metadata: Mapping[str, Any]


def chunk_json(chunk: Chunk) -> dict[str, Any]:
    """A chunk (parsed, or the one a stored chunk holds) as `inspect --json` and
    `GET /v1/notes/...` show it."""
    return {
        "id": chunk.id,
        "index": chunk.index,
        "section": chunk.section,
        "headings": list(chunk.headings),
        "start_line": chunk.start_line,
        "end_line": chunk.end_line,
        "tokens": chunk.tokens,
        "text": chunk.text,
        **chunk.location.as_json(),
    }
