"""Running one extraction in a child process with a time and a memory limit.

Reading a hostile file (a PDF, an image) goes through native libraries that can crash, loop
or allocate without bound. Each such file is read by a fresh `python -m MODULE` child: its
bytes on stdin, a JSON answer on stdout. The child limits its own address space
(RLIMIT_AS) and CPU time before it reads anything, and asks the kernel to kill it when its
parent dies (an orphan of a `kill -9` must not keep reading); the parent kills it at the wall
clock limit. Whatever happens to the child, the parent gets an answer or a `LeftOutError`
with a reason: the daemon is never harmed by the file.

The answer is JSON, never pickle: a child that a file subverted must not be able to run code
in the daemon. A stage module serves as such a child with `child_main(work)` under
`if __name__ == "__main__"`; `run_child` is the parent's side.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from vaultd.errors import LeftOutError

_MB = 1024 * 1024
#: The CPU-time limit is the wall-clock one plus this: the parent's clock decides, the CPU
#: limit only ends an orphan.
_CPU_MARGIN_S = 5


def run_child(
    module: str, path: str, data: bytes, *, timeout: float, memory_mb: int
) -> dict[str, Any]:
    """The answer of `python -m module` for `data` (the file at vault path `path`).

    Raises LeftOutError: with the child's own reason when it refused the file, "too_costly"
    past the time or memory limit, "damaged" when the reader crashed on it.
    """
    command = [
        sys.executable,
        "-m",
        module,
        str(memory_mb),
        str(math.ceil(timeout) + _CPU_MARGIN_S),
    ]
    try:
        done = subprocess.run(
            command, input=data, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise LeftOutError(
            path, f"took longer than {timeout:g} s to read (extract_timeout); skipped", "too_costly"
        ) from exc
    answer = _answer(done.stdout)
    if answer is None:
        code = done.returncode
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            reason = f"took more than the CPU time allowed to read (signal {-code}); skipped"
            raise LeftOutError(path, reason, "too_costly")
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        why = f": {tail[0][:200]}" if tail else ""
        raise LeftOutError(path, f"the reader crashed on it (exit {code}{why}); skipped", "damaged")
    if "left_out" in answer:
        reason, kind = answer["left_out"]
        raise LeftOutError(path, str(reason), kind)
    result: dict[str, Any] = answer["ok"]
    return result


def _answer(out: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(out)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and ("ok" in answer or "left_out" in answer) else None


def _limit_self(memory_mb: int, cpu_seconds: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * _MB, memory_mb * _MB))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            # PR_SET_PDEATHSIG: killed with the parent, not left reading as an orphan.
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
        if os.getppid() == 1:
            os._exit(1)  # the parent died before the line above


def child_main(work: Callable[[bytes], dict[str, Any]]) -> None:
    """Serve one request as a child of `run_child`: limits first, then the work."""
    memory_mb, cpu_seconds = int(sys.argv[1]), int(sys.argv[2])
    _limit_self(memory_mb, cpu_seconds)
    data = sys.stdin.buffer.read()
    answer: dict[str, Any]
    try:
        answer = {"ok": work(data)}
    except LeftOutError as exc:
        answer = {"left_out": [exc.reason, exc.kind]}
    except MemoryError:
        reason = f"needs more than {memory_mb} MB to read (extract_memory_mb); skipped"
        answer = {"left_out": [reason, "too_costly"]}
    except Exception as exc:  # the reader's own failure on this file: the file's fault
        answer = {"left_out": [f"cannot read ({type(exc).__name__}: {exc}); skipped", "damaged"]}
    sys.stdout.buffer.write(json.dumps(answer, ensure_ascii=False).encode())
    sys.stdout.buffer.flush()
