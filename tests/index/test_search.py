"""index/search on a real index: the real model, embedded Chroma and the SQLite manifest.

One small vault written here (plus 15 notes of the Chinese help vault) is indexed once for the
module; each test asks it something. Covers every filter, phrase ranking, the per-note cap,
merging, the parts --explain shows, keyword search in Chinese, Japanese, Korean, Thai and
right-to-left scripts, and accents, and the pairs index kept in step. The CLI's flags and the
API's checks are tests/test_search.py's.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_path
from tests.small_vault import indexed
from vaultd.answers import Hit
from vaultd.config import SearchSection, load_config
from vaultd.index import ranking
from vaultd.index import search as search_module
from vaultd.index.notes import note_view
from vaultd.index.open import Index, open_index
from vaultd.query import Filters, SearchQuery, check_query, explain_line
from vaultd.storage.schema import SCHEMA_VERSION

OLD = time.mktime((2020, 6, 1, 12, 0, 0, 0, 0, -1))

NOTES: dict[str, str] = {
    "Garden/Tomatoes.md": """---
tags: [garden/veg]
aliases: [Love apples]
status: done
year: 2021
due: 2024-03-01
---
# Tomatoes

Tomatoes want full sun and deep roots.

## Watering schedule

Soak the beds every third morning; never wet the leaves.
""",
    "Garden/Roses.md": """---
tags: [garden/flowers]
status: draft
year: 2019
rating: 4.5
kinds: [perennial, shrub]
---
# Roses

Prune roses in late winter, just above an outward-facing bud.
""",
    "Kitchen/Sauce.md": """---
tags: [cooking]
status: Done
year: 2023
due: 2025-01-15T10:00:00
---
# Tomato sauce

Simmer crushed tomatoes with garlic and olive oil for an hour.
""",
    "Kitchen/Bread.md": """---
tags: [cooking, home]
---
# Sourdough bread

Feed the starter the night before; bake at a high heat with steam.
""",
    "Phrase/Exact.md": """# Coverage policy

The battery warranty lasts eight years.
""",
    "Phrase/Scattered.md": """# Charging

Battery care matters: a battery kept cool lasts longer, and every battery ages. The
warranty card, the warranty number and the warranty terms are in the box.
""",
    "Ties/A.md": "# Lantern\n\nThe brass lantern hangs by the door.\n",
    "Ties/B.md": "# Lantern\n\nThe brass lantern hangs by the door.\n",
    "Travel/Café.md": "# Le café\n\nUn café crème à Zürich, près du lac.\n",
    "Other/Kettle.md": "# Kitchen kit\n\nThe kettle needs descaling now and then.\n",
    "Long/Manual.md": "# Kettle manual\n\n"
    + "".join(
        f"## Step {n}\n\nKettle descaling, step {n}: vinegar, water, a boil, then rinse the "
        f"kettle and repeat the descaling until the scale is gone ({n}).\n\n"
        for n in range(1, 7)
    ),
}
OLD_NOTES = {"Garden/Roses.md", "Kitchen/Bread.md"}
#: A subset of the Chinese help vault: the 15 smallest notes of its plugins folder (small, so the
#: model embeds them in seconds: it reads Chinese a character per token).
ZH_FOLDER = "插件"
ZH_NOTES = 15


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    zh = shared_path("corpora", "obsidian-help", "zh", ZH_FOLDER)
    smallest = sorted(zh.glob("*.md"), key=lambda f: (f.stat().st_size, f.name))[:ZH_NOTES]
    notes: dict[str, str | bytes] = dict(NOTES)
    notes.update({f"zh/{ZH_FOLDER}/{f.name}": f.read_bytes() for f in smallest})
    mtimes = {rel: float(OLD) for rel in OLD_NOTES}
    with indexed(tmp_path_factory.mktemp("search"), notes, mtimes) as idx:
        assert idx.manifest.failures.failed() == []
        yield idx


def paths(hits: list[Hit]) -> list[str]:
    return [h.path for h in hits]


def found(index: Index, query: str, mode: str = "keyword", **kwargs: Any) -> list[Hit]:
    return list(index.searcher.search(SearchQuery(query, mode=mode, **kwargs)).hits)


def selected(index: Index, **filters: Any) -> set[str]:
    """Notes a filter selects, and a check that each retriever stays inside them."""
    chosen = set(index.searcher.select(Filters.of(filters)) or ())
    for mode in ("vector", "hybrid"):
        hits = found(index, "garden tomatoes", mode, k=100, per_note=0, filters=Filters.of(filters))
        assert set(paths(hits)) <= chosen, mode
    return {p for p in chosen if not p.startswith("zh/")}


# -- filters ---------------------------------------------------------------------------------------


def test_tags_all_of_with_nested_tags_matching_their_parents(index: Index) -> None:
    assert selected(index, tags=["garden"]) == {"Garden/Tomatoes.md", "Garden/Roses.md"}
    assert selected(index, tags=["#garden/veg"]) == {"Garden/Tomatoes.md"}
    assert selected(index, tags=["cooking", "home"]) == {"Kitchen/Bread.md"}
    assert selected(index, tags=["garden/veg/none"]) == set()
    assert found(index, "tomatoes", filters=Filters.of({"tags": ["no-such-tag"]})) == []


def test_tags_any_of(index: Index) -> None:
    assert selected(index, tags_any=["garden/flowers", "home"]) == {
        "Garden/Roses.md",
        "Kitchen/Bread.md",
    }
    assert selected(index, tags=["cooking"], tags_any=["garden", "home"]) == {"Kitchen/Bread.md"}


def test_path_prefix_is_a_folder_or_an_exact_note(index: Index) -> None:
    assert selected(index, path_prefix="Kitchen") == {"Kitchen/Sauce.md", "Kitchen/Bread.md"}
    assert selected(index, path_prefix="Kitchen/Sauce.md") == {"Kitchen/Sauce.md"}
    assert selected(index, path_prefix="Kitch") == set()


def test_frontmatter_equality_and_in(index: Index) -> None:
    # Strings compare case-insensitively: "Done" is done.
    done = {"Garden/Tomatoes.md", "Kitchen/Sauce.md"}
    assert selected(index, where={"status": "done"}) == done
    assert selected(index, where={"status": {"$eq": "DONE"}}) == done
    assert selected(index, where={"status": {"$in": ["draft", "done"]}}) == done | {
        "Garden/Roses.md"
    }
    # A list-valued field passes when one of its items does; numbers match their text form.
    assert selected(index, where={"kinds": "shrub"}) == {"Garden/Roses.md"}
    assert selected(index, where={"year": "2021"}) == {"Garden/Tomatoes.md"}
    assert selected(index, where={"missing": "x"}) == set()


def test_frontmatter_number_ranges(index: Index) -> None:
    assert selected(index, where={"year": {"$gte": 2020}}) == {
        "Garden/Tomatoes.md",
        "Kitchen/Sauce.md",
    }
    assert selected(index, where={"year": {"$gt": 2019, "$lt": 2023}}) == {"Garden/Tomatoes.md"}
    assert selected(index, where={"rating": {"$gte": 4}}) == {"Garden/Roses.md"}
    assert selected(index, where={"year": {"$lte": 2019}, "status": "draft"}) == {"Garden/Roses.md"}


def test_frontmatter_date_ranges(index: Index) -> None:
    assert selected(index, where={"due": {"$lt": "2025-01-01"}}) == {"Garden/Tomatoes.md"}
    # A date bound compares the day a date-time value falls on.
    assert selected(index, where={"due": {"$gte": "2025-01-15"}}) == {"Kitchen/Sauce.md"}
    assert selected(index, where={"due": {"$lte": "2025-01-15"}}) == {
        "Garden/Tomatoes.md",
        "Kitchen/Sauce.md",
    }
    assert selected(index, where={"due": {"$gt": "2025-01-15T09:00:00"}}) == {"Kitchen/Sauce.md"}
    assert selected(index, where={"due": {"$gt": "2025-01-15T11:00"}}) == set()


def test_since_takes_iso_dates_and_epoch_seconds(index: Index) -> None:
    recent = set(NOTES) - OLD_NOTES
    assert selected(index, since="2021-01-01") == recent
    assert selected(index, since=OLD - 60) == set(NOTES)
    assert selected(index, since=str(int(OLD + 60))) == recent


def test_filters_select_before_ranking(index: Index) -> None:
    """A note far down the global ranking still fills a filtered page."""
    unfiltered = paths(found(index, "kettle descaling", "vector", k=3))
    assert "Garden/Roses.md" not in unfiltered
    hits = found(index, "kettle descaling", "hybrid", k=3, filters=Filters.of({"tags": ["garden"]}))
    assert {"Garden/Roses.md", "Garden/Tomatoes.md"} == set(paths(hits))


def test_a_large_selection_is_filtered_after_a_deeper_vector_query(
    index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_module, "PATH_IN_LIMIT", 0)
    hits = found(
        index, "sunny garden", "vector", k=5, filters=Filters.of({"where": {"year": 2021}})
    )
    assert paths(hits) == ["Garden/Tomatoes.md"] * len(hits) and hits


# -- ranking -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_quoted_phrase_ranks_exact_passages_first(index: Index, mode: str) -> None:
    # More occurrences win on BM25 alone; the query as typed is a phrase quoted or not.
    words = index.searcher.keyword(check_query("battery warranty"), 5, None)
    assert (
        index.manifest.notes.chunks_by_id([words[0][0]])[words[0][0]].path == "Phrase/Scattered.md"
    )
    unquoted = found(index, "battery warranty", mode, k=5)
    assert paths(unquoted)[:2] == ["Phrase/Exact.md", "Phrase/Scattered.md"]
    hits = found(index, '"battery warranty"', mode, k=5)
    assert paths(hits)[:2] == ["Phrase/Exact.md", "Phrase/Scattered.md"]
    assert hits[0].parts["phrase"]["exact"] is True
    assert hits[1].parts["phrase"]["exact"] is False


def test_title_alias_and_heading_matches_count(index: Index) -> None:
    assert paths(found(index, "love apples", k=1)) == ["Garden/Tomatoes.md"]  # alias only
    [hit] = found(index, "watering schedule", k=1)  # heading only
    assert (hit.path, hit.section) == ("Garden/Tomatoes.md", "Tomatoes > Watering schedule")
    assert paths(found(index, "sourdough", k=1)) == ["Kitchen/Bread.md"]


def test_equal_scores_are_ordered_by_path_then_line(index: Index) -> None:
    hits = found(index, "brass lantern", k=2)
    assert paths(hits) == ["Ties/A.md", "Ties/B.md"]
    assert hits[0].score == hits[1].score


def test_accents_are_folded(index: Index) -> None:
    assert paths(found(index, "cafe creme zurich", k=1)) == ["Travel/Café.md"]
    assert paths(found(index, "Zürich", k=1)) == ["Travel/Café.md"]


# -- diversity -----------------------------------------------------------------------------------


def test_per_note_cap_applies_before_the_top_k_cut(index: Index) -> None:
    capped = found(index, "kettle descaling", k=10)
    assert paths(capped).count("Long/Manual.md") == SearchSection().per_note == 3
    assert "Other/Kettle.md" in paths(capped)
    assert paths(found(index, "kettle descaling", k=10, per_note=0)).count("Long/Manual.md") == 6
    one = found(index, "kettle descaling", k=2, per_note=1)
    assert sorted(paths(one)) == ["Long/Manual.md", "Other/Kettle.md"]


def test_merge_joins_neighbouring_passages_of_a_note(index: Index) -> None:
    chunks = {c.chunk.id: c for c in index.manifest.notes.chunks_of("Long/Manual.md")}
    hits = found(index, "kettle descaling", k=5, per_note=1, merge=True)
    [manual] = [h for h in hits if h.path == "Long/Manual.md"]
    merged = [chunks[i] for i in manual.parts["merged"]]
    assert len(merged) >= 2
    indexes = sorted(c.chunk.index for c in merged)
    assert indexes == list(range(indexes[0], indexes[0] + len(indexes)))  # neighbours only
    assert manual.start_line == min(c.chunk.start_line for c in merged)
    assert manual.end_line == max(c.chunk.end_line for c in merged)
    assert all(c.chunk.text in manual.text for c in merged)
    assert len(found(index, "kettle descaling", k=5, merge=False)[0].parts.get("merged", [])) == 0


# -- explain -------------------------------------------------------------------------------------


def test_explain_shows_every_score_part(index: Index) -> None:
    [hit] = found(index, '"battery warranty"', "hybrid", k=1)
    parts = hit.parts
    assert parts["keyword"]["rank"] >= 1 and parts["keyword"]["score"] > 0
    assert parts["vector"]["rank"] >= 1 and 0 < parts["vector"]["similarity"] <= 1
    fusion = parts["fusion"]
    settings = SearchSection()
    assert fusion["k"] == settings.rrf_k
    assert fusion["keyword"] == pytest.approx(
        settings.keyword_weight / (settings.rrf_k + parts["keyword"]["rank"]), abs=1e-6
    )
    note = parts["note"]
    assert note["lead"]["rank"] >= 1 and note["lead"]["score"] == pytest.approx(
        settings.lead_weight / (ranking.LEAD_RRF_K + note["lead"]["rank"]), abs=1e-6
    )
    assert note["length"]["factor"] == pytest.approx(
        note["length"]["passages"] ** -settings.length_prior, abs=1e-6
    )
    added = note.get("second", 0.0) + note["lead"]["score"]
    assert (fusion["total"] + added) * note["length"]["factor"] == pytest.approx(
        hit.score, abs=1e-5
    )
    assert parts["phrase"] == {"phrases": ["battery warranty"], "exact": True, "tier": 1}
    line = explain_line(parts)
    assert f"first passage #{note['lead']['rank']}" in line and "passages)" in line


def test_without_the_note_signals_a_passage_scores_its_fusion_alone(index: Index) -> None:
    off = SearchSection(lead_weight=0.0, second_weight=0.0, length_prior=0.0)
    hits = found(index, "kettle descaling", "hybrid", k=5, settings=off)
    assert hits and all("note" not in h.parts for h in hits)
    assert all(h.score == pytest.approx(h.parts["fusion"]["total"], abs=1e-5) for h in hits)


def test_a_notes_first_passage_ranks_by_both_retrievers(index: Index) -> None:
    # With the vector side weighted 0, the notes' first passages rank as the keyword side
    # ranks them: the lead is not a second vote of the vectors alone.
    query = "kettle descaling"
    keyword_only = SearchSection(vector_weight=0.0)
    chunks = index.manifest.notes.chunks_by_id
    words = index.searcher.keyword(check_query(query), keyword_only.candidates, None)
    firsts = [chunks([i])[i].path for i, _ in words if chunks([i])[i].chunk.index == 0]
    hits = found(index, query, "hybrid", k=10, settings=keyword_only)
    ranks = {h.path: h.parts["note"]["lead"]["rank"] for h in hits if "lead" in h.parts["note"]}
    assert firsts and {p: ranks[p] for p in firsts if p in ranks} == {
        p: rank for rank, p in enumerate(firsts, 1) if p in ranks
    }
    assert firsts[0] in ranks


def test_a_note_found_only_by_its_first_passage_is_shown_by_it(index: Index) -> None:
    # Few passages from each retriever and the lead weighed up, so that notes ranked only by
    # their first passage reach the page.
    narrow = SearchSection(candidates=1, lead_weight=3.0)
    hits = found(index, "growing vegetables in the garden", "hybrid", k=6, settings=narrow)
    only_lead = [h for h in hits if "keyword" not in h.parts and "vector" not in h.parts]
    assert only_lead, [h.parts for h in hits]
    for hit in only_lead:
        assert index.manifest.notes.chunks_by_id([hit.id])[hit.id].chunk.index == 0
        note = hit.parts["note"]
        assert hit.score == pytest.approx(
            (note.get("second", 0.0) + note["lead"]["score"]) * note["length"]["factor"],
            abs=1e-5,
        )
    ranks = [h.parts["note"]["lead"]["rank"] for h in only_lead]
    assert ranks == sorted(ranks)


# -- scripts without spaces ----------------------------------------------------------------------


def test_chinese_keyword_search_uses_the_pairs_index(index: Index) -> None:
    prefix = f"zh/{ZH_FOLDER}"
    hits = found(index, "时间戳笔记", k=3)
    assert hits[0].path == f"{prefix}/时间戳笔记生成器.md"
    assert all("时间戳笔记" in " ".join((h.title, h.section, h.text)) for h in hits)
    # A question in the user's own words shares only some pairs of characters with the note.
    assert found(index, "随机打开一篇笔记", k=1)[0].path == f"{prefix}/漫游笔记.md"
    # Aliases are indexed: the English name finds the Chinese note.
    assert found(index, "word count", k=1)[0].path == f"{prefix}/字数统计.md"


def test_short_chinese_queries_fall_back_to_substrings(index: Index) -> None:
    hits = found(index, "录音", k=5)
    assert hits[0].path == f"zh/{ZH_FOLDER}/录音机.md"
    assert all("录音" in " ".join((h.title, h.section, h.text)) for h in hits)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_chinese_in_hybrid_mode_and_with_filters(index: Index) -> None:
    hits = found(index, "幻灯片演示", "hybrid", k=5, filters=Filters.of({"path_prefix": "zh"}))
    assert hits and all(h.path.startswith("zh/") for h in hits)
    # The keyword side's answer is among the first fused hits. Not necessarily the first: the
    # English model's vectors of Chinese text are close to noise (its top vector hit here is
    # the word-count note), and at vector weight 1.5 a vector rank 1 outweighs a keyword one.
    slides = [h for h in hits[:3] if h.path == f"zh/{ZH_FOLDER}/幻灯片.md"]
    assert slides and min(h.parts["keyword"]["rank"] for h in slides) <= 2


# -- migration -----------------------------------------------------------------------------------


#: What schema 6 kept for unspaced scripts: trigrams of the chunks' own columns.
TRIGRAMS_6 = """
CREATE VIRTUAL TABLE chunks_tri USING fts5(title, aliases, section, text, content='chunks',
    content_rowid='n', tokenize='trigram');
CREATE TRIGGER chunks_tri_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_tri(rowid, title, aliases, section, text)
    VALUES (new.n, new.title, new.aliases, new.section, new.text);
END;
CREATE TRIGGER chunks_tri_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_tri(chunks_tri, rowid, title, aliases, section, text)
    VALUES ('delete', old.n, old.title, old.aliases, old.section, old.text);
END;
INSERT INTO chunks_tri(chunks_tri) VALUES ('rebuild');
PRAGMA user_version = 6;
"""


def test_schema_6_trades_its_trigrams_for_pairs_in_place(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    zh, en = "# 同步\n\n在多台设备之间同步你的笔记和版本历史。\n", "# Sync\n\nKeep notes in step.\n"
    (vault / "zh.md").write_text(zh, encoding="utf-8")
    (vault / "en.md").write_text(en, encoding="utf-8")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n', encoding="utf-8"
    )
    with open_index(load_config(config, env={})) as index:
        index.indexer.reconcile()
    # Make it the file schema 6 wrote: its trigram index, no pairs index.
    db = sqlite3.connect(tmp_path / "data" / "vaultd.db")
    db.executescript(
        "DROP TRIGGER chunks_pairs_ai; DROP TRIGGER chunks_pairs_ad; DROP TABLE chunks_pairs;"
        + TRIGRAMS_6
    )
    db.close()

    with open_index(load_config(config, env={})) as index:
        tables = {r[0] for r in index.manifest.query("SELECT name FROM sqlite_master", ())}
        assert "chunks_tri" not in tables and "chunks_pairs" in tables
        summary = index.indexer.reconcile()
        assert summary.chunks_embedded == 0 and summary.notes_changed == 0
        assert paths(found(index, "版本历史")) == ["zh.md"]
        # The triggers keep it in step: an edit's new pairs are found, its old ones are gone.
        (vault / "zh.md").write_text("# 同步\n\n用幻灯片演示笔记。\n", encoding="utf-8")
        index.indexer.reconcile()
        assert paths(found(index, "幻灯片")) == ["zh.md"]
        assert found(index, "版本历史") == []
    version = sqlite3.connect(tmp_path / "data" / "vaultd.db").execute("PRAGMA user_version")
    assert version.fetchone()[0] == SCHEMA_VERSION


def test_japanese_korean_and_thai_runs_are_searched_by_their_pairs(tmp_path: Path) -> None:
    """The pairs index keeps every character of a pair, combining marks included (a Thai
    vowel sign is a mark: a tokenizer that splits on marks would break its pairs)."""
    vault = tmp_path / "vault"
    vault.mkdir()
    notes = {
        "ja.md": "# 日本語\n\nノートを同期する方法について説明します。\n",
        "ko.md": "# 한국어\n\n노트를 동기화하는 방법입니다.\n",
        "th.md": "# ภาษาไทย\n\nวิธีซิงค์บันทึกของคุณระหว่างอุปกรณ์\n",
        "en.md": "# Sync\n\nHow to keep notes in step.\n",
    }
    for name, text in notes.items():
        (vault / name).write_text(text, encoding="utf-8")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n', encoding="utf-8"
    )
    with open_index(load_config(config, env={})) as index:
        index.indexer.reconcile()
        for query, note in (("同期する", "ja.md"), ("동기화", "ko.md"), ("บันทึก", "th.md")):
            hits = index.searcher.search(SearchQuery(query, mode="keyword", k=3)).hits
            assert [h.path for h in hits][:1] == [note], (query, [h.path for h in hits])
        # The mark-bearing pair alone (บั: a consonant and its vowel sign) is a term.
        assert [i for i, _ in index.manifest.keyword.bm25('"บั"', 5, index="pairs")]


def test_the_pairs_index_is_rebuilt_when_its_terms_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vaultd.storage import schema

    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "zh.md").write_text("# 同步\n\n版本历史\n", encoding="utf-8")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n', encoding="utf-8"
    )
    with open_index(load_config(config, env={})) as index:
        index.indexer.reconcile()
    # Another cut (every character alone) under another version: the index follows it, and
    # deleting the note's rows afterwards finds the terms they were inserted with.
    monkeypatch.setattr(schema, "PAIRS_VERSION", "pairs-test")
    monkeypatch.setattr(schema, "cjk_terms", lambda text: " ".join(c for c in text if c > "\u3000"))
    with open_index(load_config(config, env={})) as index:
        assert [i for i, _ in index.manifest.keyword.bm25('"史"', 5, index="pairs")]
        (vault / "zh.md").unlink()
        index.indexer.reconcile()
        assert index.manifest.keyword.bm25('"史"', 5, index="pairs") == []


def test_right_to_left_titles_tags_and_aliases(tmp_path: Path) -> None:
    """Arabic and Hebrew notes: their titles, frontmatter and inline tags and aliases are kept
    as written and searched like any other word (both scripts put spaces between words)."""
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "مطبخ.md").write_text(
        "---\ntags: [طبخ/خبز]\naliases: [وصفة الخبز]\n---\n# الخبز العربي\n\n"
        "يُخبز الخبز في فرن حار جدا. #منزل\n",
        encoding="utf-8",
    )
    (vault / "גינה.md").write_text(
        "---\ntags: [גינה]\naliases: [עגבניות שלי]\n---\n# גידול עגבניות\n\n"
        "משקים את הערוגות כל בוקר שלישי.\n",
        encoding="utf-8",
    )
    (vault / "en.md").write_text("# Bread\n\nBake it hot.\n", encoding="utf-8")
    config = tmp_path / "c.toml"
    config.write_text(
        f'[vault]\npath = "{vault}"\n[store]\npath = "{tmp_path / "data"}"\n', encoding="utf-8"
    )
    with open_index(load_config(config, env={})) as index:
        index.indexer.reconcile()
        ar = note_view(index.manifest, "مطبخ.md")
        assert ar is not None and ar["title"] == "الخبز العربي"
        assert {"طبخ/خبز", "منزل"} <= set(ar["tags"])
        assert "وصفة الخبز" in ar["aliases"]
        for query, note in (("وصفة", "مطبخ.md"), ("فرن", "مطبخ.md"), ("עגבניות", "גינה.md")):
            hits = index.searcher.search(SearchQuery(query, mode="keyword", k=3)).hits
            assert [h.path for h in hits][:1] == [note], (query, [h.path for h in hits])
        # Tag filters, nested tags matching their parent, in either direction of script.
        for tag, note in (("طبخ", "مطبخ.md"), ("منزل", "مطبخ.md"), ("גינה", "גינה.md")):
            assert index.searcher.select(Filters.of({"tags": [tag]})) == [note], tag
