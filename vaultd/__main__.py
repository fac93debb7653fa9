"""`python -m vaultd`, and the `vaultd` command's entry point."""

import os
import sys

#: Seconds a thread runs Python before one waiting for the GIL is let in (see `run`).
SWITCH_INTERVAL = 0.0005


def run() -> None:
    # One BLAS thread, set before numpy loads. vaultd's products are one query vector against
    # the exact copy's matrix (vaultd.storage.exact). A second OpenBLAS thread halves one only
    # because it spins between products, ready for the next: 52 ms of CPU for each 1 ms
    # product when searches come 50 ms apart, and on 2 cores the spinning takes the core a
    # hybrid search's keyword side runs on. Told to sleep sooner, it wakes slower than one
    # thread does the product (bench/speed/blas_threads.py, docs/benchmarks.md). One thread
    # also spares the buffer OpenBLAS reserves for each core.
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
