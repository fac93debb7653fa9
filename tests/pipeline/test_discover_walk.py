"""pipeline/discover/walk: every note under the vault, streamed in order, and what the walk
left out that a user would want to hear about."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vaultd.errors import VaultdError
from vaultd.pipeline.discover.rules import UNDECODABLE, IgnoreRules
from vaultd.pipeline.discover.walk import Discovery, file_state
from vaultd.records import FileState


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    root.mkdir()
    for rel in ("b.md", "a/z.md", "a/y/x.md", "c.txt", "d.pdf", ".obsidian/app.md"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# note\n")
    return root


def test_file_state_is_the_stat_of_the_note(vault: Path) -> None:
    st = os.stat(vault / "b.md")
    assert file_state("b.md", st, 5) == FileState(
        "b.md", st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, 5
    )


def test_walk_is_depth_first_in_name_order_and_counts_other_kinds(vault: Path) -> None:
    discovery = Discovery(vault, IgnoreRules())
    assert [s.path for s in discovery.walk()] == ["a/y/x.md", "a/z.md", "b.md"]
    assert discovery.unindexed == {"other": 1, "pdf": 1}
    assert discovery.skipped == []


def test_a_walk_under_way_reports_what_the_last_one_left_out_until_it_is_done(
    vault: Path,
) -> None:
    """Status listed what the walk left out from the list a walk under way was filling again:
    every scheduled rescan showed it emptied, then refilled as the walk went."""
    (vault / "zz").mkdir()
    (vault / "zz" / "a.md").write_text("# A note met before the name below\n")
    (vault / "zz" / os.fsdecode(b"caf\xe9.md")).write_bytes(b"# Cafe\n")
    discovery = Discovery(vault, IgnoreRules())
    list(discovery.walk())
    left_out = list(discovery.skipped)
    assert left_out == [("zz/caf\\xe9.md", UNDECODABLE)]
    for walk in (discovery.walk(), discovery.walk_under("zz")):
        next(walk)
        assert discovery.reported == left_out
        list(walk)
        assert discovery.reported == discovery.skipped == left_out


def test_walk_under_finds_one_subtree(vault: Path) -> None:
    discovery = Discovery(vault, IgnoreRules())
    assert [s.path for s in discovery.walk_under("a/y")] == ["a/y/x.md"]
    assert list(discovery.walk_under(".obsidian")) == []


def test_a_note_over_the_cap_is_left_out_by_walk_and_state_of(vault: Path) -> None:
    (vault / "big.md").write_bytes(b"x" * 4096)
    discovery = Discovery(vault, IgnoreRules(max_file_mb=0.001))
    assert "big.md" not in [s.path for s in discovery.walk()]
    assert set(discovery.left_out) == {"big.md"}
    assert discovery.skipped[0][0] == "big.md"
    discovery.left_out.clear()
    assert discovery.state_of("big.md") is None
    assert set(discovery.left_out) == {"big.md"}


def test_state_of_agrees_with_the_walk(vault: Path) -> None:
    discovery = Discovery(vault, IgnoreRules())
    walked = {s.path: s for s in discovery.walk()}
    assert discovery.state_of("a/z.md") == walked["a/z.md"]
    assert discovery.state_of(".obsidian/app.md") is None
    assert discovery.state_of("c.txt") is None
    assert discovery.state_of("gone.md") is None


def test_an_unreadable_vault_is_an_error_not_an_empty_vault(tmp_path: Path) -> None:
    with pytest.raises(VaultdError):
        list(Discovery(tmp_path / "absent", IgnoreRules()).walk())


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_an_unreadable_folder_is_reported_as_unreadable(vault: Path) -> None:
    locked = vault / "a"
    locked.chmod(0)
    try:
        discovery = Discovery(vault, IgnoreRules())
        assert [s.path for s in discovery.walk()] == ["b.md"]
        assert discovery.unreadable == [("a/", "permission denied")]
    finally:
        locked.chmod(0o755)


def test_links_loops_and_undecodable_names_are_reported(tmp_path: Path, vault: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "s.md").write_text("s\n")
    (vault / "out").symlink_to(outside)
    (vault / "a" / "loop").symlink_to(vault / "a")
    (vault / os.fsdecode(b"bad\xff.md")).write_text("x\n")
    plain = Discovery(vault, IgnoreRules())
    assert [s.path for s in plain.walk()] == ["a/y/x.md", "a/z.md", "b.md"]
    assert plain.skipped == [("bad\\xff.md", UNDECODABLE)]
    following = Discovery(vault, IgnoreRules(follow_symlinks=True))
    assert [s.path for s in following.walk()] == ["a/y/x.md", "a/z.md", "b.md"]
    assert ("a/loop/", "symlink loop") in following.skipped
    assert ("out/", "symlink points outside the vault") in following.skipped


def test_report_undecodable_adds_and_drops_names(vault: Path) -> None:
    name = os.fsdecode(b"bad\xff.md")
    discovery = Discovery(vault, IgnoreRules())
    (vault / name).write_text("x\n")
    discovery.report_undecodable([name])
    assert discovery.skipped == [("bad\\xff.md", UNDECODABLE)]
    (vault / name).unlink()
    discovery.report_undecodable([name])
    assert discovery.skipped == []
