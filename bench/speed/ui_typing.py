"""Search as you type through the page, measured in the browser: for each keystroke, from the
search request leaving the page to its hits drawn (`performance.now()` around the fetch and the
drawing, in app.js), on a real daemon over obsidian-hub, in Debian's Chromium via Playwright.

Indexes the vault first when `--workdir` holds no index (the daemon's own first index; the
measurement starts once every note is searchable by its words, and says how many have their
vectors by then: hybrid search uses what is embedded). Queries are note titles typed a key at a
time, as a person would, 120 ms apart.

    python -m bench.speed.ui_typing --workdir /tmp/vaultd-ui-hub --queries 40
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from bench.lib.paths import CORPORA, SHARED
from bench.lib.results import add_record_option, record
from harness.daemon import short_socket_dir, start, wait_until, write_config
from vaultd.ui.server import UiServer

SHARED = SHARED


def titles(vault: Path, count: int, seed: int) -> list[str]:
    names = sorted(p.stem for p in vault.rglob("*.md") if len(p.stem) > 6)
    picked = random.Random(seed).sample(names, min(count, len(names)))
    return [" ".join(n.replace("-", " ").split()[:4])[:32] for n in picked]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vault", type=Path, default=CORPORA / "obsidian-hub")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/vaultd-ui-hub"))
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--label", help="the vault's name in the table (default: its folder's)")
    parser.add_argument("--delay", type=float, default=120.0, help="ms between keystrokes")
    parser.add_argument(
        "--cpu-budget", default="0.25", help="[embedding] cpu_budget while measuring"
    )
    add_record_option(parser)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    socket = short_socket_dir() / "vaultd.sock"
    config = write_config(
        work / "vaultd.toml",
        args.vault,
        work / "data",
        socket,
        extra=f"[embedding]\ncpu_budget = {args.cpu_budget}\n",
    )
    started = time.monotonic()
    daemon = start(config, socket, work / "vaultd.log", wait_ready=False, ready_timeout=600)
    try:

        def keyword_ready() -> bool:
            status = daemon.request("GET", "/v1/status")
            progress = status.get("progress") or {}
            return status["notes"] > 0 and progress.get("phase") in (None, "embed")

        wait_until(keyword_ready, "every note searchable by its words", timeout=7200)
        ready_s = time.monotonic() - started
        server = UiServer(daemon.client, args.vault, idle=0)
        server.start()
        samples: list[float] = []
        last_key: list[float] = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page()
            page.goto(server.url)
            page.wait_for_url(f"http://127.0.0.1:{server.port}/")  # the exchange moves on
            page.goto(f"http://127.0.0.1:{server.port}/#search")  # the first view is home
            for query in titles(args.vault, args.queries, args.seed):
                page.evaluate("() => { window.vaultdTimings = []; }")
                page.fill("#q", "")
                page.click("#q")
                page.keyboard.type(query, delay=args.delay)
                page.wait_for_function(
                    "q => document.body.dataset.lastQuery === q",
                    arg=query.strip(),
                    timeout=60000,
                )
                timings: list[dict[str, Any]] = page.evaluate("() => window.vaultdTimings")
                samples.extend(t["ms"] for t in timings)
                last_key.append(page.evaluate("() => window.vaultdDrawnAt - window.vaultdLastKey"))
            browser.close()
        server.close()
        status = daemon.request("GET", "/v1/status")
        ordered = sorted(samples)
        result = {
            "vault": str(args.vault),
            "notes": status["notes"],
            "chunks": status["chunks"],
            "embedded_notes": status.get("embedded"),
            "chunks_awaiting_vectors": status.get("awaiting"),
            "keyword_ready_s": round(ready_s, 1),
            "queries": args.queries,
            "keystrokes_drawn": len(samples),
            "p50_ms": round(statistics.median(ordered), 1),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
            "last_key_to_hits_p50_ms": round(statistics.median(last_key), 1),
            "last_key_to_hits_max_ms": round(max(last_key), 1),
            "load_1min": os.getloadavg()[0],
            "cores": os.cpu_count(),
        }
        print(json.dumps(result, indent=2))
        columns = ["per keystroke, request to hits drawn", "p50", "p95"]
        rows = [
            [
                f"{args.label or args.vault.name} ({len(samples)} keystrokes drawn)",
                f"{result['p50_ms']} ms",
                f"{result['p95_ms']} ms",
            ],
            [
                "last keystroke of a title to its hits drawn",
                f"{result['last_key_to_hits_p50_ms']} ms "
                f"(max {result['last_key_to_hits_max_ms']} ms)",
                "",
            ],
        ]
        record(args.record, columns, rows)
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
