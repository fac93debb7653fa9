"""Trusting only what the user owns: the paths vaultd reads its index, its record and its
socket from.

Another local user must not be able to plant what vaultd reads (a `daemon.json` sending the
CLI to their server, a `vaultd.db` they can read) nor swap a directory or a symlink on the way
to it. So a path is trusted only when every component on the way to it, walked as the kernel
walks it (each symlink followed where it stands, and its own directory checked too), is owned
by the user or by root and cannot be changed by anyone else: not writable by group or others,
except a sticky directory owned by the user or root (like /tmp, where no one can rename or
remove another's entry) or a group-writable one whose group is the user's private group (the
rule OpenSSH's `secure_path` applies to `~/.ssh`, with Debian's user-group exception).

The thing itself (the data directory and what is in it, the socket's directory, the record)
must be the user's own, and a sticky directory does not count there: anyone could add a name
to it.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from vaultd.errors import TrustError

#: Linux's limit on symlinks followed in one lookup; past it the path is refused (ELOOP).
MAX_LINKS = 40


@dataclass(frozen=True, slots=True)
class Distrust:
    """Why `path` cannot be trusted: who owns it, and what others may do to it."""

    path: Path
    #: "owner" (another user owns it) or "writable" (others may change it).
    kind: str
    uid: int
    mode: int

    def describe(self) -> str:
        if self.kind == "owner":
            return f"{self.path} belongs to {user_name(self.uid)}, not to you"
        who = "its group" if self.mode & 0o002 == 0 else "every user"
        return f"{self.path} is writable by {who} (mode {stat.S_IMODE(self.mode):03o})"


def user_name(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _trusted_owner(uid: int, me: int) -> bool:
    return uid in (me, 0)


def _private_group(gid: int, owner: int) -> bool:
    """Whether `gid` has exactly one member, `owner` (a user private group)."""
    try:
        group = grp.getgrgid(gid)
        name = pwd.getpwuid(owner).pw_name
    except KeyError:
        return False
    if any(member != name for member in group.gr_mem):
        return False
    primary = [p.pw_uid for p in pwd.getpwall() if p.pw_gid == gid]
    return all(uid == owner for uid in primary) and bool(primary or group.gr_mem)


def _problem(path: Path, info: os.stat_result, me: int, *, own: bool) -> Distrust | None:
    """What is wrong with one component: `own` for the thing itself (the user's alone, and
    no one else may add to it), else a directory or link on the way to it."""
    if not (info.st_uid == me if own else _trusted_owner(info.st_uid, me)):
        return Distrust(path, "owner", info.st_uid, info.st_mode)
    if stat.S_ISLNK(info.st_mode):
        return None  # a link's mode means nothing; who may replace it is its directory's say
    if not info.st_mode & 0o022:
        return None
    if not own and stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX:
        return None  # like /tmp: others may add names, never rename or remove ours
    if not info.st_mode & 0o002 and _private_group(info.st_gid, info.st_uid):
        return None
    return Distrust(path, "writable", info.st_uid, info.st_mode)


def distrust(path: Path, *, me: int | None = None, tighten: bool = False) -> Distrust | None:
    """The first reason `path` cannot be trusted, walking it from the root; None if it can.

    Components that do not exist yet (or cannot be looked at) are not judged: whoever creates
    them owns them, and the caller checks what it created. The path's last component must be
    the user's own; with `tighten` it may be open to others' writes, for a caller that makes
    it private next.
    """
    me = os.getuid() if me is None else me
    # Not normalised: "link/.." is where the link leads, then up, as the kernel takes it.
    pending = list((path if path.is_absolute() else Path.cwd() / path).parts[1:])
    current = Path("/")
    found = _problem(current, os.lstat(current), me, own=False)
    if found is not None:
        return found
    links = 0
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent
            continue
        candidate = current / name
        try:
            info = os.lstat(candidate)
        except OSError:
            # Missing, or a file where a directory is: nothing there to trust or distrust,
            # and the caller's own open fails with the reason.
            return None
        last = not pending
        own = last and not stat.S_ISLNK(info.st_mode)
        found = _problem(candidate, info, me, own=own)
        if found is not None and not (tighten and own and found.kind == "writable"):
            return found
        if stat.S_ISLNK(info.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise TrustError(f"cannot check {path}: too many symbolic links on the way")
            target = Path(os.readlink(candidate))
            pending = list(target.parts) + pending
            if target.is_absolute():
                current = Path("/")
                pending = pending[1:]
            continue
        current = candidate
    return None


def foreign(root: Path, *, me: int | None = None) -> list[Distrust]:
    """Everything under `root` that another user owns (chmod cannot take it back)."""
    me = os.getuid() if me is None else me
    found: list[Distrust] = []
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            entry = Path(directory) / name
            try:
                info = os.lstat(entry)
            except OSError:
                continue
            if info.st_uid != me:
                found.append(Distrust(entry, "owner", info.st_uid, info.st_mode))
    return found


def check_path(path: Path, what: str, advice: str, *, tighten: bool = False) -> None:
    """Raise TrustError naming `what` (e.g. "the data directory") when `path`, or anything on
    the way to it, is another user's or open to their writes; `advice` says what to do.
    `tighten` as for `distrust`."""
    found = distrust(path, tighten=tighten)
    if found is not None:
        raise TrustError(_message(path, what, found, advice))


def check_tree(root: Path, what: str, advice: str, *, tighten: bool = False) -> None:
    """`check_path` for `root`, then refuse anything in it that another user owns."""
    check_path(root, what, advice, tighten=tighten)
    planted = foreign(root)
    if planted:
        names = ", ".join(p.describe() for p in planted[:5])
        more = f" and {len(planted) - 5} more" if len(planted) > 5 else ""
        raise TrustError(
            f"{what} {root} holds files of another user: {names}{more}; they may have been "
            f"planted, and you cannot make them private. {advice}"
        )


def _message(path: Path, what: str, found: Distrust, advice: str) -> str:
    where = "" if found.path == Path(os.path.abspath(path)) else f" (on the way to {path})"
    return (
        f"refusing {what}: {found.describe()}{where}, so another user could plant or swap "
        f"what vaultd reads there. {advice}"
    )
