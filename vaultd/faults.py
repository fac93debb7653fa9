"""Test fault hooks: make one note crash or fail every time, for the poison-note tests.

Each hook is off unless its environment variable is set when the index is opened; nothing in
normal use sets them. A marker is a piece of text: a note holding it triggers the fault.
- VAULTD_FAULT_CRASH_ON: the parse stage kills its own process (SIGKILL, no clean-up), as the
  OOM killer or a crash in a native library would. A signal, not an exit code: exit 70 is in
  the unit file's RestartPreventExitStatus, and the point is to be restarted like a crash.
- VAULTD_FAULT_EMBED_FAIL_ON: the embedder raises EmbedError for any batch holding the marker.
- VAULTD_FAULT_PARSE_FAIL_ON: the parse stage raises NoteError for a note holding the marker.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vaultd.errors import EmbedError, NoteError

CRASH_ON = "VAULTD_FAULT_CRASH_ON"
EMBED_FAIL_ON = "VAULTD_FAULT_EMBED_FAIL_ON"
PARSE_FAIL_ON = "VAULTD_FAULT_PARSE_FAIL_ON"
CRASH_SIGNAL = signal.SIGKILL


@dataclass(frozen=True, slots=True)
class Faults:
    crash_on: bytes = b""
    embed_fail_on: str = ""
    parse_fail_on: bytes = b""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Faults:
        env = os.environ if env is None else env
        return cls(
            crash_on=env.get(CRASH_ON, "").encode("utf-8", "surrogateescape"),
            embed_fail_on=env.get(EMBED_FAIL_ON, ""),
            parse_fail_on=env.get(PARSE_FAIL_ON, "").encode("utf-8", "surrogateescape"),
        )

    def before_parse(self, data: bytes) -> None:
        if self.crash_on and self.crash_on in data:
            os.write(2, f"vaultd: test fault hook {CRASH_ON}: killing this process\n".encode())
            os.kill(os.getpid(), CRASH_SIGNAL)
        if self.parse_fail_on and self.parse_fail_on in data:
            raise NoteError(f"test fault hook {PARSE_FAIL_ON}: the parser refuses this note")

    def before_embed(self, texts: Sequence[str]) -> None:
        if self.embed_fail_on and any(self.embed_fail_on in t for t in texts):
            raise EmbedError(f"test fault hook {EMBED_FAIL_ON}: the embedder refuses this text")
