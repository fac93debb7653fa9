"""A 50,000-note vault on a real daemon: first index, edits during it, memory, restart.

    python -m bench.speed.big_vault [--notes 50000] [--work DIR] [--edits 50] [--sample 1500]

1. Builds the vault with bench/data/make_vault.py (in WORK/vault, reused when present).
2. First index: `vaultd run` on the empty data directory, timed from spawn until the daemon
   is idle with every note indexed. Meanwhile, after a warm-up, `--edits` edits to one note,
   each timed from the write until a keyword search returns it (bench/speed/latency.py's method).
3. Peak RSS (VmHWM) over the first index, and RSS at rest 30 s after it. With
   `--wait-unload`, also once the daemon has closed its vector index and model for being
   unused (`[schedule] unload`, 10 min by default), and the time of the first search after
   that (which opens them again) and of the next one.
4. Restart: SIGTERM, then a new `vaultd run` on the unchanged vault, timed from spawn until
   it is ready and reconciled; its status must show zero embeddings and zero note reads.
5. The bare floor: the vault's unique embedded texts (parsed and chunked with vaultd's own
   functions, not timed), a random `--sample` of them embedded by the bare ONNX session
   (bench/speed/index_vs_onnx.py's), scaled to all of them by padded tokens: every unique text's
   token count is known, and the full set's padding is that of one length-sorted pass.

Prints a JSON object; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.data import make_vault
from bench.lib.machine import machine
from bench.lib.results import add_record_option, record, report_rows
from bench.speed.index_vs_onnx import time_bare
from bench.speed.latency import measure_edits, rss_mb, summary
from harness.daemon import short_socket_dir, start, write_config
from vaultd.config import load_config
from vaultd.embedding.embedder import workers_for
from vaultd.embedding.spec import load_spec
from vaultd.embedding.tokens import TokenCounter, load_tokenizer
from vaultd.errors import NoteError
from vaultd.pipeline.chunk import chunk_note
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.pipeline.parse import parse_note


class PeakRss(threading.Thread):
    """Samples VmRSS every half second; VmHWM alone would miss nothing but the timeline."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(0.5):
            try:
                self.samples.append((time.monotonic() - started, rss_mb(self.pid)))
            except OSError:
                return


def unique_texts(config_file: Path) -> tuple[int, int, dict[str, str]]:
    config = load_config(config_file, env=os.environ)
    spec = load_spec(config.embedding.model)
    counter = TokenCounter.for_spec(spec)
    vault = config.require_vault()
    discovery = Discovery(vault, IgnoreRules.from_config(config.vault))
    texts: dict[str, str] = {}
    notes = chunks = 0
    for state in discovery.walk():
        try:
            note = parse_note(state.path, (vault / state.path).read_bytes())
        except NoteError:
            continue
        notes += 1
        for chunk in chunk_note(note, counter, min(config.chunking.max_tokens, spec.window)):
            chunks += 1
            texts.setdefault(chunk.hash, chunk.embed_text)
    return notes, chunks, texts


def padded_tokens(lengths: list[int], batch_size: int) -> int:
    ordered = sorted(lengths)
    return sum(
        len(ordered[i : i + batch_size]) * ordered[min(i + batch_size, len(ordered)) - 1]
        for i in range(0, len(ordered), batch_size)
    )


def bare_estimate(config_file: Path, sample: int, seed: int) -> dict[str, Any]:
    config = load_config(config_file, env=os.environ)
    spec = load_spec(config.embedding.model)
    notes, chunks, texts = unique_texts(config_file)
    tokenizer = load_tokenizer(spec)
    values = list(texts.values())
    lengths = [min(len(e.ids), spec.window) for e in tokenizer.encode_batch(values)]
    batch = config.embedding.batch_size
    picked = random.Random(seed).sample(range(len(values)), min(sample, len(values)))
    # The standard session: one run at a time on every core (see bench/speed/index_vs_onnx.py).
    cores = workers_for(config.embedding.threads)
    run = time_bare(spec, [values[i] for i in picked], batch, intra_op=cores, workers=1)
    # And as vaultd runs it: one single-threaded run per core at once.
    at_once = time_bare(spec, [values[i] for i in picked], batch, intra_op=1, workers=cores)
    full = padded_tokens(lengths, batch)
    return {
        "notes": notes,
        "chunks": chunks,
        "unique_texts": len(values),
        "unique_tokens": sum(lengths),
        "padded_tokens_full": full,
        "sample_texts": len(picked),
        "sample_padded_tokens": run.padded,
        "sample_seconds": round(run.total_s, 2),
        "bare_seconds_estimate": round(run.total_s * full / run.padded, 1),
        "at_once_sample_seconds": round(at_once.total_s, 2),
        "at_once_seconds_estimate": round(at_once.total_s * full / at_once.padded, 1),
    }


def unloaded(daemon: Any, prefix: str) -> dict[str, Any]:
    """Wait until the idle daemon has closed its vector index and model; RSS then, and the
    first search after it (which opens both again) against the next."""
    started = time.monotonic()
    while True:
        status = daemon.request("GET", "/v1/status")
        if not status["store"]["loaded"] and not status["model_loaded"]:
            break
        if time.monotonic() - started > 3600:
            raise RuntimeError("the daemon did not unload within an hour")
        time.sleep(5)
    out: dict[str, Any] = {
        f"{prefix}_unloaded_after_s": round(time.monotonic() - started),
        f"{prefix}_unloaded_rss_mb": round(rss_mb(daemon.process.pid), 1),
    }
    for key in ("first_search_after_unload_s", "next_search_s"):
        began = time.monotonic()
        daemon.search("how do I keep my notes in sync between devices", mode="vector", k=10)
        out[f"{prefix}_{key}"] = round(time.monotonic() - began, 3)
    out[f"{prefix}_reopened_rss_mb"] = round(rss_mb(daemon.process.pid), 1)
    return out


def restart(config: Path, socket: Path, log: Path, *, wait_unload: bool = False) -> dict[str, Any]:
    """Start on the indexed, unchanged vault: time to ready and reconciled, reads, RSS."""
    out: dict[str, Any] = {}
    spawned = time.monotonic()
    daemon = start(config, socket, log, wait_ready=True, ready_timeout=300)
    try:
        out["restart_ready_s"] = round(time.monotonic() - spawned, 2)
        status = daemon.request("GET", "/v1/status")
        out["restart_status"] = {
            k: status.get(k) for k in ("notes", "chunks", "embedded_total", "notes_read_total")
        }
        time.sleep(10)
        out["restart_idle_rss_mb"] = round(rss_mb(daemon.process.pid), 1)
        if wait_unload:
            out.update(unloaded(daemon, "restart"))
    finally:
        daemon.stop(signal.SIGTERM, timeout=60)
    return out


def wait_idle(daemon: Any, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            daemon.wait_idle(timeout=60)
            return
        except Exception:  # not idle within the minute: ask again
            continue
    raise RuntimeError("the first index did not finish in time")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=50_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/vaultd-big"))
    parser.add_argument("--edits", type=int, default=50)
    parser.add_argument("--edit-gap", type=float, default=5.0, help="seconds between edits")
    parser.add_argument("--sample", type=int, default=1500, help="texts for the bare session")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-bare", action="store_true")
    parser.add_argument(
        "--wait-unload",
        action="store_true",
        help="also measure RSS once the idle daemon has closed its index and model",
    )
    parser.add_argument(
        "--restart-only",
        action="store_true",
        help="only step 4, on WORK's vault and data from an earlier run",
    )
    add_record_option(parser)
    args = parser.parse_args()
    work: Path = args.work
    vault = work / "vault"
    result: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
    }
    if not vault.exists():
        result["vault"] = make_vault.build(vault, args.notes, 7, 0.8)
    data = work / "data"
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(work / "vaultd.toml", vault, data, socket, debounce="300ms")
    log = work / "vaultd.log"
    if args.restart_only:
        result.update(restart(config, socket, log, wait_unload=args.wait_unload))
        print(json.dumps(result, indent=2))
        record(args.record, ["figure", "value"], report_rows(result))
        return 0
    if data.exists():
        sys.exit(f"{data} exists: remove it for a first index")

    spawned = time.monotonic()
    daemon = start(config, socket, log, wait_ready=False, ready_timeout=300)
    sampler = PeakRss(daemon.process.pid)
    sampler.start()
    try:
        time.sleep(30)  # the first index is under way
        lags = measure_edits(daemon, vault, args.edits, args.edit_gap)
        result["edits_during_first_index"] = summary(lags)
        result["edits_done_after_s"] = round(time.monotonic() - spawned, 1)
        wait_idle(daemon, 6 * 3600)
        result["first_index_s"] = round(time.monotonic() - spawned, 1)
        status = daemon.request("GET", "/v1/status")
        result["first_index_status"] = {
            k: status.get(k) for k in ("notes", "chunks", "embedded_total", "notes_read_total")
        }
        result["peak_rss_mb"] = round(rss_mb(daemon.process.pid, "VmHWM"), 1)
        time.sleep(30)
        result["idle_rss_mb"] = round(rss_mb(daemon.process.pid), 1)
        if args.wait_unload:
            result.update(unloaded(daemon, "idle"))
    finally:
        sampler.stop.set()
        daemon.stop(signal.SIGTERM, timeout=60)
    result["rss_timeline_mb"] = [
        (round(t), round(r)) for t, r in sampler.samples[:: max(1, len(sampler.samples) // 40)]
    ]

    result.update(restart(config, socket, log, wait_unload=args.wait_unload))

    if not args.skip_bare:
        result["bare"] = bare_estimate(config, args.sample, args.seed)
        result["first_index_over_bare"] = round(
            result["first_index_s"] / result["bare"]["bare_seconds_estimate"], 3
        )
        result["first_index_over_at_once"] = round(
            result["first_index_s"] / result["bare"]["at_once_seconds_estimate"], 3
        )
    print(json.dumps(result, indent=2))
    record(args.record, ["figure", "value"], report_rows(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
