"""Related notes against the link graph: quality on a vault's own links, and latency.

    python -m bench.quality.related_eval [--vault DIR] [--workdir DIR] [--min-links 3] [--sample N]
    python -m bench.quality.related_eval --config CONFIG [--sample N]
    python -m bench.quality.related_eval --latency CONFIG [--requests 300]

Quality: the vault is indexed (a copy, with the defaults), and for every note with at least
`--min-links` links to other notes of the vault (resolved as Obsidian does), its related notes
are asked for with the linked ones *not* excluded. A link is partial ground truth: a linked note
is related, but an unlinked one may be too. Reported per way of representing the note
(`fused`, `passages`, `centroid`, see vaultd/index/related.py) and for two baselines:
- keyword: BM25 over the keyword index with the note's own words as the query (its 64 most
  frequent words of three letters or more, OR'd), notes ranked by their best passage;
- chance: the expected figure for a random ranking of the other notes (exact, per note).
Figures: the share of notes with at least one linked note in the top 5 ("hit@5"), and the
mean share of a note's linked notes found in its top 10 ("recall@10"); over all the notes
measured, and over each half (`tuning_half`): the constants are tuned on one, checked on the
other.

Latency (`--latency`): a running daemon's config; `--requests` related-notes requests through
its socket, one client, for notes drawn at random; p50 and p99.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from math import comb
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.lib.machine import machine
from bench.lib.paths import CORPORA, SHARED
from bench.lib.results import add_record_option, record
from bench.lib.workdir import vault_copy
from vaultd.api.client import Client
from vaultd.api.locate import socket_path
from vaultd.config import load_config
from vaultd.index.open import Index, open_index
from vaultd.index.related import HOWS, linked_paths

SHARED = SHARED
WORDS = re.compile(r"[^\W\d_]{3,}", re.UNICODE)


def keyword_related(index: Index, path: str, k: int) -> list[str]:
    text = " ".join(c.chunk.text for c in index.manifest.notes.chunks_of(path))
    counts = Counter(w.lower() for w in WORDS.findall(text))
    terms = [w for w, _ in counts.most_common(64)]
    if not terms:
        return []
    match = " OR ".join(f'"{t}"' for t in terms)
    hits = index.manifest.keyword.bm25(match, 400)
    records = index.manifest.notes.chunks_by_id([i for i, _ in hits])
    ranked: list[str] = []
    for chunk_id, _ in hits:
        record = records.get(chunk_id)
        if record is not None and record.path != path and record.path not in ranked:
            ranked.append(record.path)
        if len(ranked) == k:
            break
    return ranked


def chance(others: int, linked: int, k: int) -> tuple[float, float]:
    """Expected hit@k and recall@k of a random ranking of `others` notes, `linked` of them
    relevant."""
    k = min(k, others)
    hit = 1.0 - comb(others - linked, k) / comb(others, k)
    return hit, k / others


def quality(index: Index, min_links: int, sample: int = 0, seed: int = 1) -> dict[str, Any]:
    notes = index.manifest.notes.paths()
    graph = {p: linked_paths(index.manifest, p) & set(notes) for p in notes}
    # Links written in the note: those it makes (the graph's other half is its backlinks).
    row_links = {p: _outgoing(index, p, set(notes)) for p in notes}
    chosen = [p for p in notes if len(row_links[p]) >= min_links]
    eligible = len(chosen)
    if sample and len(chosen) > sample:
        chosen = sorted(random.Random(seed).sample(chosen, sample))
    methods: dict[str, dict[str, list[float]]] = {
        m: {"hit5": [], "recall10": [], "ms": []} for m in (*HOWS, "keyword", "chance")
    }
    for path in chosen:
        truth = row_links[path]
        for how in HOWS:
            started = time.perf_counter()
            found = [r.path for r in index.related.related(path, 10, how=how)]
            methods[how]["ms"].append((time.perf_counter() - started) * 1000)
            _score(methods[how], found, truth)
        _score(methods["keyword"], keyword_related(index, path, 10), truth)
        hit, _ = chance(len(notes) - 1, len(truth), 5)
        methods["chance"]["hit5"].append(hit)
        methods["chance"]["recall10"].append(chance(len(notes) - 1, len(truth), 10)[1])
    out: dict[str, Any] = {
        "notes": len(notes),
        "notes_with_links": eligible,
        "notes_measured": len(chosen),
    }
    tuning = [tuning_half(p) for p in chosen]
    out["notes_tuning"] = sum(tuning)
    for name, scores in methods.items():
        out[name] = {
            **_figures(scores, [True] * len(chosen)),
            "tuning": _figures(scores, tuning),
            "held_out": _figures(scores, [not t for t in tuning]),
        }
        if scores["ms"]:
            out[name]["in_process_ms_p50"] = round(statistics.median(scores["ms"]), 1)
    out["linked_either_way_mean"] = round(statistics.fmean(len(graph[p]) for p in chosen), 1)
    return out


def tuning_half(path: str) -> bool:
    """Whether a note is in the tuning half (the constants of vaultd/index/related.py are
    chosen on it alone; the held-out half checks them)."""
    return int(hashlib.sha256(path.encode()).hexdigest(), 16) % 2 == 0


def _figures(scores: dict[str, list[float]], keep: list[bool]) -> dict[str, float]:
    def mean(values: list[float]) -> float:
        chosen = [v for v, k in zip(values, keep, strict=True) if k]
        return round(statistics.fmean(chosen), 4) if chosen else float("nan")

    return {"hit@5": mean(scores["hit5"]), "recall@10": mean(scores["recall10"])}


def _outgoing(index: Index, path: str, notes: set[str]) -> set[str]:
    from vaultd.index.links import LinkResolver

    row = index.manifest.notes.row(path) or {}
    resolver = LinkResolver(sorted(notes))
    found = {resolver.resolve(str(link.get("target", "")), path) for link in row.get("links", [])}
    return {p for p in found if p and p != path}


def _score(scores: dict[str, list[float]], found: list[str], truth: set[str]) -> None:
    scores["hit5"].append(float(bool(set(found[:5]) & truth)))
    scores["recall10"].append(len(set(found[:10]) & truth) / len(truth))


def latency(config_path: Path, requests: int, seed: int) -> dict[str, Any]:
    config = load_config(config_path, env=os.environ)
    assert config.store.path is not None, "an embedded store's data directory"
    socket = socket_path(config.server.socket, os.environ, config.store.path, config.vault.path)
    client = Client(socket, timeout=60)
    status = client.request("GET", "/v1/status")
    notes = _indexed_paths(config_path)
    rng = random.Random(seed)
    times: list[float] = []
    sizes: list[int] = []
    for _ in range(requests):
        path = rng.choice(notes)
        started = time.perf_counter()
        try:
            found = client.request("GET", f"/v1/notes/{quote(path)}/related?k=10")["related"]
        except Exception:  # a note with no vectors (an empty note): not a timing
            continue
        times.append((time.perf_counter() - started) * 1000)
        sizes.append(len(found))
    times.sort()
    return {
        "notes": status.get("notes"),
        "chunks": status.get("chunks"),
        "requests": len(times),
        "p50_ms": round(times[len(times) // 2], 1),
        "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))], 1),
        "max_ms": round(times[-1], 1),
        "mean_results": round(statistics.fmean(sizes), 1),
    }


def _indexed_paths(config_path: Path) -> list[str]:
    import sqlite3

    config = load_config(config_path, env=os.environ)
    assert config.store.path is not None, "an embedded store's data directory"
    db = sqlite3.connect(f"file:{config.store.path / 'vaultd.db'}?mode=ro", uri=True)
    try:
        return [r[0] for r in db.execute("SELECT path FROM notes WHERE status = 'ok'")]
    finally:
        db.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vault", type=Path, default=CORPORA / "obsidian-help" / "en")
    parser.add_argument("--workdir", type=Path, help="keep the copy and its index here, reused")
    parser.add_argument(
        "--config", type=Path, help="measure the index of this config instead (no copy made)"
    )
    parser.add_argument("--min-links", type=int, default=3)
    parser.add_argument("--latency", type=Path, metavar="CONFIG", help="a running daemon's config")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--sample", type=int, default=0, help="measure this many of the notes (0: all), seeded"
    )
    add_record_option(parser)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    if args.latency is not None:
        result["latency"] = latency(args.latency, args.requests, args.seed)
        print(json.dumps(result, indent=2))
        took = result["latency"]
        row = [f"{took['requests']} requests", *(f"{took[k]} ms" for k in ("p50_ms", "p99_ms"))]
        record(args.record, ["related notes through the socket", "p50", "p99"], [row])
        return 0
    with tempfile.TemporaryDirectory(prefix="vaultd-related-") as scratch:
        config = args.config
        if config is None:
            workdir = (args.workdir or Path(scratch)).resolve()
            vault = vault_copy(args.vault, workdir)
            config = workdir / "vaultd.toml"
            config.write_text(
                f'[vault]\npath = "{vault}"\n[store]\npath = "{workdir / "data"}"\n'
                '[log]\nlevel = "warning"\n',
                encoding="utf-8",
            )
        settings = load_config(config, env=os.environ)
        with open_index(settings) as index:
            index.indexer.reconcile()
            result["vault"] = str(args.vault if args.config is None else settings.vault.path)
            result["quality"] = quality(index, args.min_links, args.sample, args.seed)
    print(json.dumps(result, indent=2))
    columns = ["hit@5 / recall@10", "all", "tuning half", "held-out half"]
    record(args.record, columns, table(result["quality"]))
    return 0


def table(quality: dict[str, Any]) -> list[list[str]]:
    """A row per method: hit@5 / recall@10 over all the measured notes and each half."""
    rows = []
    for name in (*HOWS, "keyword", "chance"):
        figures = quality[name]
        halves = (figures, figures["tuning"], figures["held_out"])
        rows.append([name, *(f"{f['hit@5']:.3f} / {f['recall@10']:.3f}" for f in halves)])
    return rows


if __name__ == "__main__":
    sys.exit(main())
