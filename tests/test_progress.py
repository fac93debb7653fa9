"""Progress of a long pass: bytes of text done, and the time left from measured throughput."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import FakeClock, shared_path
from vaultd.cli.commands import main
from vaultd.config import load_config
from vaultd.index.open import open_index
from vaultd.progress import COPY_SHARE, MIN_SECONDS, Snapshot, Tracker, estimate, text_weight


def test_estimate_is_the_rest_at_the_average_rate_so_far() -> None:
    assert estimate(250, 1000, 10.0) == pytest.approx(30.0)
    assert estimate(1000, 1000, 40.0) == 0.0


def test_no_estimate_before_there_is_anything_to_measure() -> None:
    assert estimate(0, 1000, 60.0) is None
    assert estimate(500, 1000, MIN_SECONDS / 2) is None
    assert estimate(5, 1000, 60.0) is None  # under 1% done
    assert estimate(0, 0, 60.0) is None


def test_the_text_of_a_note_is_its_bytes_less_its_comments() -> None:
    assert text_weight(b"# Plain\n\nWords.\n") == 16
    note = b"# A\n<!-- - Twitter: <https://> -->\nkept %% a hidden\nnote %% too\n"
    assert text_weight(note) == len(b"# A\n\nkept  too\n")
    # Unclosed, it is not a comment.
    assert text_weight(b"50%% off <!-- no end") == 20
    # A copy of content already seen has its texts embedded: it counts a share.
    assert text_weight(b"x" * 1000, copy=True) == round(1000 * COPY_SHARE)


def test_tracker_restarts_its_clock_with_each_phase() -> None:
    clock = FakeClock()
    tracker = Tracker(clock)
    assert tracker.snapshot() is None
    tracker("hash", 0, 10)
    clock.now += 50
    tracker("hash", 10, 10)
    tracker("index", 0, 4000)
    clock.now += 20
    tracker("index", 1000, 4000)
    snap = tracker.snapshot()
    assert snap is not None
    assert (snap.phase, snap.unit, snap.done, snap.total) == ("index", "bytes", 1000, 4000)
    assert snap.elapsed_s == pytest.approx(20.0)
    assert snap.eta_s == pytest.approx(60.0)
    assert Snapshot.from_json(snap.as_json()) == snap
    assert snap.as_json()["percent"] == 25.0
    tracker.clear()
    assert tracker.snapshot() is None


def write_config(tmp_path: Path, vault: Path) -> Path:
    config_file = tmp_path / "vaultd.toml"
    config_file.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n'
        '[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )
    return config_file


@pytest.mark.slow
def test_index_reports_bytes_then_tokens_as_they_are_embedded(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    shutil.copytree(shared_path("corpora", "kepano-obsidian"), vault)
    config_file = write_config(tmp_path, vault)
    # A copied folder: its notes count a share of their bytes, whichever is met first.
    shutil.copytree(vault / "Templates", vault / "Templates copy")
    seen: set[bytes] = set()
    sizes = 0
    for data in (p.read_bytes() for p in vault.rglob("*.md")):
        sizes += text_weight(data, copy=data in seen)
        seen.add(data)
    assert len(seen) < len(list(vault.rglob("*.md")))
    reports: list[tuple[str, int, int]] = []
    with open_index(load_config(config_file, env={})) as index:
        index.embedder.batch_size = 8  # several runs within the one batch
        summary = index.indexer.reconcile(lambda *report: reports.append(report))
        tokens = sum(
            c.chunk.tokens
            for p in index.manifest.notes.paths()
            for c in index.manifest.notes.chunks_of(p)
        )
    assert summary.chunks_embedded > 40
    phases = [phase for phase, _, _ in reports]
    # The keyword phase (bytes of text), then the embedding phase (tokens), never back.
    assert phases.index("embed") > max(i for i, p in enumerate(phases) if p == "index")
    done = [d for phase, d, total in reports if phase == "index"]
    totals = {total for phase, _, total in reports if phase == "index"}
    assert totals == {sizes}
    assert done[0] == 0 and done[-1] == sizes
    assert done == sorted(done), "progress never goes back"
    done = [d for phase, d, total in reports if phase == "embed"]
    totals = {total for phase, _, total in reports if phase == "embed"}
    assert totals == {tokens}, "every chunk awaited its vector"
    assert done[0] == 0 and done[-1] == tokens and done == sorted(done)
    # It moves with the embedding runs, not only when the batch is written.
    assert len(set(done)) >= 6


@pytest.mark.slow
def test_index_prints_progress_lines_when_not_on_a_terminal(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "vault", vault)
    config_file = write_config(tmp_path, vault)
    result = CliRunner().invoke(main, ["index", "--config", str(config_file)])
    assert result.exit_code == 0, result.output
    assert "index: 100% (" in result.stderr and "KiB of text)" in result.stderr
