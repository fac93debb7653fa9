"""Unlinked mentions come only from files that can hold a link: a note, a canvas, a drawing.
A PDF or a source file naming a note cannot be given a link to it, so it is no mention."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.small_vault import write_vault
from tests.test_attachments import canvas, make_pdf
from vaultd.config import load_config
from vaultd.index.mentions import unlinked_mentions
from vaultd.index.open import Index, open_index

SENTENCE = "A kestrel hovers above the verge before it stoops."
NOTES: dict[str, str | bytes] = {
    "Birds/Kestrel.md": "# Kestrel\n\nA small falcon.\n",
    "Walk.md": f"# Walk\n\n{SENTENCE}\n",
    "Board.canvas": canvas(
        [{"id": "c1", "type": "text", "text": SENTENCE, "x": 0, "y": 0, "width": 300, "height": 90}]
    ),
    "Field guide.pdf": make_pdf([f"Raptors\n{SENTENCE}"]),
    "birds.py": f'def spot():\n    """{SENTENCE}"""\n    return "kestrel"\n',
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    root = tmp_path_factory.mktemp("kinds")
    config = write_vault(root, NOTES)
    with config.open("a", encoding="utf-8") as out:
        out.write('[attachments]\ncode = ["*.py"]\n')
    with open_index(load_config(config, env={}), env={}) as opened:
        opened.indexer.reconcile()
        yield opened


def test_a_pdf_or_code_naming_a_note_is_no_mention_while_a_note_and_a_canvas_are(
    index: Index,
) -> None:
    kinds = index.manifest.notes.kinds_of(list(NOTES))
    # Every file is indexed, each as its kind: their words could be found.
    assert kinds == {
        "Birds/Kestrel.md": "note",
        "Walk.md": "note",
        "Board.canvas": "canvas",
        "Field guide.pdf": "pdf",
        "birds.py": "code",
    }
    found = unlinked_mentions(index.manifest, "Birds/Kestrel.md")
    assert found is not None
    assert sorted({m.path for m in found}) == ["Board.canvas", "Walk.md"]
