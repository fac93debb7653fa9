"""The walk that decides whether a path can be trusted (vaultd.trust), on real directories.

The end-to-end attacks, with a real second user, are in tests/reliability/test_other_user.py.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from vaultd.api.client import peer_uid
from vaultd.errors import TrustError
from vaultd.trust import MAX_LINKS, distrust

NOBODY = 65534


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True)
    return path


def needs_root() -> None:
    if os.getuid() != 0:
        pytest.skip("giving files to another uid needs root")


def test_a_private_path_is_trusted(tmp_path: Path) -> None:
    assert distrust(private(tmp_path / "a" / "b")) is None
    # What does not exist yet is not judged: whoever creates it owns it.
    assert distrust(tmp_path / "a" / "b" / "not yet" / "c") is None


@pytest.mark.parametrize("bits", [0o777, 0o757, 0o722])
def test_a_directory_others_can_write_is_distrusted_above_and_as_the_target(
    tmp_path: Path, bits: int
) -> None:
    shared = private(tmp_path / "shared")
    shared.chmod(bits)
    below = private(shared / "mine")
    for path in (shared, below):
        found = distrust(path)
        assert found is not None and found.path == shared and found.kind == "writable"
    # A caller about to make its own directory private may take it open (never one above).
    assert distrust(shared, tighten=True) is None
    assert distrust(below, tighten=True) is not None


def test_a_sticky_directory_is_trusted_above_but_not_as_the_target(tmp_path: Path) -> None:
    sticky = private(tmp_path / "tmp")
    sticky.chmod(0o1777)
    assert distrust(private(sticky / "mine")) is None
    found = distrust(sticky)
    assert found is not None and found.kind == "writable"


def test_another_users_directory_above_or_link_on_the_way(tmp_path: Path) -> None:
    needs_root()
    theirs = private(tmp_path / "theirs")
    os.chown(theirs, NOBODY, NOBODY)
    mine = private(theirs / "mine")
    found = distrust(mine)
    assert found is not None and found.path == theirs and found.kind == "owner"
    assert "uid 65534" in found.describe()
    # Their link in a sticky directory: they may replace it whenever they like.
    sticky = private(tmp_path / "sticky")
    sticky.chmod(0o1777)
    link = sticky / "link"
    link.symlink_to(private(tmp_path / "real"))
    os.lchown(link, NOBODY, NOBODY)
    found = distrust(link / "x")
    assert found is not None and found.path == link


def test_links_are_followed_as_the_kernel_follows_them(tmp_path: Path) -> None:
    """Each link's own directory is judged, then its target, relative or absolute, with `..`
    taken after the link (the real parent), not textually."""
    needs_root()
    theirs = private(tmp_path / "theirs")
    os.chown(theirs, NOBODY, NOBODY)
    target = private(tmp_path / "mine" / "deep")
    # An absolute link to a safe place, standing in their directory: distrusted.
    (tmp_path / "mine" / "to_theirs").symlink_to(theirs)
    (theirs / "back").symlink_to(target)
    found = distrust(tmp_path / "mine" / "to_theirs" / "back")
    assert found is not None and found.path == theirs
    # A relative link whose `..` leads into their directory.
    private(theirs / "inner")
    (target / "up").symlink_to("../../theirs/inner")
    found = distrust(target / "up")
    assert found is not None and found.path == theirs
    # `link/..` goes through the link, not around it as the text would: still distrusted.
    assert distrust(tmp_path / "mine" / "to_theirs" / ".." / "mine") is not None
    assert distrust(tmp_path / "mine" / "deep" / ".." / "deep") is None


def test_a_link_loop_is_refused(tmp_path: Path) -> None:
    mine = private(tmp_path / "mine")
    (mine / "a").symlink_to("b")
    (mine / "b").symlink_to("a")
    with pytest.raises(TrustError, match="too many symbolic links"):
        distrust(mine / "a" / "x")
    assert MAX_LINKS == 40


def test_group_writable_is_trusted_only_for_a_private_group(tmp_path: Path) -> None:
    needs_root()
    shared = private(tmp_path / "group")
    shared.chmod(0o770)
    os.chown(shared, 0, NOBODY)  # nobody's group: not root's alone
    found = distrust(private(shared / "mine"))
    assert found is not None and found.kind == "writable" and "its group" in found.describe()


def test_the_peer_uid_comes_from_the_kernel() -> None:
    if not hasattr(socket, "AF_UNIX"):
        pytest.skip("no Unix sockets")
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        assert peer_uid(left) == os.getuid()
