"""The page's link, handed to the browser through a file only the user can read.

Every local user can read every process's command line (`ps -eo args`), so a browser started
with the link would show its secret to all of them. Instead the link goes into `open.html`, a
0600 file in a fresh 0700 directory (made by `mkdtemp`, so no one can have put a name there
first) under the user's runtime directory, or the system's temporary directory without one (either
only if no other user can rename a directory on the way, which vaultd.trust checks);
the browser is started with the file's path, which holds nothing secret, and the file sends
it on to the link. Notebook servers hand their token to the browser the same way.

The file stays while the page is served, so that another browser, or the same one after a
restart, can be let in again by opening it; it is removed when the page stops, and its secret
is worthless then.
"""

from __future__ import annotations

import contextlib
import html
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from vaultd.api.locate import runtime_dir
from vaultd.errors import TrustError
from vaultd.trust import distrust

NAME = "open.html"

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={url}">
<title>vaultd</title>
</head>
<body>
<p>Opening the page of vaultd&hellip; If nothing happens, <a href="{url}">open it</a>.
This file lets a browser in for as long as this run of vaultd ui serves the page: keep it
to yourself.</p>
</body>
</html>
"""


def places(env: Mapping[str, str]) -> list[Path]:
    """Where the file's private directory may be made, best first: the user's runtime
    directory (memory only, gone at logout), then the system's temporary directory."""
    runtime = runtime_dir(env)
    return [p for p in (runtime, Path(tempfile.gettempdir())) if p is not None]


def write_link(url: str, env: Mapping[str, str]) -> LinkFile:
    """`url` in a link file in the first of `places` where only the user (or root) can change
    the way to it.

    Raises TrustError when there is no such place.
    """
    refusals = []
    for base in places(env):
        try:
            return LinkFile(url, base)
        except TrustError as exc:
            refusals.append(str(exc))
    where = "; ".join(refusals)
    raise TrustError(f"no private place to hand the page's link to the browser: {where}")


class LinkFile:
    """`open.html` holding `url`, in a private directory of its own under `base`."""

    def __init__(self, url: str, base: Path) -> None:
        """Raises TrustError when another user could swap the directory on the way to it."""
        try:
            self._directory = Path(tempfile.mkdtemp(prefix="vaultd-ui-", dir=base))
        except OSError as exc:
            raise TrustError(f"cannot make a private directory in {base}: {exc}") from exc
        self.path = self._directory / NAME
        found = distrust(self._directory)
        if found is not None:
            self.remove()
            raise TrustError(f"{base} is no place for the link: {found.describe()}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(PAGE.format(url=html.escape(url, quote=True)))

    @property
    def uri(self) -> str:
        """What the browser is started with: the file's `file://` URI (nothing secret)."""
        return self.path.as_uri()

    def remove(self) -> None:
        """Remove the file and its directory (again is harmless)."""
        with contextlib.suppress(OSError):
            shutil.rmtree(self._directory)

    def __enter__(self) -> LinkFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
