"""``tui`` and ``demo``: the Textual dashboard, and the supervised sample agent opened in it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import rundir
from ..errors import SupervisorError

if TYPE_CHECKING:
    import argparse

# ``tui RUN`` starts without argparse (``main._tui_args``): ``ops_cmds`` (which imports it) is imported where used

DEMO_AGENT = "supervisor.demo_agent"
"""The sample agent, a module of the package: the demo works from any install, not only a source checkout."""


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``tui`` and ``demo``."""
    from .ops_cmds import RUNS_ENV

    p = sub.add_parser(
        "tui",
        help="open the dashboard on a run or a directory of runs",
        description="Open the Textual dashboard on a run directory, a bare journal .jsonl, or a runs root (default ./runs).",
    )
    p.add_argument("path", type=Path, nargs="?", default=None, metavar="RUN_DIR | RUNS_ROOT",
                   help=f"default ${RUNS_ENV}, else ./runs")
    p.add_argument("--compare", type=Path, metavar="RUN_B", default=None,
                   help="open the compare view of RUN_DIR against RUN_B (agent-supervisor compare, step by step)")
    p.set_defaults(func=cmd_tui)

    p = sub.add_parser(
        "demo",
        help="start the supervised sample agent (it crashes once and resumes) and open the dashboard",
        description=(
            "Start the sample research agent under the supervisor in a new run directory under ./runs "
            "(it crashes once in search:q2 and is resumed), and open the dashboard on it. "
            "Quitting the dashboard stops the demo's supervisor; the run directory stays."
        ),
    )
    p.add_argument("--runs-root", type=Path, default=None, help=f"where to create the run (default ${RUNS_ENV}, else ./runs)")
    p.add_argument("--step-delay", type=float, default=0.4, help="seconds each step of the sample agent takes")
    p.add_argument("--keep-running", action="store_true", help="leave the supervisor running when the dashboard quits")
    p.add_argument("--no-tui", action="store_true",
                   help="headless: run the supervised demo in this terminal (its progress and the agent's output), no dashboard")
    p.set_defaults(func=cmd_demo)


def cmd_tui(args: argparse.Namespace) -> int:
    from ..tui.gc_pause import pause_gc, resume_gc

    pause_gc()  # from here, not from run_tui: before Textual and the dashboard are imported (resumed at the first frame)
    try:
        from ..tui.app import run_tui

        if getattr(args, "compare", None) is not None:
            if args.path is None:
                raise SupervisorError("tui --compare RUN_B needs RUN_A first: agent-supervisor tui RUN_A --compare RUN_B")
            return run_tui(args.path, compare=args.compare)
        if args.path is not None:
            return run_tui(args.path)
    except BaseException:
        resume_gc()
        raise
    resume_gc()  # no path: a runs root (it pauses again if it starts)
    from .ops_cmds import RUNS_ENV, runs_root

    path = runs_root()
    if not path.exists():
        raise SupervisorError(
            f"no runs root {path} here (the default: ${RUNS_ENV}, else ./runs): pass a run directory, "
            "or start one with 'agent-supervisor demo'"
        )
    return run_tui(path)


def demo_command(run_dir: Path, step_delay: float = 0.4, *, quiet: bool = True) -> list[str]:
    """The exact supervisor command line the demo starts (``quiet``: without the supervisor's progress lines)."""
    return [
        sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run_dir), *(["-q"] if quiet else []), "--",
        sys.executable, "-m", DEMO_AGENT, "--crash-in", "search:q2", "--step-delay", str(step_delay),
    ]


def start_demo(runs_root: Path, step_delay: float = 0.4) -> tuple[subprocess.Popen[bytes], Path]:
    """Start the supervised sample agent detached (own session, stdin /dev/null, output to a file)."""
    rundir.ensure_dir(runs_root)
    run_dir = runs_root / rundir.new_run_id()
    rundir.ensure_dir(run_dir)
    out_path = runs_root / f".{run_dir.name}.demo-output.log"
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, rundir.FILE_MODE)
    try:
        proc = subprocess.Popen(
            demo_command(run_dir, step_delay), stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True,
        )
    finally:
        os.close(fd)
    # wait (briefly) for the supervisor to create its files, so the dashboard opens on a live run
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and proc.poll() is None:
        if (run_dir / rundir.JOURNAL).exists() or (run_dir / rundir.SUPERVISOR_EVENTS).exists():
            break
        time.sleep(0.02)
    if proc.poll() not in (None, 0):
        raise SupervisorError(f"the demo supervisor exited with code {proc.returncode}; see {out_path}")
    return proc, run_dir


def stop_demo(proc: subprocess.Popen[bytes], run_dir: Path, timeout: float = 10.0) -> None:
    """Stop the demo's supervisor: ask it through the socket, then ``stop_tree`` (SIGTERM, 5 s, SIGKILL)."""
    if proc.poll() is not None:
        return
    try:
        from ..supervise.control import ControlClient

        ControlClient(run_dir, timeout=2.0).request({"cmd": "stop"})
    except (SupervisorError, OSError):
        pass  # fall through to signals: the process may not have opened its socket yet
    try:
        proc.wait(timeout)
        return
    except subprocess.TimeoutExpired:
        pass  # it did not stop on request: stop_tree below signals it
    from ..supervise.process import stop_tree

    # the demo's supervisor leads its own session (start_new_session): signal its whole group
    stop_tree([proc], 5.0, pgid=proc.pid, what="demo supervisor")
    proc.wait()


def cmd_demo(args: argparse.Namespace) -> int:
    from .ops_cmds import runs_root

    root = args.runs_root if args.runs_root is not None else runs_root()
    if args.no_tui:
        run_dir = rundir.ensure_dir(rundir.ensure_dir(root) / rundir.new_run_id())
        print(f"demo run: {run_dir}", file=sys.stderr)
        proc = subprocess.Popen(demo_command(run_dir, args.step_delay, quiet=False), stdin=subprocess.DEVNULL)
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            # Ctrl-C reached the supervisor too (one process group): let it stop the agent its way
            code = proc.wait()
        print(f"the run stays in {run_dir}; open it with 'agent-supervisor tui {run_dir}'", file=sys.stderr)
        return code

    from ..tui.app import make_app

    proc, run_dir = start_demo(root, args.step_delay)
    print(f"demo run: {run_dir}", file=sys.stderr)
    try:
        app = make_app(run_dir)
        code = int(app.run() or 0)
    finally:
        if not args.keep_running:
            stop_demo(proc, run_dir)
    print(f"the run stays in {run_dir}; open it again with 'agent-supervisor tui {run_dir}'", file=sys.stderr)
    return code
