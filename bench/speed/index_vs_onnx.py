"""Time the whole `vaultd index` against the bare ONNX session embedding the same texts.

The bare session is the floor any indexer pays for this model: it tokenizes the texts, runs
length-sorted batches of the same size through onnxruntime, and mean-pools. It runs two ways:

- one run at a time with ONNX Runtime's intra-op threads on every core, the way the library's
  documentation and every example use a session (the acceptance ratio is taken against this);
- as vaultd runs it: one run per core at once, each on one thread (`bare, runs at once`), so
  the table also shows what vaultd's own work costs beside the fastest floor measured here.

Its texts are exactly what vaultd embeds: the vault is parsed and chunked with vaultd's
functions (not timed) and the chunks' embedded texts are deduplicated by hash.

    python -m bench.speed.index_vs_onnx [--vault DIR] [--repeat N]

VAULT defaults to ../shared/corpora/obsidian-help/en beside the checkout; it is copied to a
temporary directory first and never written. Each repeat times a fresh `vaultd index --json`
as a subprocess (its wall time from spawn to exit, and the `seconds` it reports itself) and the
two fresh bare sessions, rotating which goes first; the median ratio is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from bench.lib.installed import vaultd_executable
from bench.lib.machine import machine
from bench.lib.paths import CORPORA
from bench.lib.results import add_record_option, record
from vaultd.config import Config, load_config
from vaultd.embedding.embedder import pool, session_options, workers_for
from vaultd.embedding.spec import ModelSpec, load_spec
from vaultd.embedding.tokens import TokenCounter, chunk_budget, load_tokenizer
from vaultd.errors import NoteError
from vaultd.pipeline.chunk import chunk_note
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.pipeline.parse import parse_note

DEFAULT_VAULT = CORPORA / "obsidian-help" / "en"
TARGET = 1.10


@dataclass
class CliRun:
    wall_s: float
    reported_s: float
    cpu_s: float
    chunks_embedded: int


@dataclass
class BareRun:
    tokenize_s: float
    run_s: float
    total_s: float
    cpu_s: float
    tokens: int
    padded: int


def write_config(path: Path, vault: Path, store: Path, args: argparse.Namespace) -> None:
    path.write_text(
        "\n".join(
            [
                "[vault]",
                f"path = {json.dumps(str(vault))}",
                "[store]",
                f"path = {json.dumps(str(store))}",
                "[embedding]",
                f"batch_size = {args.batch_size}",
                f"threads = {args.threads}",
                "[chunking]",
                f"max_tokens = {args.max_tokens}",
                "[log]",
                'level = "warning"',
                "",
            ]
        ),
        encoding="utf-8",
    )


def texts_to_embed(config: Config, spec: ModelSpec) -> tuple[int, int, list[str]]:
    """(notes, chunks, unique embedded texts) as vaultd's parse and chunk produce them."""
    vault = config.require_vault()
    counter = TokenCounter.for_spec(spec)
    max_tokens = chunk_budget(config.chunking.max_tokens, spec, counter)
    max_bytes = int(config.vault.max_file_mb * 1024 * 1024)
    discovery = Discovery(vault, IgnoreRules.from_config(config.vault))
    unique: dict[str, str] = {}
    notes = chunks = 0
    for state in discovery.walk():
        try:
            note = parse_note(state.path, (vault / state.path).read_bytes(), max_bytes=max_bytes)
        except NoteError:
            continue
        notes += 1
        for chunk in chunk_note(note, counter, max_tokens):
            chunks += 1
            unique.setdefault(chunk.hash, chunk.embed_text)
    return notes, chunks, list(unique.values())


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_cli(exe: str, config_file: Path) -> CliRun:
    cpu = children_cpu()
    started = time.perf_counter()
    done = subprocess.run(
        [exe, "index", "--json", "--quiet", "--config", str(config_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    cpu = children_cpu() - cpu
    if done.returncode != 0:
        sys.exit(f"vaultd index failed ({done.returncode}):\n{done.stderr}")
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if summary["notes_failed"]:
        print(f"warning: {summary['notes_failed']} notes failed", file=sys.stderr)
    return CliRun(wall, float(summary["seconds"]), cpu, int(summary["chunks_embedded"]))


def run_padded(
    session: ort.InferenceSession, spec: ModelSpec, rows: list[list[int]], needs_types: bool
) -> np.ndarray:
    """One plain session run over token ids padded to the longest row, pooled as vaultd pools."""
    width = max(len(row) for row in rows)
    input_ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for number, row in enumerate(rows):
        input_ids[number, : len(row)] = row
        mask[number, : len(row)] = 1
    feed = {"input_ids": input_ids, "attention_mask": mask}
    if needs_types:
        feed["token_type_ids"] = np.zeros_like(input_ids)
    hidden = session.run(None, feed)[0]
    return pool(np.asarray(hidden, dtype=np.float32), mask, spec.pooling)


def time_bare(
    spec: ModelSpec, texts: list[str], batch_size: int, *, intra_op: int, workers: int
) -> BareRun:
    """Embed `texts` with a fresh onnxruntime session; the session is built before timing.
    `workers` runs go at once, each with `intra_op` threads."""
    session = ort.InferenceSession(
        str(spec.onnx_path), session_options(intra_op), providers=["CPUExecutionProvider"]
    )
    needs_types = "token_type_ids" in {i.name for i in session.get_inputs()}
    tokenizer = load_tokenizer(spec)
    prefix = spec.document_prefix

    cpu = time.process_time()
    started = time.perf_counter()
    encodings = tokenizer.encode_batch([prefix + t for t in texts], add_special_tokens=True)
    ids = [e.ids for e in encodings]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    tokenized = time.perf_counter()
    out = np.zeros((len(ids), spec.dimensions), dtype=np.float32)
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]

    def run(batch: list[int]) -> None:
        out[batch] = run_padded(session, spec, [ids[i] for i in batch], needs_types)

    if workers == 1:
        for batch in batches:
            run(batch)
    else:
        with ThreadPoolExecutor(workers) as pool_:
            for _ in pool_.map(run, batches):
                pass
    finished = time.perf_counter()
    cpu = time.process_time() - cpu
    padded = sum(len(b) * max(len(ids[i]) for i in b) for b in batches)
    return BareRun(
        tokenize_s=tokenized - started,
        run_s=finished - tokenized,
        total_s=finished - started,
        cpu_s=cpu,
        tokens=sum(len(x) for x in ids),
        padded=padded,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Whole `vaultd index` vs the bare ONNX session on the same texts.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT, help="vault to copy")
    parser.add_argument("--repeat", type=int, default=2, help="measurements of each")
    parser.add_argument("--batch-size", type=int, default=32, help="[embedding] batch_size")
    parser.add_argument("--threads", type=int, default=0, help="[embedding] threads")
    parser.add_argument("--max-tokens", type=int, default=256, help="[chunking] max_tokens")
    add_record_option(parser)
    args = parser.parse_args(argv)
    if not args.vault.is_dir():
        print(f"no such vault: {args.vault}", file=sys.stderr)
        return 2
    exe = vaultd_executable()

    with tempfile.TemporaryDirectory(prefix="vaultd-bench-") as tmp:
        work = Path(tmp)
        vault = work / "vault"
        shutil.copytree(args.vault, vault)
        config_file = work / "config.toml"
        write_config(config_file, vault, work / "store-probe", args)
        config = load_config(config_file, env=os.environ)
        spec = load_spec(config.embedding.model)
        notes, chunks, texts = texts_to_embed(config, spec)

        cli_runs: list[CliRun] = []
        bare_runs: list[BareRun] = []
        par_runs: list[BareRun] = []
        cores = workers_for(args.threads)
        order = ["cli", "bare", "par"]
        for r in range(max(1, args.repeat)):
            write_config(config_file, vault, work / f"store-{r}", args)
            # Rotate which goes first so drift on a shared machine hits all alike.
            for step in order[r % 3 :] + order[: r % 3]:
                if step == "cli":
                    cli_runs.append(time_cli(exe, config_file))
                elif step == "bare":
                    bare_runs.append(
                        time_bare(spec, texts, args.batch_size, intra_op=cores, workers=1)
                    )
                else:
                    par_runs.append(
                        time_bare(spec, texts, args.batch_size, intra_op=1, workers=cores)
                    )
            shutil.rmtree(work / f"store-{r}", ignore_errors=True)

    print(f"vault          {args.vault} (copied)")
    print(f"machine        {machine()}")
    print(f"python         {platform.python_version()}, onnxruntime {ort.__version__}")
    print(
        f"model          {spec.id}, batch {args.batch_size}; bare: one run at a time on "
        f"{cores} intra-op threads; runs at once: {cores} runs of one thread"
    )
    print(f"notes          {notes}")
    print(f"chunks         {chunks} ({len(texts)} unique embedded texts)")
    print(f"tokens         {bare_runs[0].tokens} (special tokens included)")
    print(f"padded         {bare_runs[0].padded} in the bare session's batches")
    embedded = {run.chunks_embedded for run in cli_runs}
    if embedded != {len(texts)}:
        print(f"warning: vaultd embedded {sorted(embedded)} texts, the bare session {len(texts)}")
    print()
    print(
        f"{'run':>3}  {'vaultd wall':>11}  {'(own)':>7}  {'bare':>7}  {'at once':>7}  "
        f"{'wall/bare':>9}  {'own/bare':>8}  {'wall/at once':>12}  "
        f"{'vaultd cpu':>10}  {'bare cpu':>8}  {'cpu ratio':>9}"
    )
    wall_ratios: list[float] = []
    own_ratios: list[float] = []
    par_ratios: list[float] = []
    cpu_ratios: list[float] = []
    table: list[list[str]] = []
    for i, (cli, bare, par) in enumerate(zip(cli_runs, bare_runs, par_runs, strict=True), 1):
        wall_ratios.append(cli.wall_s / bare.total_s)
        own_ratios.append(cli.reported_s / bare.total_s)
        par_ratios.append(cli.wall_s / par.total_s)
        cpu_ratios.append(cli.cpu_s / bare.cpu_s)
        print(
            f"{i:>3}  {cli.wall_s:>10.2f}s  {cli.reported_s:>6.2f}s  {bare.total_s:>6.2f}s  "
            f"{par.total_s:>6.2f}s  {wall_ratios[-1]:>9.3f}  {own_ratios[-1]:>8.3f}  "
            f"{par_ratios[-1]:>12.3f}  {cli.cpu_s:>9.1f}s  {bare.cpu_s:>7.1f}s  "
            f"{cpu_ratios[-1]:>9.3f}"
        )
        times = (cli.wall_s, cli.reported_s, bare.total_s, par.total_s)
        ratios = (wall_ratios[-1], par_ratios[-1])
        cpus = (cli.cpu_s, bare.cpu_s)
        table.append(
            [
                str(i),
                *(f"{x:.2f} s" for x in times),
                *(f"{x:.3f}" for x in ratios),
                *(f"{x:.1f} s" for x in cpus),
                f"{cpu_ratios[-1]:.3f}",
            ]
        )
    wall = statistics.median(c.wall_s for c in cli_runs)
    own = statistics.median(c.reported_s for c in cli_runs)
    bare_s = statistics.median(b.total_s for b in bare_runs)
    par_s = statistics.median(b.total_s for b in par_runs)
    tokens = bare_runs[0].tokens
    print()
    print(f"{'median':<26}{'seconds':>9}{'chunks/s':>10}{'tokens/s':>10}")
    for name, seconds in (
        ("vaultd index (wall)", wall),
        ("vaultd index (own)", own),
        ("bare ONNX session", bare_s),
        ("bare, runs at once", par_s),
    ):
        print(f"{name:<26}{seconds:>9.2f}{len(texts) / seconds:>10.1f}{tokens / seconds:>10.0f}")
    ratio = statistics.median(wall_ratios)
    print()
    print(
        f"median ratio   {ratio:.3f} wall/bare, {statistics.median(own_ratios):.3f} own/bare, "
        f"{statistics.median(par_ratios):.3f} wall/runs at once, "
        f"{statistics.median(cpu_ratios):.3f} cpu/cpu"
    )
    verdict = "within" if ratio <= TARGET else "over"
    print(f"target         <= {TARGET:.2f} (wall/bare): {verdict}")
    rate = [f"{s:.2f} s ({len(texts) / s:.1f} chunks/s)" for s in (wall, bare_s, par_s)]
    at_once, cpu = (f"{statistics.median(r):.3f}" for r in (par_ratios, cpu_ratios))
    table.append(
        ["median", rate[0], f"{own:.2f} s", rate[1], rate[2], f"{ratio:.3f}", at_once, "", "", cpu]
    )
    columns = ["run", "vaultd wall", "vaultd `seconds`", "bare session", "bare, at once"]
    columns += ["wall/bare", "wall/at once", "vaultd CPU", "bare CPU", "CPU ratio"]
    record(args.record, columns, table, align=["right"] * len(columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
