"""The derived int8 model: built once from the installed file, pinned, cached, and rebuilt when
its cache is damaged; two builds at once do not corrupt it; a switch of precision converges.

Every build here is real (the recipe on the shipped model file, in a child process)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from harness.convergence import export_of, fresh_export
from harness.daemon import short_socket_dir, write_config
from tests.models import model_build, model_check
from vaultd.config import load_config
from vaultd.embedding import derive
from vaultd.embedding.embedder import Embedder
from vaultd.embedding.recipe import RECIPE
from vaultd.embedding.spec import DEFAULT_MODEL_ID, ModelSpec, default_spec, file_sha256
from vaultd.errors import ModelError
from vaultd.index.open import open_index
from vaultd.layout import CHROMA, MANIFEST
from vaultd.query import SearchQuery
from vaultd.storage.chroma import collection_name
from vaultd.storage.upkeep import CHROMA_DATABASE

INT8_ID = DEFAULT_MODEL_ID + "@int8"
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Obsidian keeps every note as a Markdown file in a folder called a vault.",
    "Lava flows down the slope after the eruption.",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> derive.Derived:
    """One build of the default model's derived form; cases that damage it work on copies."""
    return derive.ensure(default_spec(), tmp_path_factory.mktemp("cache"))


def copy_cache(built: derive.Derived, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(built.path.parent, cache)
    return cache


def test_the_derived_model_runs_int8_products_and_stays_close_to_the_float_form(
    built: derive.Derived,
) -> None:
    import onnx

    graph = onnx.load(str(built.path)).graph
    ops = [node.op_type for node in graph.node]
    assert ops.count("MatMulIntegerToFloat") == 36  # every weight product of the 6 layers
    assert ops.count("MultiHeadAttention") == 6 and ops.count("Gelu") == 6
    # The attention's products are inside its fused operator; what MatMuls remain are the
    # LayerNorm outputs' outlier channel by its weight row (q, k, v and FFN in: 4 a layer).
    rows = {init.name: list(init.dims)[:1] for init in graph.initializer}
    side = [node.input[1] for node in graph.node if node.op_type == "MatMul"]
    assert len(side) == 24 and all(rows[name] == [1] for name in side)
    source = default_spec()
    spec = derive.derived_spec(source, "int8", built.path.parent)
    assert spec.id == INT8_ID and spec.onnx_path == built.path
    float_vectors = Embedder(source).embed_documents(TEXTS)
    int8_vectors = Embedder(spec).embed_documents(TEXTS)
    cosine = (float_vectors * int8_vectors).sum(axis=1)
    assert cosine.min() > 0.97, cosine
    assert not np.allclose(float_vectors, int8_vectors, atol=1e-4)  # not the float graph
    # One scale per token: a text's vector does not depend on the texts batched with it.
    alone = np.stack([Embedder(spec).embed_documents([text])[0] for text in TEXTS])
    assert np.array_equal(alone, int8_vectors)


def test_the_build_is_deterministic_pinned_and_owner_only(
    built: derive.Derived, tmp_path: Path
) -> None:
    os.umask(0o000)
    try:
        again = derive.ensure(default_spec(), tmp_path / "other")
    finally:
        os.umask(0o022)
    assert again.sha256 == built.sha256 == file_sha256(again.path)
    record = json.loads(again.record.read_text())
    assert record["source_sha256"] == default_spec().onnx_sha256
    assert record["recipe"] == RECIPE and record["sha256"] == again.sha256
    for path in (again.path, again.record):
        assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)
    assert (tmp_path / "other").stat().st_mode & 0o077 == 0
    assert not list((tmp_path / "other").glob("*.partial"))


def test_a_sound_cache_is_used_as_it_is(built: derive.Derived, tmp_path: Path) -> None:
    cache = copy_cache(built, tmp_path)
    before = (cache / built.path.name).stat().st_mtime_ns
    builds: list[str] = []
    derive.ensure(default_spec(), cache, on_build=builds.append)
    assert builds == [] and (cache / built.path.name).stat().st_mtime_ns == before


def test_a_forced_build_replaces_a_sound_copy_with_the_same_bytes(
    built: derive.Derived, tmp_path: Path
) -> None:
    cache = copy_cache(built, tmp_path)
    builds: list[str] = []
    again = derive.ensure(default_spec(), cache, force=True, on_build=builds.append)
    assert builds == ["a rebuild was asked for"]
    assert again.sha256 == built.sha256 and again.built >= built.built


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "record missing", "record bad"])
def test_a_damaged_or_partial_cache_is_rebuilt(
    built: derive.Derived, tmp_path: Path, damage: str
) -> None:
    cache = copy_cache(built, tmp_path)
    model, record = cache / built.path.name, cache / built.record.name
    if damage == "flipped byte":
        data = bytearray(model.read_bytes())
        data[len(data) // 2] ^= 0xFF
        model.write_bytes(bytes(data))
    elif damage == "truncated":
        with model.open("r+b") as handle:
            handle.truncate(model.stat().st_size // 3)
    elif damage == "record missing":
        record.unlink()
    else:
        record.write_text("{not json")
    found, why = derive.find(default_spec(), cache)
    assert found is None and why != "ok"
    builds: list[str] = []
    rebuilt = derive.ensure(default_spec(), cache, on_build=builds.append)
    assert builds == [why]
    assert rebuilt.sha256 == built.sha256 == file_sha256(model)
    assert derive.find(default_spec(), cache)[0] == rebuilt


def test_two_processes_building_at_once_share_one_build(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from vaultd.embedding import derive\n"
        "from vaultd.embedding.spec import default_spec\n"
        "built = derive.ensure(default_spec(), Path(sys.argv[1]),"
        " on_build=lambda why: print('BUILT', flush=True))\n"
        "print(built.sha256)\n"
    )
    children = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(cache)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [child.communicate(timeout=900) for child in children]
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
    lines = [out.splitlines() for out, _ in outputs]
    # One built it; the other waited for the lock and took the result.
    assert sum(printed.count("BUILT") for printed in lines) == 1
    digests = {printed[-1] for printed in lines}
    found, _ = derive.find(default_spec(), cache)
    assert found is not None and digests == {found.sha256}
    built = sorted(p.suffix for p in cache.iterdir() if p.name != derive.IN_USE)
    assert built == [".json", ".lock", ".onnx"]


def test_a_model_that_cannot_be_built_is_a_clear_error_and_leaves_nothing(tmp_path: Path) -> None:
    source = tmp_path / "model.onnx"
    source.write_bytes(b"not an onnx graph")
    spec = ModelSpec(id="broken", onnx_path=source, tokenizer_path=default_spec().tokenizer_path)
    cache = tmp_path / "cache"
    with pytest.raises(ModelError, match=r"building the derived model .* failed") as caught:
        derive.ensure(spec, cache)
    assert 'precision = "float"' in str(caught.value)
    assert sorted(p.suffix for p in cache.iterdir() if p.name != derive.IN_USE) == [".lock"]


def test_the_cache_follows_xdg_and_never_lives_in_a_relative_place(tmp_path: Path) -> None:
    assert derive.cache_dir({"XDG_CACHE_HOME": str(tmp_path), "HOME": "/h"}) == (
        tmp_path / "vaultd" / "models"
    )
    if sys.platform != "darwin":
        assert derive.cache_dir({"XDG_CACHE_HOME": "rel", "HOME": "/h"}) == Path(
            "/h/.cache/vaultd/models"
        )


NOTES = {
    "volcano.md": "# Volcano\n\nLava flows down the slope after the eruption.\n",
    "violin.md": "# Violin\n\nThe concerto opens with the strings alone.\n",
    "glacier.md": "# Glacier\n\nThe ice retreats a little further every summer.\n",
    "notes/tides.md": "# Tides\n\nCrabs hide in the pools at low tide.\n",
}


def test_a_config_that_does_not_say_runs_the_int8_model(
    built: derive.Derived, tmp_path: Path
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "a.md").write_text(NOTES["volcano.md"], encoding="utf-8")
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    cache = tmp_path / "xdg" / "vaultd" / "models"
    shutil.copytree(built.path.parent, cache)
    config = write_config(tmp_path / "c.toml", vault, tmp_path / "data", short_socket_dir() / "s")
    assert "precision" not in config.read_text(encoding="utf-8")
    with open_index(load_config(config, env=env), env=env) as index:
        assert index.embedder.model_id == INT8_ID
        assert index.embedder.spec.onnx_path == cache / built.path.name
        index.indexer.reconcile()
    assert {r["metadata"]["model"] for r in export_of(config, env=env)} == {INT8_ID}


def test_a_switch_of_precision_converges_to_a_fresh_index(
    built: derive.Derived, tmp_path: Path
) -> None:
    vault = tmp_path / "vault"
    for name, text in NOTES.items():
        (vault / name).parent.mkdir(parents=True, exist_ok=True)
        (vault / name).write_text(text, encoding="utf-8")
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    shutil.copytree(built.path.parent, tmp_path / "xdg" / "vaultd" / "models")
    sockets = short_socket_dir()
    float_config = write_config(
        tmp_path / "f.toml",
        vault,
        tmp_path / "data",
        sockets / "s",
        extra='\n[embedding]\nprecision = "float"\n',
    )
    int8_config = write_config(
        tmp_path / "i.toml",
        vault,
        tmp_path / "data",
        sockets / "s",
        extra='\n[embedding]\nprecision = "int8"\n',
    )
    with open_index(load_config(float_config, env=env), env=env) as index:
        index.indexer.reconcile()
    with open_index(load_config(int8_config, env=env), env=env) as index:
        summary = index.indexer.reconcile()
        assert summary.chunks_embedded == len(NOTES) and summary.chunks_reused == 0
        hits = index.searcher.search(SearchQuery("molten rock from a mountain", mode="vector")).hits
        assert hits and hits[0].path == "volcano.md"
    # The float form's collection and vectors went once the int8 pass completed.
    with closing(sqlite3.connect(tmp_path / "data" / CHROMA / CHROMA_DATABASE)) as db:
        names = {row[0] for row in db.execute("SELECT name FROM collections")}
    assert names == {collection_name(vault, INT8_ID)}
    with closing(sqlite3.connect(tmp_path / "data" / MANIFEST)) as db:
        models = dict(db.execute("SELECT model, COUNT(*) FROM vectors GROUP BY model"))
    assert models == {INT8_ID: len(NOTES)}
    mine = export_of(int8_config, env=env)
    assert {r["metadata"]["model"] for r in mine} == {INT8_ID}
    reference = fresh_export(
        vault, tmp_path / "ref", extra='\n[embedding]\nprecision = "int8"\n', env=env
    )
    assert [r["id"] for r in mine] == [r["id"] for r in reference]
    for a, b in zip(mine, reference, strict=True):
        assert a["document"] == b["document"]
        assert np.allclose(a["vector"], b["vector"], atol=1e-5)


def test_doctor_checks_the_derived_model_and_vaultd_model_build_makes_it(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "a.md").write_text("# A\n\nSome text.\n", encoding="utf-8")
    config = write_config(
        tmp_path / "c.toml",
        vault,
        tmp_path / "data",
        short_socket_dir() / "s",
        extra='\n[embedding]\nprecision = "int8"\n',
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    build = model_build(config, env)
    assert build.before.status == "warn" and "not built yet" in build.before.message
    assert "vaultd model build" in build.before.remedy

    assert build.done.returncode == 0, build.done.stderr
    assert "building the int8 model" in build.done.stderr
    path = Path(build.done.stdout.splitlines()[0])
    assert path.parent == build.models == tmp_path / "xdg" / "vaultd" / "models"
    assert path.suffix == ".onnx"

    after = build.after
    assert after is not None and after.status == "ok"
    assert INT8_ID in after.message and str(path) in after.message
    # Damaged after the build: doctor says so; the next start rebuilds it.
    with path.open("r+b") as handle:
        handle.truncate(1000)
    damaged = model_check(config, env)
    assert damaged.status == "warn" and "damaged" in damaged.message
