"""The languages check: whether the model in use fits what the vault is written in."""

from __future__ import annotations

from vaultd.config import Config
from vaultd.doctor.report import Check, not_checked


def check_languages(config: Config, model_id: str | None) -> Check:
    """Whether the model in use fits what the vault is written in (a sample of its notes)."""
    from vaultd.embedding.spec import (
        DEFAULT_MODEL_ID,
        INSTALL_MULTILINGUAL,
        MULTILINGUAL_MODEL_ID,
    )
    from vaultd.index.models import vault_languages

    if config.vault.path is None:
        return not_checked("languages", "no vault configured", "vault")
    languages = vault_languages(config)
    measured = languages.describe()
    source = (model_id or "").split("@", 1)[0]
    if source == DEFAULT_MODEL_ID and not languages.mostly_english():
        return Check(
            "languages",
            "warn",
            f"the vault is {measured}: mostly not English, which {model_id} (English only) "
            "embeds poorly; keyword search still finds its words",
            f'{INSTALL_MULTILINGUAL} and set [embedding] model = "multilingual" '
            "(the vault is embedded again once, into a new collection)",
        )
    if source == MULTILINGUAL_MODEL_ID and languages.english >= 0.8:
        return Check(
            "languages",
            "warn",
            f"the vault is {measured}: the multilingual model embeds every passage and the "
            "default model its English ones again; the default alone ranks English about as "
            "well and indexes it about three times as fast",
            'set [embedding] model = "default" (or "auto")',
        )
    serves = f"; {model_id} serves it" if model_id else ""
    return Check("languages", "ok", f"the vault is {measured}{serves}")
