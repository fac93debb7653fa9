"""Hostile files: small files that cost far more to read than their size says (issue 51).

Shared by the extractors' tests (tests/pipeline/test_hostile_files.py) and the running
daemon's (tests/reliability/test_hostile_corpus.py).
"""

from __future__ import annotations

import json
from typing import Any

from tests.test_attachments import pdf_file

#: The text of the one page the hostile PDF names again and again.
PAGE_TEXT = "The same page, named again and again."


def nested_groups_canvas(groups: int, *, card_every: int = 10) -> bytes:
    """A canvas of `groups` labelled groups, each inside the one before, and a text card
    every `card_every` levels (inside that group, outside the next). 2,000 groups: 179 KB."""
    side = 20 * groups + 100
    nodes: list[dict[str, Any]] = []
    for level in range(groups):
        at = 10 * level
        nodes.append(
            {
                "id": f"g{level}",
                "type": "group",
                "label": f"L{level}",
                "x": at,
                "y": at,
                "width": side - 2 * at,
                "height": side - 2 * at,
            }
        )
        if level % card_every == 0:
            nodes.append(
                {
                    "id": f"c{level}",
                    "type": "text",
                    "text": f"card at level {level}",
                    "x": at + 1,
                    "y": at + 1,
                    "width": 5,
                    "height": 5,
                }
            )
    return json.dumps({"nodes": nodes, "edges": []}).encode()


def many_cards_canvas(cards: int) -> bytes:
    """A canvas of `cards` text cards in a grid, as short as JSON allows (100,000: 6.6 MB,
    under `max_file_mb`; a card without a size is a point)."""
    nodes = [
        {
            "id": f"{n:x}",
            "type": "text",
            "text": f"wallcard {n}",
            "x": n % 100,
            "y": n // 100,
        }
        for n in range(cards)
    ]
    return json.dumps({"nodes": nodes, "edges": []}, separators=(",", ":")).encode()


def surrogate_canvas() -> bytes:
    """A canvas whose card holds a lone surrogate, as JSON can spell it."""
    return (
        b'{"nodes": [{"id": "s", "type": "text", "x": 0, "y": 0, "width": 100, "height": 50,'
        b' "text": "before \\ud800 after surrogatecard"}], "edges": []}'
    )


def one_page_many_times_pdf(times: int) -> bytes:
    """A PDF whose page tree names one page object `times` times (200,000: 1.2 MB)."""
    content = f"BT /F1 12 Tf 72 720 Td ({PAGE_TEXT}) Tj ET".encode()
    kids = b" ".join(b"4 0 R" for _ in range(times))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % times,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
    ]
    return pdf_file(objects)
