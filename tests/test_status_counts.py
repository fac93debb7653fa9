"""Status's "N of M found": the note files found stay current between full walks, so the
notes indexed are never more than the notes found (it read "174 of 173 found")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.small_vault import write_vault
from vaultd.config import load_config
from vaultd.index.open import Index, open_index
from vaultd.index.status import index_status

#: The size cap of these tests' vault, as the config takes it (MiB): 2 KiB.
CAP_MB = 2 / 1024
BIG = "# Big\n\n" + "A long line about a lynx in the snow.\n" * 80


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    config = write_vault(tmp_path, {"A.md": "# A\n\nAlpha.\n", "B.md": "# B\n\nBravo.\n"})
    text = config.read_text().replace("[vault]\n", f"[vault]\nmax_file_mb = {CAP_MB}\n")
    config.write_text(text)
    with open_index(load_config(config, env={}), env={}) as opened:
        opened.indexer.reconcile()
        yield opened


def counts(index: Index) -> tuple[int, int | None]:
    status = index_status(index)
    return status.notes, status.found


def test_notes_added_moved_and_deleted_between_full_walks_are_counted_as_found(
    index: Index,
) -> None:
    vault = index.vault
    assert counts(index) == (2, 2)
    # What the watcher hands over: a new note, a move, a deletion, a new folder.
    (vault / "C.md").write_text("# C\n\nCharlie.\n")
    index.indexer.reconcile_paths(["C.md"])
    assert counts(index) == (3, 3)
    (vault / "B.md").rename(vault / "D.md")
    index.indexer.reconcile_paths(["B.md", "D.md"])
    assert counts(index) == (3, 3)
    (vault / "A.md").unlink()
    index.indexer.reconcile_paths(["A.md"])
    assert counts(index) == (2, 2)
    (vault / "Sub").mkdir()
    (vault / "Sub" / "E.md").write_text("# E\n\nEcho.\n")
    index.indexer.reconcile_paths([], ["Sub"])
    assert counts(index) == (3, 3)
    # Asked again about what it has counted already: counted once.
    index.indexer.reconcile_paths(["C.md", "Sub/E.md"], ["Sub"])
    assert counts(index) == (3, 3)
    # And the next full walk finds what the passes between counted.
    index.indexer.reconcile()
    assert counts(index) == (3, 3)


def test_a_note_left_out_for_its_size_is_found_once_it_fits(index: Index) -> None:
    vault = index.vault
    (vault / "Big.md").write_text(BIG)
    index.indexer.reconcile()
    assert counts(index) == (2, 2)  # left out, reported as such: no note found
    (vault / "Big.md").write_text("# Big\n\nNow short.\n")
    index.indexer.reconcile_paths(["Big.md"])
    assert counts(index) == (3, 3)
    (vault / "Big.md").write_text(BIG)
    index.indexer.reconcile_paths(["Big.md"])
    assert counts(index) == (2, 2)


def test_a_pass_that_forgets_notes_never_reads_as_more_indexed_than_found(
    tmp_path: Path,
) -> None:
    """Notes deleted while no daemon ran: the next start's walk dropped them from the notes
    found at once, and the manifest forgets them later in the pass, so a status read between
    the two (the whole hashing of what changed) read more notes indexed than found."""
    config = write_vault(
        tmp_path, {"A.md": "# A\n\nAlpha.\n", "B.md": "# B\n\nBravo.\n", "C.md": "# C\n\nC.\n"}
    )
    vault = tmp_path / "vault"
    with open_index(load_config(config, env={}), env={}) as index:
        index.indexer.reconcile()
    (vault / "B.md").unlink()
    (vault / "C.md").write_text("# C\n\nCharlie, edited: hashed before B is forgotten.\n")
    read: list[tuple[int, int | None]] = []
    with open_index(load_config(config, env={}), env={}) as index:
        index.indexer.reconcile(lambda phase, done, total: read.append(counts(index)))
        assert counts(index) == (2, 2)
        (vault / "A.md").unlink()
        index.indexer.reconcile_paths(
            ["A.md", "C.md"], progress=lambda *_: read.append(counts(index))
        )
        assert counts(index) == (1, 1)
    assert read
    for notes, found in read:
        assert found is None or notes <= found, read
