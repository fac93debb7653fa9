"""The two phases of a pass: every note searchable by its words before any is embedded, the
most recently modified embedded first, and edits during either phase never embedded stale.

The real model, Chroma and manifest throughout; the embedder is only watched (every text it
is given is recorded, then embedded for real).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.convergence import assert_same, fresh_export
from vaultd.config import load_config
from vaultd.embedding.embedder import Embedder
from vaultd.index import keyword_phase
from vaultd.index.export import export_records
from vaultd.index.open import Index, open_index
from vaultd.index.passes import Pacing
from vaultd.index.status import index_status
from vaultd.query import SearchQuery

DAY = 86_400
BASE = 1_700_000_000


def write_notes(vault: Path, count: int) -> None:
    vault.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        path = vault / f"n{i:02d}.md"
        path.write_text(
            f"# Note {i}\n\nThe keeper of note {i} writes about lighthouse{i} and harbour "
            f"tides.\n\n## More\n\nA second passage for note {i}: gulls{i} over the pier.\n",
            encoding="utf-8",
        )
        # Note i was modified i days after the first: the last is the most recent.
        os.utime(path, (BASE + i * DAY, BASE + i * DAY))


def config_file(root: Path, vault: Path) -> Path:
    path = root / "c.toml"
    path.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{root / "data"}"\n[log]\nlevel = "error"\n',
        encoding="utf-8",
    )
    return path


@pytest.fixture
def embedded_texts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every text the model is given, in order (the real model embeds them)."""
    seen: list[str] = []
    real = Embedder.embed_documents

    def watched(self: Embedder, texts: Any, **options: Any) -> Any:
        seen.extend(texts)
        return real(self, texts, **options)

    monkeypatch.setattr(Embedder, "embed_documents", watched)
    yield seen


def open_for(root: Path, vault: Path, pacing: Pacing | None = None) -> Any:
    return open_index(load_config(config_file(root, vault), env={}), env={}, pacing=pacing)


def converged(index: Index, vault: Path, root: Path) -> None:
    assert index.manifest.vectors.awaiting_totals(index.embedder.model_id).chunks == 0
    mine = list(export_records(index.store, with_vectors=True))
    assert_same(mine, fresh_export(vault, root / "reference"))


def test_every_note_is_searchable_by_its_words_before_any_is_embedded(
    tmp_path: Path, embedded_texts: list[str]
) -> None:
    vault = tmp_path / "vault"
    write_notes(vault, 12)
    checked: list[bool] = []
    with open_for(tmp_path, vault) as index:

        def progress(phase: str, done: int, total: int) -> None:
            if phase != "embed" or done or checked:
                return
            # The keyword phase is over and nothing is embedded yet.
            assert embedded_texts == []
            for i in range(12):
                hits = index.searcher.search(SearchQuery(f"lighthouse{i}", k=3)).hits
                assert hits[0].path == f"n{i:02d}.md" and not hits[0].indexed
                assert "keyword" in hits[0].parts or hits[0].parts == {}
            assert (
                index.searcher.search(SearchQuery("harbour tides", k=5, mode="vector")).hits == ()
            )
            status = index_status(index).as_json()
            assert (status["notes"], status["embedded"]) == (12, 0)
            assert status["awaiting"] == status["chunks"] == 24
            assert not index.indexer.is_current("n00.md")
            checked.append(True)

        summary = index.indexer.reconcile(progress)
        assert checked and summary.notes_changed == 12 and summary.chunks_embedded == 24
        assert 0 < summary.keyword_seconds <= summary.seconds
        hits = index.searcher.search(SearchQuery("lighthouse3", k=1)).hits
        assert hits[0].path == "n03.md" and hits[0].indexed
        assert index.indexer.is_current("n03.md")
        status = index_status(index).as_json()
        assert (status["embedded"], status["awaiting"]) == (12, 0)
        converged(index, vault, tmp_path)


def test_the_most_recently_modified_notes_are_embedded_first(
    tmp_path: Path, embedded_texts: list[str]
) -> None:
    vault = tmp_path / "vault"
    write_notes(vault, 10)
    with open_for(tmp_path, vault, Pacing(batch_chunks=4)) as index:  # five of two notes
        index.indexer.reconcile()
    order = list(dict.fromkeys(t.split("\n")[0].split(" > ")[0] for t in embedded_texts))
    assert order == [f"Note {i}" for i in reversed(range(10))]


def test_a_note_edited_during_the_keyword_phase_is_embedded_in_its_new_form(
    tmp_path: Path, embedded_texts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = tmp_path / "vault"
    write_notes(vault, 8)
    monkeypatch.setattr(keyword_phase, "BATCH_NOTES", 2)  # four keyword batches
    edited: list[str] = []
    with open_for(tmp_path, vault) as index:

        def pause(in_flight: frozenset[str]) -> None:
            # Between two keyword batches: n07 (the first batch, committed, awaiting its
            # vectors) and n00 (not read yet) change; the edits are served, as the daemon
            # serves them at this point.
            if edited or index.manifest.counts()["notes"] == 0:
                return
            assert index.manifest.vectors.awaiting_totals(index.embedder.model_id).chunks > 0
            for name in ("n07.md", "n00.md"):
                (vault / name).write_text(f"# Edited {name}\n\nNew words: cormorant.\n")
            edited.append("yes")
            index.indexer.reconcile_paths(["n07.md", "n00.md"])

        index.indexer.reconcile(pause=pause)
        assert edited
        assert not [t for t in embedded_texts if "lighthouse7" in t or "lighthouse0" in t]
        hits = index.searcher.search(SearchQuery("cormorant", k=5, mode="keyword")).hits
        assert {h.path for h in hits} == {"n07.md", "n00.md"}
        converged(index, vault, tmp_path)


def test_a_note_read_ahead_for_the_parsers_and_edited_is_embedded_in_its_new_form(
    tmp_path: Path, embedded_texts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With worker processes parsing, notes are read ahead of the batch being committed: at a
    pause they are in hand, and an edit of one waits (as the daemon's worker holds it) until
    its stale form is written, then replaces it before it is embedded."""
    vault = tmp_path / "vault"
    write_notes(vault, 8)
    monkeypatch.setattr(keyword_phase, "BATCH_NOTES", 2)
    waiting: set[str] = set()
    edited: list[str] = []
    serving: list[bool] = []
    with open_for(tmp_path, vault, Pacing(pool_above=1)) as index:

        def pause(in_flight: frozenset[str]) -> None:
            if serving:
                return  # the pass serving an edit pauses too; the daemon serves none there
            if not edited and index.manifest.counts()["notes"]:
                # One note committed (awaiting its vectors), one read ahead and in hand.
                written = sorted(p.name for p in vault.glob("*.md") if p.name not in in_flight)
                edited.extend([written[0], sorted(in_flight)[-1]])
                for name in edited:
                    (vault / name).write_text(f"# Edited {name}\n\nNew words: cormorant.\n")
                waiting.update(edited)
            ready = waiting - in_flight
            if ready:
                waiting.difference_update(ready)
                serving.append(True)
                index.indexer.reconcile_paths(sorted(ready))
                serving.clear()

        index.indexer.reconcile(pause=pause)
        assert edited and not waiting
        stale = [f"lighthouse{int(name[1:3])}" for name in edited]
        assert not [t for t in embedded_texts if any(word in t for word in stale)]
        hits = index.searcher.search(SearchQuery("cormorant", k=5, mode="keyword")).hits
        assert {h.path for h in hits} == set(edited)
        converged(index, vault, tmp_path)


def test_a_note_edited_during_the_embedding_phase_is_never_embedded_stale(
    tmp_path: Path, embedded_texts: list[str]
) -> None:
    vault = tmp_path / "vault"
    write_notes(vault, 8)
    edited: list[str] = []
    with open_for(tmp_path, vault, Pacing(batch_chunks=2)) as index:  # a note per batch
        model = index.embedder.model_id

        def pause(in_flight: frozenset[str]) -> None:
            if edited or not embedded_texts:
                return
            # Embedding has begun: the oldest note still awaits and is not in flight.
            assert "n00.md" not in in_flight
            assert index.manifest.vectors.awaiting_paths(model, ["n00.md"]) == {"n00.md"}
            (vault / "n00.md").write_text("# Rewritten\n\nOnly puffins now.\n")
            edited.append("n00.md")
            index.indexer.reconcile_paths(["n00.md"])
            # Served at once: searchable by meaning already, the backlog still under way.
            assert index.indexer.is_current("n00.md")
            assert index.manifest.vectors.awaiting_totals(model).chunks > 0

        index.indexer.reconcile(pause=pause)
        assert edited
        assert not [t for t in embedded_texts if "lighthouse0" in t]
        assert [t for t in embedded_texts if "puffins" in t]
        converged(index, vault, tmp_path)


def test_a_stopped_first_index_resumes_without_embedding_twice(
    tmp_path: Path, embedded_texts: list[str]
) -> None:
    """Stopped in the embedding phase (an exception at a pause point, as Ctrl-C or a
    graceful stop raises there): the next pass embeds only what was left."""
    vault = tmp_path / "vault"
    write_notes(vault, 6)

    class Stop(Exception):
        pass

    with open_for(tmp_path, vault, Pacing(batch_chunks=4)) as index:

        def pause(in_flight: frozenset[str]) -> None:
            if len(embedded_texts) >= 4:
                raise Stop

        with pytest.raises(Stop):
            index.indexer.reconcile(pause=pause)
        first = len(embedded_texts)
        assert 0 < first < 12
        assert index.manifest.counts()["notes"] == 6  # every note searchable by its words
        summary = index.indexer.reconcile()
        assert summary.chunks_embedded == 12 - first
        assert len(set(embedded_texts)) == len(embedded_texts) == 12
        converged(index, vault, tmp_path)


def test_a_passage_two_notes_share_reaches_the_store_for_both_in_one_pass(
    tmp_path: Path, embedded_texts: list[str]
) -> None:
    """Two notes of one name in two folders, alike (a README copied around): their chunks
    share texts and vectors. Batches of one chunk put the twins in different batches; each
    is published with the vector when it comes, not left for the next pass's repair."""
    vault = tmp_path / "vault"
    text = "# Readme\n\nHow to build the tool.\n\n## Licence\n\nShare it freely.\n"
    for folder in ("one", "two"):
        (vault / folder).mkdir(parents=True)
        (vault / folder / "Readme.md").write_text(text, encoding="utf-8")
    with open_for(tmp_path, vault, Pacing(batch_chunks=1)) as index:
        index.indexer.reconcile()
        assert len(embedded_texts) == 2  # one text each for the two passages
        assert index.store.ids() == set(index.manifest.notes.chunk_ids())
        assert len(index.manifest.notes.chunk_ids()) == 4
        assert index.indexer.sync_store() == 0
