"""End to end on a copy of Obsidian's help vault, with the real model and embedded Chroma.

The counts `vaultd index --json` prints are the contract: work is spent only on what changed.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import shared_path
from vaultd.cli.commands import main
from vaultd.embedding.tokens import TokenCounter
from vaultd.pipeline.chunk import chunk_note
from vaultd.pipeline.detect import GRANULARITY_NS
from vaultd.pipeline.parse import parse_note

pytestmark = [pytest.mark.corpus, pytest.mark.slow]


def write_config(path: Path, vault: Path, store: Path) -> Path:
    path.write_text(
        f'[vault]\npath = "{vault}"\n\n[store]\npath = "{store}"\n\n[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )
    return path


def run(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def index(config: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads(run("index", "--json", "-q", "--config", str(config)))
    return summary


def export(config: Path) -> list[dict[str, Any]]:
    out = run("export", "--with-vectors", "--config", str(config))
    return [json.loads(line) for line in out.splitlines() if line]


def search(config: Path, query: str, *extra: str) -> list[dict[str, Any]]:
    out = run("search", query, "--json", "-k", "20", "--config", str(config), *extra)
    hits: list[dict[str, Any]] = json.loads(out)["hits"]
    return hits


def vault_hashes(vault: Path, counter: TokenCounter) -> set[str]:
    hashes: set[str] = set()
    for file in vault.rglob("*.md"):
        note = parse_note(file.relative_to(vault).as_posix(), file.read_bytes())
        hashes.update(c.hash for c in chunk_note(note, counter, 256))
    return hashes


def has_own_title(file: Path) -> bool:
    """The title comes from frontmatter or an H1, not from the file name."""
    return parse_note(file.name, file.read_bytes()).title != file.stem


HELP_FOLDERS = ("Bases", "Editing and formatting")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("help")
    # Two of its folders and the notes at its root, 343 distinct chunks (more than one
    # commit's worth): what the test counts needs hundreds of chunks, not all of them.
    help_vault = shared_path("corpora", "obsidian-help", "en")
    for name in HELP_FOLDERS:
        shutil.copytree(help_vault / name, root / "vault" / name)
    for note in help_vault.glob("*.md"):
        shutil.copy2(note, root / "vault" / note.name)
    # A note hashed within a timestamp tick of its last change (the copy set its ctime) is read
    # again by the next pass (pipeline/detect.py): the tests below count reads.
    changed = max(f.stat().st_ctime_ns for f in (root / "vault").rglob("*"))
    while time.time_ns() <= changed + GRANULARITY_NS:
        time.sleep(0.05)
    return root


# It embeds part of the help vault twice (the first index and the fresh one compared at the
# end): about 340 chunks each time, a quarter of a minute of CPU, several times that on a
# busy machine. The limit guards against a hang, not for speed.
@pytest.mark.timeout(1800)
def test_incremental_runs_spend_work_only_on_changes(
    workspace: Path, counter: TokenCounter
) -> None:
    vault = workspace / "vault"
    config = write_config(workspace / "config.toml", vault, workspace / "data")
    notes = sorted(vault.rglob("*.md"))

    first = index(config)
    assert first["notes_seen"] == len(notes) == first["notes_changed"]
    assert first["notes_failed"] == 0
    # Identical texts share one embedding: exactly the distinct embedded texts are embedded.
    assert first["chunks_embedded"] == len(vault_hashes(vault, counter)) > 300

    second = index(config)
    assert second["chunks_embedded"] == 0
    assert second["notes_unchanged"] == len(notes)
    # A stat walk: no note is opened.
    assert second["notes_read"] == 0

    later = 2_000_000_000 * 10**9
    for file in notes:
        os.utime(file, ns=(later, later))
    touched = index(config)
    assert touched["notes_touched"] == len(notes)
    assert touched["chunks_embedded"] == 0 and touched["notes_changed"] == 0
    assert touched["notes_read"] == len(notes)  # hashed, not parsed

    # Ten renames: notes moved to another folder, and a note with a title of its own given a
    # new file name. Neither changes an embedded text, so a fresh index must agree exactly at
    # the end; a rename that changes a title taken from the file name is tested below.
    titled = [f for f in notes if has_own_title(f)][:1]
    others = [f for f in notes if f not in titled and f.parent != vault][:9]
    assert len(titled) + len(others) == 10
    renamed: dict[str, str] = {}
    (vault / "Moved here").mkdir()
    for file in titled:
        target = file.with_name("Renamed " + file.name)
        file.rename(target)
        renamed[file.relative_to(vault).as_posix()] = target.relative_to(vault).as_posix()
    for file in others:
        target = vault / "Moved here" / file.name
        file.rename(target)
        renamed[file.relative_to(vault).as_posix()] = target.relative_to(vault).as_posix()
    moved = index(config)
    assert moved["notes_moved"] == 10
    assert moved["chunks_embedded"] == 0 and moved["notes_changed"] == 0
    assert moved["notes_deleted"] == 0
    records = export(config)
    paths_in_store = {r["metadata"]["path"] for r in records}
    assert not paths_in_store & set(renamed), "old paths left in the store"
    assert set(renamed.values()) <= paths_in_store
    for old, new in renamed.items():
        title = (vault / new).stem
        hits = search(config, title, "--mode", "keyword")
        assert all(h["path"] != old for h in hits)
    new_path = renamed[others[0].relative_to(vault).as_posix()]
    first_text = next(r["document"] for r in records if r["metadata"]["path"] == new_path)
    hits = search(config, first_text[:200])
    assert hits[0]["path"] == new_path

    # Appending a paragraph to ten notes embeds only the chunks whose embedded text changed.
    before = vault_hashes(vault, counter)
    edited = sorted(vault.rglob("*.md"))[:10]
    for file in edited:
        with file.open("a", encoding="utf-8") as handle:
            handle.write("\n\nA closing remark about the quokka population of Rottnest Island.\n")
    expected = len(vault_hashes(vault, counter) - before)
    appended = index(config)
    assert appended["notes_changed"] == 10
    assert appended["chunks_embedded"] == expected
    assert 10 <= expected <= 20
    assert appended["chunks_reused"] > 0
    hits = search(config, "quokka Rottnest", "--mode", "keyword")
    assert {h["path"] for h in hits} == {f.relative_to(vault).as_posix() for f in edited}

    # Deleting a note removes its chunks.
    victim = edited[0]
    victim_path = victim.relative_to(vault).as_posix()
    victim_chunks = sum(1 for r in export(config) if r["metadata"]["path"] == victim_path)
    victim.unlink()
    deleted = index(config)
    assert deleted["notes_deleted"] == 1
    assert deleted["chunks_deleted"] == victim_chunks > 0
    assert deleted["chunks_embedded"] == 0
    assert all(r["metadata"]["path"] != victim_path for r in export(config))

    # After all that, the store equals a fresh index of the final vault.
    incremental = export(config)
    fresh_config = write_config(workspace / "fresh.toml", vault, workspace / "fresh-data")
    index(fresh_config)
    fresh = export(fresh_config)
    assert [r["id"] for r in incremental] == [r["id"] for r in fresh]
    for mine, theirs in zip(incremental, fresh, strict=True):
        assert mine["document"] == theirs["document"]
        assert mine["metadata"] == theirs["metadata"], mine["id"]
        assert np.allclose(mine["vector"], theirs["vector"], atol=1e-5), mine["id"]


def test_rename_of_a_file_named_note_costs_no_embedding(tmp_path: Path) -> None:
    """A title taken from the file name changes with a rename; the vectors are kept."""
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Old name.md").write_text("Some words about gardening.\n", encoding="utf-8")
    config = write_config(tmp_path / "c.toml", vault, tmp_path / "data")
    index(config)
    (vault / "Old name.md").rename(vault / "New name.md")
    summary = index(config)
    assert summary["notes_moved"] == 1 and summary["chunks_embedded"] == 0
    [record] = export(config)
    assert record["metadata"]["path"] == "New name.md"
    assert record["metadata"]["title"] == "New name"
    [hit] = search(config, "New name", "--mode", "keyword")
    assert hit["path"] == "New name.md"


def test_a_pass_keeps_serving_edits_after_the_first_one_it_served(tmp_path: Path) -> None:
    """A fresh edit is served by a pass run from the long pass's pause point; the long pass
    must call its pause point again afterwards, for the next edit."""
    from harness.daemon import short_socket_dir, write_config
    from vaultd.config import load_config
    from vaultd.index.open import open_index
    from vaultd.index.passes import Pacing

    vault = tmp_path / "vault"
    vault.mkdir()
    for i in range(12):
        (vault / f"n{i:02}.md").write_text(f"# Note {i}\n\nParagraph {i} of the vault.\n", "utf-8")
    config = write_config(tmp_path / "c.toml", vault, tmp_path / "data", short_socket_dir() / "s")
    calls: list[int] = []
    with open_index(load_config(config, env={}), env={}, pacing=Pacing(batch_chunks=2)) as index:

        def pause(in_flight: frozenset[str]) -> None:
            calls.append(len(calls))
            if len(calls) == 1:
                (vault / "fresh.md").write_text("# Fresh\n\nAn edit.\n", encoding="utf-8")
                index.indexer.reconcile_paths(["fresh.md"], pause=pause)

        index.indexer.reconcile(pause=pause)
    # Batches of 2 chunks: the long pass pauses between each of its 6 batches, also after
    # the nested pass has returned.
    assert len(calls) >= 5, calls
