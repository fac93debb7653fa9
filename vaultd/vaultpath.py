"""What a vault path is: the one rule every door (socket API, CLI, MCP bridge) applies.

A vault path names a note or folder relative to the vault root, as the walk records it
(`vaultd.pipeline.discover`): POSIX separators, Unicode NFC. It must never lead out of the
vault, whatever the joining code does with it.

Normalised, not refused: empty and "." components are dropped (`a//b` and `./a` name `a/b`
and `a`, as `Discovery.state_of` reads them), a trailing "/" goes, and each component is put
in NFC (a name typed on macOS arrives decomposed).

Refused (`VaultPathError`): an empty path, a NUL byte, text that is not UTF-8 (a lone
surrogate: a name the walk never indexes), an absolute path (`/etc/passwd`), any `..`
component, and what would lead out when read with Windows' rules: `..` or a leading separator
between backslashes (`..\\x`, `\\\\server\\share`) and a drive letter (`C:`, `C:\\x`). A
backslash anywhere else is an ordinary character of a POSIX file name and is kept.
"""

from __future__ import annotations

import re
import unicodedata

from vaultd.errors import VaultPathError

_DRIVE = re.compile(r"[A-Za-z]:")


def vault_path(value: str) -> str:
    """`value` as the vault path it names, in the manifest's spelling; VaultPathError if it
    is not one."""
    why = _refusal(value)
    if why:
        raise VaultPathError(value, why)
    parts = [unicodedata.normalize("NFC", p) for p in value.split("/") if p not in ("", ".")]
    if not parts:
        raise VaultPathError(value, "it names the vault itself, not a note or folder in it")
    return "/".join(parts)


def _refusal(value: str) -> str:
    if not value:
        return "it is empty"
    if "\0" in value:
        return "it holds a NUL byte"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    if value.startswith(("/", "\\")):
        return "it is absolute; name it relative to the vault"
    if _DRIVE.match(value):
        return "it starts with a drive letter; name it relative to the vault"
    if ".." in re.split(r"[/\\]", value):
        return "it has a '..' component, which leads out of the vault"
    return ""
