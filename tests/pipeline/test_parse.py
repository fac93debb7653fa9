"""Parsing rules of issue 2: a file's bytes become a `Note` the way Obsidian reads it.

Each rule has its own test over a small note written inline, so a failure names the rule.
"""

from __future__ import annotations

import unicodedata

import pytest

from vaultd.pipeline.parse import parse_note
from vaultd.records import Link, Note


def parse(text: str, path: str = "note.md") -> Note:
    return parse_note(path, text.encode("utf-8"))


def block_lines(note: Note) -> list[tuple[str, int, int, str]]:
    return [(b.kind, b.start_line, b.end_line, b.text) for b in note.blocks]


# -- path ----------------------------------------------------------------------------------------


def test_path_is_normalised_to_nfc() -> None:
    nfd = unicodedata.normalize("NFD", "Café/Résumé.md")
    assert nfd != "Café/Résumé.md"
    note = parse("body", path=nfd)
    assert note.path == unicodedata.normalize("NFC", nfd)
    assert note.title == unicodedata.normalize("NFC", "Résumé")


def test_path_stays_vault_relative_posix() -> None:
    assert parse("body", path="Projects/2024/Plan.md").path == "Projects/2024/Plan.md"


# -- title ---------------------------------------------------------------------------------------


def test_title_from_frontmatter_wins_over_h1_and_file_name() -> None:
    note = parse("---\ntitle: From YAML\n---\n# From Heading\n\nbody\n", path="From File.md")
    assert note.title == "From YAML"


def test_title_from_first_h1_when_frontmatter_has_none() -> None:
    note = parse("---\ntags: [x]\n---\n## Intro\n\n# First\n\ntext\n\n# Second\n")
    assert note.title == "First"


def test_title_from_setext_h1() -> None:
    assert parse("Setext Title\n============\n\nbody\n").title == "Setext Title"


def test_title_drops_closing_atx_hashes() -> None:
    assert parse("# Closed Title ##\n\nbody\n").title == "Closed Title"


def test_title_from_file_name_without_md() -> None:
    note = parse("## Only a subheading\n\ntext\n", path="Folder/My Note.md")
    assert note.title == "My Note"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Setext two\n----------\n\nbody\n", id="setext-h2"),
        pytest.param("```\n# not a heading\n```\n", id="h1-in-code"),
        pytest.param("---\ntitle: ''\n---\nbody\n", id="empty-frontmatter-title"),
    ],
)
def test_title_falls_back_to_file_name(text: str) -> None:
    assert parse(text, path="Fallback.md").title == "Fallback"


# -- frontmatter ---------------------------------------------------------------------------------


@pytest.mark.parametrize("closer", ["---", "..."])
def test_frontmatter_closed_by_dashes_or_dots(closer: str) -> None:
    note = parse(f"---\ntitle: T\nrating: 3\n{closer}\nbody text\n")
    assert note.frontmatter == {"title": "T", "rating": 3}
    assert note.errors == ()
    assert note.body == "body text\n"
    assert note.body_start_line == 5
    assert block_lines(note) == [("paragraph", 5, 5, "body text")]


def test_frontmatter_only_on_the_first_line() -> None:
    note = parse("\n---\ntitle: T\n---\nbody\n")
    assert note.frontmatter == {}
    assert note.body_start_line == 1


def test_frontmatter_values_are_json_safe() -> None:
    note = parse("---\ncreated: 2024-01-02\nwhen: 2024-01-02 10:30:00\n---\n")
    assert note.frontmatter == {"created": "2024-01-02", "when": "2024-01-02T10:30:00"}


def test_unclosed_frontmatter_is_recorded_and_file_is_body() -> None:
    note = parse("---\ntitle: T\nbody #tag\n")
    assert note.frontmatter == {}
    assert any("never closed" in e for e in note.errors)
    assert note.body_start_line == 1
    assert note.tags == ("tag",)


@pytest.mark.parametrize(
    "yaml_text",
    [
        pytest.param("title: [unclosed", id="flow-sequence"),
        pytest.param("a: b: c", id="nested-colon"),
        pytest.param("key:\n\t- tab", id="tab-indent"),
        pytest.param("- just\n- a list", id="not-a-mapping"),
    ],
)
def test_invalid_yaml_is_recorded_and_body_still_parsed(yaml_text: str) -> None:
    n = yaml_text.count("\n") + 1
    note = parse(f"---\n{yaml_text}\n---\n# Heading\n\nBody #tag with [[Link]].\n")
    assert note.frontmatter == {}
    assert len(note.errors) == 1 and note.errors[0].startswith("frontmatter:")
    assert note.title == "Heading"
    assert note.tags == ("tag",)
    assert note.links == (Link("Link"),)
    # The file has n + 2 frontmatter lines; the heading is the next one.
    assert block_lines(note) == [
        ("heading", n + 3, n + 3, "# Heading"),
        ("paragraph", n + 5, n + 5, "Body #tag with [[Link]]."),
    ]


def test_utf8_bom_before_frontmatter() -> None:
    note = parse_note("n.md", b"\xef\xbb\xbf---\ntitle: T\n---\n# H\nbody\n")
    assert note.frontmatter == {"title": "T"}
    assert note.errors == ()
    assert block_lines(note) == [("heading", 4, 4, "# H"), ("paragraph", 5, 5, "body")]


def test_utf8_bom_without_frontmatter() -> None:
    note = parse_note("n.md", b"\xef\xbb\xbf# Heading\n\nbody\n")
    assert note.title == "Heading"
    assert "\ufeff" not in note.body


LF_NOTE = (
    "---\ntitle: T\ntags: [a]\n---\n# Head\n\nPara #b with [[L]].\nsecond line\n\n"
    "```py\ncode\n```\n\n## Sub\n\n- x\n- y\n"
)


@pytest.mark.parametrize(
    "newline", [pytest.param("\r\n", id="crlf"), pytest.param("\r", id="cr-only")]
)
def test_crlf_and_cr_parse_like_lf(newline: str) -> None:
    lf = parse(LF_NOTE)
    other = parse(LF_NOTE.replace("\n", newline))
    assert block_lines(other) == block_lines(lf)
    assert (other.title, other.tags, other.links, other.frontmatter) == (
        lf.title,
        lf.tags,
        lf.links,
        lf.frontmatter,
    )
    assert "\r" not in other.body


def test_mixed_line_endings_count_each_as_one_line() -> None:
    note = parse("first\r\n\rsecond\n\r\nthird\n")
    assert block_lines(note) == [
        ("paragraph", 1, 1, "first"),
        ("paragraph", 3, 3, "second"),
        ("paragraph", 5, 5, "third"),
    ]


# -- aliases -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("aliases: [One, Two]", ("One", "Two")),
        ("aliases:\n  - One\n  - Two", ("One", "Two")),
        ("aliases: One", ("One",)),
        ("alias: One", ("One",)),
        ("alias: [One, Two]", ("One", "Two")),
        ("aliases: [One, One, '', ' Two ']", ("One", "Two")),
        ("aliases:", ()),
    ],
)
def test_aliases_from_aliases_or_alias(yaml_text: str, expected: tuple[str, ...]) -> None:
    assert parse(f"---\n{yaml_text}\n---\n").aliases == expected


# -- tags: frontmatter ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        pytest.param("tags: [alpha, Beta]", ("alpha", "beta"), id="flow-list"),
        pytest.param("tags:\n  - alpha\n  - '#beta'", ("alpha", "beta"), id="block-list-hash"),
        pytest.param("tags: alpha, beta", ("alpha", "beta"), id="comma-string"),
        pytest.param("tags: alpha beta", ("alpha", "beta"), id="space-string"),
        pytest.param("tags: '#alpha #beta'", ("alpha", "beta"), id="hash-string"),
        pytest.param("tags: '#alpha, #beta'", ("alpha", "beta"), id="hash-comma-string"),
        pytest.param("tag: alpha", ("alpha",), id="tag-string"),
        pytest.param("tag: [alpha, beta]", ("alpha", "beta"), id="tag-list"),
        pytest.param("tags: [a/b/c]", ("a/b/c",), id="nested"),
        pytest.param("tags: [2024, y2024]", ("y2024",), id="digits-only-dropped"),
        pytest.param("tags: [alpha]\ntag: beta", ("alpha", "beta"), id="both-keys"),
    ],
)
def test_frontmatter_tags(yaml_text: str, expected: tuple[str, ...]) -> None:
    assert parse(f"---\n{yaml_text}\n---\n").tags == expected


# -- tags: inline --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("#plain", "plain", id="ascii"),
        pytest.param("#日本語", "日本語", id="cjk"),
        pytest.param("#Россия", "россия", id="cyrillic"),
        pytest.param("#émoji", "émoji", id="latin-accents"),
        pytest.param("#with_underscore", "with_underscore", id="underscore"),
        pytest.param("#with-dash", "with-dash", id="dash"),
        pytest.param("#nested/tag/deep", "nested/tag/deep", id="nested"),
        pytest.param("#y2024", "y2024", id="letters-digits"),
        pytest.param("#1st", "1st", id="digit-first"),
    ],
)
def test_inline_tag_characters(text: str, expected: str) -> None:
    assert parse(f"Some prose {text} here.\n").tags == (expected,)


def test_inline_tag_at_line_start_and_ends_at_punctuation() -> None:
    assert parse("#first tag, then #second. And #third!\n").tags == ("first", "second", "third")


@pytest.mark.parametrize("text", ["#123", "#2024/01", "issue#12", "C#sharp", "a#b"])
def test_not_a_tag(text: str) -> None:
    assert parse(f"Prose {text} prose.\n").tags == ()


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Use `#hidden` in code.", id="inline-code"),
        pytest.param("Use ``a ` #hidden`` in code.", id="double-backtick-code"),
        pytest.param("```\n#hidden\n```", id="fenced-backticks"),
        pytest.param("~~~md\n#hidden\n~~~", id="fenced-tildes"),
        pytest.param("Before.\n\n    #hidden indented code", id="indented-code"),
        pytest.param("Inline $#hidden$ math.", id="inline-math"),
        pytest.param("Inline $$ x #hidden $$ display math.", id="inline-display-math"),
        pytest.param("$$\n#hidden\n$$", id="block-math"),
        pytest.param("Text <!-- #hidden --> text.", id="html-comment"),
        pytest.param("<!--\n#hidden\n\n#hidden\n-->", id="html-comment-block"),
        pytest.param("Text %% #hidden %% text.", id="obsidian-comment"),
        pytest.param("%%\n#hidden\n\nmore #hidden\n%%", id="obsidian-comment-multiline"),
        pytest.param("See http://x/#hidden now.", id="url-fragment"),
        pytest.param("See <https://example.com/page#hidden>.", id="autolink-fragment"),
        pytest.param("[link](https://example.com/#hidden)", id="markdown-link-url"),
        pytest.param("<div>\n#hidden\n</div>", id="html-block"),
    ],
)
def test_no_tags_from_hidden_regions(text: str) -> None:
    note = parse(f"Visible #seen tag.\n\n{text}\n\nAfter.\n")
    assert note.tags == ("seen",)


@pytest.mark.parametrize("text", ["# Heading", "## Heading", "###### Heading", "#\tHeading"])
def test_heading_markers_are_not_tags(text: str) -> None:
    assert parse(f"{text}\n\nbody\n").tags == ()


def test_tag_in_heading_text_counts() -> None:
    assert parse("## Heading #inhead\n\nbody\n").tags == ("inhead",)


def test_tags_lower_cased_deduplicated_sorted() -> None:
    note = parse("---\ntags: [Zeta, alpha]\n---\n#Beta #beta #ALPHA #zeta #Mid/Sub\n")
    assert note.tags == ("alpha", "beta", "mid/sub", "zeta")


# -- links ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[[Target]]", Link("Target"), id="plain"),
        pytest.param("[[Target#Heading]]", Link("Target", heading="Heading"), id="heading"),
        pytest.param("[[Target#^block-1]]", Link("Target", block="block-1"), id="block"),
        pytest.param("[[Target|Alias]]", Link("Target", alias="Alias"), id="alias"),
        pytest.param(
            "[[Target#Heading|Alias]]",
            Link("Target", heading="Heading", alias="Alias"),
            id="heading-alias",
        ),
        pytest.param("![[Embedded]]", Link("Embedded", embed=True), id="embed"),
        pytest.param("![[image.png]]", Link("image.png", embed=True), id="embed-file"),
        pytest.param("![[Embedded#^b]]", Link("Embedded", block="b", embed=True), id="embed-block"),
        pytest.param("[[#Heading]]", Link("note", heading="Heading"), id="in-note-heading"),
        pytest.param("[[#^b]]", Link("note", block="b"), id="in-note-block"),
        pytest.param("[[Folder/Sub Note]]", Link("Folder/Sub Note"), id="folder"),
        pytest.param("[[Note ünïcode 日本]]", Link("Note ünïcode 日本"), id="unicode"),
    ],
)
def test_wikilink_forms(text: str, expected: Link) -> None:
    assert parse(f"See {text} here.\n", path="Folder/note.md").links == (expected,)


def test_table_escaped_pipe_in_wikilink() -> None:
    note = parse("| col | other |\n| --- | --- |\n| [[Target\\|Alias]] | x |\n")
    assert note.links == (Link("Target", alias="Alias"),)


def test_links_inside_frontmatter_values() -> None:
    note = parse(
        "---\nup: '[[Parent]]'\nrelated:\n  - '[[A|Shown]]'\n  - '[[B#Part]]'\n"
        "meta:\n  source: 'see [[C]] and ![[D]]'\n---\nBody [[E]].\n"
    )
    assert note.links == (
        Link("Parent"),
        Link("A", alias="Shown"),
        Link("B", heading="Part"),
        Link("C"),
        Link("D", embed=True),
        Link("E"),
    )


def test_links_in_document_order() -> None:
    note = parse("[[One]] then [two](Two.md) then ![[Three]]\n\n- [[Four]]\n")
    assert [link.target for link in note.links] == ["One", "Two", "Three", "Four"]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Use `[[Hidden]]` here.", id="inline-code"),
        pytest.param("```\n[[Hidden]] [x](Hidden.md)\n```", id="fenced-code"),
        pytest.param("Before.\n\n    [[Hidden]]", id="indented-code"),
        pytest.param("Text `[x](Hidden.md)` here.", id="inline-code-markdown-link"),
        pytest.param("%% [[Hidden]] %%", id="obsidian-comment"),
        pytest.param("<!-- [[Hidden]] -->", id="html-comment"),
    ],
)
def test_no_links_from_code_or_comments(text: str) -> None:
    assert parse(f"[[Seen]]\n\n{text}\n").links == (Link("Seen"),)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[x](Other.md)", Link("Other"), id="plain"),
        pytest.param("[x](My%20Note.md)", Link("My Note"), id="percent-encoded"),
        pytest.param("[x](<My Note.md>)", Link("My Note"), id="angle-brackets"),
        pytest.param(
            "[x](Folder/My%20Note.md#Some%20Heading)",
            Link("Folder/My Note", heading="Some Heading"),
            id="heading",
        ),
        pytest.param("[x](<Other.md#^blk>)", Link("Other", block="blk"), id="block"),
        pytest.param("[x](./Other.md)", Link("Other"), id="dot-slash"),
        pytest.param('[x](Other.md "Title")', Link("Other"), id="with-title"),
        pytest.param("![x](Other.md)", Link("Other", embed=True), id="image-syntax"),
    ],
)
def test_markdown_links_to_local_notes(text: str, expected: Link) -> None:
    assert parse(f"See {text} here.\n").links == (expected,)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[x](https://example.com/page.md)", id="https-md"),
        pytest.param("[x](http://example.com/)", id="http"),
        pytest.param("[x](mailto:a@example.com)", id="mailto"),
        pytest.param("[x](obsidian://open?vault=v&file=Note.md)", id="obsidian-uri"),
        pytest.param("[x](image.png)", id="png"),
        pytest.param("![x](diagram.svg)", id="svg-embed"),
        pytest.param("[x](report.pdf)", id="pdf"),
    ],
)
def test_markdown_links_not_to_notes_are_ignored(text: str) -> None:
    assert parse(f"See {text} here.\n").links == ()


# -- structure -----------------------------------------------------------------------------------


def test_blocks_carry_file_line_numbers_after_frontmatter() -> None:
    note = parse("---\na: 1\nb: 2\n---\n\n# Title\n\nPara one\ncontinues.\n\n- item\n- item\n")
    assert block_lines(note) == [
        ("heading", 6, 6, "# Title"),
        ("paragraph", 8, 9, "Para one\ncontinues."),
        ("list", 11, 12, "- item\n- item"),
    ]


@pytest.mark.parametrize(
    "follower", ["## Next", "```\ncode\n```", "> quote", "<div>x</div>", "***", "| a |\n|---|"]
)
def test_list_ended_by_another_block_is_kept(follower: str) -> None:
    # mistune inserts such a list after parsing the block that ends it; it must not be lost.
    note = parse(f"Intro:\n\n1. [[First]]\n2. second\n\n{follower}\n")
    assert ("list", 3, 4, "1. [[First]]\n2. second") in block_lines(note)
    assert Link("First") in note.links


def test_blocks_inside_a_multi_paragraph_comment_are_dropped() -> None:
    note = parse("%%\nhidden\n\n## Hidden heading\n\nhidden too\n%%\n\nVisible.\n")
    assert block_lines(note) == [("paragraph", 9, 9, "Visible.")]


def test_comment_followed_by_visible_text_is_kept() -> None:
    note = parse("%% note to self %% Visible text.\n")
    assert block_lines(note) == [("paragraph", 1, 1, "%% note to self %% Visible text.")]


@pytest.mark.parametrize(
    ("source", "kept"),
    [
        ("a text[^1]\n\n[^1]: <img src=x>\n[^2]: two\n", ["[^1]: <img src=x>\n[^2]: two"]),
        ("x\n\n[ref]: http://a.b\n[^3]: three\n", ["[^3]: three"]),
        ("y[^n]\n\n[^n]: word\n", ["[^n]: word"]),
    ],
)
def test_a_footnote_is_text_even_where_it_would_read_as_a_link_reference(
    source: str, kept: list[str]
) -> None:
    """A footnote of one word, or of `<...>`, is what a link reference looks like: it was
    dropped from the note, and every footnote after it with it."""
    texts = [b.text for b in parse_note("a.md", source.encode()).blocks]
    assert texts[1:] == kept, texts
