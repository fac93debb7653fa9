"""The multilingual model's throughput beside the default's, as vaultd runs them, in one run.

    python -m bench.speed.model_speed [--vault DIR] [--rounds 3] [--precision int8] [--json]

For each model (`[embedding] model` "default" and "multilingual", at `--precision`): the
vault's texts as vaultd embeds them with that model (its own tokenizer's chunks, deduplicated,
prepared untimed), embedded by vaultd's `Embedder` with `vaultd index`'s settings (one run per
core; "multilingual" is the pair vaultd runs, e5 for every text and the default model for the
English ones, `vaultd.embedding.paired`); then a whole `vaultd index --json` of a fresh copy,
as a subprocess. Rounds alternate the models, so a load from elsewhere falls on both; the
median of each is reported, and the ratios of the medians. Both models are built into a
temporary cache first (not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.installed import vaultd_executable
from bench.lib.machine import machine
from bench.lib.results import add_record_option, record
from bench.speed.index_vs_onnx import DEFAULT_VAULT, texts_to_embed, time_cli
from vaultd.config import EmbeddingSection, load_config
from vaultd.embedding import derive
from vaultd.embedding.embedder import Embedder, TextEmbedder
from vaultd.embedding.paired import PairedEmbedder
from vaultd.embedding.spec import load_spec
from vaultd.embedding.tokens import load_tokenizer
from vaultd.pipeline.languages import latin_query, reads_english

#: The two models vaultd ships or builds.
MODELS = ("default", "multilingual")


def write_config(path: Path, vault: Path, store: Path, model: str, precision: str) -> Path:
    path.write_text(
        f"[vault]\npath = {json.dumps(str(vault))}\n[store]\npath = {json.dumps(str(store))}\n"
        f'[embedding]\nmodel = "{model}"\nprecision = "{precision}"\n[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--precision", choices=("int8", "float"), default=EmbeddingSection().precision
    )
    parser.add_argument("--no-index", action="store_true", help="skip the whole vaultd index")
    parser.add_argument("--json", action="store_true")
    add_record_option(parser)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "vault": str(args.vault),
        "precision": args.precision,
    }
    with tempfile.TemporaryDirectory(prefix="vaultd-models-") as scratch:
        work = Path(scratch)
        cache = work / "xdg" / "vaultd" / "models"
        os.environ["XDG_CACHE_HOME"] = str(work / "xdg")  # the subprocesses find the models
        embedders: dict[str, TextEmbedder] = {}
        texts: dict[str, list[str]] = {}
        tokens: dict[str, int] = {}
        for model in MODELS:
            spec = derive.derived_spec(load_spec(model), args.precision, cache)
            config = load_config(
                write_config(work / f"{model}.toml", args.vault, work / "unused", model,
                             args.precision),
                env=os.environ,
            )  # fmt: skip
            notes, chunks, unique = texts_to_embed(config, spec)
            texts[model] = unique
            tokenizer = load_tokenizer(spec)
            prefix = spec.document_prefix
            tokens[model] = sum(
                len(e.ids) for e in tokenizer.encode_batch([prefix + t for t in unique])
            )
            embedder: TextEmbedder = Embedder(spec)
            english: dict[str, int] = {}
            if spec.english:
                # As vaultd runs it: the English model beside it, for the English texts.
                partner = derive.derived_spec(load_spec(spec.english), args.precision, cache)
                embedder = PairedEmbedder(
                    Embedder(spec),
                    Embedder(partner),
                    reads_english=reads_english,
                    latin_query=latin_query,
                )
                english_texts = [t for t in unique if reads_english(t)]
                english = {
                    "english_texts": len(english_texts),
                    "english_tokens": sum(
                        len(e.ids) for e in load_tokenizer(partner).encode_batch(english_texts)
                    ),
                }
            embedders[model] = embedder
            embedder.embed_documents(unique[:16])  # warm-up
            report[model] = {
                "model_id": embedder.model_id,
                "notes": notes,
                "chunks": chunks,
                "unique_texts": len(unique),
                "tokens": tokens[model],
                **english,
            }
        exe = vaultd_executable()
        seconds: dict[str, dict[str, list[float]]] = {m: {"embed": [], "index": []} for m in MODELS}
        for round_ in range(args.rounds):
            order = list(MODELS) if round_ % 2 == 0 else list(reversed(MODELS))
            for model in order:
                started = time.perf_counter()
                embedders[model].embed_documents(texts[model])
                seconds[model]["embed"].append(time.perf_counter() - started)
                print(f"round {round_ + 1} {model} embed {seconds[model]['embed'][-1]:.1f} s",
                      file=sys.stderr)  # fmt: skip
                if args.no_index:
                    continue
                copy = work / f"vault-{model}-{round_}"
                shutil.copytree(args.vault, copy)
                config_file = write_config(
                    work / f"i-{model}-{round_}.toml", copy, work / f"data-{model}-{round_}",
                    model, args.precision,
                )  # fmt: skip
                run = time_cli(exe, config_file)
                seconds[model]["index"].append(run.wall_s)
                print(f"round {round_ + 1} {model} index {run.wall_s:.1f} s", file=sys.stderr)
        for model in MODELS:
            embed = statistics.median(seconds[model]["embed"])
            entry = report[model]
            entry["embed_seconds"] = [round(x, 2) for x in seconds[model]["embed"]]
            entry["embed_median_s"] = round(embed, 2)
            entry["texts_per_s"] = round(entry["unique_texts"] / embed, 1)
            entry["tokens_per_s"] = round(entry["tokens"] / embed, 0)
            if seconds[model]["index"]:
                entry["index_seconds"] = [round(x, 2) for x in seconds[model]["index"]]
                entry["index_median_s"] = round(statistics.median(seconds[model]["index"]), 2)
        d, m = report["default"], report["multilingual"]
        report["multilingual_over_default"] = {
            "embed_seconds": round(m["embed_median_s"] / d["embed_median_s"], 3),
            "tokens_per_s": round(m["tokens_per_s"] / d["tokens_per_s"], 3),
            **(
                {"index_seconds": round(m["index_median_s"] / d["index_median_s"], 3)}
                if "index_median_s" in m
                else {}
            ),
        }
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))
    columns = ["model", "unique texts", "tokens", "embedding", "texts/s", "tokens/s"]
    record(args.record, [*columns, "whole `vaultd index`"], table(report))
    return 0


def median_of(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):.1f} s ({min(seconds):.1f}–{max(seconds):.1f})"


def table(report: dict[str, Any]) -> list[list[str]]:
    """A row per model, then the multilingual pair over the default."""
    rows = []
    for model in MODELS:
        entry = report[model]
        index = entry.get("index_seconds")
        rows.append(
            [
                f"{model} ({report['precision']})",
                f"{entry['unique_texts']:,}",
                f"{entry['tokens']:,}",
                median_of(entry["embed_seconds"]),
                f"{entry['texts_per_s']:.1f}",
                f"{entry['tokens_per_s']:,.0f}",
                median_of(index) if index else "",
            ]
        )
    ratio = report["multilingual_over_default"]
    index_ratio = f"{ratio['index_seconds']:.2f}×" if "index_seconds" in ratio else ""
    embed_ratio, tokens_ratio = f"{ratio['embed_seconds']:.2f}×", f"{ratio['tokens_per_s']:.2f}×"
    rows.append(["multilingual / default", "", "", embed_ratio, "", tokens_ratio, index_ratio])
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
