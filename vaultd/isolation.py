"""Running one extraction in a child process with a time and a memory limit.

Reading a hostile file (a PDF, an image) goes through native libraries that can crash, loop
or allocate without bound. Such files are read by a `python -m MODULE` worker process, one
file at a time: its bytes on stdin, a JSON answer on stdout, each framed by its length. The
worker limits its own address space (RLIMIT_AS) before it reads anything, and asks the kernel
to kill it when its parent dies (an orphan of a `kill -9` must not keep reading); the parent
kills it at the wall-clock limit, and starts another for the next file after a kill, a crash
or an answer of "out of memory". It is kept between files: a Python start costs more than
reading a small PDF (bench/quality/pdf_extract.py). Whatever happens to the worker, the parent gets
an answer or a `LeftOutError` with a reason: the daemon is never harmed by the file.

A worker runs in a session of its own, so the terminal's Ctrl-C (sent to the whole foreground
process group) reaches the daemon, never the reader: the daemon decides how to stop. A worker
that dies on a file all the same (a signal from elsewhere, `kill -9`, the kernel's OOM killer)
is given the file once more in a fresh worker: only a file that kills the reader twice is left
out, and "out of memory" is said only when the kernel counted an OOM kill meanwhile. A worker
ended by the process's own stop (`stop_children`) costs nothing: the thread waiting on it gets
`PassStoppedError`, and the file is read again by the next pass.

The answer is JSON, never pickle: a child that a file subverted must not be able to run code
in the daemon. A stage module serves as such a child with `child_main(work)` under
`if __name__ == "__main__"`; `run_child` is the parent's side.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from vaultd.errors import LeftOutError, LeftOutKind, PassStoppedError

_MB = 1024 * 1024
#: Characters of a reader's own message kept in a reason.
MAX_REASON = 240


class _Child:
    """One extraction worker: a `python -m module` child serving files one at a time, its
    bytes in and its answer out, each framed by an 8-byte length. Started on first use, and
    again after it died, timed out or ran out of memory (it exits after that answer)."""

    def __init__(
        self, module: str, timeout: float, memory_mb: int, args: tuple[str, ...] = ()
    ) -> None:
        self.module, self.timeout, self.memory_mb = module, timeout, memory_mb
        self.args = args
        self._process: subprocess.Popen[bytes] | None = None
        #: When it last finished a file (`time.monotonic`), for `release_children`.
        self.used = time.monotonic()

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is not None:
            _close_pipes(self._process)  # ended between files (idle release, a kill)
            self._process = None
        if self._process is None:
            command = [sys.executable, "-m", self.module, str(self.memory_mb), *self.args]
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                # Not a pipe: a chatty reader would fill it and stall. Its exit code says enough.
                stderr=subprocess.DEVNULL,
                # Out of the terminal's process group: its Ctrl-C is the daemon's to act on.
                start_new_session=True,
            )
        return self._process

    def ask(self, path: str, data: bytes) -> dict[str, Any]:
        """The worker's answer for `data`, the file at vault path `path`.

        A worker that dies on the file is given it once more, a fresh one: a kill from
        elsewhere costs a second read, not the file. Twice is the file's doing.
        """
        first: _Died | None = None
        while True:
            if _stopping.is_set():
                raise PassStoppedError(path)
            process = self._started()
            if _stopping.is_set():  # asked while it started: `stop_children` may have missed it
                self.close()
                raise PassStoppedError(path)
            kills = oom_kills()
            try:
                return self._ask(process, path, data)
            except _Died as died:
                if _stopping.is_set():
                    raise PassStoppedError(path) from None
                died.oom = oom_kills() > kills
                if first is not None:
                    raise _died_twice(path, first, died) from None
                first = died
            finally:
                _cpu_of(process.pid)  # what this file cost, kept after the worker is gone
                self.used = time.monotonic()

    def _ask(self, process: subprocess.Popen[bytes], path: str, data: bytes) -> dict[str, Any]:
        assert process.stdin is not None and process.stdout is not None
        deadline = time.monotonic() + self.timeout
        try:
            process.stdin.write(len(data).to_bytes(8, "big") + data)
            process.stdin.flush()
            out = process.stdout.fileno()
            size = int.from_bytes(_read(out, 8, deadline), "big")
            answer = _answer(_read(out, size, deadline))
        except TimeoutError as exc:
            _cpu_of(process.pid)
            self.close()
            raise LeftOutError(
                path,
                f"took longer than {self.timeout:g} s to read (extract_timeout); skipped",
                "too_costly",
            ) from exc
        except (OSError, EOFError, ValueError):
            answer = None
        if answer is None:
            raise _Died(self._ended())
        if answer.get("exiting"):
            # It exits after this answer: asked again before it is gone, it would look
            # crashed on the next file.
            self._ended()
        return answer

    def _ended(self) -> int:
        """The worker's exit code once it has ended (killed if it has not in 5 s)."""
        process = self._process
        self._process = None
        assert process is not None
        try:
            code = process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        _close_pipes(process)
        return code

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()
            _close_pipes(process)


class _Died(Exception):
    """A worker ended without answering: its exit code (negative: the signal that ended it),
    and whether the kernel killed a process for want of memory while it read."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code
        self.oom = False


def _died_twice(path: str, first: _Died, second: _Died) -> LeftOutError:
    if first.oom or second.oom:
        reason = "the system ran out of memory reading it (the kernel ended the reader); skipped"
        return LeftOutError(path, reason, "too_costly")
    how = (
        _how(first.code)
        if first.code == second.code
        else f"{_how(first.code)}, then {_how(second.code)}"
    )
    return LeftOutError(path, f"the reader crashed on it twice ({how}); skipped", "damaged")


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def oom_kills() -> int:
    """How many processes the kernel has killed for want of memory: in this process's cgroup
    (where a unit's MemoryMax is enforced: cgroup v2's memory.events, v1's memory.oom_control)
    and on the whole system (/proc/vmstat); 0 where none can be read. A reader's SIGKILL is
    "out of memory" only when this count grew while it read."""
    total = 0
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            for line in handle:
                _, controllers, path = line.strip().split(":", 2)
                if not controllers:
                    total += _counted(f"/sys/fs/cgroup{path}/memory.events")
                elif "memory" in controllers.split(","):
                    total += _counted(f"/sys/fs/cgroup/memory{path}/memory.oom_control")
    except (OSError, ValueError):
        pass
    return total + _counted("/proc/vmstat")


def _counted(path: str) -> int:
    """The `oom_kill N` line of a kernel counter file, or 0."""
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _close_pipes(process: subprocess.Popen[bytes]) -> None:
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _read(fd: int, size: int, deadline: float | None = None) -> bytes:
    """`size` bytes from a pipe, by `deadline` if given (else TimeoutError), or EOFError."""
    chunks: list[bytes] = []
    left = size
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


#: One worker per module and limits, per process (a parser worker process has its own).
_children: dict[tuple[str, float, int, tuple[str, ...]], _Child] = {}
_children_lock = threading.Lock()
#: Set by `stop_children` until `close_children`: this process is stopping, and no worker is
#: started or waited for.
_stopping = threading.Event()


def run_child(
    module: str,
    path: str,
    data: bytes,
    *,
    timeout: float,
    memory_mb: int,
    args: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The answer of the `python -m module` worker for `data` (the file at vault path `path`).
    `args` are the worker's own settings, on its command line after the memory limit.

    Raises LeftOutError: with the worker's own reason when it refused the file, "too_costly"
    past the time or memory limit, "damaged" when the reader crashed on it twice.
    PassStoppedError when `stop_children` ended the worker (this process is stopping).
    """
    key = (module, timeout, memory_mb, args)
    with _children_lock:
        child = _children.setdefault(key, _Child(module, timeout, memory_mb, args))
        answer = child.ask(path, data)
    if "left_out" in answer:
        reason, kind = answer["left_out"]
        raise LeftOutError(path, str(reason), kind)
    result: dict[str, Any] = answer["ok"]
    return result


#: CPU seconds each extraction worker this process started had used when last read, by pid.
_spent: dict[int, float] = {}
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_of(pid: int) -> None:
    """Read the worker's CPU time so far (user and system, /proc/PID/stat) into `_spent`."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        _spent[pid] = (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, ValueError, IndexError):
        pass  # gone (its last reading stands) or not Linux


def children_cpu() -> float:
    """CPU seconds this process's extraction workers have used, live and ended: the daemon's
    pacing counts them as its own work (OCR is bulk work under the budget), not as other
    programs' load. Read without waiting for a worker busy with a file."""
    for child in list(_children.values()):
        process = child._process
        if process is not None:
            _cpu_of(process.pid)
    return sum(_spent.values())


def close_children() -> None:
    """End this process's extraction workers (an index closing; they also end with it)."""
    with _children_lock:
        for child in _children.values():
            child.close()
        _children.clear()
        _stopping.clear()


def stop_children() -> None:
    """End this process's extraction workers now, from any thread, without waiting for the
    file one reads (the daemon's stop, a parser worker told to end). The thread waiting on
    one gets PassStoppedError, and none starts again until `close_children`.

    Takes no lock (the reading thread holds `_children_lock` while it waits), so a signal
    handler may call it too."""
    _stopping.set()
    for child in list(_children.values()):
        process = child._process
        if process is not None:
            with contextlib.suppress(OSError):
                process.kill()


def release_children(unused_s: float) -> int:
    """End the extraction workers that read no file for `unused_s` seconds; how many ended.

    A daemon at rest should not hold an OCR engine until its next image: after a first index
    the OCR worker keeps about 0.9 GB resident. The next file starts one again (about a
    second). A worker reading a file now is never ended: with one busy, this waits for
    nothing and ends none.
    """
    if not _children_lock.acquire(blocking=False):
        return 0
    try:
        now = time.monotonic()
        idle = [
            child
            for child in _children.values()
            if child._process is not None and now - child.used >= unused_s
        ]
        for child in idle:
            child.close()
        return len(idle)
    finally:
        _children_lock.release()


def _answer(out: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(out)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and ("ok" in answer or "left_out" in answer) else None


def _limit_self(memory_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * _MB, memory_mb * _MB))
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            # PR_SET_PDEATHSIG: killed with the parent, not left reading as an orphan.
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
        if os.getppid() == 1:
            os._exit(1)  # the parent died before the line above


#: A native library's exception names its class as a dotted prefix of its last line.
_EXCEPTION_PREFIX = re.compile(r"^[\w.]+(?:Error|Exception|Fail): ")


#: What a native library's message says when it ran out of memory.
_OUT_OF_MEMORY = ("bad_alloc", "Failed to allocate memory")


def failure(exc: BaseException) -> tuple[LeftOutKind, str]:
    """A reader's failure on a file as its kind and a one-line reason. Running out of memory
    (a MemoryError, or a native library's std::bad_alloc at the worker's RLIMIT_AS, or
    onnxruntime's memory arena failing to grow there) is "too_costly" and names
    `extract_memory_mb`: the file is fine. Anything else is the reader's error on it,
    "damaged", with the last line of its message (onnxruntime puts a whole traceback in it)."""
    text = str(exc)
    if isinstance(exc, MemoryError) or any(sign in text for sign in _OUT_OF_MEMORY):
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return "too_costly", "needs more memory to read than there is"
        return "too_costly", f"needs more than {limit // _MB} MB to read (extract_memory_mb)"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    message = _EXCEPTION_PREFIX.sub("", lines[-1]) if lines else ""
    if len(message) > MAX_REASON:
        message = message[: MAX_REASON - 3] + "..."
    return "damaged", f"cannot read ({type(exc).__name__}: {message})"


def child_main(work: Callable[[bytes], dict[str, Any]]) -> None:
    """Serve files as the worker `run_child` starts: limits first, then one file at a time
    until stdin ends. After running out of memory (on the file, or on a part of it the work
    lists in its answer's "failed" as [part, kind, reason]) it answers and exits: a fresh
    one follows, its heap unfragmented."""
    _limit_self(int(sys.argv[1]))
    stdin, stdout = sys.stdin.buffer.fileno(), sys.stdout.buffer
    while True:
        try:
            data = _read(stdin, int.from_bytes(_read(stdin, 8), "big"))
        except EOFError:
            return  # the parent is done with this worker
        answer: dict[str, Any]
        spent = False
        try:
            result = work(data)
            answer = {"ok": result}
            spent = any(kind == "too_costly" for _, kind, _ in result.get("failed") or ())
        except LeftOutError as exc:
            answer = {"left_out": [exc.reason, exc.kind]}
        except Exception as exc:  # the reader's own failure on this file
            kind, reason = failure(exc)
            answer, spent = {"left_out": [f"{reason}; skipped", kind]}, kind == "too_costly"
        if spent:
            answer["exiting"] = True  # so the parent waits for this one to end
        body = json.dumps(answer, ensure_ascii=False).encode()
        stdout.write(len(body).to_bytes(8, "big") + body)
        stdout.flush()
        if spent:
            return
