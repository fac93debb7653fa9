"""pipeline/pdf: a PDF's text layer as a note, a passage per page with its page and the
outline in force as its heading path; what cannot be read is left out with its reason."""

from __future__ import annotations

import pytest

from tests.conftest import shared_path
from tests.test_attachments import make_pdf
from vaultd.errors import LeftOutError
from vaultd.pipeline import pdf


def test_read_gives_each_pages_text_and_the_outline() -> None:
    found = pdf.read(make_pdf(["First page line one\nline two", "Second page text here"]))
    assert found == {
        "pages": ["First page line one\nline two", "Second page text here"],
        "outline": [],
        "total_pages": 2,
    }


def test_a_real_manuals_outline_is_read_with_levels_and_page_indexes() -> None:
    found = pdf.read(shared_path("corpora", "attachments", "pdf", "asymptote.pdf").read_bytes())
    assert found["outline"][:3] == [
        [0, "1 Description", 5],
        [0, "2 Installation", 7],
        [1, "UNIX binary distributions", 7],
    ]


def test_a_scan_has_no_text_layer() -> None:
    with pytest.raises(LeftOutError) as caught:
        pdf.read(shared_path("corpora", "attachments", "pdf", "pixel.pdf").read_bytes())
    assert caught.value.kind == "no_text"


def test_each_page_with_text_is_a_passage_with_its_page() -> None:
    note = pdf.extract("docs/Manual.pdf", make_pdf(["Alpha page words", "", "Gamma page words"]))
    assert (note.path, note.title, note.kind) == ("docs/Manual.pdf", "Manual", "pdf")
    assert [(b.text, b.location.page, b.location.page_end) for b in note.blocks] == [
        ("Alpha page words", 1, 1),
        ("Gamma page words", 3, 3),
    ]
    assert [(b.start_line, b.end_line) for b in note.blocks] == [(1, 1), (3, 3)]
    assert note.body == "Alpha page words\n\nGamma page words"


def test_the_outline_in_force_is_each_pages_heading_path() -> None:
    outline = [[0, "Two", 2], [0, "One", 0], [1, "One.A", 1], [1, " ", 1], [0, "Far", 99]]
    made = pdf.note_of("x.pdf", {"pages": ["a", "b", "c", "d"], "outline": outline})
    assert [b.headings for b in made.blocks] == [
        ("One",),
        ("One", "One.A"),
        ("Two",),
        ("Two",),
    ]


def test_ocr_errors_are_the_notes() -> None:
    made = pdf.note_of("x.pdf", {"pages": ["a"], "errors": ["page 2: unreadable"]})
    assert made.errors == ("page 2: unreadable",)


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"hello, not a pdf at all", "damaged"),
        (make_pdf(["Some text on a page"])[:200], "damaged"),
        (make_pdf(["Some text on a page"], encrypt=True), "encrypted"),
        (make_pdf(["", "  tiny  "]), "no_text"),
    ],
)
def test_what_cannot_be_read_is_left_out_with_its_reason(data: bytes, kind: str) -> None:
    with pytest.raises(LeftOutError) as caught:
        pdf.read(data, "bad.pdf")
    assert (caught.value.path, caught.value.kind) == ("bad.pdf", kind)
