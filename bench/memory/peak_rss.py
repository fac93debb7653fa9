"""Peak resident memory of real vaultd processes: a first index, and one huge note.

    python -m bench.memory.peak_rss [--case help huge] [--mode index run] [--repeat 3]
                             [--tree DIR ...] [--env NAME=VALUE ...] [--huge-mb 1.0]

Cases, each on a fresh copy of its vault and a fresh data directory:

- `help`: ../shared/corpora/obsidian-help/en (173 notes), a first index;
- `huge`: a vault of one generated note of `--huge-mb` MB (seeded prose from obsidian-help's
  own sentences, under headings, with lists and links: realistic Markdown).

Modes: `index` runs `vaultd index --json` to its exit, and takes the peak from the kernel's
`ru_maxrss` for that child (`wait4`); `run` starts `vaultd run` (harness/daemon.py), waits until
it is idle, and reads VmHWM from /proc before stopping it (with `yield_above = 1`: on a
shared machine the governor would otherwise hold bulk work back for as long as others run).
Both sample /proc/PID/status every 0.1 s meanwhile, for the hints: anonymous against
file-backed memory at the peak, when in the run the peak came (a peak at the end grows with
the run; one early and flat does not), and what the process held once done (`run`: idle,
after the daemon handed its arena and free heap back). The huge note chunks into about 1,500
chunks of full width (1 MB).

Every `--tree` (a source tree, put first on the child's PYTHONPATH; default this checkout)
runs each repeat, in rotating order, so that memory and time can be compared within a repeat
on a shared machine: the report gives each tree's range and, for the second tree on, its time
and CPU as a ratio to the first tree's in the same repeat. `--env` sets variables for the
child (MALLOC_ARENA_MAX=2, say).

Prints one JSON line per run, then a JSON summary; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.lib.machine import cpu_model
from bench.lib.paths import CORPORA, REPO
from bench.lib.results import add_record_option, record
from harness.daemon import short_socket_dir, start, write_config

HELP = CORPORA / "obsidian-help" / "en"
CHECKOUT = REPO


def status_mb(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon and RssFile of `pid`, in MB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[name] = round(int(value.split()[0]) / 1024, 1)
    return out


class Sampler(threading.Thread):
    """/proc/PID/status every 0.1 s until the process is gone or `stop` is set."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stop.wait(0.1):
            try:
                self.samples.append((time.monotonic() - started, status_mb(self.pid)))
            except (OSError, ValueError, IndexError):
                return

    def hints(self, until: float | None = None) -> dict[str, Any]:
        samples = [s for s in self.samples if until is None or s[0] <= until]
        if not samples:
            return {}
        end = samples[-1][0] or 1.0
        at, peak = max(samples, key=lambda s: s[1].get("VmRSS", 0.0))
        tenths = [0.0] * 10
        for t, s in samples:
            slot = min(int(10 * t / end), 9)
            tenths[slot] = max(tenths[slot], s.get("VmRSS", 0.0))
        return {
            "peak_sampled_mb": peak.get("VmRSS"),
            "peak_anon_mb": peak.get("RssAnon"),
            "peak_file_mb": peak.get("RssFile"),
            "peak_at": round(at / end, 2),
            "rss_by_tenth_mb": tenths,
        }


# -- the vaults -------------------------------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def corpus_sentences(source: Path) -> list[str]:
    """Prose sentences of a corpus: body lines, no front matter, code, tables or headings."""
    sentences: list[str] = []
    for path in sorted(source.rglob("*.md")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.startswith("---"):
            end = text.find("\n---", 3)
            text = text[end + 4 :] if end > 0 else text
        fenced = False
        for line in text.splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            line = line.strip()
            if fenced or not line or line[0] in "#|>!<-*" or line[0].isdigit():
                continue
            sentences.extend(s for s in _SENTENCE.split(line) if len(s.split()) >= 5)
    return sentences


def huge_note(size: int, seed: int = 1) -> str:
    """About `size` bytes of Markdown: sections of paragraphs drawn from obsidian-help's
    sentences by a seeded generator, with subheadings, lists and wikilinks now and then."""
    sentences = corpus_sentences(HELP)
    rng = random.Random(seed)
    words = [w.strip(".,:;()[]`*\"'") for s in sentences[:2000] for w in s.split()]
    words = [w for w in words if w.isalpha() and len(w) > 3]
    parts = ["---\ntags: [reference, long]\n---\n# A very long note\n"]
    length = len(parts[0])
    section = 0
    while length < size:
        section += 1
        block = [f"\n## {section}. {' '.join(rng.sample(words, 3)).capitalize()}\n"]
        for _ in range(rng.randint(2, 6)):
            if rng.random() < 0.25:
                block.append(f"\n### {' '.join(rng.sample(words, 2)).capitalize()}\n")
            if rng.random() < 0.2:
                block.append("\n" + "".join(f"- {rng.choice(sentences)}\n" for _ in range(4)))
            paragraph = " ".join(rng.choice(sentences) for _ in range(rng.randint(3, 8)))
            if rng.random() < 0.3:
                paragraph += f" See [[{rng.choice(words).capitalize()}]]."
            block.append("\n" + paragraph + "\n")
        text = "".join(block)
        parts.append(text)
        length += len(text.encode("utf-8"))
    return "".join(parts)


def make_vault(case: str, root: Path, huge_mb: float) -> Path:
    vault = root / "vault"
    if case == "help":
        shutil.copytree(HELP, vault)
    else:
        vault.mkdir()
        (vault / "Long note.md").write_text(huge_note(int(huge_mb * 1024 * 1024)), "utf-8")
    return vault


# -- the runs ---------------------------------------------------------------------------------


@dataclass
class Run:
    case: str
    mode: str
    tree: str
    repeat: int
    peak_mb: float
    seconds: float
    cpu_s: float
    chunks_embedded: int
    after_mb: float | None = None
    hints: dict[str, Any] = field(default_factory=dict)


def child_env(tree: Path, extra: dict[str, str]) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_index(case: str, tree: Path, repeat: int, args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory(prefix="vaultd-peak-") as tmp:
        root = Path(tmp)
        vault = make_vault(case, root, args.huge_mb)
        config = root / "vaultd.toml"
        config.write_text(
            f'[vault]\npath = "{vault}"\n[store]\npath = "{root / "data"}"\n'
            '[log]\nlevel = "warning"\n',
            encoding="utf-8",
        )
        out, cfg = root / "index.json", str(config)
        with out.open("wb") as stdout:
            started = time.monotonic()
            process = subprocess.Popen(
                [sys.executable, "-m", "vaultd", "index", "--json", "--quiet", "--config", cfg],
                stdout=stdout,
                env=child_env(tree, args.env),
            )
            sampler = Sampler(process.pid)
            sampler.start()
            _, status, usage = os.wait4(process.pid, 0)
            wall = time.monotonic() - started
            process.returncode = os.waitstatus_to_exitcode(status)
        sampler.stop.set()
        if process.returncode != 0:
            sys.exit(f"vaultd index failed ({process.returncode})")
        summary = json.loads(out.read_text().strip().splitlines()[-1])
        return Run(
            case,
            "index",
            str(tree),
            repeat,
            peak_mb=round(usage.ru_maxrss / 1024, 1),
            seconds=round(wall, 2),
            cpu_s=round(usage.ru_utime + usage.ru_stime, 1),
            chunks_embedded=int(summary["chunks_embedded"]),
            hints=sampler.hints(),
        )


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_daemon(case: str, tree: Path, repeat: int, args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory(prefix="vaultd-peak-") as tmp:
        root = Path(tmp)
        vault = make_vault(case, root, args.huge_mb)
        socket = short_socket_dir() / "vaultd.sock"
        # Bulk work must not wait for other programs here: the peak is what is measured, and
        # on a shared machine the governor would stretch the run for as long as they run.
        config = write_config(
            root / "vaultd.toml",
            vault,
            root / "data",
            socket,
            extra="\n[embedding]\nyield_above = 1.0\n",
        )
        started = time.monotonic()
        daemon = start(
            config, socket, root / "vaultd.log", env=child_env(tree, args.env), wait_ready=False
        )
        sampler = Sampler(daemon.process.pid)
        sampler.start()
        try:
            while True:
                try:
                    daemon.wait_idle(timeout=60)
                    break
                except Exception:  # not idle within the minute: ask again
                    if daemon.process.poll() is not None:
                        raise
            idle = time.monotonic() - started
            cpu = cpu_seconds(daemon.process.pid)
            status = daemon.request("GET", "/v1/status")
            time.sleep(5)  # the worker hands its arena and free heap back once idle
            memory = status_mb(daemon.process.pid)
        finally:
            sampler.stop.set()
            daemon.stop()
        return Run(
            case,
            "run",
            str(tree),
            repeat,
            peak_mb=memory["VmHWM"],
            seconds=round(idle, 2),
            cpu_s=round(cpu, 1),
            chunks_embedded=int(status.get("embedded_total") or 0),
            after_mb=memory["VmRSS"],
            hints=sampler.hints(until=idle),
        )


def spread(values: list[float]) -> list[float]:
    return [round(min(values), 2), round(max(values), 2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", nargs="+", choices=("help", "huge"), default=["help", "huge"])
    parser.add_argument("--mode", nargs="+", choices=("index", "run"), default=["index", "run"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tree", type=Path, action="append", default=[])
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--huge-mb", type=float, default=1.0)
    add_record_option(parser)
    args = parser.parse_args()
    args.env = dict(item.split("=", 1) for item in args.env)
    trees: list[Path] = [t.resolve() for t in args.tree] or [CHECKOUT]
    # `python -m vaultd` puts its working directory first on sys.path, before PYTHONPATH: run
    # from a checkout, every tree would run that checkout's code.
    os.chdir(tempfile.gettempdir())
    runs: list[Run] = []
    for repeat in range(args.repeat):
        for case in args.case:
            for mode in args.mode:
                shift = repeat % len(trees)
                for tree in trees[shift:] + trees[:shift]:
                    how = run_index if mode == "index" else run_daemon
                    run = how(case, tree, repeat, args)
                    runs.append(run)
                    print(json.dumps(asdict(run)), flush=True)
    summary: dict[str, Any] = {
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count()},
        "date": time.strftime("%Y-%m-%d"),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "env": args.env,
        "results": [],
    }
    for case in args.case:
        for mode in args.mode:
            first = {
                r.repeat: r for r in runs if (r.case, r.mode, r.tree) == (case, mode, str(trees[0]))
            }
            for tree in trees:
                mine = [r for r in runs if (r.case, r.mode, r.tree) == (case, mode, str(tree))]
                row: dict[str, Any] = {
                    "case": case,
                    "mode": mode,
                    "tree": str(tree),
                    "peak_mb": spread([r.peak_mb for r in mine]),
                    "seconds": spread([r.seconds for r in mine]),
                    "cpu_s": spread([r.cpu_s for r in mine]),
                    "chunks_embedded": sorted({r.chunks_embedded for r in mine}),
                }
                if mode == "run":
                    row["idle_mb"] = spread([r.after_mb or 0.0 for r in mine])
                if tree != trees[0]:
                    row["seconds_ratio"] = spread(
                        [r.seconds / first[r.repeat].seconds for r in mine]
                    )
                    row["cpu_ratio"] = spread([r.cpu_s / first[r.repeat].cpu_s for r in mine])
                summary["results"].append(row)
    print(json.dumps(summary, indent=2))
    columns = ["peak RSS", *(str(tree) for tree in trees)]
    record(args.record, columns, table(summary["results"], trees, args.repeat))


def megabytes(spread: list[float], runs: int) -> str:
    low, high = spread
    figure = f"{low:,.0f} MB" if round(low) == round(high) else f"{low:,.0f}–{high:,.0f} MB"
    return figure + (f" ({runs} runs)" if runs > 1 else "")


def table(results: list[dict[str, Any]], trees: list[Path], runs: int) -> list[list[str]]:
    """A row per case and mode (and the daemon at rest after a run), a column per tree."""
    rows: list[list[str]] = []
    for case, mode in dict.fromkeys((r["case"], r["mode"]) for r in results):
        mine = {r["tree"]: r for r in results if (r["case"], r["mode"]) == (case, mode)}
        name = f"`vaultd {mode}`, {case}"
        rows.append([name, *(megabytes(mine[str(t)]["peak_mb"], runs) for t in trees)])
        if mode == "run":
            at_rest = (megabytes(mine[str(t)]["idle_mb"], runs) for t in trees)
            rows.append([f"{name}, at rest", *at_rest])
    return rows


if __name__ == "__main__":
    main()
