"""What a vault is written in (vaultd.pipeline.languages): the measure `model = "auto"` and
doctor go by."""

from __future__ import annotations

from vaultd.pipeline.languages import latin_query, measure, reads_english

ENGLISH = "Obsidian keeps every note as a Markdown file in a folder that you own and control."
CHINESE = "幻灯片插件可以把你的笔记变成演示文稿，在会议上直接放映。"
FRENCH = "Le chat est sur la table et il mange une pomme. Nous allons au marché demain."


def test_english_is_english() -> None:
    found = measure([ENGLISH])
    assert found.mostly_english() and found.english == 1.0
    assert found.describe() == "100% Latin (English)"


def test_chinese_counts_each_character_as_a_short_word() -> None:
    found = measure([CHINESE])
    assert not found.mostly_english()
    assert dict(found.shares) == {"Han": 1.0}
    # Half the sentences, but a character weighs three letters: most of the text is Chinese.
    mixed = measure([ENGLISH, CHINESE])
    assert dict(mixed.shares)["Han"] > 0.5 and not mixed.mostly_english()


def test_another_latin_script_language_is_not_english() -> None:
    found = measure([FRENCH])
    assert not found.latin_is_english and not found.mostly_english()
    assert found.describe() == "100% Latin (not English)"


def test_nothing_measured_counts_as_english_and_says_so() -> None:
    found = measure(["", "1234 !!"])
    assert found.letters == 0 and found.mostly_english()
    assert found.describe() == "no text measured"
    assert found.as_dict()["summary"] == "no text measured"


def test_a_passage_reads_as_english_by_its_function_words() -> None:
    assert reads_english("How to water the tomatoes when the summer is dry and hot.")
    assert not reads_english("Comment arroser les tomates quand l'été est sec et chaud.")
    assert not reads_english("在多台设备之间同步你的笔记，并且保持版本历史。")
    assert not reads_english("| 2021 | 2022 |\n|---|---|\n| 17 | 42 |")


def test_a_query_goes_by_its_script() -> None:
    # Too short for function words: "sync pricing" is as English as a query gets.
    assert latin_query("sync pricing") and latin_query("arroser les tomates")
    assert not latin_query("如何同步") and not latin_query("Canvas 怎么用")
    assert not latin_query("2024")
