"""Compare `vaultd index` with the LangChain route to the same store, on the same ONNX model.

The LangChain route is what a Python user would write instead of vaultd:

    ObsidianLoader -> MarkdownHeaderTextSplitter -> RecursiveCharacterTextSplitter
    -> langchain_core.indexing.index(SQLRecordManager, cleanup="incremental",
       source_id_key="source") -> Chroma (embedded PersistentClient)

Its `Embeddings` wraps vaultd's own Embedder (all-MiniLM-L6-v2 int8, same batch size and
threads), so both sides pay the same price per embedded token; only what each decides to embed
differs. Both run on their own copy of the vault, as a fresh process per step (a script run
or a restart), through the same steps:

    initial   the first index of the vault
    (a)       again, nothing changed
    (b)       every note touched (new mtime, same bytes)
    (c)       10 notes renamed
    (d)       a paragraph appended to 10 other notes

    python -m bench.speed.langchain_compare [--vault DIR]

VAULT defaults to ../shared/corpora/obsidian-help/en beside the checkout; it is copied to a
temporary directory and never written. Needs the `bench` extra: pip install -e '.[bench]'.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib.installed import vaultd_executable
from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from bench.lib.tables import markdown
from vaultd.embedding.embedder import Embedder
from vaultd.embedding.spec import load_spec
from vaultd.embedding.tokens import load_tokenizer

DEFAULT_VAULT = CORPORA / "obsidian-help" / "en"
COLLECTION = "obsidian"
HEADERS = [("#", "Header 1"), ("##", "Header 2"), ("###", "Header 3")]
PARAGRAPH = (
    "\n\nThis paragraph was appended to measure what an edit costs. It adds a few plain "
    "sentences at the end of the note, as a quick addition after a meeting would.\n"
)


@dataclass
class Step:
    """What one tool spent on one step."""

    embedded: int
    seconds: float
    wall: float
    records: int
    stale: int
    detail: str


# -- the LangChain route (runs in its own process) ---------------------------------------------


def langchain_run(state: Path, vault: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One LangChain indexing run of `vault` into the store under `state`."""
    try:
        import chromadb
        from chromadb.config import Settings
        from langchain_chroma import Chroma
        from langchain_classic.indexes import SQLRecordManager
        from langchain_community.document_loaders import ObsidianLoader
        from langchain_core.documents import Document
        from langchain_core.embeddings import Embeddings
        from langchain_core.indexing import index
        from langchain_text_splitters import (
            MarkdownHeaderTextSplitter,
            RecursiveCharacterTextSplitter,
        )
    except ImportError as exc:
        sys.exit(f"{exc}: install the bench extra: pip install -e '.[bench]'")

    class CountingEmbeddings(Embeddings):
        """vaultd's Embedder as a LangChain `Embeddings`, counting the texts it is given."""

        def __init__(self, embedder: Embedder) -> None:
            self.embedder = embedder
            self.tokenizer = load_tokenizer(embedder.spec)
            self.texts = 0
            self.tokens = 0
            #: Time spent counting tokens, taken off the run's time.
            self.counting = 0.0

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            started = time.perf_counter()
            self.texts += len(texts)
            window = self.embedder.spec.window
            self.tokens += sum(min(len(e.ids), window) for e in self.tokenizer.encode_batch(texts))
            self.counting += time.perf_counter() - started
            vectors: list[list[float]] = self.embedder.embed_documents(texts).tolist()
            return vectors

        def embed_query(self, text: str) -> list[float]:
            vector: list[float] = self.embedder.embed_query(text).tolist()
            return vector

    embeddings = CountingEmbeddings(
        Embedder(load_spec("default"), threads=args.threads, batch_size=args.batch_size)
    )
    client = chromadb.PersistentClient(
        path=str(state / "chroma"), settings=Settings(anonymized_telemetry=False)
    )
    store = Chroma(
        collection_name=COLLECTION,
        embedding_function=embeddings,
        client=client,
        collection_metadata={"hnsw:space": "cosine"},
    )
    records = SQLRecordManager(f"chroma/{COLLECTION}", db_url=f"sqlite:///{state / 'records.db'}")
    records.create_schema()
    by_header = MarkdownHeaderTextSplitter(headers_to_split_on=HEADERS)
    by_size = RecursiveCharacterTextSplitter(
        chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap
    )
    splits = 0

    def documents() -> Iterator[Document]:
        nonlocal splits
        for note in ObsidianLoader(str(vault)).lazy_load():
            sections = by_header.split_text(note.page_content)
            for section in sections:
                section.metadata = {**note.metadata, **section.metadata}
            for split in by_size.split_documents(sections):
                splits += 1
                yield split

    started = time.perf_counter()
    result = index(
        documents(),
        records,
        store,
        cleanup="incremental",
        source_id_key="source",
        key_encoder="sha256",
    )
    seconds = time.perf_counter() - started - embeddings.counting
    stored = store.get(include=["metadatas"])
    paths = [str(m.get("path", "")) for m in stored["metadatas"]]
    return {
        "embedded": embeddings.texts,
        "tokens": embeddings.tokens,
        "seconds": seconds,
        "records": len(paths),
        "stale": sum(1 for p in paths if not Path(p).is_file()),
        "splits": splits,
        **{k: int(v) for k, v in result.items()},
    }


# -- the two sides as subprocesses ----------------------------------------------------------------


def time_langchain(state: Path, vault: Path, args: argparse.Namespace) -> Step:
    command = [
        sys.executable,
        "-m",
        "bench.speed.langchain_compare",
        "--langchain-run",
        str(state),
        "--vault",
        str(vault),
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
        "--chunk-size",
        str(args.chunk_size),
        "--chunk-overlap",
        str(args.chunk_overlap),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"the LangChain run failed ({done.returncode}):\n{done.stderr}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    detail = (
        f"{out['splits']} splits, {out['tokens']:,} tokens embedded: {out['num_added']} added, "
        f"{out['num_skipped']} skipped, {out['num_deleted']} deleted"
    )
    return Step(out["embedded"], out["seconds"], wall, out["records"], out["stale"], detail)


def time_vaultd(exe: str, config: Path, vault: Path) -> Step:
    started = time.perf_counter()
    done = subprocess.run(
        [exe, "index", "--json", "--quiet", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"vaultd index failed ({done.returncode}):\n{done.stderr}")
    s: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    exported = subprocess.run(
        [exe, "export", "--config", str(config)], capture_output=True, text=True, check=True
    )
    paths = [json.loads(line)["metadata"]["path"] for line in exported.stdout.splitlines() if line]
    detail = (
        f"{s['notes_changed']} changed, {s['notes_moved']} moved, {s['notes_touched']} touched; "
        f"{s['chunks_reused']} reused, {s['chunks_deleted']} deleted"
    )
    return Step(
        int(s["chunks_embedded"]),
        float(s["seconds"]),
        wall,
        len(paths),
        sum(1 for p in paths if not (vault / p).is_file()),
        detail,
    )


# -- the steps ------------------------------------------------------------------------------------


def notes(vault: Path) -> list[Path]:
    return sorted(vault.rglob("*.md"))


def spread(items: list[Path], count: int, offset: float) -> list[Path]:
    """`count` items evenly spread over `items`, starting `offset` of a step in."""
    step = len(items) / count
    return [items[int((i + offset) * step)] for i in range(count)]


def touch_all(vault: Path) -> None:
    now = time.time_ns()
    for path in notes(vault):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, max(now, st.st_mtime_ns + 1_000_000_000)))


def rename(vault: Path, count: int) -> None:
    for path in spread(notes(vault), count, 0.25):
        path.rename(path.with_name(f"{path.stem} (renamed){path.suffix}"))


def append(vault: Path, count: int) -> None:
    candidates = [p for p in notes(vault) if "(renamed)" not in p.stem]
    for path in spread(candidates, count, 0.75):
        with path.open("a", encoding="utf-8") as handle:
            handle.write(PARAGRAPH)


def write_config(path: Path, vault: Path, store: Path, args: argparse.Namespace) -> None:
    path.write_text(
        f"[vault]\npath = {json.dumps(str(vault))}\n"
        f"[store]\npath = {json.dumps(str(store))}\n"
        f"[embedding]\nbatch_size = {args.batch_size}\nthreads = {args.threads}\n"
        '[log]\nlevel = "warning"\n',
        encoding="utf-8",
    )


COLUMNS = [
    "step",
    "LangChain embedded",
    "vaultd embedded",
    "LangChain s",
    "vaultd s",
    "LangChain wall",
    "vaultd wall",
    "LangChain records (stale)",
    "vaultd records (stale)",
]


def table(rows: list[tuple[str, Step, Step]]) -> list[list[str]]:
    return [
        [
            name,
            f"{lc.embedded:,}",
            f"{vd.embedded:,}",
            f"{lc.seconds:.1f}",
            f"{vd.seconds:.1f}",
            f"{lc.wall:.1f}",
            f"{vd.wall:.1f}",
            f"{lc.records:,} ({lc.stale})",
            f"{vd.records:,} ({vd.stale})",
        ]
        for name, lc, vd in rows
    ]


def print_table(rows: list[tuple[str, Step, Step]]) -> None:
    print(markdown(COLUMNS, table(rows)))
    print()
    for name, lc, vd in rows:
        print(f"{name}\n  LangChain: {lc.detail}\n  vaultd:    {vd.detail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="vaultd vs LangChain's indexing API on the same ONNX model.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT, help="vault to copy")
    parser.add_argument("--batch-size", type=int, default=32, help="texts per ONNX run")
    parser.add_argument("--threads", type=int, default=0, help="ONNX intra-op threads")
    parser.add_argument("--chunk-size", type=int, default=1000, help="LangChain chunk chars")
    parser.add_argument("--chunk-overlap", type=int, default=100, help="LangChain overlap")
    parser.add_argument("--count", type=int, default=10, help="notes renamed, notes edited")
    parser.add_argument("--langchain-run", type=Path, metavar="STATE", help=argparse.SUPPRESS)
    add_record_option(parser)
    args = parser.parse_args(argv)

    if args.langchain_run is not None:
        print(json.dumps(langchain_run(args.langchain_run, args.vault, args)))
        return 0
    if not args.vault.is_dir():
        print(f"no such vault: {args.vault}", file=sys.stderr)
        return 2
    exe = vaultd_executable()

    with tempfile.TemporaryDirectory(prefix="vaultd-langchain-") as tmp:
        work = Path(tmp)
        lc_vault, vd_vault = work / "vault-langchain", work / "vault-vaultd"
        shutil.copytree(args.vault, lc_vault)
        shutil.copytree(args.vault, vd_vault)
        lc_state = work / "langchain"
        lc_state.mkdir()
        config = work / "vaultd.toml"
        write_config(config, vd_vault, work / "vaultd-store", args)

        steps = [
            ("initial index", None),
            ("(a) no change", None),
            ("(b) touch every note", touch_all),
            (f"(c) rename {args.count} notes", lambda v: rename(v, args.count)),
            (f"(d) append to {args.count} notes", lambda v: append(v, args.count)),
        ]
        rows: list[tuple[str, Step, Step]] = []
        for i, (name, change) in enumerate(steps):
            if change is not None:
                change(lc_vault)
                change(vd_vault)
            # Alternate which goes first so drift on a shared machine hits both alike.
            if i % 2 == 0:
                lc = time_langchain(lc_state, lc_vault, args)
                vd = time_vaultd(exe, config, vd_vault)
            else:
                vd = time_vaultd(exe, config, vd_vault)
                lc = time_langchain(lc_state, lc_vault, args)
            rows.append((name, lc, vd))
            print(f"{name}: LangChain {lc.embedded}, vaultd {vd.embedded}", file=sys.stderr)
        count = len(notes(vd_vault))

    print(f"vault: {args.vault} ({count} notes, copied)")
    print(
        f"model: all-MiniLM-L6-v2 int8 via vaultd's Embedder, batch {args.batch_size}; "
        f"LangChain chunks {args.chunk_size} chars, overlap {args.chunk_overlap}"
    )
    print("s: the run's own time (no start-up); wall: the whole process\n")
    print_table(rows)
    record(args.record, COLUMNS, table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
