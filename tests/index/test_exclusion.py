"""`[mcp] exclude`'s rules on their own: globs from the vault root, tags and the tags nested
in them, kinds."""

from __future__ import annotations

from vaultd.index.exclusion import Exclusion


def test_no_rule_is_no_exclusion() -> None:
    assert Exclusion.of([]) is None


def test_a_glob_matches_from_the_vault_root() -> None:
    rules = Exclusion.of(["Private/**"])
    assert rules is not None and not rules.by_note
    assert rules.excludes("Private/Tokens.md")
    assert rules.excludes("Private/deep/Screenshot.png")
    assert not rules.excludes("Public/Private notes.md")


def test_a_tag_covers_the_tags_nested_in_it_in_any_case() -> None:
    rules = Exclusion.of(["#Secret"])
    assert rules is not None and rules.by_note
    assert rules.tag_excluded("#secret") and rules.tag_excluded("secret/keys")
    assert not rules.tag_excluded("secretive")
    assert rules.excludes("Notes/Keys.md", tags=["work", "SECRET/api"])
    assert not rules.excludes("Notes/Keys.md", tags=["work"])


def test_a_kind_rule_matches_the_kind_only() -> None:
    rules = Exclusion.of(["kind:image"])
    assert rules is not None
    assert rules.excludes("Attachments/shot.png", kind="image")
    assert not rules.excludes("Attachments/paper.pdf", kind="pdf")
