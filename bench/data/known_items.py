"""The known-item question sets: notes a person half remembers, and what they would type.

    python -m bench.data.known_items --vault help|kepano|hub [--notes 100] [--seed 38]

Writes `bench/data/questions/known-<vault>-{tune,heldout}.jsonl` by this rule, never by
hand: the vault's notes (parsed by vaultd's own parser) that have text are sorted by path and
`--notes` of them drawn with `random.Random(seed)`; the first half drawn is the tuning half,
the second the held-out half. For each note, with the same generator:

- **phrase**: a run of 4 to 6 words (length drawn) from one line of the note as a reader sees
  it (links shown by their text, markup dropped), every word letters only, whose folded form
  (case, accents, punctuation) no other note's text holds; up to 40 draws, else none.
- **typo**: that run with one word of 5+ letters (drawn) changed by one edit of a kind drawn
  from deletion, insertion, substitution and a swap of two neighbouring letters, at a drawn
  place (inserted and substituted letters drawn from a-z), the result being no word of the
  vault (a typo that makes another word is another problem).
- **name**: the note's title, an alias or its file name (drawn among those no other note has),
  lower-cased.
- **word**: a word of 6+ letters of the note (a token as the words index cuts it, letters
  only) whose stem (the index's term) no other note holds in its title, aliases, headings or
  text (code included), drawn; none when it has no such word.

`python -m bench.quality.known_items` asks them through a daemon.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.lib.paths import CORPORA, QUESTIONS, REPO
from vaultd.pipeline.parse import parse_note
from vaultd.storage.keyword import stems
from vaultd.storage.vocabulary import fold

VAULTS = {
    "help": CORPORA / "obsidian-help" / "en",
    "kepano": CORPORA / "kepano-obsidian",
    "hub": CORPORA / "obsidian-hub",
}
KINDS = ("phrase", "typo", "name", "word")
_WORD = re.compile(r"\w+")
_LETTERS = re.compile(r"[^\W\d_]+")
_WIKILINK = re.compile(r"!?\[\[([^\]|]*)\|([^\]]*)\]\]")
_PLAINLINK = re.compile(r"!?\[\[([^\]]*)\]\]")
_MDLINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")


def reader_lines(text: str) -> list[str]:
    """The note's lines as a reader sees them: links as their shown text."""
    text = _MDLINK.sub(r"\1", _PLAINLINK.sub(r"\1", _WIKILINK.sub(r"\2", text)))
    return [line for line in text.splitlines() if line.strip()]


def load_notes(vault: Path) -> dict[str, dict[str, Any]]:
    notes: dict[str, dict[str, Any]] = {}
    for file in sorted(vault.rglob("*.md")):
        rel = file.relative_to(vault).as_posix()
        if any(part.startswith(".") for part in Path(rel).parts):
            continue
        note = parse_note(rel, file.read_bytes())
        prose = "\n".join(b.text for b in note.blocks if b.kind != "code")
        if not _LETTERS.search(prose):
            continue
        notes[rel] = {
            "title": note.title,
            "aliases": list(note.aliases),
            "stem": Path(rel).stem,
            "lines": reader_lines(prose),
            # What the words index holds of the note (code included).
            "all": " ".join([note.title, *note.aliases, *(b.text for b in note.blocks)]),
        }
    return notes


def typo(word: str, rng: random.Random) -> str:
    kind = rng.choice(("deletion", "insertion", "substitution", "swap"))
    at = rng.randrange(len(word))
    letters = "abcdefghijklmnopqrstuvwxyz"
    if kind == "deletion":
        return word[:at] + word[at + 1 :]
    if kind == "insertion":
        return word[:at] + rng.choice(letters) + word[at:]
    if kind == "substitution":
        return word[:at] + rng.choice(letters.replace(word[at].lower(), "")) + word[at + 1 :]
    at = min(at, len(word) - 2)
    return word[:at] + word[at + 1] + word[at] + word[at + 2 :]


def generate(vault: Path, count: int, seed: int) -> list[dict[str, Any]]:
    notes = load_notes(vault)
    folded = {path: " " + fold(n["all"]) + " " for path, n in notes.items()}
    vocabulary = {w.lower() for text in folded.values() for w in _WORD.findall(text)}
    # Tokens as the index cuts them (`SilentVoid13` is one), of letters only.
    words_of = {
        p: {w for w in _WORD.findall(n["all"].lower()) if _LETTERS.fullmatch(w)}
        for p, n in notes.items()
    }
    stem_of = stems(sorted({w for ws in words_of.values() for w in ws}))
    notes_by_stem: defaultdict[str, set[str]] = defaultdict(set)
    for path, ws in words_of.items():
        for w in ws:
            if w in stem_of:
                notes_by_stem[stem_of[w]].add(path)
    name_count: defaultdict[str, int] = defaultdict(int)
    for n in notes.values():
        for name in {fold(x) for x in (n["title"], n["stem"], *n["aliases"]) if x}:
            name_count[name] += 1
    rng = random.Random(seed)
    drawn = rng.sample(sorted(notes), min(count, len(notes)))
    rows: list[dict[str, Any]] = []
    for number, path in enumerate(drawn):
        n = notes[path]
        half = "tune" if number < len(drawn) / 2 else "heldout"
        base = {"path": path, "half": half}
        run = None
        for _ in range(40):
            line = rng.choice(n["lines"])
            words = _WORD.findall(line)
            size = rng.randint(4, 6)
            if len(words) < size:
                continue
            at = rng.randrange(len(words) - size + 1)
            candidate = words[at : at + size]
            if not all(_LETTERS.fullmatch(w) for w in candidate):
                continue
            needle = " " + fold(" ".join(candidate)) + " "
            if sum(needle in text for text in folded.values()) == 1:
                run = candidate
                break
        if run is not None:
            rows.append({**base, "kind": "phrase", "query": " ".join(run)})
            long = [i for i, w in enumerate(run) if len(w) >= 5]
            for _ in range(40):
                if not long:
                    break
                i = rng.choice(long)
                changed = typo(run[i], rng)
                if changed.lower() not in vocabulary:
                    typed = [*run[:i], changed, *run[i + 1 :]]
                    rows.append({**base, "kind": "typo", "query": " ".join(typed), "word": changed})
                    break
        names = [x for x in (n["title"], *n["aliases"], n["stem"]) if x]
        unique = [x for x in dict.fromkeys(names) if name_count[fold(x)] == 1 and fold(x)]
        if unique:
            rows.append({**base, "kind": "name", "query": rng.choice(unique).lower()})
        rare = sorted(
            w
            for w in words_of[path]
            if len(w) >= 6 and w in stem_of and notes_by_stem[stem_of[w]] == {path}
        )
        if rare:
            rows.append({**base, "kind": "word", "query": rng.choice(rare)})
    return rows


def write_sets(name: str, rows: list[dict[str, Any]]) -> None:
    for half in ("tune", "heldout"):
        target = QUESTIONS / f"known-{name}-{half}.jsonl"
        with target.open("w", encoding="utf-8") as fh:
            for row in rows:
                if row["half"] == half:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"{target.relative_to(REPO)}: {sum(r['half'] == half for r in rows)} questions")


def load(name: str, split: str) -> list[dict[str, Any]]:
    halves = ("tune", "heldout") if split == "all" else (split,)
    rows: list[dict[str, Any]] = []
    for half in halves:
        with (QUESTIONS / f"known-{name}-{half}.jsonl").open(encoding="utf-8") as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--vault", choices=sorted(VAULTS), required=True)
    parser.add_argument("--notes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=38)
    args = parser.parse_args()
    write_sets(args.vault, generate(VAULTS[args.vault], args.notes, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
