"""kill -9 soak: many trials of the crash tests that CI runs twenty of.

Each trial SIGKILLs `vaultd index` at a random moment of a first index, or `vaultd run` at a
random moment of a burst of edits, restarts, and compares the store exhaustively (ids,
documents, metadata, vectors within 1e-5) with a fresh index of the same tree.

    python -m bench.soak.crash_soak --trials 200
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.lib.results import add_record_option, record
from harness.convergence import assert_same, fresh_export
from harness.crash import index_command, kill_after, recover
from harness.daemon import short_socket_dir, start, write_config
from harness.vaults import pin_mtimes, random_operations, random_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--notes", type=int, default=40)
    add_record_option(parser)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    failures = 0
    trials = {"first index": [0, 0], "burst": [0, 0]}  # trials, of which diverged
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vaultd-soak-") as tmp:
        root = Path(tmp)
        base = root / "base"
        base.mkdir()
        text_rng = random.Random(7)
        for i in range(args.notes):
            folder = base / f"f{i % 4}"
            folder.mkdir(exist_ok=True)
            (folder / f"n{i}.md").write_text(random_text(text_rng, f"Note {i}") * 3)
        (root / "ref").mkdir()
        reference = fresh_export(base, root / "ref")
        for trial in range(args.trials):
            work = root / f"t{trial}"
            work.mkdir()
            vault = work / "vault"
            shutil.copytree(base, vault)
            config = write_config(work / "c.toml", vault, work / "data", short_socket_dir() / "s")
            burst = trial % 2 == 1
            try:
                if not burst:
                    process = subprocess.Popen(index_command(config), stderr=subprocess.DEVNULL)
                    kill_after(process, rng.uniform(2.0, 6.0))
                    expected = reference
                else:
                    subprocess.run(index_command(config), check=True, stderr=subprocess.DEVNULL)
                    socket = short_socket_dir() / "vaultd.sock"
                    config = write_config(
                        work / "c.toml", vault, work / "data", socket, debounce="100ms"
                    )
                    daemon = start(config, socket, work / "vaultd.log")
                    random_operations(vault, work, random.Random(trial), 60)
                    kill_after(daemon.process, rng.uniform(0.05, 2.5))
                    pin_mtimes(vault)
                    fresh_dir = work / "fresh"
                    fresh_dir.mkdir()
                    expected = fresh_export(vault, fresh_dir)
                assert_same(recover(config), expected)
                verdict = "ok"
            except AssertionError as exc:
                failures += 1
                verdict = f"DIVERGED: {exc}"
            kind = "burst" if burst else "first index"
            trials[kind][0] += 1
            trials[kind][1] += verdict != "ok"
            print(f"trial {trial + 1}/{args.trials} ({kind}): {verdict}", flush=True)
            shutil.rmtree(work, ignore_errors=True)
    minutes = (time.monotonic() - started) / 60
    print(f"{args.trials} trials, {failures} diverged, {minutes:.1f} min")
    rows = [[kind, f"{n:,}", f"{diverged:,}"] for kind, (n, diverged) in trials.items()]
    rows.append(["all", f"{args.trials:,}", f"{failures:,}"])
    record(args.record, [f"killed during ({minutes:.1f} min)", "trials", "diverged"], rows)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
