"""SciFact nDCG@10 in keyword mode, for code before and after a change, on an index that holds
only the keyword phase (no vectors: a machine too busy to embed 9,832 passages can still check
that the keyword side loses nothing).

    python -m bench.quality.keyword_scifact --workdir /tmp/i38-scifact \\
        --code before=/tmp/base-i38 --code after=.

The vault is written as `scifact_eval.py` writes it; `vaultd index` runs until every note is in
the manifest (its keyword phase) and is then stopped by SIGTERM, which keeps what it finished.
Each `--code` checkout then runs `scifact_eval.evaluate` in a child process with that checkout
first on its PYTHONPATH.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from bench.lib.beir import load_dataset
from bench.lib.paths import REPO
from bench.lib.results import add_record_option, record, report_rows
from bench.quality.scifact_eval import DEFAULT_DATA, build_vault, write_config

CHILD = """
import json, sys
from pathlib import Path
code = Path(sys.argv[1])
if (code / "bench" / "__init__.py").exists():
    from bench.lib.beir import load_dataset
    from bench.quality.scifact_eval import evaluate
else:  # a checkout from before bench/ was a package
    sys.path.insert(0, str(code / "bench"))
    from beir import load_dataset
    from scifact_eval import evaluate
dataset = load_dataset(Path(sys.argv[2]))
queries = [(q, dataset.queries[q]) for q in sorted(dataset.qrels) if q in dataset.queries]
results, _ = evaluate(Path(sys.argv[3]), dataset, queries, ["keyword"], False)
print(json.dumps(results["keyword"].summary()))
"""


def keyword_phase(config: Path, data: Path, notes: int) -> None:
    if _notes(data) >= notes:
        return
    child = subprocess.Popen(
        [sys.executable, "-m", "vaultd", "index", "-q", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        cwd="/",
    )
    try:
        while child.poll() is None and _notes(data) < notes:
            time.sleep(2)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            child.wait()


def _notes(data: Path) -> int:
    db = data / "vaultd.db"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT count(DISTINCT path) FROM chunks").fetchone()[0])
    except sqlite3.Error:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/i38-scifact"))
    parser.add_argument("--code", action="append", default=[], help="NAME=CHECKOUT")
    add_record_option(parser)
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    dataset = load_dataset(args.data)
    (workdir / "vault").mkdir(parents=True, exist_ok=True)
    build_vault(dataset.corpus, workdir / "vault")
    config = write_config(workdir, 0)
    keyword_phase(config, workdir / "data", len(dataset.corpus))
    report: dict[str, object] = {"load": os.getloadavg(), "notes": _notes(workdir / "data")}
    for name, code in (c.split("=", 1) for c in args.code or [f"after={REPO}"]):
        env = {**os.environ, "PYTHONPATH": str(Path(code).resolve())}
        checkout = str(Path(code).resolve())
        done = subprocess.run(
            [sys.executable, "-c", CHILD, checkout, str(args.data.resolve()), str(config)],
            capture_output=True,
            text=True,
            env=env,
            cwd="/",
            check=True,
        )
        report[name] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(report))
    record(args.record, ["figure", "value"], report_rows(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
