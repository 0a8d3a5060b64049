"""Re-execute an agent against its journal: ``replay --verify`` (strict) and ``replay --live PATTERN`` (partial).

The agent runs as a real child process with ``AGENT_SUPERVISOR_REPLAY`` set;
its SDK serves steps from the journal, opens nothing for writing in the run
directory, and writes a report (see :mod:`supervisor.replay.session`) to a
private temporary directory. This module starts the child, reads that report,
formats it, and judges the outcome:

* exit 0: every step replayed (``--verify``), or the partial replay ran to the end (``--live``);
* exit 1: a divergence (another step at a position, other inputs, a step missing
  from the journal, a run that stops before the journal's end);
* exit 3: the agent failed for another reason (a live step raised, it crashed,
  or it wrote no report because it does not open the run with the SDK).

Like Temporal's replayer, ``--verify`` is meant for CI: run it on recorded runs
after changing the agent's code, and a non-zero exit says the new code would not
resume those runs.
"""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import orjson

from ..core import rundir
from ..core import state as state_mod
from ..core.records import preview
from ..errors import ReplayError, RunDirError
from ..supervise.process import stop_tree
from .session import ENV_REPLAY_REPORT, ReplayMode, read_report

EXIT_OK = 0
EXIT_DIVERGED = 1
EXIT_AGENT_FAILED = 3

_STOP_GRACE_S = 5.0


@dataclass
class ReplayResult:
    """The outcome of one replay: the agent's exit code, its report, and what changed on disk."""

    mode: ReplayMode
    run_dir: Path
    command: list[str]
    returncode: int
    seconds: float
    report: dict[str, Any] | None
    touched: list[str] = field(default_factory=list)
    """Files of the run directory that changed while the agent ran (its own side effects)."""

    @property
    def divergences(self) -> list[dict[str, Any]]:
        return list(self.report.get("divergences", [])) if self.report else []

    @property
    def exit_code(self) -> int:
        if self.report is None:
            return EXIT_AGENT_FAILED
        if self.divergences:
            return EXIT_DIVERGED
        if self.report.get("error") or self.returncode != 0:
            return EXIT_AGENT_FAILED
        return EXIT_OK


def _fingerprint(run_dir: Path) -> dict[str, tuple[int, int, int]]:
    """Size, mtime and inode of every file in the run directory (one level of subdirectories)."""
    out: dict[str, tuple[int, int, int]] = {}
    for base in (run_dir, run_dir / rundir.CHECKPOINTS):
        try:
            entries = list(os.scandir(base))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            if e.is_file(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                out[os.path.relpath(e.path, run_dir)] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def _child_env(run_dir: Path, mode: ReplayMode, report: Path) -> dict[str, str]:
    # an outer supervisor's variables must not leak in: the replayed agent is not supervised
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")}
    env[rundir.ENV_RUN_DIR] = str(run_dir)
    env[rundir.ENV_REPLAY] = mode.env_value()
    env[ENV_REPLAY_REPORT] = str(report)
    env[rundir.ENV_RESUME] = "1"
    return env


def recorded_command(run_dir: Path) -> tuple[list[str], Path]:
    """The command and working directory ``run.json`` recorded, for ``replay --verify`` without ``-- CMD``."""
    meta = rundir.read_run_json(run_dir)
    cmd = meta.get("command")
    if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd):
        raise ReplayError(
            f"{run_dir} records no command to re-run; give it after '--': "
            f"agent-supervisor replay {run_dir} --verify -- python agent.py"
        )
    cwd = Path(str(meta.get("cwd") or "."))
    if not cwd.is_dir():
        raise ReplayError(f"the recorded working directory {cwd} no longer exists; give the command after '--'")
    return list(cmd), cwd


def run_replay(
    run_dir: Path, mode: ReplayMode, command: list[str], *, cwd: Path | None = None, stdout: TextIO | None = None
) -> ReplayResult:
    """Run ``command`` in replay ``mode`` against ``run_dir`` and collect its report.

    The child inherits the terminal (its own output stays visible). On Ctrl-C
    the child, which shares our process group, gets the same SIGINT; we wait a
    few seconds for it, then kill it.
    """
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a run directory; replay --verify/--live needs the directory that holds journal.jsonl")
    run_dir = run_dir.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="agent-supervisor-replay-"))  # mode 0700, outside the run directory
    try:
        report_path = tmp / "report.json"
        before = _fingerprint(run_dir)
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(command, env=_child_env(run_dir, mode, report_path), cwd=cwd, stdout=stdout)
        except FileNotFoundError:
            raise ReplayError(f"cannot run {command[0]!r}: no such program; check the command after '--'") from None
        except PermissionError:
            raise ReplayError(f"cannot run {command[0]!r}: permission denied") from None
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            _stop(proc)
            raise
        seconds = time.perf_counter() - t0
        report = read_report(report_path)
        after = _fingerprint(run_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    touched = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    if report is not None and Path(str(report.get("run_dir"))) != run_dir:
        raise ReplayError(
            f"the agent replayed {report.get('run_dir')}, not {run_dir}: drop --run-dir from the command "
            "or pass the same directory to replay"
        )
    return ReplayResult(mode, run_dir, command, rc, seconds, report, touched)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the child after a Ctrl-C: a moment to exit on the terminal's SIGINT, then ``stop_tree``.

    A Ctrl-C at the terminal reaches the child too (same process group, so only
    the child is signalled); a SIGINT sent to this process alone does not, hence the SIGTERM.
    """
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        stop_tree([proc], _STOP_GRACE_S, what="replayed agent")
        proc.wait()


# --------------------------------------------------------------------------- formatting


def _show(value: Any, width: int) -> str:
    """A preview in which a string is quoted, so that an empty or blank one is visible."""
    return preview(orjson.dumps(value).decode() if isinstance(value, str) else value, width)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def format_value_diff(old: Any, new: Any, indent: str = "    ") -> list[str]:
    """Lines showing how ``old`` became ``new``: path-level changes, long texts as a unified diff."""
    lines: list[str] = []
    for c in state_mod.diff(old, new):
        where = c.pointer or "/"
        if c.op == "added":
            lines.append(f"{indent}+ {where}: {_show(c.new, 100)}")
        elif c.op == "removed":
            lines.append(f"{indent}- {where}: {_show(c.old, 100)}")
        elif isinstance(c.old, str) and isinstance(c.new, str) and ("\n" in c.old + c.new or len(c.old) + len(c.new) > 100):
            lines.append(f"{indent}~ {where}:")
            udiff = difflib.unified_diff(c.old.splitlines(), c.new.splitlines(), "recorded", "new", lineterm="", n=2)
            lines.extend(f"{indent}  {line}" for line in udiff)
        else:
            lines.append(f"{indent}~ {where}: {_show(c.old, 48)} -> {_show(c.new, 48)}")
    return lines


def format_divergence(d: dict[str, Any]) -> list[str]:
    """A divergence as the lines ``replay`` prints: position, expected, actual."""
    pos = d.get("position")
    kind = d.get("kind")
    if kind == "step":
        return [f"DIVERGED at position {pos} (seq {d.get('seq')}): expected step {d.get('expected')!r}, actual {d.get('actual')!r}"]
    if kind == "inputs":
        head = (
            f"DIVERGED at position {pos} (seq {d.get('seq')}), step {d.get('step')!r}: other inputs: "
            f"expected hash {d.get('expected')}, actual {d.get('actual')}"
        )
        if d.get("expected_inputs") is None:
            return [head, "    (the journal records only the hash of the inputs)"]
        return [head, *format_value_diff(d.get("expected_inputs"), d.get("actual_inputs"))]
    if kind == "missing":
        return [f"DIVERGED at position {pos}: expected the end of the journal, actual step {d.get('actual')!r} (not in the journal)"]
    if kind == "unfinished":
        return [f"DIVERGED at position {pos}: expected {d.get('expected')}, actual: {d.get('actual')}"]
    return [f"DIVERGED at position {pos}: {d}"]


def format_result(res: ReplayResult) -> list[str]:
    """The report a person reads: divergences or live diffs, then a one-line summary."""
    r = res.report
    if r is None:
        return [
            f"replay failed: the agent exited with code {res.returncode} without a replay report; "
            "check that it opens the run with supervisor.Run (and that nothing else ran)"
        ]
    lines: list[str] = []
    for d in r.get("divergences", []):
        lines.extend(format_divergence(d))
    for s in r.get("live", []):
        where = f"position {s.get('position')} (seq {s.get('seq')})"
        if s.get("changed"):
            lines.append(f"live step {s['step']!r} at {where}: output changed")
            lines.extend(format_value_diff(s.get("recorded_output"), s.get("new_output")))
        else:
            lines.append(f"live step {s['step']!r} at {where}: output unchanged")
    for s in r.get("new_steps", []):
        lines.append(f"live step {s['step']!r} at position {s.get('position')}: new (not in the journal): {preview(s.get('new_output'), 80)}")
    for c in r.get("input_changes", []):
        lines.append(
            f"warning: step {c.get('step')!r} at position {c.get('position')} was served from the journal "
            "although its inputs differ from the recorded ones; add it to --live to re-run it"
        )
        if c.get("expected_inputs") is not None:
            lines.extend(format_value_diff(c.get("expected_inputs"), c.get("actual_inputs")))
    if r.get("error"):
        lines.append(f"replay failed: {r['error']}")
    for name in res.touched:
        lines.append(f"warning: the agent changed {name} in the run directory during the replay (its own side effect)")
    lines.append(summary_line(res))
    return lines


def summary_line(res: ReplayResult) -> str:
    r = res.report or {}
    secs = f"{res.seconds:.2f} s"
    n_div = len(res.divergences)
    if res.mode.kind == "strict":
        checked = f"inputs checked for {r.get('inputs_checked', 0)}"
        if r.get("inputs_unchecked"):
            checked += f", {r['inputs_unchecked']} without recorded inputs"
        verdict = "replay verified" if res.exit_code == EXIT_OK else f"replay FAILED ({_plural(n_div, 'divergence')})" if n_div else "replay FAILED"
        return f"{verdict}: {r.get('replayed', 0)} of {r.get('journal_steps', '?')} steps replayed in {secs} ({checked}); no step function ran"
    live = r.get("live", [])
    changed = sum(1 for s in live if s.get("changed"))
    pats = ", ".join(repr(p) for p in res.mode.patterns)
    verdict = "partial replay" if res.exit_code == EXIT_OK else f"partial replay FAILED ({_plural(n_div, 'divergence')})" if n_div else "partial replay FAILED"
    return (
        f"{verdict}: {r.get('replayed', 0)} steps served from the journal, {len(live) + len(r.get('new_steps', []))} "
        f"run live (matching {pats}), {changed} outputs changed, in {secs}"
    )


def print_result(res: ReplayResult, out: TextIO | None = None) -> int:
    """Print the result and return the exit code for the command."""
    out = out or sys.stdout
    for line in format_result(res):
        out.write(line + "\n")
    out.flush()
    return res.exit_code
