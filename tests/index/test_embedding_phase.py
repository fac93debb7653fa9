"""index/embedding_phase: the chunks awaiting vectors embedded and published, all of them or
only those of the notes asked for."""

from __future__ import annotations

from pathlib import Path

from tests.index.phases import keyword_pass, paths_in_store
from tests.small_vault import indexed
from vaultd.index.passes import quiet

NOTES = {"a.md": "# A\n\nThe keeper climbs the stairs.\n"}


def test_what_awaits_is_embedded_and_published(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        vault, phase, model = index.vault, index.indexer.embedding, index.indexer.model_id
        (vault / "c.md").write_text("# C\n\nThe lantern room.\n", encoding="utf-8")
        (vault / "d.md").write_text("# D\n\nThe fog horn.\n", encoding="utf-8")
        keyword_pass(index)
        waiting = len(index.manifest.vectors.awaiting(model, 100))
        made, embedded = phase.vectors_made, index.embedder.embedded

        phase.run(quiet)

        assert waiting >= 2
        assert index.embedder.embedded - embedded == waiting
        assert phase.vectors_made - made == waiting
        assert index.manifest.vectors.awaiting(model, 100) == []
        assert paths_in_store(index) == {"a.md", "c.md", "d.md"}
        assert index.indexer.sync.sync() == 0


def test_only_the_notes_asked_for_are_embedded(tmp_path: Path) -> None:
    with indexed(tmp_path, NOTES) as index:
        vault, phase, model = index.vault, index.indexer.embedding, index.indexer.model_id
        (vault / "c.md").write_text("# C\n\nThe lantern room.\n", encoding="utf-8")
        (vault / "d.md").write_text("# D\n\nThe fog horn.\n", encoding="utf-8")
        keyword_pass(index)

        phase.run(quiet, ["c.md"])
        assert index.manifest.vectors.awaiting_paths(model, ["c.md", "d.md"]) == {"d.md"}
        assert paths_in_store(index) == {"a.md", "c.md"}

        phase.run(quiet, [])  # nothing asked for: nothing done
        assert index.manifest.vectors.awaiting_paths(model, ["d.md"]) == {"d.md"}
