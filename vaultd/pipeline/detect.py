"""Manifest and disk compared: which notes to skip, read, re-key or forget.

Pure decisions, no I/O: the indexer stats and hashes, this module says what that means.
- The stat as recorded (size, mtime, ctime, inode), recorded well after the file last
  changed: unchanged, not even read.
- Read, and the SHA-256 is as recorded: a touch (only the stat is updated).
- A new path whose hash equals that of a path that is gone: a move.

A stat proves nothing about a file changed within one timestamp tick of its hash: a
filesystem with 1-second (or FAT's 2-second) timestamps gives two saves within one tick the
same mtime and ctime. Such a file is "racily clean" in git's words, and is read again until a
hash is recorded more than `GRANULARITY_NS` after its last change. The ctime catches an edit
whose mtime was put back (`touch -r`); nothing a user can do sets it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Container, Iterable, Mapping

from vaultd.records import Change, FileState, KnownNote, Scan

#: The coarsest timestamp assumed, ns: FAT's 2 s. Measuring each filesystem's would save a
#: hash of the notes saved in the last two seconds before they were indexed, once.
GRANULARITY_NS = 2 * 10**9


def same_stat(old: KnownNote, state: FileState) -> bool:
    """Whether the stat is exactly the one recorded with the note's hash."""
    return (old.size, old.mtime_ns, old.ctime_ns, old.inode) == (
        state.size,
        state.mtime_ns,
        state.ctime_ns,
        state.inode,
    )


#: Left-out kinds that only other bytes can change (see `classify`).
SETTLED_LEFT_OUT = frozenset({"damaged", "encrypted"})


def trusted(old: KnownNote, state: FileState, granularity_ns: int = GRANULARITY_NS) -> bool:
    """Whether the stat alone says the note holds what was indexed of it.

    Only for a note indexed fine, whose stat is as recorded, and whose last change (the later
    of mtime and ctime: `touch -r` can set the mtime back, not the ctime) lies more than one
    timestamp tick before the hash: a write after the hash then shows in the stat.
    """
    return (
        old.ok
        and same_stat(old, state)
        and old.hashed_ns > 0
        and state.changed_ns < old.hashed_ns - granularity_ns
    )


def scan(
    known: Mapping[str, KnownNote],
    walk: Iterable[FileState],
    *,
    verify: Container[str] = frozenset(),
    granularity_ns: int = GRANULARITY_NS,
) -> Scan:
    """Compare a walk with the manifest; the notes in `verify` are read whatever their stat."""
    seen = unchanged = distrusted = 0
    candidates: list[FileState] = []
    present: set[str] = set()
    for state in walk:
        seen += 1
        present.add(state.path)
        old = known.get(state.path)
        if old is not None and state.path not in verify and trusted(old, state, granularity_ns):
            unchanged += 1
            continue
        if old is not None and old.ok and same_stat(old, state):
            distrusted += 1
        candidates.append(state)
    gone = sorted(p for p in known if p not in present)
    return Scan(
        seen=seen, unchanged=unchanged, candidates=candidates, distrusted=distrusted, gone=gone
    )


def due_for_check(known: Mapping[str, KnownNote], share: float) -> set[str]:
    """The `share` of the indexed notes hashed longest ago (never first): read by a full pass
    whatever their stat, so that whatever a stat could hide is found within 1/share passes.

    Each check records a new time, so the next pass takes the next oldest: a rotation that
    needs no state of its own and survives restarts.
    """
    if share <= 0:
        return set()
    indexed = [k for k in known.values() if k.ok]
    if share >= 1:
        return {k.path for k in indexed}
    count = math.ceil(len(indexed) * share)
    oldest = sorted(indexed, key=lambda k: (k.hashed_ns, k.path))[:count]
    return {k.path for k in oldest}


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
            # Same bytes: only a new mtime (or size, never with the same bytes) is a touch the
            # store's metadata must follow; a new ctime or hash time is the manifest's alone.
            same = (old.size, old.mtime_ns) == (state.size, state.mtime_ns)
            changes.append(Change.of("verified" if same else "touched", state, sha256))
        elif old.left_out in SETTLED_LEFT_OUT and old.sha256 == sha256:
            # A damaged or encrypted attachment is so for these bytes whatever the settings:
            # not read again (a child process each, every pass) until its content changes.
            continue
        elif old.quarantined and old.sha256 == sha256:
            # It failed too often on exactly this content: left alone until the content changes
            # (or the user releases it by name).
            continue
        else:
            changes.append(Change.of("modified", state, sha256))

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
            changes.append(Change.of("moved", state, sha256, source))
        else:
            changes.append(Change.of("created", state, sha256))
    changes.extend(Change("deleted", path) for path in sorted(gone) if path not in moved_from)
    return changes
