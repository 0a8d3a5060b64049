"""``replay`` (TUI, ``--verify``, ``--live``) and ``fork``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ..core import history as history_mod
from ..core.fork import fork
from ..core.rundir import check_readable_run_dir
from ..errors import SupervisorError
from ..replay.runner import print_result, recorded_command, result_json, result_junit, run_replay
from ..replay.session import ReplayMode
from .inspect_cmds import resolve_point

_REPLAY_EPILOG = """\
modes:
  (no flag)          open the TUI over the run, read-only (time travel)
  --verify -- CMD    re-run CMD with every step served from the journal; no step function runs.
                     Exit 0 if it replays cleanly, 1 on a divergence (other step, other inputs,
                     a step missing from the journal), 3 if the agent failed otherwise.
  --live PAT -- CMD  run the steps whose names match PAT (fnmatch glob: * ? [seq]; repeatable)
                     live and serve the others; print how each live step's output changed.
Without '-- CMD', the command and working directory recorded in run.json are used
(a recorded 'python' is the interpreter that runs agent-supervisor).
A replay writes nothing in RUN_DIR: the agent runs on a scratch copy of it (the
arguments that name RUN_DIR are pointed at the copy), and a replay fails (exit 3)
if the original changed or the agent reported no replay (it does not use the SDK
or the replay protocol: see docs/replay-fork.md).
"""


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``replay`` and ``fork``."""
    p = sub.add_parser(
        "replay",
        help="time-travel a run in the TUI, or re-execute an agent against its journal",
        description="Replay a finished or crashed run: in the TUI, or by re-executing the agent against its journal.",
        epilog=_REPLAY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory (or, for the TUI, a bare journal .jsonl)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--verify", action="store_true", help="strict deterministic re-execution (for CI)")
    mode.add_argument("--live", action="append", metavar="PATTERN", help="run matching steps live (fnmatch glob)")
    p.add_argument("--json", action="store_true", help="with --verify/--live: print the result as one JSON object")
    p.add_argument("--junit", type=Path, metavar="FILE", help="with --verify/--live: also write the result as JUnit XML to FILE")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD", help="the agent's command")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser(
        "fork",
        help="copy a run's effective history up to a record into a new run directory",
        description=(
            "Make a new run directory whose journal is the effective history of RUN_DIR up to SEQ "
            "(re-numbered from 0; each record keeps origin_seq/origin_id), with the state as of SEQ "
            "as a checkpoint named 'fork' and a fork record naming its origin. RUN_DIR is not changed. "
            "When RUN_DIR has a workspace, the fork gets its own: the files as of SEQ in a new directory "
            "(the original's workspace is never written). "
            "Run or supervise the agent on the new directory to continue live from there."
        ),
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--at", required=True, metavar="SEQ", help="a record's seq, a checkpoint name, or 'end'")
    p.add_argument("--to", type=Path, metavar="NEW_DIR", help="where to create the fork (default: RUN_DIR-fork-SEQ beside it)")
    p.add_argument(
        "--workspace", type=Path, metavar="PATH",
        help="where the fork's files go, a new or empty directory (default: NEW_DIR.workspace beside the fork; "
        "see docs/workspace.md)",
    )
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="re-run from here with a change: the fork's agent gets this environment variable (repeatable); "
                   "the fork is started under supervise, then the compare command is printed")
    p.add_argument("--live", action="append", default=[], metavar="GLOB",
                   help="also run again the copied steps whose names match (fnmatch, repeatable), as replay --live "
                   "does; starts the fork as --env does")
    p.add_argument("--json", action="store_true", help="print the fork's path and origin as one JSON object")
    p.set_defaults(func=cmd_fork)


_FLAGS = ("--verify", "--json")
"""The options without a value that may come before the agent's command."""
_VALUED: dict[str, Callable[[argparse.Namespace, str], None]] = {
    "--live": lambda a, v: setattr(a, "live", [*(a.live or []), v]),
    "--junit": lambda a, v: setattr(a, "junit", Path(v)),
}
"""The options with a value (``--live STEP``, ``--live=STEP``) that may come before it."""


def _split_command(args: argparse.Namespace) -> list[str]:
    """Take the agent's command (after ``--``) from the remainder, and the options written before it.

    argparse hands everything after RUN_DIR to the remainder, options included,
    so ``replay RUN --verify -- python agent.py`` is split here.
    """
    rest = list(args.command or [])
    if "--" in rest:
        i = rest.index("--")
        opts, cmd = rest[:i], rest[i + 1 :]
    elif rest and not rest[0].startswith("-"):
        opts, cmd = [], rest  # argparse already dropped a '--' that came right after RUN_DIR
    else:
        opts, cmd = rest, []
    i = 0
    while i < len(opts):
        o = opts[i]
        name, eq, value = o.partition("=")
        if o in _FLAGS:
            setattr(args, o[2:], True)
        elif eq and name in _VALUED:
            _VALUED[name](args, value)
        elif o in _VALUED and i + 1 < len(opts):
            _VALUED[o](args, opts[i + 1])
            i += 1
        else:
            raise SupervisorError(
                f"unexpected {o!r}: put the agent's command after '--', e.g. "
                f"agent-supervisor replay {args.run_dir} --verify -- python agent.py"
            )
        i += 1
    if args.verify and args.live:
        raise SupervisorError("--verify and --live exclude each other: --verify serves every step, --live runs some")
    return cmd


def cmd_replay(args: argparse.Namespace) -> int:
    check_readable_run_dir(args.run_dir)
    cmd = _split_command(args)
    if not args.verify and not args.live:
        if cmd:
            raise SupervisorError("a command after '--' needs --verify or --live; without them replay opens the TUI")
        if args.json or args.junit:
            raise SupervisorError("--json and --junit report a re-execution: add --verify (or --live PATTERN)")
        return _open_tui(args.run_dir)
    if args.junit is not None and (args.junit.is_dir() or not args.junit.parent.is_dir()):
        raise SupervisorError(f"--junit {args.junit}: give a file path in an existing directory")
    mode = ReplayMode("strict") if args.verify else ReplayMode("live", tuple(_patterns(args.live)))
    cwd = None
    if not cmd:
        cmd, cwd = recorded_command(args.run_dir)
        print(f"replaying with the recorded command: {' '.join(cmd)} (in {cwd})", file=sys.stderr)
    # the agent's own output goes to stderr, so stdout carries only the verdict (easy to grep in CI)
    res = run_replay(args.run_dir, mode, cmd, cwd=cwd, stdout=sys.stderr)
    if args.junit is not None:
        args.junit.write_text(result_junit(res), encoding="utf-8")
    if args.json:
        sys.stdout.write(orjson.dumps(result_json(res), option=orjson.OPT_INDENT_2).decode() + "\n")
        return res.exit_code
    return print_result(res)


def _patterns(values: list[str]) -> list[str]:
    pats = [v for v in values if v.strip()]
    if not pats or any("\n" in p for p in pats):
        raise SupervisorError("--live needs a step-name pattern such as 'summarize' or 'search:*' (one line each)")
    return pats


def _open_tui(path: Path) -> int:
    # imported here: the core (and `replay --verify` in CI) never needs Textual
    try:
        from ..tui.app import run_tui
    except ModuleNotFoundError as e:
        if e.name and (e.name.startswith("supervisor.tui") or e.name.startswith("textual")):
            raise SupervisorError(f"the replay TUI is not available ({e}); use --verify or --live, or 'agent-supervisor log'") from None
        raise
    return int(run_tui(path, replay=True) or 0)


def cmd_fork(args: argparse.Namespace) -> int:
    check_readable_run_dir(args.run_dir)
    env = _env_pairs(args.env)
    h = history_mod.load(args.run_dir)
    seq = resolve_point(h, args.at)
    if seq < 0:
        raise SupervisorError(f"{args.run_dir} has no records to fork")
    new = fork(args.run_dir, seq, args.to, history=h, workspace=args.workspace)
    if env or args.live:
        return _start_changed(args, new, seq, env)
    files = _fork_files(new)
    if args.json:
        out = {"fork": str(new), "origin": str(args.run_dir), "seq": seq}
        if files is not None:
            out["workspace"], out["files"] = str(files[0]), files[1]
        print(orjson.dumps(out).decode())
        return 0
    print(f"forked {args.run_dir} at seq {seq} into {new}")
    if files is not None:
        root, n = files
        held = f"the original's files as of seq {seq}: {n} file{'s' if n != 1 else ''}" if n is not None else (
            "no files: the original has no snapshot as of that seq"
        )
        print(f"its workspace: {root} ({held}; the original's workspace is not touched)")
    print(f"continue it live with: agent-supervisor supervise --run-dir {new} [-- CMD]   (without CMD: the recorded command)")
    return 0


def _env_pairs(pairs: list[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` as a dict, each checked (before anything is written)."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise SupervisorError(f"--env {pair!r}: give KEY=VALUE with KEY a variable name, e.g. --env MODEL=small")
        env[key] = value
    return env


def _start_changed(args: argparse.Namespace, new: Path, seq: int, env: dict[str, str]) -> int:
    """"Re-run from here with a change": the change in the fork's ``run.json`` (so every restart keeps it), the fork
    run under ``supervise`` to its end here, then the command that compares it with its origin."""
    import subprocess

    from ..core import rundir

    meta = rundir.read_run_json(new)
    changes: dict[str, Any] = {}
    if env:
        changes["env"] = {**(meta.get("env") or {}), **env}
    if args.live:
        changes["rerun"] = list(args.live)
    rundir.update_run_json(new, **changes)
    what = ", ".join([*(f"{k}={v}" for k, v in env.items()), *(f"--live {g}" for g in args.live)])
    print(f"forked {args.run_dir} at seq {seq} into {new} with {what}; running it under supervise", flush=True)
    rc = subprocess.call([sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(new)])
    print(f"the fork ended (exit {rc}); compare it with its origin:\n"
          f"  agent-supervisor compare {args.run_dir} {new}")
    return rc


def _fork_files(new: Path) -> tuple[Path, int | None] | None:
    """The fork's workspace and how many files it was given (``None``: none, no snapshot); ``None``: no workspace."""
    from ..core import workspace  # only a fork reads it: the other commands start without it

    settings = workspace.settings_of(new)
    if settings is None:
        return None
    made = [r for r in workspace.Store(new).index() if r.for_ == "fork"]
    return settings.root, (made[-1].files if made else None)
