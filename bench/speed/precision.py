"""The int8 model against the float one, in one run: throughput, a whole `vaultd index`, and
how far each vector moved.

On the same texts (vaultd's own chunks of the vault, deduplicated, prepared untimed) and in the
same process layout (one run per core, each on one thread), in rounds whose order rotates:

- `plain`: the shipped file through a plain onnxruntime session, the best plain use measured
  here: sorted by tokens, runs of at most 32 texts and 2,048 padded tokens, one run per core;
- `float`: the shipped file as vaultd runs it (`Embedder`, `vaultd index`'s settings);
- `int8`: the derived model as vaultd runs it;
- `index`: the whole `vaultd index --json` of a fresh copy with `precision = "int8"` (the
  derived model already built), as a subprocess.

Then the cosine of each int8 vector to its float vector (mean and minimum), and whether an int8
vector depends on the texts it shares a run with (each text embedded alone against in runs).

    python -m bench.speed.precision [--vault DIR] [--rounds 3] [--json]

The derived model is built into a temporary cache first (its build time and SHA-256 are
reported, and a second build checks that it is the same byte for byte).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from bench.lib.installed import vaultd_executable
from bench.lib.machine import machine
from bench.lib.results import add_record_option, record, report_rows
from bench.speed.index_vs_onnx import (
    DEFAULT_VAULT,
    run_padded,
    texts_to_embed,
    time_cli,
)
from vaultd.config import load_config
from vaultd.embedding import derive
from vaultd.embedding.embedder import Embedder, session_options, workers_for
from vaultd.embedding.spec import ModelSpec, default_spec
from vaultd.embedding.tokens import load_tokenizer

PLAIN_BATCH = 32
PLAIN_TOKENS = 2048
COSINE_TEXTS = 1000


def plain_embed(session: ort.InferenceSession, spec: ModelSpec, texts: list[str]) -> float:
    """Seconds to embed `texts` with a plain session: tokenize, sort, runs of at most 32 texts
    and 2,048 padded tokens, one run per core at once."""
    tokenizer = load_tokenizer(spec)
    needs_types = "token_type_ids" in {i.name for i in session.get_inputs()}
    started = time.perf_counter()
    ids = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=True)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in order:
        width = len(ids[i])
        if batch and (len(batch) == PLAIN_BATCH or (len(batch) + 1) * width > PLAIN_TOKENS):
            batches.append(batch)
            batch = []
        batch.append(i)
    if batch:
        batches.append(batch)
    out = np.zeros((len(ids), spec.dimensions), dtype=np.float32)

    def run(rows: list[int]) -> None:
        out[rows] = run_padded(session, spec, [ids[i] for i in rows], needs_types)

    with ThreadPoolExecutor(workers_for(0)) as runs:
        list(runs.map(run, batches))
    return time.perf_counter() - started


def timed(embedder: Embedder, texts: list[str]) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    vectors = embedder.embed_documents(texts)
    return time.perf_counter() - started, vectors


def write_config(path: Path, vault: Path, store: Path, precision: str) -> Path:
    path.write_text(
        f"[vault]\npath = {json.dumps(str(vault))}\n[store]\npath = {json.dumps(str(store))}\n"
        f'[embedding]\nprecision = "{precision}"\n[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT, help="vault to copy")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every contender")
    parser.add_argument("--no-index", action="store_true", help="skip the whole vaultd index")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_record_option(parser)
    args = parser.parse_args(argv)
    if not args.vault.is_dir():
        print(f"no such vault: {args.vault}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "load_start": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="vaultd-precision-") as tmp:
        work = Path(tmp)
        cache = work / "xdg" / "vaultd" / "models"
        # The subprocesses (`vaultd index`) find the derived model there too.
        os.environ["XDG_CACHE_HOME"] = str(work / "xdg")
        env = dict(os.environ)
        source = default_spec()
        built = derive.ensure(source, cache)
        again = derive.ensure(source, work / "second", force=True)
        report["build"] = {
            "seconds": [built.seconds, again.seconds],
            "sha256": built.sha256,
            "deterministic": built.sha256 == again.sha256,
            "bytes": built.path.stat().st_size,
            "source_bytes": source.onnx_path.stat().st_size,
        }
        int8_spec = derive.derived_spec(source, "int8", cache)
        vault = work / "vault"
        shutil.copytree(args.vault, vault)
        probe = write_config(work / "probe.toml", vault, work / "probe-store", "float")
        notes, chunks, texts = texts_to_embed(load_config(probe, env=env), source)
        report.update(notes=notes, chunks=chunks, texts=len(texts))

        plain_session = ort.InferenceSession(
            str(source.onnx_path), session_options(1), providers=["CPUExecutionProvider"]
        )
        float_embedder = Embedder(source)
        int8_embedder = Embedder(int8_spec)
        # Warm-up: the first runs of a session allocate its arena.
        plain_embed(plain_session, source, texts[:64])
        float_embedder.embed_documents(texts[:64])
        int8_embedder.embed_documents(texts[:64])

        exe = vaultd_executable()
        seconds: dict[str, list[float]] = {"plain": [], "float": [], "int8": [], "index": []}
        vectors: dict[str, np.ndarray] = {}
        order = ["plain", "float", "int8", "index"]
        if args.no_index:
            order.remove("index")
        for r in range(max(1, args.rounds)):
            for step in order[r % len(order) :] + order[: r % len(order)]:
                print(f"round {r + 1}: {step}", file=sys.stderr, flush=True)
                if step == "plain":
                    seconds["plain"].append(plain_embed(plain_session, source, texts))
                elif step == "index":
                    config = write_config(work / "i.toml", vault, work / f"store-{r}", "int8")
                    run = time_cli(exe, config)
                    seconds["index"].append(run.wall_s)
                    shutil.rmtree(work / f"store-{r}", ignore_errors=True)
                else:
                    embedder = float_embedder if step == "float" else int8_embedder
                    took, vectors[step] = timed(embedder, texts)
                    seconds[step].append(took)

        cosine = (vectors["float"] * vectors["int8"]).sum(axis=1)[:COSINE_TEXTS]
        sample = texts[:200]
        alone = np.stack([int8_embedder.embed_documents([t])[0] for t in sample])
        together = int8_embedder.embed_documents(sample)
        self_cosine = (alone * together).sum(axis=1)

    pairs = [f / i for f, i in zip(seconds["float"], seconds["int8"], strict=True)]
    report["seconds"] = {k: [round(s, 2) for s in v] for k, v in seconds.items() if v}
    report["speedup_int8_over_float"] = [round(p, 3) for p in pairs]
    report["speedup_median"] = round(statistics.median(pairs), 3)
    report["plain_over_float"] = round(
        statistics.median(seconds["float"]) / statistics.median(seconds["plain"]), 3
    )
    if seconds["index"]:
        ratios = [i / p for i, p in zip(seconds["index"], seconds["plain"], strict=True)]
        report["index_over_plain"] = [round(x, 3) for x in ratios]
        report["index_over_plain_median"] = round(statistics.median(ratios), 3)
    report["cosine"] = {
        "texts": int(cosine.size),
        "mean": round(float(cosine.mean()), 5),
        "min": round(float(cosine.min()), 5),
        "p01": round(float(np.percentile(cosine, 1)), 5),
    }
    report["alone_vs_in_runs"] = {
        "texts": len(sample),
        "mean": round(float(self_cosine.mean()), 6),
        "min": round(float(self_cosine.min()), 6),
    }
    report["load_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for key, value in report.items():
            print(f"{key:<26}{value}")
    record(args.record, ["figure", "value"], report_rows(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
