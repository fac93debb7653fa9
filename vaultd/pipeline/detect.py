"""Manifest and disk compared: which notes to skip, read, re-key or forget.

Pure decisions, no I/O: the indexer stats and hashes, this module says what that means.
- Size and mtime as recorded: unchanged, not even read.
- Read, and the SHA-256 is as recorded: a touch (only the stat is updated).
- A new path whose hash equals that of a path that is gone: a move.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vaultd.records import Change, FileState, KnownNote


@dataclass(slots=True)
class Scan:
    """The result of comparing one walk of the vault with the manifest."""

    seen: int = 0
    unchanged: int = 0
    #: Files whose content must be read and hashed.
    candidates: list[FileState] = field(default_factory=list)
    #: Known paths the walk did not find.
    gone: list[str] = field(default_factory=list)


def scan(known: Mapping[str, KnownNote], walk: Iterable[FileState]) -> Scan:
    """Compare a walk with the manifest."""
    result = Scan()
    present: set[str] = set()
    for state in walk:
        result.seen += 1
        present.add(state.path)
        old = known.get(state.path)
        if old is not None and old.ok and old.size == state.size and old.mtime_ns == state.mtime_ns:
            result.unchanged += 1
        else:
            result.candidates.append(state)
    result.gone = sorted(p for p in known if p not in present)
    return result


def keep_unreadable(gone: Iterable[str], unreadable_dirs: Iterable[str]) -> list[str]:
    """Drop from `gone` what lies under folders the walk could not read: unreadable is not
    deleted, and the notes come back once the folder is readable again."""
    prefixes = tuple(p.rstrip("/") + "/" for p in unreadable_dirs)
    return [p for p in gone if not (prefixes and p.startswith(prefixes))]


def classify(
    known: Mapping[str, KnownNote],
    hashed: Iterable[tuple[FileState, str]],
    gone: Iterable[str],
) -> list[Change]:
    """Turn hashed candidates and gone paths into changes, pairing moves by content hash."""
    changes: list[Change] = []
    fresh: list[tuple[FileState, str]] = []
    for state, sha256 in hashed:
        old = known.get(state.path)
        if old is None:
            fresh.append((state, sha256))
        elif old.ok and old.sha256 == sha256:
            changes.append(Change("touched", state.path, None, state.size, state.mtime_ns, sha256))
        elif old.quarantined and old.sha256 == sha256:
            # It failed too often on exactly this content: left alone until the content changes
            # (or the user releases it by name).
            continue
        else:
            changes.append(Change("modified", state.path, None, state.size, state.mtime_ns, sha256))

    by_hash: dict[str, list[str]] = defaultdict(list)
    for path in sorted(gone):
        old = known[path]
        if old.ok:
            by_hash[old.sha256].append(path)
    moved_from: set[str] = set()
    for state, sha256 in sorted(fresh, key=lambda item: item[0].path):
        sources = by_hash.get(sha256)
        if sources:
            source = sources.pop(0)
            moved_from.add(source)
            changes.append(Change("moved", state.path, source, state.size, state.mtime_ns, sha256))
        else:
            changes.append(Change("created", state.path, None, state.size, state.mtime_ns, sha256))
    changes.extend(Change("deleted", path) for path in sorted(gone) if path not in moved_from)
    return changes
