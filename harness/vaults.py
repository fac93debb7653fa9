"""Vaults the tests and the benchmarks write and change: a small fixed vault, notes of random
words, and a seeded mix of the file operations an editor and a user make."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

NOTES = {
    "Garden/Watering.md": """---
title: Garden Watering
aliases: [Watering, Irrigation]
tags: [garden/water, home]
---
# Garden Watering

Water the tomatoes every morning. See [[Compost]] and [[Über Notiz]].

## Schedule

Drip irrigation on the garden beds runs at dawn.
""",
    "Garden/Compost.md": """---
tags: [garden]
---
# Compost

Turn the compost pile weekly; it feeds the beds. Links back to [[Watering]].
""",
    "Über Ordner/Über Notiz.md": """# Über Notiz

Grüße aus dem Garten, geschrieben auf der Reise. #reise
""",
    "Kitchen/Bread Recipe.md": """---
aliases: [Sourdough]
tags: [cooking]
---
# Bread Recipe

Knead the sourdough, proof it overnight, bake at 250 degrees. See [[Garden/Watering#Schedule]].
""",
}


def write_vault(root: Path) -> Path:
    """A small vault: folders, tags (one nested), aliases, links, a non-ASCII folder and name."""
    for rel, text in NOTES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def note(title: str, body: str) -> str:
    return f"# {title}\n\n{body}\n"


WORDS = (
    "alpine",
    "meadow",
    "glacier",
    "lichen",
    "moss",
    "fern",
    "cedar",
    "spruce",
    "birch",
    "willow",
    "river",
    "delta",
    "estuary",
    "tide",
    "coral",
    "reef",
    "kelp",
    "plankton",
    "krill",
    "whale",
    "dolphin",
    "seal",
    "puffin",
    "gannet",
    "tern",
    "heron",
    "egret",
)


def random_text(rng: random.Random, title: str) -> str:
    paragraphs = [
        " ".join(rng.choices(WORDS, k=rng.randint(5, 40))) + "." for _ in range(rng.randint(1, 4))
    ]
    return note(title, "\n\n".join(paragraphs))


def random_operations(vault: Path, outside: Path, rng: random.Random, count: int) -> None:
    """Creates, edits, atomic saves, renames, deletes, touches, folder moves; in bursts."""
    folders = ["", "a", "b", "a/deep"]
    for name in folders:
        (vault / name).mkdir(parents=True, exist_ok=True)
    serial = 0
    for step in range(count):
        notes = sorted(p for p in vault.rglob("*.md") if ".trash" not in p.parts)
        action = rng.choices(
            ["create", "edit", "atomic", "rename", "delete", "touch", "trash", "folder"],
            weights=[25, 25, 10, 12, 8, 8, 4, 3],
        )[0]
        if action == "create" or not notes:
            serial += 1
            folder = vault / rng.choice(folders)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"n{serial}.md").write_text(random_text(rng, f"Note {serial}"))
        elif action == "edit":
            target = rng.choice(notes)
            with target.open("a") as handle:
                handle.write("\n" + " ".join(rng.choices(WORDS, k=8)) + ".\n")
        elif action == "atomic":
            target = rng.choice(notes)
            tmp = target.with_name("." + target.name + ".tmp")
            tmp.write_text(random_text(rng, target.stem))
            os.replace(tmp, target)
        elif action == "rename":
            target = rng.choice(notes)
            folder = vault / rng.choice(folders)
            folder.mkdir(parents=True, exist_ok=True)
            destination = folder / target.name
            if not destination.exists():
                target.rename(destination)
        elif action == "delete":
            rng.choice(notes).unlink()
        elif action == "touch":
            os.utime(rng.choice(notes))
        elif action == "trash":
            (vault / ".trash").mkdir(exist_ok=True)
            target = rng.choice(notes)
            os.replace(target, vault / ".trash" / target.name)
        else:
            # A folder leaves the vault and another comes back in under a new name.
            name = rng.choice(["a", "b"])
            if (vault / name).exists():
                parked = outside / f"{name}{step}"
                (vault / name).rename(parked)
                if rng.random() < 0.7:
                    parked.rename(vault / name)
        if step % 100 == 99:
            time.sleep(rng.uniform(0, 0.4))  # bursts with pauses between them


#: The modification time `pin_mtimes` gives every note.
PINNED_NS = 1_800_000_000 * 10**9


def pin_mtimes(vault: Path) -> None:
    """Every note's mtime set to PINNED_NS: two trees of the same notes, edited at different
    times, then export the same records."""
    for file in vault.rglob("*.md"):
        os.utime(file, ns=(PINNED_NS, PINNED_NS))
