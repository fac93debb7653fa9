"""`vaultd doctor` names a kind of file switched on whose reader is missing, and gives each
left-out file the advice its reason calls for (the setting that applies, OCR for a PDF of
pictures, a password for an encrypted one), through the real command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.daemon import fault_env, running, write_config
from tests.test_attachments import canvas, make_pdf
from vaultd.config import load_config
from vaultd.index.open import open_index

#: What an environment without the ocr extra (or one grammar) looks like to vaultd: the
#: modules cannot be imported (a None in sys.modules makes `import` and `find_spec` fail).
NO_EXTRA = 'import sys\nsys.modules["rapidocr_onnxruntime"] = None\n'


def doctor(config: Path, env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "vaultd", "doctor", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}


def vault_config(tmp_path: Path, attachments: str) -> Path:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Note.md").write_text("# Note\n\nA kestrel over the verge.\n")
    return write_config(
        tmp_path / "vaultd.toml",
        vault,
        tmp_path / "data",
        tmp_path / "v.sock",
        extra=f"\n[attachments]\n{attachments}\n",
    )


def test_ocr_on_without_the_ocr_extra_is_a_warning_with_its_remedy(tmp_path: Path) -> None:
    config = vault_config(tmp_path, "ocr = true")
    checks = doctor(config, fault_env(tmp_path, NO_EXTRA))
    readers = checks["readers"]
    assert readers["status"] == "warn"
    assert "ocr = true" in readers["message"] and "ocr extra" in readers["message"]
    assert "pip install 'vaultd-obsidian[ocr]'" in readers["remedy"]
    assert "ocr = false" in readers["remedy"]


def test_code_globs_without_their_grammar_name_the_language(tmp_path: Path) -> None:
    config = vault_config(tmp_path, 'code = ["**/*.rs", "**/*.py"]')
    source = 'import sys\nsys.modules["tree_sitter_rust"] = None\n'
    readers = doctor(config, fault_env(tmp_path, source))["readers"]
    assert readers["status"] == "warn" and "(rust)" in readers["message"]
    assert "python" not in readers["message"]
    assert "tree-sitter-rust" in readers["remedy"]


def test_every_reader_installed_is_ok(tmp_path: Path) -> None:
    pytest.importorskip("rapidocr_onnxruntime")
    config = vault_config(tmp_path, 'ocr = true\ncode = ["**/*.py"]')
    readers = doctor(config)["readers"]
    assert readers["status"] == "ok", readers


def test_each_left_out_file_gets_the_advice_of_its_reason(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    files: dict[str, bytes] = {
        "Note.md": b"# Note\n\nA kestrel over the verge.\n",
        "Scan.pdf": make_pdf(["", ""]),
        "Locked.pdf": make_pdf(["A secret page of text, long enough to count."], encrypt=True),
        "Big.md": b"# Big\n\n" + b"A long line of words. " * 200,
        "Board.canvas": canvas(
            [
                {"id": f"c{i}", "type": "text", "text": f"Card {i}", "x": 0, "y": 90 * i}
                | {"width": 200, "height": 80}
                for i in range(3)
            ]
        ).encode(),
    }
    for name, data in files.items():
        (vault / name).parent.mkdir(parents=True, exist_ok=True)
        (vault / name).write_bytes(data)
    config = write_config(
        tmp_path / "vaultd.toml",
        vault,
        tmp_path / "data",
        tmp_path / "v.sock",
        extra="\n[attachments]\nmax_cards = 2\n",
    )
    # Big.md, 4.4 kB, is over this; the other notes are not.
    config.write_text(config.read_text().replace("[vault]\n", "[vault]\nmax_file_mb = 0.002\n"))
    with open_index(load_config(config, env={}), env={}) as index:
        index.indexer.reconcile()
        left_out = {entry.path: entry.kind for entry in index.manifest.failures.left_out()}
    assert left_out == {"Scan.pdf": "no_text", "Locked.pdf": "encrypted", "Big.md": "too_big"}
    manifest = doctor(config)["manifest"]
    assert manifest["status"] == "warn"
    # Each file's advice, up to where it goes on after a semicolon.
    advice = {
        name: found.group(1)
        for name in files
        if (found := re.search(rf"{re.escape(name)}: ([^;]*)", manifest["remedy"]))
    }
    assert "ocr = true" in advice["Scan.pdf"]
    assert "encrypted" in advice["Locked.pdf"] and "password" in advice["Locked.pdf"]
    assert "[vault] max_file_mb" in advice["Big.md"]
    # Only the advice that fits: nothing about encodings or permissions for these files.
    assert "UTF-8" not in manifest["remedy"] and "read access" not in manifest["remedy"]
    # The canvas past max_cards is indexed in part, and the setting to raise is named.
    assert "Board.canvas" in manifest["message"] and "[attachments] max_cards" in manifest["remedy"]


def test_a_running_daemons_left_out_files_get_the_same_advice(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Note.md").write_text("# Note\n\nA kestrel over the verge.\n")
    (vault / "Scan.pdf").write_bytes(make_pdf(["", ""]))
    (vault / "Locked.pdf").write_bytes(make_pdf(["A secret page of text."], encrypt=True))
    with running(vault, tmp_path) as daemon:
        manifest = doctor(daemon.config)["manifest"]
    assert "(from the daemon)" in manifest["message"]
    assert re.search(r"Scan\.pdf: its pages are pictures[^;]*ocr = true", manifest["remedy"])
    assert re.search(r"Locked\.pdf: encrypted[^;]*password", manifest["remedy"])
    assert "UTF-8" not in manifest["remedy"] and "max_file_mb" not in manifest["remedy"]
