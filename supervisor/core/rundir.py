"""The run directory: its paths, ``run.json``, permissions and atomic writes.

The layout is the public contract described in docs/run-directory.md.
Nothing here imports Textual.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ..errors import FormatError, RunDirError

FORMAT = 1
"""The run-directory format this version writes and the newest it reads."""

RUN_JSON = "run.json"
JOURNAL = "journal.jsonl"
JOURNAL_LOCK = "journal.lock"
CALLS = "llm.jsonl"
"""The model-call proxy's records (:mod:`.llm_calls`), beside the journal."""
CHECKPOINTS = "checkpoints"
SUPERVISOR_EVENTS = "supervisor.jsonl"
WORKSPACE = "workspace"
"""``RUN/workspace/``: the workspace's snapshots (objects, manifests, the index; :mod:`.workspace`)."""
AGENT_LOG = "agent.log"
SUPERVISOR_LOCK = "supervisor.lock"
CONTROL_SOCK = "control.sock"

# The environment contract between the supervisor and the agent it starts.
ENV_RUN_DIR = "AGENT_SUPERVISOR_RUN_DIR"
ENV_RUN_ID = "AGENT_SUPERVISOR_RUN_ID"
ENV_WORKSPACE = "AGENT_SUPERVISOR_WORKSPACE"
"""The run's workspace directory (absolute), set by the supervisor; the SDK takes it over its own argument."""
ENV_ATTEMPT = "AGENT_SUPERVISOR_ATTEMPT"
ENV_RESUME = "AGENT_SUPERVISOR_RESUME"
ENV_SUPERVISED = "AGENT_SUPERVISOR_PID"
ENV_REPLAY = "AGENT_SUPERVISOR_REPLAY"
"""``strict`` (every step served from the journal) or ``live:PATTERN``; set by ``replay --verify``."""

DIR_MODE = 0o700
FILE_MODE = 0o600

# Documented exit codes an agent may use (see docs/sdk.md, "Exit codes").
EXIT_ROLLBACK = 75
"""The SDK appended a rollback record; restart me with the resume flag (EX_TEMPFAIL)."""
EXIT_FAILED = 78
"""Permanent failure: do not restart me; the run directory keeps everything."""
EXIT_ABORTED = 79
"""A person aborted the run at a pause: do not restart me; nothing is lost, the run resumes when started again."""


def new_run_id() -> str:
    """A run id that sorts by creation time, e.g. ``20261129-183012-7f3a``."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex()


def new_uid() -> str:
    """``run.json``'s ``uid``: 128 random bits written once, when the run is created. Two runs of one directory
    name (``Run.open()`` names every ``agent.py`` run ``agent``), or a directory deleted and made again, never
    share it; the exporters derive trace and span ids from it."""
    return os.urandom(16).hex()


_second_cache: tuple[int, str] = (-1, "")
_ms_cache: tuple[int, str] = (-1, "")
_MS_SUFFIX = tuple(f".{i:03d}Z" for i in range(1000))


def utc_now() -> str:
    """ISO-8601 UTC time with milliseconds, as every record carries it (``2026-11-29T18:30:12.345Z``).

    Called for every journal line: the string of the current millisecond and the
    ``strftime`` of the current second are cached (tuples: a thread reads a whole pair or the other).
    """
    global _second_cache, _ms_cache
    ms = int(time.time() * 1000)
    c = _ms_cache
    if c[0] == ms:
        return c[1]
    sec = ms // 1000
    s = _second_cache
    if s[0] != sec:  # strftime costs microseconds: once a second is enough
        s = _second_cache = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    out = s[1] + _MS_SUFFIX[ms - sec * 1000]
    _ms_cache = (ms, out)
    return out


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_run_file(path: Path | str, flags: int, mode: int = FILE_MODE, *, owner: bool = True) -> int:
    """Open a file of a run directory: never through a symbolic link, never another user's file.

    A link named ``journal.jsonl`` must not make the tool truncate, move aside or
    append to the file it points to, and a file someone else owns is not ours to
    read or write: both are refused with one line (:class:`RunDirError`), for
    writers and readers alike. So is anything that is not a regular file (a FIFO, a
    directory, a device, a socket): it is opened non-blocking and checked with
    ``fstat`` before anything reads or writes it, so a FIFO never blocks the opener.
    ``FileNotFoundError`` passes through. ``owner=False``: the caller checks the owner
    itself (with :func:`check_owner` and its own ``fstat``).
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunDirError(
                f"{path} is a symbolic link: run files are never opened through a link (it could point anywhere); "
                "replace it with the file itself"
            ) from None
        if e.errno in (errno.EISDIR, errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):  # a directory, FIFO, socket
            with contextlib.suppress(OSError):
                check_regular(path, os.lstat(path))
        raise
    try:
        st = os.fstat(fd)
        check_regular(path, st)
        if not flags & os.O_NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        if owner:
            check_owner(fd, path, st)
    except BaseException:
        os.close(fd)
        raise
    return fd


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def check_regular(path: Path | str, st: os.stat_result) -> None:
    """Refuse a run file that is not a regular file (one line, :class:`RunDirError`).

    Reading a FIFO would wait for a writer forever, and a device or a socket is no journal."""
    if stat.S_ISREG(st.st_mode):
        return
    kind = next((name for test, name in _FILE_KINDS if test(st.st_mode)), "not a regular file")
    raise RunDirError(
        f"{path} is {kind}, not a regular file: run files are only read and written as regular files; "
        "move it aside and put the file itself in its place"
    )


def check_owner(fd: int, path: Path | str, st: os.stat_result | None = None) -> None:
    """Refuse a run file that another user owns (one line, :class:`RunDirError`)."""
    uid = (st or os.fstat(fd)).st_uid
    if uid != os.geteuid():
        raise RunDirError(
            f"{path} is owned by uid {uid}, not by you (uid {os.geteuid()}): run files are read and written "
            "only by their owner; run as that user, or make the file yours if you trust it"
        )


def read_run_file(path: Path | str) -> bytes:
    """The whole content of a run file, opened as :func:`open_run_file` does."""
    fd = open_run_file(path, os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def datasync_function() -> Callable[[int], None]:
    """``os.fdatasync`` where the platform has it, else ``os.fsync`` (macOS has no ``fdatasync``).

    Looked up when called (a writer calls it once, when it is created), not at import:
    a test that hides ``os.fdatasync`` gets the fallback.
    """
    sync: Callable[[int], None] | None = getattr(os, "fdatasync", None)
    return sync if sync is not None else os.fsync


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a write may be partial)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def next_sealed(directory: Path, stem: str, suffix: str) -> Path:
    """The name for the next sealed file of a rotated log: ``<stem>.NNNNNN<suffix>``, one past the highest."""
    pattern = re.compile(rf"^{re.escape(stem)}\.(\d{{6,}}){re.escape(suffix)}$")
    existing = [int(m.group(1)) for n in os.listdir(directory) if (m := pattern.match(n))]
    return directory / f"{stem}.{max(existing, default=0) + 1:06d}{suffix}"


def atomic_write(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a mix.

    Temporary file in the same directory, fsync, ``os.replace``, fsync the directory.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(3).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (mode 0700) and its parents if needed; refuse a file in its place."""
    if path.exists() and not path.is_dir():
        raise RunDirError(f"{path} is a file, not a run directory: pass a directory path")
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    except PermissionError as e:
        raise RunDirError(f"cannot create {path}: permission denied; choose a writable location") from e
    except OSError as e:
        raise RunDirError(f"cannot create {path}: {e.strerror}") from e
    return path


def check_readable_run_dir(path: Path) -> Path:
    """Validate a run directory given on the command line, with an actionable message."""
    if not path.exists():
        raise RunDirError(f"{path}: no such run directory; list runs with 'ls runs/' or pass the right path")
    if not path.is_dir():  # a file, or a FIFO, a socket... named as the journal: refused by check_run_files
        if path.suffix == ".jsonl":
            check_run_files(path.parent, [path.name])
            return path
        raise RunDirError(f"{path} is a file, not a run directory: pass the directory that holds journal.jsonl")
    if not os.access(path, os.R_OK | os.X_OK):
        raise RunDirError(f"{path}: permission denied; run as the user who owns the run directory")
    if not is_run_dir(path):
        # refused before anything is read or written: a typo must not create journal files in a stray directory
        raise RunDirError(
            f"{path} is not a run directory: it holds no {JOURNAL}, journal segment or {RUN_JSON}; "
            "pass a run directory such as runs/<run-id>"
        )
    read_run_json(path)  # refuses a newer format
    check_run_files(path, os.listdir(path))
    return path


_CHECKED = frozenset((JOURNAL, JOURNAL_LOCK, SUPERVISOR_EVENTS, RUN_JSON, CALLS, AGENT_LOG, SUPERVISOR_LOCK))


def check_run_files(directory: Path, names: list[str]) -> None:
    """Refuse, before any command reads or writes them, run files that are symbolic links, another user's,
    or not regular files (a FIFO, a directory, a device, a socket): :func:`open_run_file` on each."""
    for n in names:
        if n in _CHECKED or (n.startswith("journal.") and n.endswith(".jsonl")):
            try:
                fd = open_run_file(directory / n, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block
            except FileNotFoundError:
                continue  # a rotation renamed it since the listing
            os.close(fd)


def is_run_dir(path: Path) -> bool:
    """A directory that holds a journal (``journal.jsonl`` or a sealed ``journal.NNNNNN.jsonl``) or ``run.json``."""
    try:
        names = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return False
    return any(n in (JOURNAL, RUN_JSON, CALLS) or (n.startswith("journal.") and n.endswith(".jsonl")) for n in names)


def read_run_json(run_dir: Path) -> dict[str, Any]:
    """``run.json`` as a dict; ``{"format": 0}`` for a bare journal written by another program."""
    p = run_dir / RUN_JSON
    try:
        data = read_run_file(p)
    except FileNotFoundError:
        return {"format": 0}
    except PermissionError as e:
        raise RunDirError(f"{p}: permission denied; run as the user who owns the run directory") from e
    try:
        meta = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise RunDirError(f"{p} is not valid JSON ({e}); restore it or move it aside to open the journal alone") from e
    if not isinstance(meta, dict):
        raise RunDirError(f"{p} is not a JSON object; restore it or move it aside to open the journal alone")
    fmt = meta.get("format", 0)
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 0:
        raise RunDirError(
            f'{p}: "format" is {fmt!r}, not a format number (this version writes {FORMAT}); '
            "restore run.json or move it aside to open the journal alone"
        )
    if fmt > FORMAT:
        raise FormatError(
            f"{run_dir} has run-directory format {fmt}, newer than this version reads ({FORMAT}); "
            "upgrade agent-supervisor to open it"
        )
    _check_fields(p, meta)
    return meta


def _is_str(v: Any) -> bool:
    return v is None or isinstance(v, str)


_RUN_JSON_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "id": (_is_str, "a string (the run id)"),
    "uid": (_is_str, "a string (the run's unique id, 32 hex digits)"),
    "created": (_is_str, "an ISO-8601 time string"),
    "ended": (_is_str, "an ISO-8601 time string or null"),
    "status": (_is_str, 'a string such as "running" or "succeeded"'),
    "reason": (_is_str, "a string or null"),
    "cwd": (_is_str, "a directory path (a string)"),
    "command": (lambda v: v is None or (isinstance(v, list) and all(isinstance(a, str) for a in v)),
                'a list of strings (the agent\'s argv, e.g. ["python", "agent.py"])'),
    "attempts": (lambda v: v is None or (type(v) is int and v >= 0), "a whole number of attempts, 0 or more"),
    "supervisor_pid": (lambda v: v is None or (type(v) is int and v > 0), "a process id (a positive whole number) or null"),
    "llm_proxy": (lambda v: v is None or isinstance(v, dict), 'an object such as {"match": "identity"} or null'),
    "workspace": (lambda v: v is None or isinstance(v, dict), 'an object such as {"root": "/abs/path"} or null'),
    "env": (lambda v: v is None or (isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())),
            'an object of strings such as {"MODEL": "small"} (what the agent\'s environment gets) or null'),
    "rerun": (lambda v: v is None or (isinstance(v, list) and all(isinstance(a, str) for a in v)),
              'a list of step-name globs such as ["llm:*"] or null'),
}
"""Every field of ``run.json`` the code reads, with what it must hold (``null`` stands for an absent field)."""


def _check_fields(p: Path, meta: dict[str, Any]) -> None:
    """Refuse a field of ``run.json`` that holds the wrong type, naming the file, the field, its value and the
    type it should have (one line, :class:`RunDirError`), before any code uses it."""
    for key, (ok, should) in _RUN_JSON_FIELDS.items():
        v = meta.get(key)
        if not ok(v):
            held = orjson.dumps(v, default=repr).decode()
            held = held if len(held) <= 60 else held[:59] + "\u2026"
            raise RunDirError(
                f'{p}: "{key}" is {held}, not {should}; correct the field or remove it '
                "(or restore run.json from a backup)"
            )


def write_run_json(run_dir: Path, meta: dict[str, Any]) -> None:
    """Replace ``run.json`` atomically."""
    meta.setdefault("format", FORMAT)
    atomic_write(run_dir / RUN_JSON, orjson.dumps(meta, option=orjson.OPT_INDENT_2) + b"\n")


def update_run_json(run_dir: Path, **changes: Any) -> dict[str, Any]:
    """Read, change and atomically rewrite ``run.json``; creates it if missing."""
    meta = read_run_json(run_dir)
    if meta.get("format", 0) == 0 and not (run_dir / RUN_JSON).exists():
        meta = {"id": run_dir.name, "uid": new_uid(), "created": utc_now(), "format": FORMAT}
    meta.update(changes)
    meta["format"] = FORMAT
    write_run_json(run_dir, meta)
    return meta


def flock_held(path: Path) -> bool:
    """Whether a process holds an exclusive ``flock`` on ``path`` right now.

    A shared, non-blocking probe: it never waits and is released before returning, so it
    takes nothing the holder (a journal writer, a supervisor) would need.
    """
    try:
        fd = open_run_file(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
