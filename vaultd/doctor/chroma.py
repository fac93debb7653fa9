"""The chroma check: the store probed in a child process (a damaged HNSW segment can crash the
process that opens it), then its ids compared with the manifest's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vaultd.config import Config
from vaultd.doctor.report import Check, not_checked, quoted
from vaultd.errors import VaultdError
from vaultd.hints import suggest
from vaultd.storage.view import ManifestView


def _repair_remedy() -> str:
    return f"start the daemon or run {suggest('index')}: the store is repaired from the manifest"


def check_chroma(
    config: Config,
    env: Mapping[str, str],
    data_dir: Path,
    vault: Path,
    model_id: str | None,
    view: ManifestView | None,
) -> Check:
    """Probe the store in a child process, then compare its ids with the manifest's."""
    from vaultd.layout import CHROMA
    from vaultd.storage.chroma import collection_name
    from vaultd.storage.probe import closed_uncleanly, mark_closed, why_probe
    from vaultd.storage.vectors import VectorStore

    expected = view.chunk_ids if view is not None else frozenset()
    chroma_dir = data_dir / CHROMA
    remote = bool(config.store.url)
    where = config.store.url if remote else str(chroma_dir)
    # Opening the store rewrites its files; when the record of vaultd's last clean close was
    # current, it is renewed afterwards, so doctor does not cost the next start a probe.
    was_clean = not remote and why_probe(data_dir, chroma_dir) is None
    if not remote:
        found_files = _check_chroma_files(chroma_dir, expected)
        if found_files is not None:
            return found_files
    if model_id is None:
        return not_checked("chroma", "the model is unknown", "model")
    try:
        store = VectorStore(
            collection=config.store.collection or collection_name(vault, model_id),
            vault_id=str(vault),
            model_id=model_id,
            path=None if remote else chroma_dir,
            url=config.store.url,
            token=env.get(config.store.token_env, ""),
        )
        try:
            ids = store.ids()
        finally:
            store.close()
            if was_clean:
                mark_closed(data_dir, chroma_dir)
    except VaultdError as exc:
        remedy = (
            "start the Chroma server, or correct [store] url and [store] token_env"
            if remote
            else "choose another [store] collection, or move the store aside and run "
            + suggest("index")
        )
        return Check("chroma", "fail", str(exc), remedy)
    if view is None:
        return Check("chroma", "ok", f"{where}: {len(ids)} records (no manifest to compare)")
    missing = len(expected - ids)
    extra = len(ids - expected)
    if missing or extra:
        return Check(
            "chroma",
            "fail",
            f"{where} disagrees with the manifest: {missing} chunks missing, {extra} extra "
            f"({len(ids)} stored, {len(expected)} expected)",
            _repair_remedy(),
        )
    found = f"{where}: {len(ids)} records, the same ids as the manifest"
    if not remote and closed_uncleanly(data_dir):
        found += "; it was not closed cleanly, but it opens and answers"
    return Check("chroma", "ok", found)


def _check_chroma_files(chroma_dir: Path, expected: frozenset[str]) -> Check | None:
    """What is wrong with the embedded store's files (missing, or damaged as a probe in a
    child process finds them), or None."""
    from vaultd.layout import DAMAGED
    from vaultd.storage.probe import probe

    if not chroma_dir.exists():
        if not expected:
            return Check("chroma", "ok", f"{chroma_dir}: nothing stored yet")
        return Check(
            "chroma",
            "fail",
            f"{chroma_dir} is missing; the manifest lists {len(expected)} chunks",
            _repair_remedy() + " (nothing is embedded again)",
        )
    problem = probe(chroma_dir)
    if problem is None:
        return None
    aside = str(chroma_dir) + DAMAGED
    return Check(
        "chroma",
        "fail",
        f"{chroma_dir} is damaged: {problem}",
        f"move it aside and let vaultd rebuild it from the manifest (nothing is embedded "
        f"again): mv {quoted(chroma_dir)} {quoted(aside)}, then start the daemon or run "
        + suggest("index"),
    )
