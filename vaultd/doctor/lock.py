"""The lock check, and with it how the index is judged: who holds the data directory decides
where the manifest and the store are read from.

With a daemon of this vault answering, the daemon owns the data directory, so the lock, the
manifest and the store are judged from its `/v1/health` and `/v1/status` and not touched.
Without one, doctor takes the lock only for the seconds it reads the store (never waiting for
it, never breaking it), reads the manifest through a query-only SQLite connection and probes
the store before it lists its ids (vaultd.doctor.chroma).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vaultd.config import Config
from vaultd.doctor.chroma import check_chroma
from vaultd.doctor.daemon import Answer, who_answers
from vaultd.doctor.manifest import check_manifest, troubled_check
from vaultd.doctor.report import READ_ONLY_REMEDY, Check, not_checked, quoted
from vaultd.errors import (
    DaemonStoppedError,
    DataDirError,
    LockedError,
    StoreError,
    TrustError,
    VaultdError,
)
from vaultd.hints import suggest
from vaultd.storage.lock import READERS, DataDirLock, Holder, LockHolder, holder_pid


def index_checks(
    config: Config, env: Mapping[str, str], vault: Path, data_dir: Path, model_id: str | None
) -> tuple[dict[str, Check], Mapping[str, Any] | None]:
    """socket, lock, manifest and chroma by name: through the daemon when one of this vault
    answers, else on disk; and the daemon's watch status when one answered."""
    socket, sock, answer = who_answers(config.server.socket, vault, data_dir, env)
    found = {} if socket is None else {"socket": socket}
    if sock is not None and answer.kind == "daemon" and answer.status.get("vault") == str(vault):
        found["lock"], found["manifest"], found["chroma"] = daemon_checks(
            answer, holder_pid(data_dir), sock, config.attachments.ocr
        )
        watch = answer.status.get("watch")
        return found, watch if isinstance(watch, dict) else None
    found["lock"], found["manifest"], found["chroma"] = _on_disk(
        config, env, vault, data_dir, model_id, sock
    )
    return found, None


def daemon_checks(
    answer: Answer, pid: int | None, path: Path, ocr_on: bool = False
) -> tuple[Check, Check, Check]:
    """(lock, manifest, chroma) as the running daemon reports them."""
    status = answer.status
    who = f"pid {pid}" if pid is not None else "pid unknown"
    lock = Check("lock", "ok", f"held by the running daemon ({who}), which answers on {path}")
    troubled = [
        (str(note.get("path", "")), kind, str(note.get("reason", "")))
        for kind in ("failed", "quarantined")
        for note in status.get(kind) or []
    ]
    left_out = status.get("left_out") or []
    troubled += [
        (str(entry.get("path", "")), "left_out", str(entry.get("reason", ""))) for entry in left_out
    ]
    kinds = {str(entry.get("path", "")): str(entry.get("kind", "")) for entry in left_out}
    in_part = [
        (str(entry.get("path", "")), str(entry.get("reason", "")))
        for entry in status.get("in_part") or []
    ]
    manifest = troubled_check(
        int(status.get("notes", 0)),
        int(status.get("chunks", 0)),
        troubled,
        kinds,
        in_part,
        ocr_on,
    )
    manifest = Check(
        "manifest", manifest.status, f"{manifest.message} (from the daemon)", manifest.remedy
    )
    health = str(answer.health.get("status", status.get("status", "?")))
    reasons = status.get("reasons") or {}
    if health == "ok":
        chroma = Check(
            "chroma",
            "ok",
            "the daemon owns the store and keeps it in step with the manifest (health ok)",
        )
    elif health == "starting":
        chroma = Check(
            "chroma",
            "warn",
            "the daemon is still starting (its first pass over the vault is running)",
            f"wait for it to finish, then run {suggest('doctor')} again",
        )
    else:
        why = "; ".join(f"{k}: {v}" for k, v in reasons.items()) or str(
            answer.health.get("reason", "no reason given")
        )
        chroma = Check(
            "chroma",
            "fail",
            f"the daemon reports {health}: {why}",
            "read the daemon's log (journalctl --user -u vaultd); a store fault is repaired "
            f"from the manifest on its next full pass ({suggest('reindex')})",
        )
    return lock, manifest, chroma


#: Why a holder of the lock may not answer, by what its lock file says it is.
_HELD: dict[Holder | None, str] = {
    Holder.DAEMON: "it is still starting, or it listens on another [server] socket",
    Holder.INDEX: "it lets go once the index is built",
    Holder.FORGET: "it is removing the index",
    **{kind: "it lets go within seconds" for kind in READERS},
}
_GUESS = "a `vaultd index` run, a daemon still starting, or one with another [server] socket"


def _on_disk(
    config: Config,
    env: Mapping[str, str],
    vault: Path,
    data_dir: Path,
    model_id: str | None,
    sock: Path | None,
) -> tuple[Check, Check, Check]:
    """(lock, manifest, chroma) read on disk, the store only while doctor holds the lock."""
    ocr_on = config.attachments.ocr
    if not data_dir.is_dir():
        lock = Check("lock", "ok", "free: the data directory does not exist yet")
        manifest, _ = check_manifest(data_dir, vault, model_id, ocr_on)
        return lock, manifest, check_chroma(config, env, data_dir, vault, model_id, None)
    held = DataDirLock(data_dir, Holder.DOCTOR)
    try:
        # Fails at once when held: doctor never waits for the lock and never breaks it.
        held.acquire()
    except (TrustError, DaemonStoppedError, LockedError, StoreError) as exc:
        return _unavailable(exc, data_dir, vault, model_id, ocr_on, sock)
    # Held only while the manifest and the store are read, so their ids are one snapshot.
    try:
        lock = Check("lock", "ok", "free: no vaultd process is using the data directory")
        manifest, view = check_manifest(data_dir, vault, model_id, ocr_on)
        if model_id is None and view is not None:
            model_id = view.model
        return lock, manifest, check_chroma(config, env, data_dir, vault, model_id, view)
    finally:
        held.release()


def _unavailable(
    exc: VaultdError,
    data_dir: Path,
    vault: Path,
    model_id: str | None,
    ocr_on: bool,
    sock: Path | None,
) -> tuple[Check, Check, Check]:
    """(lock, manifest, chroma) when doctor cannot take the lock: the manifest is still read
    (query-only, beside whoever holds it) unless another user could have written it; the
    store is left to its holder."""
    if isinstance(exc, TrustError):
        return (
            Check("lock", "fail", str(exc), ""),
            not_checked("manifest", "another user could have written it", "lock"),
            not_checked("chroma", "another user could have written it", "lock"),
        )
    manifest, _ = check_manifest(data_dir, vault, model_id, ocr_on)
    if isinstance(exc, DaemonStoppedError):
        return (
            Check("lock", "fail", str(exc), f"kill -CONT {exc.pid}"),
            manifest,
            not_checked("chroma", f"pid {exc.pid} is using the store", "lock"),
        )
    if isinstance(exc, LockedError):
        holder = LockHolder(exc.pid, Holder.named(exc.holder))
        who = holder.describe()
        on = f" on {sock}" if sock else ""
        lock = Check(
            "lock",
            "warn",
            f"held by {who}, but no daemon answers{on}: {_HELD.get(holder.kind, _GUESS)}",
            f"wait for it to finish; {suggest('status')} shows the index meanwhile",
        )
        return lock, manifest, not_checked("chroma", f"{who} is using the store", "lock")
    remedy = (
        READ_ONLY_REMEDY
        if isinstance(exc, DataDirError) and exc.read_only
        else f"chmod u+rwx {quoted(data_dir)}"
    )
    return (
        Check("lock", "fail", str(exc), remedy),
        manifest,
        not_checked("chroma", "the lock is unusable", "lock"),
    )
