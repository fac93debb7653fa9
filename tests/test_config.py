from __future__ import annotations

import dataclasses
import hashlib
import tomllib
from pathlib import Path

import pytest

from vaultd.config import (
    SECTIONS,
    Config,
    EmbeddingSection,
    VaultSection,
    config_path,
    default_store_path,
    load_config,
    parse_duration,
    section_keys,
)
from vaultd.errors import ConfigError, FlagError

EXAMPLE = Path(__file__).resolve().parent.parent / "config" / "vaultd.example.toml"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose XDG directories all live under tmp_path."""
    home = tmp_path / "home"
    home.mkdir()
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
    }


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    path = tmp_path / "My Vault"
    path.mkdir()
    return path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(path: Path, env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path, env=env)
    assert caught.value.source == str(path)
    return caught.value.problems


# -- finding the file ------------------------------------------------------------------------


def test_config_path_prefers_explicit_then_env_then_xdg(
    tmp_path: Path, env: dict[str, str]
) -> None:
    default = write(Path(env["XDG_CONFIG_HOME"]) / "vaultd" / "config.toml", "")
    from_env = tmp_path / "env.toml"
    explicit = tmp_path / "explicit.toml"

    assert config_path(explicit, {**env, "VAULTD_CONFIG": str(from_env)}) == explicit
    assert config_path(None, {**env, "VAULTD_CONFIG": str(from_env)}) == from_env
    assert config_path(None, env) == default


def test_config_path_without_xdg_config_home_uses_dot_config(env: dict[str, str]) -> None:
    del env["XDG_CONFIG_HOME"]
    assert config_path(None, env) is None
    default = write(Path(env["HOME"]) / ".config" / "vaultd" / "config.toml", "")
    assert config_path(None, env) == default
    # The XDG spec says a relative value is invalid and must be ignored.
    assert config_path(None, {**env, "XDG_CONFIG_HOME": "relative/dir"}) == default


def test_missing_default_file_means_defaults(env: dict[str, str]) -> None:
    assert config_path(None, env) is None
    assert load_config(env=env) == Config()


def test_load_config_without_path_reads_vaultd_config_env(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = write(tmp_path / "elsewhere.toml", "[log]\nlevel = 'debug'\n")
    config = load_config(env={**env, "VAULTD_CONFIG": str(path)})
    assert config.log.level == "debug"
    assert config.source == path


def test_explicit_missing_file_is_an_error(tmp_path: Path, env: dict[str, str]) -> None:
    """Blamed on what named it (issue 52): there is no file whose content could be wrong."""
    missing = tmp_path / "nope.toml"
    with pytest.raises(FlagError) as caught:
        load_config(missing, env=env)
    assert str(caught.value) == f"--config {missing}: file not found"
    with pytest.raises(FlagError) as caught:
        load_config(env={**env, "VAULTD_CONFIG": str(missing)})
    assert str(caught.value) == f"$VAULTD_CONFIG {missing}: file not found"


# -- values ----------------------------------------------------------------------------------


def test_full_file_is_parsed_into_typed_values(
    tmp_path: Path, env: dict[str, str], vault: Path
) -> None:
    path = write(
        tmp_path / "cfg" / "vaultd.toml",
        f"""
        [vault]
        path = "{vault}"
        exclude = ["Templates/", "*.excalidraw.md"]
        include = ["Notes/**"]
        follow_symlinks = true
        skip_conflicts = false
        use_gitignore = false
        max_file_mb = 2

        [store]
        url = "http://localhost:8000"
        collection = "notes"
        token_env = "MY_TOKEN"

        [embedding]
        batch_size = 64
        threads = 4

        [chunking]
        max_tokens = 512

        [server]
        socket = "/run/vaultd.sock"

        [schedule]
        rescan = "1h30m"
        health = "0"

        [watch]
        debounce = "500ms"
        backend = "polling"

        [log]
        level = "warning"
        format = "json"
        file = "/var/log/vaultd.log"
        """,
    )
    config = load_config(path, env=env)

    assert config.source == path
    assert config.vault == VaultSection(
        path=vault,
        exclude=("Templates/", "*.excalidraw.md"),
        include=("Notes/**",),
        follow_symlinks=True,
        skip_conflicts=False,
        use_gitignore=False,
        max_file_mb=2.0,
    )
    assert isinstance(config.vault.max_file_mb, float)
    assert (config.store.url, config.store.collection, config.store.token_env) == (
        "http://localhost:8000",
        "notes",
        "MY_TOKEN",
    )
    assert config.embedding == EmbeddingSection(model="default", batch_size=64, threads=4)
    assert config.chunking.max_tokens == 512
    assert config.server.socket == "/run/vaultd.sock"
    assert config.schedule.rescan_seconds == 5400.0
    assert config.schedule.health_seconds == 0.0
    assert config.watch.debounce_seconds == 0.5
    assert config.watch.backend == "polling"
    assert (config.log.level, config.log.format, config.log.file) == (
        "warning",
        "json",
        "/var/log/vaultd.log",
    )


def test_sections_are_frozen(env: dict[str, str]) -> None:
    config = load_config(env=env)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.embedding.batch_size = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1d", 86400.0),
        ("500ms", 0.5),
        ("1.5s", 1.5),
        (" 2m ", 120.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "90", "1 hour", "h", "-5s", "1x", "1h 30", "s1"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# -- paths -----------------------------------------------------------------------------------


def test_vault_flag_overrides_file(tmp_path: Path, env: dict[str, str], vault: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    path = write(tmp_path / "c.toml", f'[vault]\npath = "{other}"\n')
    assert load_config(path, vault=vault, env=env).vault.path == vault


def test_relative_vault_flag_is_taken_from_cwd(
    tmp_path: Path, env: dict[str, str], vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(vault.parent)
    assert load_config(vault=Path(vault.name), env=env).vault.path == vault


def test_relative_paths_in_file_are_taken_from_its_directory(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = write(
        tmp_path / "etc" / "c.toml",
        '[vault]\npath = "../notes"\n[store]\npath = "data"\n[embedding]\nmodel = "models/x"\n',
    )
    config = load_config(path, env=env)
    assert config.vault.path == tmp_path / "notes"
    assert config.store.path == tmp_path / "etc" / "data"
    assert config.embedding.model == str(tmp_path / "etc" / "models" / "x")


def test_tilde_expands_to_home(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path / "c.toml", '[vault]\npath = "~/Notes"\n')
    assert load_config(path, env=env).vault.path == Path(env["HOME"]) / "Notes"
    assert load_config(vault=Path("~"), env=env).vault.path == Path(env["HOME"])


def test_vault_path_is_resolved_through_symlinks(
    tmp_path: Path, env: dict[str, str], vault: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(vault)
    assert load_config(vault=link, env=env).vault.path == vault


def test_default_store_path_is_per_vault_under_xdg_data(env: dict[str, str], vault: Path) -> None:
    config = load_config(vault=vault, env=env)
    digest = hashlib.sha256(str(vault).encode()).hexdigest()[:8]
    expected = Path(env["XDG_DATA_HOME"]) / "vaultd" / f"My Vault-{digest}"
    assert config.store.path == expected == default_store_path(vault, env)
    assert config.require_store() == expected


def test_default_store_path_without_xdg_data_home(env: dict[str, str], vault: Path) -> None:
    del env["XDG_DATA_HOME"]
    store = load_config(vault=vault, env=env).store.path
    assert store is not None
    assert store.parent == Path(env["HOME"]) / ".local" / "share" / "vaultd"


def test_no_vault_means_no_store_path(env: dict[str, str]) -> None:
    config = load_config(env=env)
    assert config.vault.path is None
    assert config.store.path is None
    with pytest.raises(ConfigError, match="no vault configured"):
        config.require_store()


@pytest.mark.parametrize("store", ["{vault}", "{vault}/.vaultd", "{vault}/sub/../data"])
def test_store_inside_vault_is_an_error(
    tmp_path: Path, env: dict[str, str], vault: Path, store: str
) -> None:
    path = write(
        tmp_path / "c.toml",
        f'[vault]\npath = "{vault}"\n[store]\npath = "{store.format(vault=vault)}"\n',
    )
    [problem] = problems_of(path, env)
    assert problem.startswith("[store] path: ")
    assert "inside the vault" in problem


def test_derived_store_inside_vault_is_an_error(env: dict[str, str], vault: Path) -> None:
    env["XDG_DATA_HOME"] = str(vault / "data")
    with pytest.raises(ConfigError, match="inside the vault"):
        load_config(vault=vault, env=env)


def test_store_beside_vault_with_common_prefix_is_fine(
    tmp_path: Path, env: dict[str, str], vault: Path
) -> None:
    path = write(tmp_path / "c.toml", f'[store]\npath = "{vault}-data"\n')
    assert load_config(path, vault=vault, env=env).store.path == Path(f"{vault}-data")


def test_require_vault(tmp_path: Path, env: dict[str, str], vault: Path) -> None:
    assert load_config(vault=vault, env=env).require_vault() == vault

    path = write(tmp_path / "c.toml", "")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env=env).require_vault()
    assert caught.value.problems == [
        f"no vault configured: pass --vault DIR or set [vault] path in {path}"
    ]

    with pytest.raises(ConfigError, match="does not exist"):
        load_config(vault=tmp_path / "gone", env=env).require_vault()
    with pytest.raises(ConfigError, match="is not a directory"):
        load_config(vault=path, env=env).require_vault()


# -- validation ------------------------------------------------------------------------------


def test_typo_tolerance_is_a_search_switch(
    tmp_path: Path, env: dict[str, str], vault: Path
) -> None:
    assert load_config(vault=vault, env=env).search.typos is True
    path = write(tmp_path / "c.toml", "[search]\ntypos = false\n")
    assert load_config(path, vault=vault, env=env).search.typos is False
    path = write(tmp_path / "bad.toml", '[search]\ntypos = "off"\ntypo = true\n')
    assert problems_of(path, env) == [
        "[search] typos: expected true or false, got 'off'",
        "[search] typo: unknown key (did you mean 'typos'?)",
    ]


def test_every_problem_is_reported_at_once(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(
        tmp_path / "c.toml",
        """
        path = "/notes"

        [vault]
        exlude = ["x"]
        follow_symlinks = "yes"
        max_file_mb = 0
        include = "*.md"
        exclude = ["ok/", "\\\\"]

        [embeding]
        model = "x"

        [embedding]
        batch_size = "abc"
        threads = true
        max_tokens = 100

        [chunking]
        max_tokens = 10000

        [schedule]
        rescan = "1 hour"
        health = 5

        [watch]
        backend = "inotify"

        [log]
        level = "verbose"
        format = 1
        """,
    )
    problems = problems_of(path, env)
    assert problems == [
        "path: unknown top-level key (did you mean [vault] path?)",
        "[vault] exlude: unknown key (did you mean 'exclude'?)",
        "[vault] follow_symlinks: expected true or false, got 'yes'",
        "[vault] max_file_mb: must be a number greater than 0, got 0",
        "[vault] include: expected a list of strings, got '*.md'",
        "[vault] exclude: invalid glob pattern(s): '\\\\'",
        "unknown section [embeding] (did you mean [embedding]?)",
        "[embedding] batch_size: expected an integer, got 'abc'",
        "[embedding] threads: expected an integer, got true",
        "[embedding] max_tokens: unknown key (did you mean [chunking] max_tokens?)",
        "[chunking] max_tokens: must be between 32 and 8192, got 10000",
        '[schedule] rescan: not a duration: \'1 hour\' (use e.g. "90s", "30m", "1h", "1h30m",'
        ' or "0" for off)',
        '[schedule] health: expected a duration string such as "30m" or "0", got 5',
        "[watch] backend: must be one of 'auto', 'native', 'polling', got 'inotify'",
        "[log] level: must be one of 'debug', 'info', 'warning', 'error', got 'verbose'",
        "[log] format: must be one of 'auto', 'console', 'json', got 1",
    ]
    # The message a user sees lists them all, one per line, naming the file.
    message = str(ConfigError(problems, source=str(path)))
    assert message.startswith(f"invalid configuration in {path}:\n  - ")
    assert message.count("\n  - ") == len(problems)


def test_unknown_names_without_close_match_get_no_suggestion(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = write(tmp_path / "c.toml", "[zzz]\n[log]\nqqqqqq = 1\n")
    assert problems_of(path, env) == ["unknown section [zzz]", "[log] qqqqqq: unknown key"]


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        (
            "[embedding]\nbatch_size = 0",
            "[embedding] batch_size: must be between 1 and 1024, got 0",
        ),
        ("[embedding]\nbatch_size = 1025", "[embedding] batch_size: must be between 1 and 1024"),
        ("[embedding]\nbatch_size = 3.0", "[embedding] batch_size: expected an integer, got 3.0"),
        ("[embedding]\nthreads = -1", "[embedding] threads: must be at least 0, got -1"),
        ("[embedding]\nmodel = ''", "[embedding] model: must not be empty"),
        ("[chunking]\nmax_tokens = 31", "[chunking] max_tokens: must be between 32 and 8192"),
        ("[vault]\nmax_file_mb = true", "[vault] max_file_mb: expected a number, got true"),
        ("[vault]\nmax_file_mb = inf", "[vault] max_file_mb: must be a number greater than 0"),
        ("[vault]\nexclude = [1]", "[vault] exclude: expected a list of strings, got [1]"),
        ("[vault]\npath = 3", "[vault] path: expected a string, got 3"),
        ("[store]\nurl = false", "[store] url: expected a string, got false"),
        ("[watch]\ndebounce = '10'", "[watch] debounce: not a duration: '10'"),
        ("vault = 1", "vault: expected a [vault] table, got 1"),
    ],
)
def test_bad_values(tmp_path: Path, env: dict[str, str], toml: str, problem: str) -> None:
    path = write(tmp_path / "c.toml", toml)
    [reported] = problems_of(path, env)
    assert reported.startswith(problem)


def test_toml_syntax_error_is_one_problem_with_its_line(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = write(tmp_path / "c.toml", '[vault]\nexclude = ["a"\n\n[log]\n')
    [problem] = problems_of(path, env)
    assert problem.startswith("TOML syntax error: ")
    assert "line 4" in problem


def test_file_that_is_not_utf8_is_an_error(tmp_path: Path, env: dict[str, str]) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b'[log]\nfile = "\xff"\n')
    [problem] = problems_of(path, env)
    assert "UTF-8" in problem


def test_unreadable_file_is_an_error(tmp_path: Path, env: dict[str, str]) -> None:
    [problem] = problems_of(tmp_path, env)  # a directory cannot be read as a file
    assert problem.startswith("cannot read: ")


def test_config_error_exit_code() -> None:
    assert ConfigError(["x"]).exit_code == 78


# -- the example file ------------------------------------------------------------------------


def test_example_file_documents_every_key_with_its_default() -> None:
    with EXAMPLE.open("rb") as fh:
        example = tomllib.load(fh)

    assert list(example) == list(SECTIONS)
    for section, keys in example.items():
        code = section_keys(section)
        assert list(keys) == list(code), f"[{section}] keys differ from the code"
        for key, raw in keys.items():
            parse = next(
                f.metadata["parse"] for f in dataclasses.fields(SECTIONS[section]) if f.name == key
            )
            assert parse(raw) == code[key], f"[{section}] {key} = {raw!r} is not the default"


def test_example_file_loads_to_the_defaults(env: dict[str, str]) -> None:
    assert load_config(EXAMPLE, env=env) == dataclasses.replace(Config(), source=EXAMPLE)


def test_the_image_limits_default_to_the_readers_own() -> None:
    """A library caller with no config (`Extraction()`) and a daemon with the default config
    leave out the same images."""
    from vaultd.config import AttachmentsSection
    from vaultd.index.extract import Extraction

    configured, bare = Extraction.from_config(AttachmentsSection()), Extraction()
    assert configured.max_image_pixels == bare.max_image_pixels
    assert configured.max_image_bytes == bare.max_image_bytes
