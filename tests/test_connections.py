"""The vault's connections besides related notes (issue 22), on a real index: unlinked
mentions, tags with counts, recent notes, outlines, and search hits as highlighted snippets;
through the socket API's routes and the CLI without a daemon."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from pydantic import TypeAdapter

from tests.small_vault import api, indexed
from vaultd.answers import Hit
from vaultd.cli.commands import main
from vaultd.errors import ApiError
from vaultd.index import browse
from vaultd.index.mentions import unlinked_mentions
from vaultd.index.open import Index
from vaultd.index.snippets import merged, snippet, unspaced_spans
from vaultd.query import SearchQuery

DAY = 86400
NOTES = {
    "Animals/Sea otter.md": "---\naliases: [Lutra]\ntags: [animals/mammals]\n---\n# Sea otter\n"
    "\nSea otters float on their backs and crack urchins with stones.\n\n## Sleep\n\nThey "
    "hold paws while sleeping.\n\n### Rafts\n\nGroups are called rafts.\n\n## Diet\n\n"
    "Urchins, crabs and clams.\n",
    "Trips/Coast.md": "---\ntags: [travel]\n---\n# Coast\n\nOn the pier we watched a sea otter "
    "crack a clam.\n\nLater a lutra swam by the boats.\n\nThe running tide runs fast here.\n",
    "Trips/Bay.md": "# Bay\n\nThe [[Sea otter]] colony in the bay is growing; every sea otter "
    "there is counted.\n",
    "Trips/Plurals.md": "# Plurals\n\nOtters everywhere, and seas of them.\n",
    "Animals/Whale.md": "---\ntags: [animals/mammals, animals]\n---\n# Whale\n\nWhales sing.\n",
    "中文/水獭.md": "# 水獭\n\n水獭睡觉时会牵着手。\n",
    "中文/河流.md": "# 河流\n\n河里住着一只水獭，它每天捕鱼。\n",
}
#: Days before now each note was last modified.
AGE = {path: i * 10 for i, path in enumerate(NOTES)}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    now = 1_900_000_000
    mtimes = {path: now - AGE[path] * DAY for path in NOTES}
    with indexed(tmp_path_factory.mktemp("connections"), NOTES, mtimes) as opened:
        yield opened


# -- unlinked mentions -------------------------------------------------------------------------


def test_unlinked_mentions_name_the_note_without_linking_it(index: Index) -> None:
    found = unlinked_mentions(index.manifest, "Animals/Sea otter.md")
    assert found is not None
    by_name = {(m.path, m.name): m for m in found}
    # By its title and by its alias, in a note that does not link it; the name marked.
    coast = by_name[("Trips/Coast.md", "Sea otter")]
    assert coast.text == "On the pier we watched a **sea otter** crack a clam."
    assert (coast.start_line, coast.end_line) == (6, 10)  # the passage holding it
    assert by_name[("Trips/Coast.md", "Lutra")].text == "Later a **lutra** swam by the boats."
    paths = {m.path for m in found}
    # Bay links it already; Plurals says "otters" and "seas", which is no mention of the name;
    # and the note itself is no mention.
    assert paths == {"Trips/Coast.md"}


def test_a_name_in_an_unspaced_script_is_found_in_running_text(index: Index) -> None:
    found = unlinked_mentions(index.manifest, "中文/水獭.md")
    assert found is not None and [m.path for m in found] == ["中文/河流.md"]
    assert found[0].text == "河里住着一只**水獭**，它每天捕鱼。"


def test_mentions_through_the_socket_and_the_cli(index: Index) -> None:
    status, body = api(index, f"/v1/notes/{quote('Animals/Sea otter.md')}/mentions?k=1")
    assert status == HTTPStatus.OK and len(body["mentions"]) == 1
    assert set(body["mentions"][0]) == {"path", "title", "start_line", "end_line", "text", "name"}
    for target, code in (
        ("/v1/notes/Nowhere.md/mentions", HTTPStatus.NOT_FOUND),
        ("/v1/notes/Trips/Bay.md/mentions?k=0", HTTPStatus.BAD_REQUEST),
    ):
        with pytest.raises(ApiError) as raised:
            api(index, target)
        assert raised.value.status == code, target


# -- tags, recent notes, outlines --------------------------------------------------------------


def test_tags_with_their_counts_nested_tags_counting_for_their_parents(index: Index) -> None:
    counts = {t["tag"]: t["notes"] for t in browse.tags(index.manifest)}
    assert counts == {"animals": 2, "animals/mammals": 2, "travel": 1}
    assert browse.tags(index.manifest)[0]["notes"] == 2  # most used first
    assert [t["tag"] for t in browse.tags(index.manifest, "#Animals/")] == [
        "animals",
        "animals/mammals",
    ]
    assert browse.tags(index.manifest, "anim") == []  # a prefix is a whole tag
    assert api(index, "/v1/tags?prefix=travel")[1] == {"tags": [{"tag": "travel", "notes": 1}]}


def test_recent_notes_newest_first_and_since(index: Index) -> None:
    newest = [n["path"] for n in browse.recent(index.manifest, 3)]
    assert newest == list(NOTES)[:3]
    first = browse.recent(index.manifest, 1)[0]
    assert first["title"] == "Sea otter" and first["tags"] == ["animals/mammals"]
    assert first["modified"].endswith("Z")
    since = (1_900_000_000 - 15 * DAY) * 1_000_000_000
    assert len(browse.recent(index.manifest, 50, since)) == 2
    status, body = api(index, "/v1/recent?k=2")
    assert status == HTTPStatus.OK and [n["path"] for n in body["notes"]] == newest[:2]
    with pytest.raises(ApiError) as raised:
        api(index, "/v1/recent?since=yesterday-ish")
    assert raised.value.status == HTTPStatus.BAD_REQUEST


def test_an_outline_gives_each_section_its_line_range(index: Index) -> None:
    status, body = api(index, f"/v1/notes/{quote('Animals/Sea otter.md')}/outline")
    assert status == HTTPStatus.OK
    assert [(h["level"], h["text"], h["start_line"], h["end_line"]) for h in body["headings"]] == [
        (1, "Sea otter", 5, 19),
        (2, "Sleep", 9, 15),
        (3, "Rafts", 13, 15),
        (2, "Diet", 17, 19),
    ]
    with pytest.raises(ApiError) as raised:
        api(index, "/v1/notes/Nowhere.md/outline")
    assert raised.value.status == HTTPStatus.NOT_FOUND


# -- snippets ----------------------------------------------------------------------------------


def marks(text: str | None, ranges: tuple[tuple[int, int], ...]) -> list[str]:
    """What the ranges of a hit's text cover."""
    assert text is not None
    return [text[s:e] for s, e in ranges]


def test_search_snippets_mark_stemmed_words_and_phrases(index: Index) -> None:
    hits = index.searcher.search(
        SearchQuery("running tides", k=1, mode="keyword", snippets=True)
    ).hits
    assert hits[0].path == "Trips/Coast.md" and hits[0].snippet is not None
    # The words index matched "running", "runs" and "tide" by their stems: all are marked.
    assert "The running tide runs fast here." in hits[0].snippet
    assert marks(hits[0].snippet, hits[0].highlights) == ["running", "tide", "runs"]
    assert (hits[0].start_line, hits[0].end_line) == (6, 10)  # the passage's own range
    shown = TypeAdapter(Hit).dump_python(hits[0], mode="json")  # as the API sends it
    assert "text" not in shown and shown["snippet"] == hits[0].snippet
    assert shown["highlights"] == [list(r) for r in hits[0].highlights]
    phrase = index.searcher.search(
        SearchQuery('"crack a clam"', k=1, mode="keyword", snippets=True)
    ).hits
    assert " ".join(marks(phrase[0].snippet, phrase[0].highlights)) == "crack a clam"
    # Without snippets, the ranges are into the whole passage.
    whole = index.searcher.search(SearchQuery("running tides", k=1, mode="keyword")).hits[0]
    assert whole.snippet is None
    assert marks(whole.text, whole.highlights) == ["running", "tide", "runs"]


def test_a_merged_hits_ranges_are_into_its_passages_joined(index: Index) -> None:
    for snippets in (False, True):
        hits = index.searcher.search(
            SearchQuery(
                "otters rafts urchins paws", k=5, mode="keyword", merge=True, snippets=snippets
            )
        ).hits
        otter = next(h for h in hits if h.path == "Animals/Sea otter.md")
        assert len(otter.parts["merged"]) > 1
        shown = otter.snippet if snippets else otter.text
        assert marks(shown, otter.highlights) == ["otters", "urchins", "paws", "rafts", "Urchins"]


def test_search_snippets_mark_chinese_runs(index: Index) -> None:
    hits = index.searcher.search(SearchQuery("水獭捕鱼", k=2, mode="keyword", snippets=True)).hits
    river = next(h for h in hits if h.path == "中文/河流.md")
    # "水獭捕鱼" occurs in no note whole: its pairs are marked where they occur.
    assert sorted(marks(river.snippet, river.highlights)) == ["捕鱼", "水獭"]


def test_a_long_passage_is_cut_around_its_marks() -> None:
    text = "filler words " * 60 + "the heron stood still " + "more filler " * 60
    at = text.index("heron")
    cut, ranges = snippet(text, [(at, at + 5)], limit=120)
    assert marks(cut, tuple(ranges)) == ["heron"] and cut.startswith("…") and cut.endswith("…")
    assert len(cut) < 160
    assert merged([(5, 9), (0, 3), (2, 6)]) == [(0, 9)]
    assert unspaced_spans("东京タワー", ["タワー"]) == [(2, 5)]


def test_the_cli_without_a_daemon(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for path in ("Animals/Sea otter.md", "Trips/Coast.md"):
        (vault / path).parent.mkdir(parents=True, exist_ok=True)
        (vault / path).write_text(NOTES[path], encoding="utf-8")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n'
        '[log]\nlevel = "error"\n',
        encoding="utf-8",
    )
    runner = CliRunner()
    assert runner.invoke(main, ["index", "--config", str(config)]).exit_code == 0
    shown = runner.invoke(main, ["outline", "Animals/Sea otter.md", "--config", str(config)])
    assert shown.exit_code == 0, shown.output
    assert "    Rafts  (13-15)" in shown.output
    tags = runner.invoke(main, ["tags", "--json", "--config", str(config)])
    assert json.loads(tags.output)["tags"][0] == {"tag": "animals", "notes": 1}
    found = runner.invoke(main, ["search", "sea otter", "--snippets", "--config", str(config)])
    # Piped: the passage's text as it is, nothing marked (tests/test_highlights.py: a terminal).
    assert found.exit_code == 0 and "crack a clam" in found.output
    assert "**" not in found.output
    near = runner.invoke(
        main, ["mentions", str(vault / "Animals/Sea otter.md"), "--config", str(config)]
    )
    assert "**sea otter**" in near.output and "Trips/Coast.md:6-10" in near.output
    recent = runner.invoke(main, ["recent", "-k", "1", "--config", str(config)])
    assert recent.exit_code == 0 and len(recent.output.strip().splitlines()) == 1
    missing = runner.invoke(main, ["mentions", "Nowhere.md", "--config", str(config)])
    assert missing.exit_code == 2 and "not an indexed note" in missing.output
