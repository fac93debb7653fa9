"""`python -m vaultd`, and the `vaultd` command's entry point."""

import os
import sys

#: Seconds a thread runs Python before one waiting for the GIL is let in (see `run`).
SWITCH_INTERVAL = 0.0005


def run() -> None:
    # One BLAS thread, set before numpy loads. vaultd's products are one query vector against
    # the exact copy's matrix (vaultd.storage.exact): memory-bound, no faster on two threads,
    # and OpenBLAS's helper threads spin on a core after each product, which on 2 cores is
    # the core the hybrid search's keyword side runs on (the daemon's CPU per vector search
    # on obsidian-hub: 11.5 ms with them, 6.4 ms without, the same wall time:
    # docs/benchmarks.md). It also spares the buffer OpenBLAS reserves for each core.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # A thread waiting for the GIL gets it within half a millisecond, not Python's five: a
    # hybrid search's two sides hand it back and forth between their native calls (ONNX
    # Runtime, SQLite, numpy), and each handoff waited for the other side's interval to run
    # out (hybrid p50 on obsidian-hub in process 7.78 -> 7.38 ms: docs/benchmarks.md).
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        from vaultd.cli.commands import main
    except KeyboardInterrupt:
        # Ctrl-C while the command's modules load (a few tenths of a second): nothing has
        # started, so there is nothing to stop and no traceback to show.
        sys.exit(130)
    main()


# Guarded: a spawned worker process may import this module (see vaultd.index.parsers).
if __name__ == "__main__":
    run()
