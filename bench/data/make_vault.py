"""Build a big, reproducible vault from the real notes in ../shared/corpora.

    python -m bench.data.make_vault OUT [--notes 50000] [--seed 7] [--rename 0.8] [--force]

Every note of the corpora (obsidian-hub, obsidian-help en/zh/Sandbox, kepano-obsidian: about
7,000) is copied round after round until OUT holds `--notes` notes. Round 0 is the corpora as
they are, each under its own top-level folder; every later round puts a full copy of them
under a folder of its own (`Archive 2019/`, `Team wiki/`, ...), so folders keep the depth and
sizes of real vaults (up to six levels, a few to a few hundred notes each).

Copies are changed the way real vaults drift, decided by a seeded generator so the same
arguments give the same bytes on any machine:

- `--rename` of the copies get a new file name (`Note 3.md`), so a new title and new
  embedded texts; the rest keep theirs, and their unchanged chunks are exact duplicates of
  the original's (the same `title > section` and text), as copied folders are;
- a quarter get a paragraph appended, one in ten a status line after the front matter, one
  in ten a tag; these change one chunk, add one, or change only metadata.

Links keep pointing at the original names, as links in copied folders do. OUT must be empty
or absent (`--force` empties it). A JSON summary is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from bench.lib.paths import CORPORA

CORPORA = CORPORA
SOURCES = (
    "obsidian-hub",
    "obsidian-help/en",
    "obsidian-help/zh",
    "obsidian-help/Sandbox",
    "kepano-obsidian",
)
ROUNDS = (
    "Archive 2019",
    "Archive 2020",
    "Team wiki",
    "Reading notes",
    "Projects/Old site",
    "Imports/Evernote",
    "Archive 2021",
    "Clients/Northwind",
    "Courses",
    "Research/Drafts",
    "Archive 2022",
    "Imports/Notion",
    "Teaching",
    "Archive 2023",
    "Personal/Journal material",
)
APPENDED = (
    "Reviewed again this week; nothing to change for now.",
    "Follow-up: compare this with the notes from the last planning meeting.",
    "Open question: does this still hold after the migration to the new setup?",
    "Summary for the team: the steps above worked on both laptops without changes.",
    "Note to self: link this from the index note once the draft is finished.",
)
STATUSES = ("draft", "reviewed", "stale", "in progress", "archived")
TAGS = ("review", "archive/old", "project/active", "reading", "todo/later")


@dataclass(frozen=True)
class Source:
    corpus: str
    rel: PurePosixPath
    data: bytes


def sources(corpora: Path) -> list[Source]:
    found: list[Source] = []
    for corpus in SOURCES:
        root = corpora / corpus
        if not root.is_dir():
            sys.exit(f"{root} is missing: make_vault.py reads the corpora in ../shared/corpora")
        for path in sorted(root.rglob("*.md")):
            rel = path.relative_to(root)
            if any(part.startswith(".") for part in rel.parts):
                continue
            found.append(Source(corpus, PurePosixPath(rel.as_posix()), path.read_bytes()))
    return found


def edit(data: bytes, rng: random.Random, stats: dict[str, int]) -> bytes:
    roll = rng.random()
    text = data.decode("utf-8", errors="surrogateescape")
    if roll < 0.25:
        stats["appended"] += 1
        text = text.rstrip("\n") + "\n\n" + rng.choice(APPENDED) + "\n"
    elif roll < 0.35:
        stats["status_line"] += 1
        line = f"Status: {rng.choice(STATUSES)}\n\n"
        if text.startswith("---\n") and "\n---\n" in text[4:]:
            end = text.index("\n---\n", 4) + 5
            text = text[:end] + line + text[end:]
        else:
            text = line + text
    elif roll < 0.45:
        stats["tagged"] += 1
        text = text.rstrip("\n") + f"\n\n#{rng.choice(TAGS)}\n"
    else:
        return data
    return text.encode("utf-8", errors="surrogateescape")


def build(out: Path, notes: int, seed: int, rename: float) -> dict[str, object]:
    found = sources(CORPORA)
    rng = random.Random(seed)
    stats = {"appended": 0, "status_line": 0, "tagged": 0, "renamed": 0, "kept_name": 0}
    written = 0
    total_bytes = 0
    folders: set[PurePosixPath] = set()
    round_number = 0
    while written < notes:
        if round_number > len(ROUNDS):
            sys.exit(f"--notes {notes} needs more than {len(ROUNDS) + 1} rounds of copies")
        base = PurePosixPath(ROUNDS[round_number - 1]) if round_number else PurePosixPath()
        for source in found:
            if written == notes:
                break
            rel = base / source.corpus.replace("/", " ") / source.rel
            data = source.data
            if round_number:
                if rng.random() < rename:
                    stats["renamed"] += 1
                    rel = rel.with_name(f"{rel.stem} {round_number + 1}{rel.suffix}")
                else:
                    stats["kept_name"] += 1
                data = edit(data, rng, stats)
            target = out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            folders.add(rel.parent)
            written += 1
            total_bytes += len(data)
        round_number += 1
    return {
        "notes": written,
        "bytes": total_bytes,
        "folders": len(folders),
        "max_depth": max(len(f.parts) for f in folders),
        "source_notes": len(found),
        "rounds": round_number,
        "seed": seed,
        "rename": rename,
        **stats,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the vault to create (empty or absent)")
    parser.add_argument("--notes", type=int, default=50_000, help="notes to write (50,000)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the edits (7)")
    parser.add_argument(
        "--rename", type=float, default=0.8, help="share of copies given a new name (0.8)"
    )
    parser.add_argument("--force", action="store_true", help="empty OUT first")
    args = parser.parse_args(argv)
    if args.out.exists() and any(args.out.iterdir()):
        if not args.force:
            sys.exit(f"{args.out} is not empty; pass --force to replace it")
        shutil.rmtree(args.out)
    started = time.perf_counter()
    summary = build(args.out, args.notes, args.seed, args.rename)
    summary["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
