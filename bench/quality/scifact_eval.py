"""Retrieval quality on a BEIR dataset (default SciFact): nDCG@10, recall@10/@100 and latency.

Each abstract becomes a note `<doc-id>.md` with its title as H1 and the abstract below; the vault
is indexed by `vaultd index` exactly as a user's vault would be, then every judged query is run
through vaultd's own search in each mode. Usage:

    python -m bench.quality.scifact_eval [--data DIR] [--workdir DIR]
        [--modes keyword,vector,hybrid] [--limit N] [--json]

DATA defaults to ../shared/bench/scifact beside the checkout; it is read, never copied. Without
--workdir the vault and index go to a temporary directory and are thrown away. With --workdir
they are kept, and a later run re-indexes only what changed, which for the same data is nothing.

Search asks for the top 100 passages (vaultd's maximum); a document is ranked where its best
passage ranks (later passages of the same document are dropped), so a long abstract cut into
several chunks counts once, by its best-matching chunk.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from bench.lib.beir import Dataset, Document, dedupe, load_dataset, ndcg_at, percentile, recall_at
from bench.lib.paths import SHARED
from bench.lib.results import add_record_option, record
from vaultd.config import EmbeddingSection, SearchSection, load_config
from vaultd.index.open import open_index
from vaultd.query import MAX_K, MODES, Mode, SearchQuery

DEFAULT_DATA = SHARED / "bench" / "scifact"
#: Published BEIR SciFact nDCG@10, for the printed comparison.
PUBLISHED = {"BM25": 0.665, "all-MiniLM-L6-v2 (fp32)": 0.645}
CUTOFFS = (10, 100)


@dataclass
class ModeResult:
    ndcg10: list[float] = field(default_factory=list)
    recall10: list[float] = field(default_factory=list)
    recall100: list[float] = field(default_factory=list)
    docs: list[int] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        n = max(1, len(self.ndcg10))
        return {
            "ndcg@10": round(sum(self.ndcg10) / n, 4),
            "recall@10": round(sum(self.recall10) / n, 4),
            "recall@100": round(sum(self.recall100) / n, 4),
            "docs_per_query": round(sum(self.docs) / n, 1),
            "latency_p50_ms": round(percentile(self.latency_ms, 50), 2),
            "latency_p95_ms": round(percentile(self.latency_ms, 95), 2),
        }


# -- the vault ---------------------------------------------------------------------------------


def note_text(doc: Document) -> str:
    title = " ".join(doc.title.split()) or doc.id
    return f"# {title}\n\n{doc.text.strip()}\n"


def build_vault(corpus: Sequence[Document], vault: Path) -> tuple[int, int]:
    """Write one note per document; unchanged notes are left alone so their mtime stays.

    Returns (notes written, stale notes removed).
    """
    vault.mkdir(parents=True, exist_ok=True)
    wanted: set[str] = set()
    written = 0
    for doc in corpus:
        name = f"{doc.id}.md"
        wanted.add(name)
        data = note_text(doc).encode("utf-8")
        path = vault / name
        try:
            if path.read_bytes() == data:
                continue
        except FileNotFoundError:
            pass
        path.write_bytes(data)
        written += 1
    removed = 0
    for path in vault.glob("*.md"):
        if path.name not in wanted:
            path.unlink()
            removed += 1
    return written, removed


def write_config(workdir: Path, threads: int, precision: str = "float") -> Path:
    config = workdir / "vaultd.toml"
    text = (
        "[vault]\n"
        f"path = {json.dumps(str(workdir / 'vault'))}\n"
        "[store]\n"
        f"path = {json.dumps(str(workdir / 'data'))}\n"
        "[embedding]\n"
        f"threads = {threads}\n"
        f'precision = "{precision}"\n'
        "[log]\n"
        'level = "warning"\n'
    )
    if not config.is_file() or config.read_text(encoding="utf-8") != text:
        config.write_text(text, encoding="utf-8")
    return config


def run_index(config: Path, quiet: bool) -> tuple[dict[str, Any], float]:
    """`vaultd index --json` in a child process; returns its summary and the wall time."""
    command = [sys.executable, "-m", "vaultd", "index", "--json", "--config", str(config)]
    if quiet:
        command.append("-q")
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"vaultd index failed with exit code {done.returncode}")
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary, seconds


# -- evaluation --------------------------------------------------------------------------------


def search_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """`--search KEY=VALUE` pairs as `SearchSection` fields of their own types."""
    fields = {f.name: f for f in dataclasses.fields(SearchSection)}
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in fields or not value:
            raise ValueError(f"--search {pair!r}: expected KEY=VALUE, KEY one of {sorted(fields)}")
        kind = type(getattr(SearchSection(), key))
        out[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return out


def doc_id(path: str) -> str:
    return PurePosixPath(path).stem


def evaluate(
    config_path: Path,
    dataset: Dataset,
    queries: Sequence[tuple[str, str]],
    modes: Sequence[Mode],
    progress: bool,
    overrides: Mapping[str, Any] = {},
    known: Sequence[bool] = (True,),
) -> tuple[dict[str, ModeResult], dict[str, int]]:
    """Each mode's results; with `known` (False, True) each mode also without the known-item
    rules (tiers and typo corrections), as "<mode>, known off"."""
    config = load_config(config_path, env=os.environ)
    settings = replace(config.search, **overrides)
    runs = [(mode, on) for mode in modes for on in known]
    label = {(mode, on): mode if on else f"{mode}, known off" for mode, on in runs}
    results: dict[str, ModeResult] = {label[run]: ModeResult() for run in runs}
    with open_index(config) as index:
        counts = index.manifest.counts()
        searcher = index.searcher
        if queries:  # warm up: the first call of each mode pays for caches and lazy loading
            for mode in modes:
                searcher.search(SearchQuery(queries[0][1], k=MAX_K, mode=mode, settings=settings))
        for done, (query_id, text) in enumerate(queries, 1):
            relevant = dataset.qrels[query_id]
            # Modes take turns on each query, so background load on the machine hits all alike.
            for mode, on in runs:
                started = time.perf_counter()
                hits = searcher.search(
                    SearchQuery(text, k=MAX_K, mode=mode, settings=settings, known_items=on)
                ).hits
                elapsed = (time.perf_counter() - started) * 1000
                ranking = dedupe(doc_id(hit.path) for hit in hits)
                result = results[label[mode, on]]
                result.latency_ms.append(elapsed)
                result.docs.append(len(ranking))
                result.ndcg10.append(ndcg_at(ranking, relevant, 10))
                result.recall10.append(recall_at(ranking, relevant, 10))
                result.recall100.append(recall_at(ranking, relevant, 100))
            if progress and (done % 50 == 0 or done == len(queries)):
                print(f"searched {done}/{len(queries)} queries", file=sys.stderr)
    return results, counts


# -- output ------------------------------------------------------------------------------------


def render(report: dict[str, Any]) -> str:
    index = report["index"]
    lines = [
        f"data        {report['data']}",
        f"workdir     {report['workdir']}",
        f"corpus      {report['documents']:,} documents -> {index['notes']:,} notes, "
        f"{index['chunks']:,} chunks",
        f"index       {index['seconds']:.1f} s wall ({index['summary']['chunks_embedded']:,} "
        f"chunks embedded, {index['summary']['chunks_reused']:,} reused, "
        f"{index['summary']['notes_failed']} notes failed)",
        f"queries     {report['queries']} judged, top {MAX_K} passages each",
        "",
        f"{'mode':<17} {'nDCG@10':>8} {'R@10':>7} {'R@100':>7} {'docs':>6} "
        f"{'p50 ms':>8} {'p95 ms':>8}",
    ]
    for mode, m in report["modes"].items():
        lines.append(
            f"{mode:<17} {m['ndcg@10']:>8.4f} {m['recall@10']:>7.4f} {m['recall@100']:>7.4f} "
            f"{m['docs_per_query']:>6.1f} {m['latency_p50_ms']:>8.1f} {m['latency_p95_ms']:>8.1f}"
        )
    published = ", ".join(f"{name} {score:.3f}" for name, score in PUBLISHED.items())
    lines += ["", f"published nDCG@10 on SciFact: {published}"]
    lines.append("docs: distinct documents among the top passages (R@100 is over these)")
    return "\n".join(lines)


def table(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The modes' figures as docs/benchmarks.md tables them."""
    columns = ["mode", "nDCG@10", "recall@10", "recall@100", "docs in top 100 passages"]
    rows = [
        [mode]
        + [f"{m[key]:.4f}" for key in ("ndcg@10", "recall@10", "recall@100")]
        + [f"{m['docs_per_query']:.1f}", f"{m['latency_p50_ms']:.1f} ms"]
        + [f"{m['latency_p95_ms']:.1f} ms"]
        for mode, m in report["modes"].items()
    ]
    return [*columns, "p50", "p95"], rows


def parse_modes(text: str) -> list[Mode]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(
            f"modes must be a comma-separated list of {', '.join(MODES)}; got {text!r}"
        )
    return modes  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA,
        help=f"BEIR dataset folder, read only (default: {DEFAULT_DATA})",
    )
    parser.add_argument(
        "--split", default="test", help="qrels split when there is no qrels.tsv (default: test)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the vault and index here and reuse them on the next run (default: a "
        "temporary directory, removed afterwards)",
    )
    parser.add_argument(
        "--modes",
        type=parse_modes,
        default=["keyword", "vector", "hybrid"],
        metavar="LIST",
        help="comma-separated modes (default: keyword,vector,hybrid)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        metavar="N",
        default=0,
        help="evaluate only the first N judged queries (default: all)",
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="ONNX Runtime threads (0: one per core)"
    )
    parser.add_argument(
        "--precision",
        choices=("float", "int8"),
        default=EmbeddingSection().precision,
        help="[embedding] precision (default: vaultd's); give each its own --workdir",
    )
    parser.add_argument(
        "--search",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [search] setting for this run, e.g. lead_weight=0 (repeatable)",
    )
    parser.add_argument(
        "--known",
        choices=("on", "off", "both"),
        default="on",
        help="the known-item rules (tiers, typo corrections): on, off, or both in one run",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    add_record_option(parser)
    args = parser.parse_args(argv)
    try:
        overrides = search_overrides(args.search)
    except ValueError as exc:
        parser.error(str(exc))

    if not (args.data / "corpus.jsonl").is_file():
        print(f"no BEIR dataset (corpus.jsonl) in {args.data}", file=sys.stderr)
        return 2
    dataset = load_dataset(args.data, args.split)
    queries = dataset.judged_queries()
    if args.limit > 0:
        queries = queries[: args.limit]

    with tempfile.TemporaryDirectory(prefix="vaultd-beir-") as scratch:
        workdir = (args.workdir or Path(scratch)).resolve()
        workdir.mkdir(parents=True, exist_ok=True)

        def log(msg: str) -> None:
            if not args.quiet:
                print(msg, file=sys.stderr)

        written, removed = build_vault(dataset.corpus, workdir / "vault")
        log(f"vault: {len(dataset.corpus)} notes ({written} written, {removed} removed)")
        config = write_config(workdir, args.threads, args.precision)
        summary, index_seconds = run_index(config, args.quiet)
        log(
            f"index: {summary['chunks_embedded']} chunks embedded, "
            f"{summary['chunks_reused']} reused in {index_seconds:.1f} s"
        )
        known = {"on": (True,), "off": (False,), "both": (False, True)}[args.known]
        results, counts = evaluate(
            config, dataset, queries, args.modes, not args.quiet, overrides, known
        )

    report: dict[str, Any] = {
        "data": str(args.data.resolve()),
        "workdir": str(args.workdir.resolve()) if args.workdir else "(temporary)",
        "documents": len(dataset.corpus),
        "queries": len(queries),
        "k": MAX_K,
        "precision": args.precision,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "index": {
            "seconds": round(index_seconds, 2),
            "notes": counts["notes"],
            "chunks": counts["chunks"],
            "summary": summary,
        },
        "modes": {mode: result.summary() for mode, result in results.items()},
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    record(args.record, *table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
