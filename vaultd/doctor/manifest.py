"""The manifest check: `vaultd.db` readable (query-only), intact, this vault's and of a schema
this vaultd reads; its failing, left-out and partly indexed files, each with advice."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from vaultd.doctor.left_out import in_part_advice, left_out_advice
from vaultd.doctor.report import Check, first_few, quoted
from vaultd.hints import suggest
from vaultd.storage.view import ManifestView, read_manifest


def _rebuild_remedy(data_dir: Path) -> str:
    return (
        f"the manifest is the index's source of truth; move the data directory aside and index "
        f"again (every note is embedded again): mv {quoted(data_dir)} "
        f"{quoted(str(data_dir) + '.broken')} && vaultd index"
    )


def troubled_check(
    view_notes: int,
    chunks: int,
    troubled: Sequence[tuple[str, str, str]],
    left_out: Mapping[str, str] = {},
    in_part: Sequence[tuple[str, str]] = (),
    ocr_on: bool = False,
) -> Check:
    """The manifest's notes: failing ones, and left-out and partly indexed files each with
    the advice its reason calls for (`left_out`: each left-out file's `LeftOutKind`)."""
    found = f"{view_notes} notes, {chunks} chunks"
    if not troubled and not in_part:
        return Check("manifest", "ok", found)
    remedies = []
    for group, names in (("failing", ("failed", "quarantined")), ("left out", ("left_out",))):
        kinds: dict[str, int] = {}
        listed = []
        for path, status, reason in troubled:
            if status in names:
                kinds[status] = kinds.get(status, 0) + 1
                listed.append(f"{path}: {reason}" if reason else path)
        if not listed:
            continue
        counts = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(kinds.items()))
        found += f"; {counts}: {first_few(listed)}"
        if group == "failing":
            remedies.append(
                "fix or remove the failing notes: vaultd retries a failed note on every pass and "
                f"a quarantined one when it changes; {suggest('reindex', 'PATH')} retries one now"
            )
    # One piece of advice per reason, naming the files it is for.
    advised: dict[str, list[str]] = {}
    for path, status, reason in troubled:
        if status == "left_out":
            advice = left_out_advice(path, left_out.get(path, ""), reason, ocr_on)
            advised.setdefault(advice, []).append(path)
    if advised:
        remedies.append(
            "; ".join(f"{first_few(paths)}: {advice}" for advice, paths in advised.items())
            + " (vaultd looks at left-out files again on every pass)"
        )
    if in_part:
        listed = [f"{path}: {reason}" for path, reason in in_part]
        found += f"; {len(in_part)} indexed in part: {first_few(listed)}"
        remedies.append(in_part_advice([reason for _, reason in in_part]))
    return Check("manifest", "warn", found, "; ".join(remedies))


def check_manifest(
    data_dir: Path, vault: Path | None, model_id: str | None, ocr_on: bool = False
) -> tuple[Check, ManifestView | None]:
    """The manifest: readable, this vault's, of this schema; its troubled files with advice
    (`ocr_on`: whether [attachments] ocr is, which the advice for a picture-only PDF turns on)."""
    from vaultd.errors import ManifestDamagedError, StoreError
    from vaultd.layout import MANIFEST
    from vaultd.storage.schema import SCHEMA_VERSION

    if not (data_dir / MANIFEST).exists():
        return (
            Check(
                "manifest",
                "warn",
                f"no index yet in {data_dir}",
                f"run {suggest('index')}, or start the daemon ({suggest('run')})",
            ),
            None,
        )
    try:
        view = read_manifest(data_dir, model_id)
    except ManifestDamagedError as exc:
        found = f"{exc.manifest} is damaged: {exc.problem}"
        return Check("manifest", "fail", found, _rebuild_remedy(data_dir)), None
    except StoreError as exc:
        return Check("manifest", "fail", str(exc), _rebuild_remedy(data_dir)), None
    unusable = _unusable(view, data_dir, vault)
    if unusable is not None:
        return unusable, None
    checked = troubled_check(
        view.notes, len(view.chunk_ids), view.troubled, view.left_out, view.in_part, ocr_on
    )
    if checked.status == "ok" and model_id and view.model and view.model != model_id:
        return (
            Check(
                "manifest",
                "warn",
                f"{checked.message}; built with the model {view.model}, the configured one is "
                f"{model_id}: {view.unembedded} chunks will be embedded again",
                "nothing to do if the model change is meant; otherwise restore [embedding] model",
            ),
            view,
        )
    if checked.status == "ok" and view.schema < SCHEMA_VERSION:
        return (
            Check(
                "manifest",
                "ok",
                f"{checked.message}; schema {view.schema} is migrated at the next start",
            ),
            view,
        )
    return checked, view


def _unusable(view: ManifestView, data_dir: Path, vault: Path | None) -> Check | None:
    """Why a manifest that could be read cannot serve: damaged inside, of a newer schema, or
    another vault's index."""
    from vaultd.layout import MANIFEST
    from vaultd.storage.schema import SCHEMA_VERSION

    if view.integrity != "ok":
        return Check(
            "manifest",
            "fail",
            f"{data_dir / MANIFEST} is damaged: {view.integrity}",
            _rebuild_remedy(data_dir),
        )
    if view.schema > SCHEMA_VERSION:
        return Check(
            "manifest",
            "fail",
            f"written by a newer vaultd (schema {view.schema}, this one reads {SCHEMA_VERSION})",
            "upgrade vaultd",
        )
    if vault is not None and view.vault is not None and view.vault != str(vault):
        return Check(
            "manifest",
            "fail",
            f"{data_dir} holds the index of {view.vault}, not {vault}",
            "give this vault its own [store] path",
        )
    return None
