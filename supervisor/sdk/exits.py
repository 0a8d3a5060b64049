"""How the SDK ends an agent, and the run-directory checks before it opens one: one-line errors that say
which file and what to do, exit 2 for a run directory that cannot be used, exit codes from any thread."""

from __future__ import annotations

import errno
import os
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn, cast

from ..core import rundir
from ..errors import RunDirError, SupervisorError

EXIT_ERROR = 2
"""Exit code of an agent whose run directory could not be opened or written: the error is one line on
stderr, as for the command line's user errors. For the supervisor it is a crash like any other."""


def exiting(e: SupervisorError, code: int) -> SupervisorError:
    """Print ``e`` on one line and return it as an exception that is both its own type and ``SystemExit(code)``.

    An agent can still catch it as the error it is (``except JournalLockedError``);
    if nothing does, the interpreter ends with ``code`` and prints no traceback.
    """
    print(f"agent-supervisor: {e}", file=sys.stderr)
    cls = _exiting_type(type(e))
    x: Any = cls.__new__(cls, *e.args)
    x.__dict__.update(e.__dict__)
    x.args = e.args
    x.code = code
    return cast(SupervisorError, x)


_EXITING: dict[type[SupervisorError], type[SupervisorError]] = {}


def _exiting_type(cls: type[SupervisorError]) -> type[SupervisorError]:
    """``cls`` and ``SystemExit`` in one class, under the name of ``cls`` (one per error class)."""
    t = _EXITING.get(cls)
    if t is None:
        ns = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        t = _EXITING[cls] = type(cls.__name__, (cls, SystemExit), ns)
    return t


def check_run_files(path: Path) -> None:
    """Refuse a directory where a run file belongs, naming it (the OS error would not say which); then, before
    anything is written, any run file that is not a regular file (a FIFO, a socket), a link or another user's
    (:func:`rundir.check_run_files`)."""
    for name in (rundir.RUN_JSON, rundir.JOURNAL, rundir.JOURNAL_LOCK):
        p = path / name
        if p.is_dir() and not p.is_symlink():
            raise RunDirError(f"{p} is a directory, where the run keeps a file: move it aside (mv {p} {p}.bak) and run again")
    try:
        names = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # created (or refused) by Run
    rundir.check_run_files(path, [n for n in names if n != rundir.AGENT_LOG])  # agent.log is the supervisor's


def check_writable(path: Path) -> None:
    """Refuse an existing run directory the agent cannot write (it would fail later, at a checkpoint or at exit)."""
    try:
        st = os.statvfs(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # created (or refused) by Run
    if st.f_flag & os.ST_RDONLY:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def _lock_holder(lock: Path) -> int | None:
    """The pid of the process holding the ``flock`` on ``lock``, from ``/proc/locks`` (Linux); ``None`` if unknown."""
    try:
        st = os.stat(lock)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == dev and parts[4].isdigit():
            return int(parts[4])
    return None


def locked_message(path: Path) -> str:
    """Which run is locked and by whom (the pid; not its command line, which may hold a secret)."""
    pid = _lock_holder(path / rundir.JOURNAL_LOCK)
    who = "another process" if pid is None else f"another process (pid {pid}, see 'ps -p {pid}')"
    return (
        f"{who} is writing the journal of {path}; stop it first, or give this agent another run directory "
        "(two agents on one run would interleave their steps)"
    )


_OS_HINTS = {
    errno.EROFS: "the file system is read-only; give the agent a run directory on a writable file system",
    errno.EACCES: "permission denied; run the agent as the user who owns the run directory, or give it one it can write",
    errno.EPERM: "operation not permitted (an immutable file or directory?); give the agent a run directory it can write",
    errno.ENOSPC: "no space left on the device; free some space and run the agent again (it resumes)",
    errno.EDQUOT: "disk quota exceeded; free some space and run the agent again (it resumes)",
    errno.EISDIR: "a directory where the run keeps a file; move it aside and run again",
    errno.ENOTDIR: "a file where the run keeps a directory; move it aside and run again",
}


def os_error(run_dir: Path, e: OSError) -> RunDirError:
    """An OS error on a run directory as a one-line error that says which file, what went wrong and what to do."""
    hint = _OS_HINTS.get(e.errno or 0) or f"{e.strerror or e}; check the path and its permissions"
    where = f" {e.filename}:" if e.filename and str(e.filename) != str(run_dir) else ""
    return RunDirError(f"cannot use the run directory {run_dir}:{where} {hint}")


def default_run_dir() -> Path:
    """``./runs/<script name>``: the same directory each time, so ``python agent.py`` twice resumes."""
    main = sys.modules.get("__main__")
    stem = Path(getattr(main, "__file__", None) or "agent").stem
    return Path("runs") / stem


def exit_agent(message: str, code: int) -> NoReturn:
    """Print ``message`` and end the agent with ``code``: ``SystemExit`` in the main thread; from another
    thread the whole process, at once (the journal is closed: what follows could not be recorded)."""
    print(message, file=sys.stderr)
    if threading.current_thread() is threading.main_thread():
        raise SystemExit(code)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass  # closed or broken: nothing more can be said there
    os._exit(code)
