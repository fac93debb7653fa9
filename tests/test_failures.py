"""One bad note is recorded, counted and retried; it never stops the run or fails its neighbours."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from vaultd.cli.commands import main
from vaultd.config import load_config
from vaultd.embedding.embedder import Embedder
from vaultd.errors import EmbedError
from vaultd.index.export import export_records
from vaultd.index.open import open_index
from vaultd.query import SearchQuery


def make_vault(root: Path) -> Path:
    vault = root / "vault"
    (vault / "sub").mkdir(parents=True)
    for i in range(6):
        (vault / "sub" / f"good{i}.md").write_text(f"# Good {i}\n\nPlain words number {i}.\n")
    return vault


def config_for(root: Path, vault: Path, extra: str = "") -> Path:
    path = root / "c.toml"
    path.write_text(
        f'[vault]\npath = "{vault}"\n{extra}\n[store]\npath = "{root / "data"}"\n'
        '[log]\nlevel = "error"\n',
        encoding="utf-8",
    )
    return path


def test_binary_too_big_and_unreadable_files_are_left_out_not_failed_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left out: no note vaultd can index. Listed with the kind and reason, never counted as
    failed or quarantined, looked at again on every pass, and off the list once fixed."""
    import os

    vault = make_vault(tmp_path)
    (vault / "binary.md").write_bytes(b"\x00\x01\x02 not text")
    (vault / "latin1.md").write_bytes(("Grüße aus Köln, schöne Tage. " * 40).encode("latin-1"))
    (vault / "big.md").write_text("x" * 3000)
    (vault / "sub" / "locked.md").write_text("# Locked\n\nA kestrel.\n")
    real_open = os.open

    def denying(file: Any, *args: Any, **kwargs: Any) -> Any:
        # Injected fault: tests run as root here, which reads whatever the mode bits say.
        # Notes are opened one component at a time (Discovery.open_note): the last is the name.
        if str(file).endswith("locked.md"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", denying)
    config = load_config(config_for(tmp_path, vault, "max_file_mb = 0.002"), env={})
    with open_index(config, env={}) as index:
        first = index.indexer.reconcile()
        assert first.notes_failed == 0 and first.failures == []
        assert first.notes_changed == 6 and first.notes_left_out == 4
        kinds = {(e.path, e.kind) for e in index.manifest.failures.left_out()}
        assert kinds == {
            ("big.md", "too_big"),
            ("binary.md", "binary"),
            ("latin1.md", "not_utf8"),
            ("sub/locked.md", "unreadable"),
        }
        reasons = {e.path: e.reason for e in index.manifest.failures.left_out()}
        assert reasons["binary.md"].startswith("binary content")
        assert reasons["big.md"].startswith("larger than the 0.002 MB limit")
        assert "Permission denied" in reasons["sub/locked.md"]
        assert (
            index.manifest.failures.failed() == [] and index.manifest.failures.quarantined() == []
        )
        counts = index.manifest.counts()
        assert (counts["notes"], counts["failed"], counts["left_out"]) == (6, 0, 4)
        # Looked at again on every pass, and never quarantined for it.
        for _ in range(3):
            again = index.indexer.reconcile()
            assert again.notes_left_out == 4 and again.chunks_embedded == 0
        assert (
            index.manifest.failures.quarantined() == []
            and len(index.manifest.failures.left_out()) == 4
        )
        # Fixed, or deleted: off the list.
        (vault / "binary.md").write_text("# Fixed\n\nNow it is text.\n")
        (vault / "big.md").write_text("small now")
        (vault / "latin1.md").unlink()
        monkeypatch.setattr(os, "open", real_open)
        third = index.indexer.reconcile()
        assert third.notes_left_out == 0 and third.notes_changed == 3
        assert index.manifest.failures.left_out() == [] and index.manifest.failures.failed() == []
        assert index.manifest.counts()["notes"] == 9


def test_a_note_grown_over_the_cap_loses_its_chunks_and_is_left_out(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    grows = vault / "grows.md"
    grows.write_text("# Grows\n\nA short note about an ibex.\n")
    config = load_config(config_for(tmp_path, vault, "max_file_mb = 0.002"), env={})
    with open_index(config, env={}) as index:
        index.indexer.reconcile()
        assert [
            h.path for h in index.searcher.search(SearchQuery("ibex", k=3, mode="keyword")).hits
        ] == ["grows.md"]
        grows.write_text("# Grows\n\nA long note about an ibex.\n" + "words " * 1000)
        # The watcher's path: one note, looked at alone.
        summary = index.indexer.reconcile_paths(["grows.md"])
        assert summary.left_out == [
            {"path": "grows.md", "kind": "too_big", "reason": summary.left_out[0]["reason"]}
        ]
        assert index.manifest.notes.chunk_ids("grows.md") == []
        assert index.searcher.search(SearchQuery("ibex", k=3, mode="keyword")).hits == ()
        assert [e.path for e in index.manifest.failures.left_out()] == ["grows.md"]
        assert not [r for r in export_records(index.store) if r["metadata"]["path"] == "grows.md"]
        # Still too big at the next full pass: still listed, nothing else happens.
        again = index.indexer.reconcile()
        assert (again.notes_left_out, again.notes_deleted) == (1, 0)
        grows.unlink()
        assert index.indexer.reconcile_paths(["grows.md"]).notes_deleted == 1
        assert index.manifest.failures.left_out() == []


def test_a_failing_embedding_batch_is_retried_note_by_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = make_vault(tmp_path)
    (vault / "poison.md").write_text("# Poison\n\nThis text upsets the model: POISON.\n")
    real_embed = Embedder.embed_documents

    def flaky(self: Embedder, texts: Any, **options: Any) -> Any:
        # Injected fault: the model fails on any batch holding the poison text.
        if any("POISON" in t for t in texts):
            raise EmbedError("injected failure")
        return real_embed(self, texts, **options)

    monkeypatch.setattr(Embedder, "embed_documents", flaky)
    config = load_config(config_for(tmp_path, vault), env={})
    with open_index(config, env={}) as index:
        summary = index.indexer.reconcile()
        # Every note reached the keyword index (the keyword phase); one failed for vectors.
        assert summary.notes_failed == 1 and summary.notes_changed == 7
        assert [f["path"] for f in summary.failures] == ["poison.md"]
        hits = index.searcher.search(SearchQuery("plain words", k=10, mode="keyword")).hits
        assert len({h.path for h in hits}) == 6 and all(h.indexed for h in hits)
        poison = index.searcher.search(SearchQuery("upsets the model", k=3, mode="keyword")).hits
        assert [(h.path, h.indexed) for h in poison][:1] == [("poison.md", False)]
        assert [f[0] for f in index.manifest.failures.failed()] == ["poison.md"]
        assert not [r for r in export_records(index.store) if r["metadata"]["path"] == "poison.md"]


def test_a_note_failing_after_its_first_vectors_were_written_is_searchable_by_its_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword phase records the new text before any vector is made; when the model then
    fails on part of it, the note is reported failed, is found by its new words, and the store
    holds only what has a vector now: nothing of the old text answers a vector search."""
    vault = make_vault(tmp_path)
    victim = vault / "victim.md"
    victim.write_text("# Victim\n\n## One\n\nFirst version, heron.\n\n## Two\n\nOld two.\n")
    config = load_config(config_for(tmp_path, vault), env={})
    real_embed = Embedder.embed_documents

    def fails_late(self: Embedder, texts: Any, *, ready: Any = None, **options: Any) -> Any:
        # Injected fault: the run holding the poison text fails after the others delivered.
        if not any("POISON" in t for t in texts):
            return real_embed(self, texts, ready=ready, **options)
        if ready is None:
            raise EmbedError("injected failure")
        clean = [i for i, t in enumerate(texts) if "POISON" not in t]
        vectors = real_embed(self, [texts[i] for i in clean])
        ready(clean, vectors)
        raise EmbedError("injected failure after the other runs")

    with open_index(config, env={}) as index:
        assert index.indexer.reconcile().notes_failed == 0
        victim.write_text(
            "# Victim\n\n## One\n\nSecond version, egret.\n\n## Two\n\nNew two: POISON.\n"
        )
        (vault / "sub" / "good0.md").write_text("# Good 0\n\nPlain words, changed.\n")
        monkeypatch.setattr(Embedder, "embed_documents", fails_late)
        summary = index.indexer.reconcile()
        assert [f["path"] for f in summary.failures] == ["victim.md"]
        assert [f[0] for f in index.manifest.failures.failed()] == ["victim.md"]
        assert [
            h.path for h in index.searcher.search(SearchQuery("heron", k=5, mode="keyword")).hits
        ] == []
        assert [
            h.path for h in index.searcher.search(SearchQuery("egret", k=5, mode="keyword")).hits
        ] == ["victim.md"]
        stored = {c.chunk.id: c.chunk.text for c in index.manifest.notes.chunks_of("victim.md")}
        published = {
            r["id"]: r["document"]
            for r in export_records(index.store)
            if r["metadata"]["path"] == "victim.md"
        }
        # Only the chunk whose vector was made; each as the manifest has it.
        assert [t for t in published.values() if "egret" in t]
        assert all(stored[i] == text for i, text in published.items())
        assert not [t for t in published.values() if "POISON" in t or "heron" in t]
        assert (
            "changed" in index.searcher.search(SearchQuery("plain words changed", k=1)).hits[0].text
        )
        # Fixed: the next pass embeds it, and it is no failure any more.
        monkeypatch.setattr(Embedder, "embed_documents", real_embed)
        assert index.indexer.reconcile().notes_failed == 0
        assert index.manifest.failures.failed() == []
        assert index.manifest.vectors.awaiting_totals(index.embedder.model_id).chunks == 0


def test_a_newly_excluded_note_is_removed_from_the_index(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    (vault / "Private").mkdir()
    (vault / "Private" / "diary.md").write_text("# Diary\n\nSecret thoughts about otters.\n")
    runner = CliRunner()
    first = runner.invoke(main, ["index", "-q", "--config", str(config_for(tmp_path, vault))])
    assert first.exit_code == 0, first.output
    excluded = config_for(tmp_path, vault, 'exclude = ["Private/"]')
    second = runner.invoke(main, ["index", "-q", "--json", "--config", str(excluded)])
    assert second.exit_code == 0, second.output
    assert '"notes_deleted": 1' in second.stdout
    search = runner.invoke(main, ["search", "otters", "--json", "--config", str(excluded)])
    assert "diary" not in search.stdout


def test_a_second_process_on_the_same_data_directory_is_refused(tmp_path: Path) -> None:
    vault = make_vault(tmp_path)
    config_path = config_for(tmp_path, vault)
    config = load_config(config_path, env={})
    with open_index(config, env={}):
        result = CliRunner().invoke(main, ["index", "--config", str(config_path)])
    assert result.exit_code == 75
    assert "another vaultd process" in result.output
    assert str(os.getpid()) in result.output


def test_notes_in_a_folder_that_cannot_be_read_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """chmod 000 on a folder: its notes stay indexed (stale, not deleted) until it is back.

    Tests run as root here, which reads through any mode, so the denial is injected.
    """
    from vaultd.pipeline.discover import Discovery

    vault = make_vault(tmp_path)
    config = load_config(config_for(tmp_path, vault), env={})
    with open_index(config, env={}) as index:
        assert index.indexer.reconcile().notes_changed == 6
        real_list = Discovery._list

        def denied(self: Discovery, path: str, rel: str) -> Any:
            if rel == "sub":
                self._skip(rel + "/", "permission denied")
                return None
            return real_list(self, path, rel)

        monkeypatch.setattr(Discovery, "_list", denied)
        summary = index.indexer.reconcile()
        assert summary.notes_deleted == 0
        assert {"path": "sub/", "reason": "permission denied"} in summary.skipped
        assert index.manifest.counts()["notes"] == 6
        monkeypatch.setattr(Discovery, "_list", real_list)
        assert index.indexer.reconcile().notes_deleted == 0


@pytest.mark.parametrize("when", ["after the walk", "after the hash"])
def test_a_note_written_again_during_a_pass_is_recorded_with_the_stat_it_was_read_under(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A save with the same bytes between the walk's stat and the reads must not leave the
    walk's older mtime in the manifest: every later start would read that note again."""
    vault = make_vault(tmp_path)
    note = vault / "sub" / "good3.md"
    config = load_config(config_for(tmp_path, vault), env={})

    def saved_again() -> None:
        st = note.stat()
        note.write_bytes(note.read_bytes())
        os.utime(note, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))

    with open_index(config, env={}) as index:
        indexer = index.indexer
        if when == "after the walk":
            real_walk = indexer.discovery.walk

            def walk() -> Any:
                yield from real_walk()
                saved_again()

            monkeypatch.setattr(indexer.discovery, "walk", walk)
        else:
            real_read = indexer.reader.read
            reads: list[str] = []

            def read(path: str) -> Any:
                out = real_read(path)
                reads.append(path)
                if path == "sub/good3.md" and reads.count(path) == 1:
                    saved_again()
                return out

            monkeypatch.setattr(indexer.reader, "read", read)
        assert indexer.reconcile().notes_changed == 6
        monkeypatch.undo()
        # Notes changed within a timestamp tick of their read are read again (racily clean,
        # see pipeline/detect.py) until a tick has passed; never touched, which they would be
        # with the walk's stat recorded.
        deadline = time.monotonic() + 60
        while (again := indexer.reconcile()).notes_read:
            assert (again.notes_touched, again.notes_changed) == (0, 0)
            assert time.monotonic() < deadline, "notes read on every pass"
    assert (again.notes_read, again.notes_touched, again.notes_unchanged) == (0, 0, 6)


def test_a_moved_note_written_again_before_it_is_indexed_is_indexed_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A move whose new file changes after it was hashed must not keep the old chunks."""
    vault = make_vault(tmp_path)
    config = load_config(config_for(tmp_path, vault), env={})
    with open_index(config, env={}) as index:
        indexer = index.indexer
        indexer.reconcile()
        moved = vault / "sub" / "moved.md"
        (vault / "sub" / "good2.md").rename(moved)
        real_read = indexer.reader.read

        def read(path: str) -> Any:
            out = real_read(path)
            if path == "sub/moved.md":  # the hash read: edited before the parse reads it
                moved.write_text("# Moved\n\nRewritten about a kingfisher.\n")
                monkeypatch.setattr(indexer.reader, "read", real_read)
            return out

        monkeypatch.setattr(indexer.reader, "read", read)
        summary = indexer.reconcile()
        assert summary.notes_failed == 0
        paths = {r["metadata"]["path"]: r["document"] for r in export_records(index.store)}
        assert "sub/good2.md" not in paths
        assert "kingfisher" in paths["sub/moved.md"]
        hits = index.searcher.search(SearchQuery("kingfisher", k=1, mode="keyword")).hits
        assert [h.path for h in hits] == ["sub/moved.md"]
