"""``runs``, ``stop``, ``restart``, ``logs`` and ``completion``: the commands people reach for first.

``stop`` and ``restart`` talk to the run's live supervisor over ``control.sock``
and wait, as ``systemctl`` does, until the change has happened (``--no-wait``
returns once the supervisor has accepted it). ``logs`` prints ``agent.log``
with its sealed segments in order, and ``-f`` follows it across rotations until
the run has no live supervisor (as ``kubectl logs -f`` ends with its container).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from ..core.rundir import (
    SUPERVISOR_LOCK,
    check_readable_run_dir,
    flock_held,
    is_run_dir,
)
from ..errors import SupervisorError

RUNS_ENV = "AGENT_SUPERVISOR_RUNS"
"""Sets the runs root that ``runs``, ``tui`` and ``demo`` use by default (else ``./runs``)."""

AGENT_LOG = "agent.log"
_FOLLOW_POLL_S = 0.2
_LIVE_CHECK_S = 1.0


def runs_root() -> Path:
    """The default runs root: ``$AGENT_SUPERVISOR_RUNS``, else ``./runs``."""
    return Path(os.environ.get(RUNS_ENV) or "runs")


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``runs``, ``stop``, ``restart``, ``logs`` and ``completion``."""
    p = sub.add_parser(
        "runs", help="list the runs under a runs root",
        description=f"List the runs under ROOT (default ${RUNS_ENV}, else ./runs): status, steps, attempts, last activity, newest first.",
    )
    p.add_argument("root", type=Path, nargs="?", default=None, metavar="ROOT")
    p.add_argument("--json", action="store_true", help="one JSON object per run, one per line")
    p.set_defaults(func=cmd_runs)

    for name, what in (("stop", "stop a run's supervisor and its agent"), ("restart", "restart a run's agent (it resumes)")):
        p = sub.add_parser(name, help=what,
                           description=f"{what[0].upper()}{what[1:]}, through its live supervisor, and wait until it has happened.")
        p.add_argument("run_dir", type=Path, metavar="RUN")
        p.add_argument("--no-wait", action="store_true", help="return once the supervisor has accepted the request")
        p.add_argument("--timeout", type=float, default=60.0, metavar="S", help="how long to wait (default 60 s)")
        p.set_defaults(func=cmd_stop if name == "stop" else cmd_restart)

    p = sub.add_parser(
        "logs", help="print (and follow) the agent's output",
        description="Print the agent's captured stdout and stderr (agent.log and its sealed segments, oldest first).",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the run's supervisor exits")
    p.add_argument("-n", "--lines", type=int, default=None, metavar="N", help="only the last N lines (then follow, with -f)")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser(
        "completion", help="print a shell completion script",
        description="Print a completion script for SHELL. Bash: agent-supervisor completion bash > "
        "~/.local/share/bash-completion/completions/agent-supervisor; zsh: into a directory on $fpath as _agent-supervisor; "
        "fish: > ~/.config/fish/completions/agent-supervisor.fish.",
    )
    p.add_argument("shell", choices=("bash", "zsh", "fish"))
    p.set_defaults(func=cmd_completion)


# runs -------------------------------------------------------------------------------------------


def cmd_runs(args: argparse.Namespace) -> int:
    from ..tui.control import list_runs
    from ..views.fmt import ago

    root: Path = args.root if args.root is not None else runs_root()
    if not root.is_dir():
        hint = "" if args.root is not None else f" (the default; set ${RUNS_ENV} or pass ROOT)"
        raise SupervisorError(f"{root}: no such directory{hint}")
    if is_run_dir(root):
        raise SupervisorError(f"{root} is a run, not a directory of runs: use 'agent-supervisor status {root}'")
    rows = list_runs(root)
    out = sys.stdout
    if args.json:
        for r in rows:
            out.write(orjson.dumps({
                "path": str(r.path), "id": r.id, "status": r.status, "live": r.live,
                "steps": int(r.steps) if r.steps.isdigit() else None,
                "attempts": int(r.attempts) if r.attempts.isdigit() else None,
                "last_activity": r.last_activity, "command": r.command,
            }).decode() + "\n")
        return 0
    if not rows:
        print(f"no runs under {root}", file=sys.stderr)
        return 0
    now = time.time()
    table = [("RUN", "STATUS", "STEPS", "ATTEMPTS", "LAST ACTIVITY", "COMMAND")]
    table += [(r.path.name, r.status, r.steps, r.attempts, ago(r.last_activity, now), r.command) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(5)]
    for row in table:
        cells = [row[i].ljust(widths[i]) for i in range(5)]
        out.write("  ".join([*cells, row[5]]).rstrip() + "\n")
    return 0


# stop, restart ----------------------------------------------------------------------------------


def _request(run_dir: Path, req: dict[str, Any]) -> dict[str, Any]:
    from ..tui.control import control_request

    return control_request(run_dir, req)


def _live(run_dir: Path) -> dict[str, Any] | None:
    """The live supervisor's status answer; ``None`` if no supervisor runs. A supervisor that holds its lock but
    did not answer (busy, or stuck) is an error: never taken for "none runs" (``stop`` would report a success)."""
    from ..supervise.control import run_status

    st = run_status(run_dir, timeout=2.0)
    if st.live:
        return st.fields
    if flock_held(run_dir / SUPERVISOR_LOCK):
        raise SupervisorError(
            f"a supervisor holds {run_dir / SUPERVISOR_LOCK} but did not answer on its control socket within 2 s "
            f"(busy, or stuck); try again, or see 'agent-supervisor status {run_dir}'"
        )
    return None


def cmd_stop(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    check_readable_run_dir(run_dir)
    if _live(run_dir) is None:
        # as `systemctl stop` on a stopped unit: the wanted state holds already, not an error
        print(f"{run_dir}: no supervisor is running; nothing to stop", file=sys.stderr)
        return 0
    _request(run_dir, {"cmd": "stop"})
    if args.no_wait:
        print(f"{run_dir}: stop requested")
        return 0
    deadline = time.monotonic() + args.timeout
    # until the supervisor lets go of supervisor.lock: its last act, after run.json says how it ended
    while flock_held(run_dir / SUPERVISOR_LOCK):
        if time.monotonic() > deadline:
            print(f"agent-supervisor: {run_dir}: the supervisor has not stopped after {args.timeout:g} s; "
                  "see 'agent-supervisor status' (it may be waiting for the agent to exit)", file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(f"{run_dir}: stopped")
    return 0


def cmd_restart(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    check_readable_run_dir(run_dir)
    before = _live(run_dir)
    if before is None:
        raise SupervisorError(
            f"no supervisor is running for {run_dir}; start one with 'agent-supervisor supervise --run-dir {run_dir} -- CMD'"
        )
    attempt = int(before.get("attempt") or 0)
    _request(run_dir, {"cmd": "restart"})
    if args.no_wait:
        print(f"{run_dir}: restart requested")
        return 0
    deadline = time.monotonic() + args.timeout
    while True:
        now = _live(run_dir)
        if now is None:
            raise SupervisorError(f"the supervisor of {run_dir} exited instead of restarting; see 'agent-supervisor status {run_dir}'")
        if int(now.get("attempt") or 0) > attempt and now.get("pid"):
            print(f"{run_dir}: restarted: attempt {now['attempt']}, pid {now['pid']}")
            return 0
        if time.monotonic() > deadline:
            print(f"agent-supervisor: {run_dir}: no new attempt after {args.timeout:g} s (state {now.get('state')}); "
                  "see 'agent-supervisor status'", file=sys.stderr)
            return 1
        time.sleep(0.1)


# logs -------------------------------------------------------------------------------------------


def log_paths(run_dir: Path) -> list[Path]:
    """``agent.NNNNNN.log`` segments in order, then ``agent.log``."""
    sealed = sorted(p for p in run_dir.glob("agent.*.log") if p.name[6:-4].isdigit())
    cur = run_dir / AGENT_LOG
    return [*sealed, cur] if cur.exists() else sealed


def _last_lines(sealed: list[Path], tail: bytes, n: int) -> list[bytes]:
    """The last ``n`` lines of the sealed segments followed by ``tail`` (older files read only while needed)."""
    out = tail.splitlines(keepends=True)[-n:] if n else []
    for p in reversed(sealed):
        if len(out) >= n:
            break
        lines = p.read_bytes().splitlines(keepends=True)
        out = lines[max(0, len(lines) - (n - len(out))) :] + out
    return out


def cmd_logs(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    check_readable_run_dir(run_dir)
    if args.lines is not None and args.lines < 0:
        raise SupervisorError(f"--lines {args.lines}: give 0 or more")
    cur = run_dir / AGENT_LOG
    paths = log_paths(run_dir)
    sealed = [p for p in paths if p != cur]
    # agent.log is read through one descriptor, which -f then goes on reading: no line lost or repeated
    f = open(cur, "rb") if cur in paths else None
    try:
        if f is None and not sealed and not args.follow:
            raise SupervisorError(f"{run_dir} has no agent.log: its agent has not run under 'agent-supervisor supervise' yet")
        out = sys.stdout.buffer
        _print_logs(sealed, f, args.lines, out)
        out.flush()
        if args.follow:
            for chunk in _follow(run_dir, cur, f):
                out.write(chunk)
                out.flush()
            f = None  # closed by the follower
    finally:
        if f is not None:
            f.close()
    return 0


def _print_logs(sealed: list[Path], f: IO[bytes] | None, lines: int | None, out: IO[bytes]) -> None:
    """The rotated logs then the current one (``f``), whole or their last ``lines`` lines."""
    if lines is not None:
        out.writelines(_last_lines(sealed, f.read() if f else b"", lines))
        return
    for p in sealed:
        with open(p, "rb") as g:
            _copy(g, out)
    if f is not None:
        _copy(f, out)


def _copy(f: IO[bytes], out: IO[bytes]) -> None:
    while chunk := f.read(1 << 20):
        out.write(chunk)


def _follow(run_dir: Path, cur: Path, f: IO[bytes] | None) -> Iterator[bytes]:
    """Yield ``agent.log``'s new bytes, across rotations, until no supervisor lives for the run.

    ``f`` is ``agent.log`` opened and read up to where printing stopped (or None).
    The open file is read to its end before a newer ``agent.log`` is opened (a
    rotation renames the file we hold, so nothing written before it is lost).
    """
    ino = os.fstat(f.fileno()).st_ino if f is not None else -1
    last_check = 0.0
    live = True
    try:
        while True:
            if f is None:
                try:
                    f = open(cur, "rb")
                except FileNotFoundError:
                    pass  # between a rotation's rename and the new file: the next poll opens it
                else:
                    ino = os.fstat(f.fileno()).st_ino
            got = False
            if f is not None:
                while chunk := f.read(1 << 16):
                    got = True
                    yield chunk
                try:
                    rotated = os.stat(cur).st_ino != ino
                except FileNotFoundError:
                    rotated = False
                if rotated:  # the rest of the old file is read: open the new one
                    f.close()
                    f = None
                    continue
            if not got:
                now = time.monotonic()
                if now - last_check >= _LIVE_CHECK_S:
                    last_check = now
                    try:
                        now_live = _live(run_dir) is not None
                    except SupervisorError:
                        now_live = True  # it lives, busy: keep following
                    was_live, live = live, now_live
                    if not live and not was_live:
                        return  # a whole check period with no supervisor and nothing new: the run is over
                time.sleep(_FOLLOW_POLL_S)
    finally:
        if f is not None:
            f.close()


# completion -------------------------------------------------------------------------------------


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    from .parser import build_parser

    parser = build_parser()
    sys.stdout.write(shtab.complete(parser, shell=args.shell))
    return 0
