"""The manifest queries of a pass over one note, counted and held: the walk of a note through
a pass looks nothing up twice (its chunk ids, its chunks, its vectors are read once and passed
on), and a change that adds a query here says so.

The real manifest, model and Chroma; the statements are those SQLite runs, as its trace
callback sees them on every connection of the manifest.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from vaultd.config import load_config
from vaultd.index.open import Index, open_index
from vaultd.index.passes import Pacing

NOTE = "# A\n\nThe keeper writes about {}.\n\n## More\n\nGulls over the pier [[b]].\n"


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    vault = tmp_path / "vault"
    vault.mkdir()
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n'
        '[log]\nlevel = "error"\n',
        encoding="utf-8",
    )
    # Vectors recorded once, at the end of the batch, however slow the machine: the cadence
    # that records them every few seconds would add a write here.
    once = Pacing(commit_seconds=float("inf"))
    with open_index(load_config(config, env={}), env={}, pacing=once) as opened:
        opened.indexer.reconcile()  # the first pass's recovery and repair are not counted
        yield opened


def counted(index: Index, paths: list[str]) -> tuple[int, int]:
    """(reads, write transactions) of a pass over `paths`. Statements that triggers run
    (traced as `-- ...`) are the write's own work, not queries of the pass."""
    statements: list[str] = []
    index.manifest.trace(statements.append)
    try:
        index.indexer.reconcile_paths(paths)
    finally:
        index.manifest.trace(None)
    reads = sum(1 for s in statements if s.lstrip().upper().startswith("SELECT"))
    writes = sum(1 for s in statements if s.lstrip().upper().startswith("BEGIN"))
    return reads, writes


def test_a_pass_over_one_note_looks_nothing_up_twice(index: Index) -> None:
    note = index.vault / "a.md"

    note.write_text(NOTE.format("lighthouses"), encoding="utf-8")
    # Reads: the note as known (the scan); the chunk ids at its path (what its write
    # replaces); the vectors stored for its texts (published at once); inside the write,
    # the attempts kept on this content; then the embedding phase: what awaits (totals),
    # the batch, the same texts awaiting in other notes, the batch's notes as recorded, and
    # the next batch (none). Writes: in flight, the keyword phase's write, in flight for
    # the embedding, the vectors.
    assert counted(index, ["a.md"]) == (9, 4)

    note.write_text(NOTE.format("harbours"), encoding="utf-8")
    # An edit: as a new note.
    assert counted(index, ["a.md"]) == (9, 4)

    os.rename(note, index.vault / "c.md")
    # A move: the scan; the old path's chunks and their vectors (kept: nothing to embed,
    # and no more lookup of either before the write); the chunk ids at the new path; the
    # attempts inside the write; what awaits (nothing). Writes: in flight, the write.
    assert counted(index, ["a.md", "c.md"]) == (6, 2)

    os.utime(index.vault / "c.md", (2e9, 2e9))
    # A touch: the scan; its chunks, their vectors and its record (to publish the new mtime
    # to the store); what awaits. Writes: the new stat.
    assert counted(index, ["c.md"]) == (5, 1)

    (index.vault / "c.md").unlink()
    # A delete: the scan; its chunk ids (deleted from the store); what awaits. Writes: the
    # delete.
    assert counted(index, ["c.md"]) == (3, 1)
