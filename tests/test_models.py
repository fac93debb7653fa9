"""The bundled model loads offline and verified; a custom model directory works the same way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from vaultd.embedding.embedder import Embedder
from vaultd.embedding.spec import DEFAULT_MODEL_ID, MANIFEST_NAME, default_spec, load_spec, verify
from vaultd.errors import ModelError
from vaultd.storage.chroma import collection_name


def test_default_model_is_installed_and_pinned() -> None:
    spec = default_spec()
    assert spec.id == DEFAULT_MODEL_ID and spec.dimensions == 384 and spec.window == 256
    assert spec.onnx_path.is_file() and spec.tokenizer_path.is_file()
    verify(spec.onnx_path, spec.onnx_sha256)
    verify(spec.tokenizer_path, spec.tokenizer_sha256)


def test_vectors_are_normalised_mean_pooled_and_meaningful() -> None:
    embedder = Embedder(default_spec())
    docs = embedder.embed_documents(
        ["Obsidian Sync keeps notes in step across devices.", "Bananas are rich in potassium."]
    )
    assert docs.shape == (2, 384)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    query = embedder.embed_query("synchronise my notes between phone and laptop")
    assert query @ docs[0] > query @ docs[1] + 0.2
    # Batching and length-sorting do not change a text's vector.
    alone = embedder.embed_documents(["Bananas are rich in potassium."])[0]
    assert np.allclose(alone, docs[1], atol=1e-5)


def test_a_damaged_model_file_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "model.onnx"
    copy.write_bytes(b"not a model")
    with pytest.raises(ModelError, match="damaged"):
        verify(copy, default_spec().onnx_sha256)


def test_a_custom_model_directory(tmp_path: Path) -> None:
    spec = default_spec()
    directory = tmp_path / "my-model"
    directory.mkdir()
    shutil.copy(spec.onnx_path, directory / "model.onnx")
    shutil.copy(spec.tokenizer_path, directory / "tokenizer.json")
    (directory / MANIFEST_NAME).write_text(
        json.dumps(
            {
                "id": "minilm-copy",
                "dimensions": 384,
                "pooling": "mean",
                "window": 256,
                "query_prefix": "",
                "document_prefix": "",
            }
        )
    )
    custom = load_spec(str(directory))
    assert custom.id == "minilm-copy"
    text = ["A note about gardens."]
    assert np.allclose(
        Embedder(custom).embed_documents(text), Embedder(spec).embed_documents(text), atol=1e-6
    )
    # Another model means another collection: vectors are never mixed.
    vault = tmp_path / "vault"
    assert collection_name(vault, custom.id) != collection_name(vault, spec.id)


def test_an_incomplete_model_directory_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=r"tokenizer\.json is missing"):
        load_spec(str(tmp_path))
