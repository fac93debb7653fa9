"""`vaultd search --all`: every running daemon asked, their hits fused by reciprocal rank."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from vaultd.errors import VaultdError

#: Reciprocal rank fusion's constant across vaults: each list is one vault's own ranking, all
#: equally trusted, so the customary 60 (a flat curve) rather than search's tuned `rrf_k`,
#: which weighs two retrievers of one vault.
_RRF_K = 60
#: How long a daemon has to answer, beyond the wait for a note the search asks for.
ANSWER_SECONDS = 30.0


def socket_dir(config: Any) -> Path:
    """Where the daemons' sockets live: beside the configured socket, else the default one."""
    from vaultd.api.locate import sockets_dir

    found = sockets_dir(config.server.socket, os.environ)
    if found is not None:
        return found
    if config.vault.path is not None:
        data_dir: Path = config.require_store()
        return data_dir  # no shared directory: only this vault's own daemon is found
    raise VaultdError(
        "cannot tell where the daemons' sockets are: set [server] socket in the config, "
        "or $XDG_RUNTIME_DIR"
    )


def _ask_daemon(sock: Path, request: Any) -> tuple[str, list[dict[str, Any]]]:
    """(the daemon's vault, its hits); raises VaultdError when it does not answer."""
    from vaultd.api.client import Client, RemoteService
    from vaultd.api.limits import MAX_WAIT

    # A search asked to wait (--wait-for) is answered once the wait is over: its timeout, of
    # which a daemon waits at most MAX_WAIT.
    waits = min(request.timeout, MAX_WAIT) if request.wait_for is not None else 0.0
    client = Client(sock, timeout=ANSWER_SECONDS + waits)
    health = client.health()
    if health is None:
        raise VaultdError("no daemon answers")
    # The daemon's own id from now on: an answer from another daemon on this socket is refused.
    client.vault_id = str(health.get("vault_id", "")) or None
    found = RemoteService(client).search(request)
    return str(health.get("vault", sock)), found.model_dump(mode="json", exclude_unset=True)["hits"]


def search_every_vault(config: Any, request: Any) -> dict[str, Any]:
    """Ask every daemon with a socket beside this vault's; fuse their hits by reciprocal rank.

    Each daemon ranks its own vault; RRF needs no calibration between them (BM25 and cosine
    scores of two vaults are not comparable). Hits are labelled with their vault; the sockets
    that did not answer are said on stderr.
    """
    from concurrent.futures import ThreadPoolExecutor

    directory = socket_dir(config)
    sockets = sorted(p for p in directory.glob("*.sock") if p.is_socket())
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(sockets)))) as pool:
        futures = {s: pool.submit(_ask_daemon, s, request) for s in sockets}
    fused: list[tuple[float, float, str, dict[str, Any]]] = []
    silent: list[str] = []
    for sock, future in futures.items():
        try:
            vault, hits = future.result()
        except VaultdError as exc:
            silent.append(f"vaultd: skipped {sock}: {exc}")
            continue
        for rank, hit in enumerate(hits, 1):
            labelled = {**hit, "vault": vault, "vault_name": Path(vault).name, "rank": rank}
            fused.append((1.0 / (_RRF_K + rank), float(hit["score"]), vault, labelled))
    # Before any error: a daemon that answered with a refusal (a wait that ran out) says why.
    for line in silent:
        click.echo(line, err=True)
    if not sockets:
        raise VaultdError(f"no running vaultd daemon answers in {directory}")
    if not fused and len(silent) == len(sockets):
        raise VaultdError(f"no daemon in {directory} answered the search (see above)")
    fused.sort(key=lambda item: (-item[0], -item[1], item[2]))
    return {"hits": [{**hit, "score": round(rrf, 6)} for rrf, _, _, hit in fused[: request.k]]}
