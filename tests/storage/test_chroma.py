"""storage/chroma: one collection opened on first use, checked as this vault's and model's,
released when idle, and chromadb's errors translated into StoreError."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from vaultd.errors import StoreError, StoreFullError, StoreMismatchError
from vaultd.storage import chroma
from vaultd.storage.chroma import Chroma


def _open(path: Path, **overrides: Any) -> Chroma:
    settings: dict[str, Any] = {
        "collection": "notes",
        "vault_id": "v",
        "model_id": "m",
        "path": path,
    }
    return Chroma(**{**settings, **overrides})


def test_a_collection_is_made_for_its_vault_and_model_and_refused_to_others(
    tmp_path: Path,
) -> None:
    store = _open(tmp_path)
    try:
        store.call("add", lambda c: c.add(ids=["a"], embeddings=[[1.0, 0.0]]))
        meta = store.call("read", lambda c: c.metadata)
        assert (meta["vaultd:vault"], meta["vaultd:model"], meta["hnsw:space"]) == (
            "v",
            "m",
            "cosine",
        )
        assert (
            store.call("read", lambda c: c.configuration["hnsw"]["ef_search"]) == chroma.SEARCH_EF
        )
    finally:
        store.close()

    with pytest.raises(StoreMismatchError, match="belongs to model 'm'"):
        _open(tmp_path, model_id="other")
    again = _open(tmp_path)
    try:
        assert again.call("count", lambda c: c.count()) == 1
    finally:
        again.close()


def test_chromadb_errors_become_store_errors_naming_the_operation(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        with pytest.raises(StoreError, match=f"cannot add twice at {tmp_path}"):
            store.call("add twice", lambda c: c.add(ids=["a"], embeddings=[[1.0], [2.0]]))
    finally:
        store.close()


def test_an_idle_store_is_released_and_reopened_on_use(tmp_path: Path) -> None:
    closed: list[bool] = []
    store = _open(tmp_path, on_close=lambda: closed.append(True))
    try:
        store.call("add", lambda c: c.add(ids=["a"], embeddings=[[1.0, 0.0]]))
        assert store.loaded
        assert not store.release(unused_for=3600)
        with store.in_use():
            assert not store.release(unused_for=0)  # an operation is in flight
        assert store.release(unused_for=0)
        assert not store.loaded and closed == [True]
        assert store.call("count", lambda c: c.count()) == 1
        assert store.loaded
    finally:
        store.close()


def test_disk_full_is_found_in_any_cause() -> None:
    def raised(inner: BaseException) -> BaseException:
        try:
            try:
                raise inner
            except BaseException as exc:
                raise RuntimeError("wrapped") from exc
        except RuntimeError as outer:
            return outer

    assert chroma.is_disk_full(raised(OSError(errno.ENOSPC, "full")))
    full = sqlite3.OperationalError("x")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL
    assert chroma.is_disk_full(raised(full))
    assert chroma.is_disk_full(Exception("Error: database or disk is full"))
    assert not chroma.is_disk_full(raised(OSError(errno.EACCES, "denied")))


def test_only_network_failures_and_overloaded_servers_are_transient() -> None:
    request = httpx.Request("GET", "http://127.0.0.1:1")

    def status(code: int) -> httpx.HTTPStatusError:
        return httpx.HTTPStatusError("s", request=request, response=httpx.Response(code))

    assert chroma.is_transient(httpx.ConnectError("refused"))
    assert chroma.is_transient(TimeoutError())
    assert chroma.is_transient(status(503)) and chroma.is_transient(status(429))
    assert not chroma.is_transient(status(404))
    assert not chroma.is_transient(ValueError("bad request"))


def test_names_headers_and_briefs() -> None:
    name = chroma.collection_name(Path("/home/me/My Vault!"), "model")
    assert name.startswith("vaultd-My-Vault-") and len(name) == len("vaultd-My-Vault-") + 10
    assert name == chroma.collection_name(Path("/home/me/My Vault!"), "model")
    assert name != chroma.collection_name(Path("/home/me/My Vault!"), "other")
    assert chroma.collection_name(Path("/"), "m").startswith("vaultd-vault-")
    assert chroma.auth_headers("t") == {"Authorization": "Bearer t"}
    assert chroma.auth_headers("") is None
    assert chroma.brief(ValueError("a\n  b")) == "a b"
    assert chroma.brief(KeyError()) == "KeyError"
    assert len(chroma.brief(ValueError("x" * 1000))) == 301


def test_translate_names_a_full_disk(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        translated = store._translate("add", OSError(errno.ENOSPC, "full"), False, 1)
        assert isinstance(translated, StoreFullError)
    finally:
        store.close()
