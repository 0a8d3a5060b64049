"""Re-execute an agent against its journal: ``replay --verify`` (strict) and ``replay --live PATTERN`` (partial).

The agent runs as a real child process with ``AGENT_SUPERVISOR_REPLAY`` set,
against a scratch copy of the run directory in a private temporary directory:
a replay never writes into the run directory, whatever the agent does (an
agent that does not use the SDK would run its real work and append to the
journal it is given). Its SDK serves steps from the journal and writes a report
(see :mod:`supervisor.replay.session`; the protocol is in docs/replay-fork.md) to that
temporary directory. This module copies the run, starts the child, reads the
report, checks that the original is unchanged byte for byte, formats the
result, and judges the outcome:

* exit 0: every step replayed (``--verify``), or the partial replay ran to the end (``--live``);
* exit 1: a divergence (another step at a position, other inputs, a step missing
  from the journal, a run that stops before the journal's end);
* exit 3: the agent failed for another reason (a live step raised, it crashed,
  it wrote no report because it does not use the SDK or the replay protocol),
  or the original run directory changed while the agent ran.

A run whose model calls the proxy recorded (``llm.jsonl``) is verified through it: ``--verify`` starts an
:class:`~supervisor.supervise.llm_proxy.LlmProxy` that is not live (``live=False``: a call without a recorded
answer is refused with 409, none goes upstream) on a private copy of ``llm.jsonl`` and the journal files (its
``served`` notes go there, never into the run directory) and points the agent at it with the base-URL
variables. The first call that matched no record is a divergence (kind ``llm``, exit 1); otherwise the result
says how many calls were served. An agent that writes no replay report (it does not use the SDK: the proxy is
its only link to the run) is judged by its calls: verified if it exited 0 and was served its calls.

Like Temporal's replayer, ``--verify`` is meant for CI: run it on recorded runs
after changing the agent's code, and a non-zero exit says the new code would not
resume those runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ..core import llm_calls, rundir
from ..core.command import portable_program, recorded_cwd, retarget_command
from ..core.records import preview
from ..core.redact import argv_is_redacted
from ..errors import ReplayError, RunDirError, SupervisorError
from ..supervise.process import stop_tree
from ..views.value_diff import format_value_diff
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
    """Files the agent changed in its scratch copy of the run directory (its own side effects; the original has them not)."""
    original_changed: list[str] = field(default_factory=list)
    """Files of the original run directory that changed while the agent ran: a failed replay."""
    notes: list[str] = field(default_factory=list)
    """What the runner changed in the command (a run directory argument pointed at the scratch copy)."""
    report_problem: str | None = None
    """Why the report the agent wrote could not be used (not JSON, not the protocol's shape)."""
    llm: dict[str, Any] | None = None
    """The proxied model calls (``--verify`` of a run with ``llm.jsonl``): ``recorded`` (successful calls of the
    effective history), ``served`` (answered from them), ``mismatch`` (the first call that matched none, or ``None``)."""

    @property
    def divergences(self) -> list[dict[str, Any]]:
        out = list(self.report.get("divergences", [])) if self.report else []
        if self.llm is not None and self.llm.get("mismatch"):
            out.append({"kind": "llm", "position": self.llm["served"], **self.llm["mismatch"]})
        return out

    @property
    def exit_code(self) -> int:
        if self.original_changed:
            return EXIT_AGENT_FAILED
        if self.report is None:  # a proxied agent without the SDK: judged by its calls
            if self.llm is None or self.report_problem:
                return EXIT_AGENT_FAILED
            if self.divergences:
                return EXIT_DIVERGED
            return EXIT_OK if self.returncode == 0 and (self.llm["served"] or not self.llm["recorded"]) else EXIT_AGENT_FAILED
        if self.divergences:
            return EXIT_DIVERGED
        if self.report.get("error") or self.returncode != 0:
            return EXIT_AGENT_FAILED
        return EXIT_OK


# --------------------------------------------------------------------------- the scratch copy

_CHUNK = 1 << 20
_Snapshot = dict[str, str]
"""Relative path -> ``sha256:...`` for a file, ``dir`` for a directory, ``link:TARGET``, ``other`` (a socket, a fifo)."""


def _hash_fd(fd: int) -> str:
    h = hashlib.sha256()
    while chunk := os.read(fd, _CHUNK):
        h.update(chunk)
    return "sha256:" + h.hexdigest()


def _walk(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (not following links), as ``(relative path, lstat)``, parents first."""
    out: list[tuple[str, os.stat_result]] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = sorted(os.scandir(root / rel if rel else root), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            r = f"{rel}/{e.name}" if rel else e.name
            st = e.stat(follow_symlinks=False)
            out.append((r, st))
            if stat.S_ISDIR(st.st_mode):
                stack.append(r)
    return out


def snapshot(root: Path) -> _Snapshot:
    """The content of every entry under ``root``, to prove byte for byte that a replay changed nothing."""
    snap: _Snapshot = {}
    for rel, st in _walk(root):
        if stat.S_ISREG(st.st_mode):
            try:
                fd = os.open(root / rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # removed since the scan: absent from the snapshot, so a difference
            try:
                snap[rel] = _hash_fd(fd)
            finally:
                os.close(fd)
        elif stat.S_ISDIR(st.st_mode):
            snap[rel] = "dir"
        elif stat.S_ISLNK(st.st_mode):
            snap[rel] = "link:" + os.readlink(root / rel)
        else:
            snap[rel] = "other"
    return snap


_SUPERVISOR_FILES = re.compile(
    rf"{re.escape(rundir.SUPERVISOR_EVENTS)}|{re.escape(rundir.SUPERVISOR_LOCK)}|{re.escape(rundir.CONTROL_SOCK)}|agent(\.\d+)?\.log"
)
"""The supervisor's own files at the top of a run directory: no agent reads them, and ``agent.log`` can be large."""


def copy_run_dir(src: Path, dst: Path) -> tuple[_Snapshot, _Snapshot]:
    """Copy the run directory ``src`` into the new directory ``dst``; return the snapshots of ``src`` and of the copy.

    A real copy, not hard links: an agent that appends to its journal would append
    to the original through a link. Everything is copied (the journal's segments
    and torn tails, ``run.json``, checkpoints, the agent's own files) except the
    supervisor's files (events, ``agent.log``, lock, socket); every file of
    ``src`` is hashed, each read once for its copy and its hash. A symbolic link
    is refused: copying its target would replay another file than the run's, and
    keeping it would let the agent write through it, outside the copy.
    """
    snap: _Snapshot = {}
    copied: _Snapshot = {}
    os.mkdir(dst, 0o700)
    for rel, st in _walk(src):
        s, d = src / rel, dst / rel
        if stat.S_ISLNK(st.st_mode):
            raise ReplayError(
                f"{s} is a symbolic link: a replay runs the agent on a copy of the run directory and does "
                "not follow links; replace the link with the file it points to"
            )
        if stat.S_ISDIR(st.st_mode):
            os.mkdir(d, 0o700)
            snap[rel] = copied[rel] = "dir"
        elif not stat.S_ISREG(st.st_mode):
            snap[rel] = "other"  # a socket or a fifo: nothing to copy
        elif "/" not in rel and _SUPERVISOR_FILES.fullmatch(rel):
            fd = os.open(s, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                snap[rel] = _hash_fd(fd)
            finally:
                os.close(fd)
        else:
            snap[rel] = copied[rel] = _copy_file(s, d, st)
    return snap, copied


def _copy_file(src: Path, dst: Path, st: os.stat_result) -> str:
    h = hashlib.sha256()
    fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, stat.S_IMODE(st.st_mode) | 0o600)
        try:
            while chunk := os.read(fin, _CHUNK):
                h.update(chunk)
                rundir.write_all(fout, chunk)
        finally:
            os.close(fout)
    finally:
        os.close(fin)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))  # readers that look at mtimes see the run as it was
    return "sha256:" + h.hexdigest()


def changed(before: _Snapshot, after: _Snapshot) -> list[str]:
    """Paths added, removed or changed between two snapshots, sorted."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


_JOURNAL_FILES = re.compile(r"journal(\.\d+)?\.jsonl")
"""The journal's files (active and sealed segments): the proxy reads them for the rollbacks' abandoned spans."""


def _start_proxy(scratch: Path, proxy_dir: Path) -> Any:
    """A proxy that is not live, on a private copy of the scratch's ``llm.jsonl`` and journal files (its notes
    are written there), started; aiohttp (the ``llm-proxy`` extra) is imported only here."""
    try:
        from ..supervise.llm_proxy import LlmProxy
    except SupervisorError as e:  # aiohttp is missing: the module says which extra to install
        raise ReplayError(f"{scratch.name} has model calls recorded by the proxy ({llm_calls.CALLS}); "
                          f"replay --verify serves them through it: {e}") from None
    from ..core.redact import Redactor

    os.mkdir(proxy_dir, 0o700)
    for entry in os.scandir(scratch):
        if entry.is_file(follow_symlinks=False) and (entry.name == llm_calls.CALLS or _JOURNAL_FILES.fullmatch(entry.name)):
            shutil.copy2(entry.path, proxy_dir / entry.name)
    proxy = LlmProxy(proxy_dir, redact=Redactor(), live=False)
    proxy.start()
    return proxy


def _recorded_calls(run_dir: Path) -> int:
    """How many successful calls of the effective history a verify may be served (one a ``key`` and occurrence)."""
    spans = llm_calls.abandoned_spans(run_dir)
    return len({(r.get("key"), r.get("k")) for r in llm_calls.step_calls(run_dir)
                if isinstance(r.get("output"), dict) and not llm_calls.in_spans(r.get("ts"), spans)})


def _proxy_result(proxy: Any, proxy_dir: Path, recorded: int, before: int) -> dict[str, Any]:
    """What the proxy saw: its ``served`` notes after the ``before`` lines of the copy, its first mismatch (with
    the recorded call it takes the place of: the same endpoint and model at the same occurrence, if any)."""
    calls = llm_calls.read_calls(proxy_dir)
    served = [r for r in calls[before:] if r.get("kind") == "note" and r.get("message") == llm_calls.SERVED_NOTE]
    mismatch = dict(proxy.mismatch) if proxy.mismatch is not None else None
    if mismatch is not None:
        spans = llm_calls.abandoned_spans(proxy_dir)
        same = [r for r in calls[:before] if r.get("kind") == "step" and isinstance(r.get("output"), dict)
                and r.get("match") == mismatch.get("match") and r.get("km") == mismatch.get("km")
                and not llm_calls.in_spans(r.get("ts"), spans)]
        if same:
            mismatch["recorded_seq"] = same[-1].get("seq")
            mismatch["expected_body"] = (same[-1].get("inputs") or {}).get("body")
        mismatch["actual_body"] = mismatch.pop("body", None)
    return {"recorded": recorded, "served": len(served), "mismatch": mismatch}


def _child_env(run_dir: Path, mode: ReplayMode, report: Path) -> dict[str, str]:
    # an outer supervisor's variables must not leak in: the replayed agent is not supervised
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")}
    env[rundir.ENV_RUN_DIR] = str(run_dir)
    env[rundir.ENV_REPLAY] = mode.env_value()
    env[ENV_REPLAY_REPORT] = str(report)
    env[rundir.ENV_RESUME] = "1"
    return env


def recorded_command(run_dir: Path) -> tuple[list[str], Path]:
    """The command and working directory ``run.json`` recorded, for ``replay --verify`` without ``-- CMD``.

    A relative ``cwd`` is taken from the run directory (the shipped sample runs
    record ``../..``, so they replay from any copy of ``sample_runs/``); a
    recorded Python interpreter becomes :func:`portable_program`.
    """
    meta = rundir.read_run_json(run_dir)
    cmd = meta.get("command")
    if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd):
        raise ReplayError(
            f"{run_dir} records no command to re-run; give it after '--': "
            f"agent-supervisor replay {run_dir} --verify -- python agent.py"
        )
    if argv_is_redacted(cmd):
        raise ReplayError(
            f"the command recorded in {run_dir}/run.json had a secret, written as [REDACTED]; give it after '--': "
            f"agent-supervisor replay {run_dir} --verify -- CMD"
        )
    cwd = recorded_cwd(run_dir, meta)
    if not cwd.is_dir():
        raise ReplayError(f"the recorded working directory {cwd} no longer exists; give the command after '--'")
    return [portable_program(cmd[0]), *cmd[1:]], cwd


def run_replay(
    run_dir: Path, mode: ReplayMode, command: list[str], *, cwd: Path | None = None, stdout: TextIO | None = None
) -> ReplayResult:
    """Run ``command`` in replay ``mode`` against a scratch copy of ``run_dir`` and collect its report.

    The original is hashed while it is copied and hashed again after the agent
    exits: a difference fails the replay. The child inherits the terminal (its
    own output stays visible). On Ctrl-C the child, which shares our process
    group, gets the same SIGINT; we wait a few seconds for it, then kill it.
    """
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a run directory; replay --verify/--live needs the directory that holds journal.jsonl")
    run_dir = run_dir.resolve()
    here = (cwd or Path.cwd()).resolve()
    tmp = Path(tempfile.mkdtemp(prefix="agent-supervisor-replay-")).resolve()  # mode 0700, outside the run directory
    try:
        scratch = tmp / run_dir.name  # the same name: an agent may take its run id from it
        try:
            before, copied = copy_run_dir(run_dir, scratch)
        except OSError as e:
            raise ReplayError(
                f"cannot copy {run_dir} to a scratch directory in {tmp.parent} ({e.strerror or e}); "
                "a replay runs the agent on a copy: set TMPDIR to a directory with room"
            ) from None
        child_cmd, notes = retarget_command(command, run_dir, scratch, here)
        child_cwd = scratch / here.relative_to(run_dir) if here.is_relative_to(run_dir) else here
        if child_cwd != here:
            notes.append(f"the agent runs in the scratch copy {child_cwd}, not in {here}")
        report_path = tmp / "report.json"
        env = _child_env(scratch, mode, report_path)
        proxy = None
        llm: dict[str, Any] | None = None
        if mode.kind == "strict" and (scratch / llm_calls.CALLS).is_file():
            recorded, lines = _recorded_calls(scratch), len(llm_calls.read_calls(scratch))
            proxy = _start_proxy(scratch, tmp / "llm-proxy")
            env.update(proxy.env())
        t0 = time.perf_counter()
        try:
            try:
                proc = subprocess.Popen(child_cmd, env=env, cwd=child_cwd, stdout=stdout)
            except FileNotFoundError:
                raise ReplayError(f"cannot run {command[0]!r}: no such program; check the command after '--'") from None
            except PermissionError:
                raise ReplayError(f"cannot run {command[0]!r}: permission denied") from None
            try:
                rc = proc.wait()
            except KeyboardInterrupt:
                _stop(proc)
                raise
        finally:
            if proxy is not None:
                proxy.close()
        if proxy is not None:
            llm = _proxy_result(proxy, tmp / "llm-proxy", recorded, lines)
        seconds = time.perf_counter() - t0
        original_changed = changed(before, snapshot(run_dir))
        touched = changed(copied, snapshot(scratch))
        problem = None
        try:
            report = read_report(report_path)
        except ReplayError as e:
            report, problem = None, str(e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if report is not None and not original_changed:
        reported = Path(str(report.get("run_dir")))
        if reported == run_dir:
            # it found the original by a path replay could not see; the SDK opens it read-only, and the hashes agree
            notes.append(f"the agent opened {run_dir} itself, not the scratch copy; it wrote nothing there")
        elif reported != scratch:
            raise ReplayError(
                f"the agent replayed {reported}, not {run_dir}: drop --run-dir from the command "
                "or pass the same directory to replay"
            )
    return ReplayResult(mode, run_dir, command, rc, seconds, report, touched, original_changed, notes, problem, llm)


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


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


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
    if kind == "llm":
        call = f"{d.get('method')} /{d.get('route')}{d.get('path')}"
        return [f"DIVERGED at a model call (after {pos} served): {call} (model {d.get('model')!r}, "
                f"call {int(d.get('k') or 0) + 1} of its kind) has no recorded answer in {llm_calls.CALLS} "
                f"(its key {d.get('key')} matches no recorded call: another prompt, model or endpoint)",
                *([f"    the recorded call {d.get('recorded_seq')} of {llm_calls.CALLS} there (request body: recorded -> new):",
                   *format_value_diff(d.get("expected_body"), d.get("actual_body"), "      ")]
                  if "recorded_seq" in d else [])]
    return [f"DIVERGED at position {pos}: {d}"]


def format_result(res: ReplayResult) -> list[str]:
    """The report a person reads: divergences or live diffs, then a one-line summary."""
    r = res.report
    lines = [f"note: {n}" for n in res.notes]
    lines.extend(_changed_lines(res))
    if r is None and res.report_problem:
        lines.append(f"replay FAILED: {res.report_problem}")
        return lines
    if r is None and res.llm is not None:  # a proxied agent without the SDK: its calls are the replay
        for d in res.divergences:
            lines.extend(format_divergence(d))
        lines.append(summary_line(res))
        return lines
    if r is None:
        lines.append(
            f"replay FAILED: the agent did not report a replay: it does not use the SDK or the replay protocol "
            f"(it exited with code {res.returncode} and wrote no ${ENV_REPLAY_REPORT}; "
            "open the run with supervisor.Run, or see 'The replay protocol' in docs/replay-fork.md)"
        )
        return lines
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
        lines.append(f"live step {s['step']!r} at position {s.get('position')}: new (not in the journal): "
                     f"{preview(s.get('new_output'), 80)}")
    for c in r.get("input_changes", []):
        lines.append(
            f"warning: step {c.get('step')!r} at position {c.get('position')} was served from the journal "
            "although its inputs differ from the recorded ones; add it to --live to re-run it"
        )
        if c.get("expected_inputs") is not None:
            lines.extend(format_value_diff(c.get("expected_inputs"), c.get("actual_inputs")))
    if r.get("error"):
        lines.append(f"replay failed: {r['error']}")
    lines.append(summary_line(res))
    return lines


def _changed_lines(res: ReplayResult) -> list[str]:
    """What the agent wrote: in its scratch copy (a warning), in the original (a failed replay)."""
    lines = [
        f"warning: the agent changed {name} in its run directory during the replay (its own side effect; "
        "it went to the scratch copy, the original is unchanged)"
        for name in res.touched
    ]
    if res.original_changed:
        names = ", ".join(res.original_changed[:10]) + (", ..." if len(res.original_changed) > 10 else "")
        lines.append(
            f"replay FAILED: the run directory {res.run_dir} changed during the replay ({names}): "
            "the agent wrote to it by a path that replay could not point at the scratch copy, "
            "or another process writes to this run"
        )
    return lines


def summary_line(res: ReplayResult) -> str:
    r = res.report or {}
    secs = f"{res.seconds:.2f} s"
    n_div = len(res.divergences)
    if res.mode.kind == "strict":
        checked = f"inputs checked for {r.get('inputs_checked', 0)}"
        if r.get("inputs_unchecked"):
            checked += f", {r['inputs_unchecked']} without recorded inputs"
        failed = f"replay FAILED ({_plural(n_div, 'divergence')})" if n_div else "replay FAILED"
        verdict = "replay verified" if res.exit_code == EXIT_OK else failed
        calls = _calls_summary(res)
        if res.report is None:
            how = f"exited with code {res.returncode}" if res.returncode else "exited 0"
            return f"{verdict}: the agent {how} in {secs}; {calls}"
        nested = r.get("nested_steps") or 0
        inside = f", {nested} of them inside others (a served step's are not visited)" if nested else ""
        return (f"{verdict}: {r.get('replayed', 0)} of {r.get('journal_steps', '?')} steps replayed{inside} "
                f"in {secs} ({checked}); no step function ran" + (f"; {calls}" if calls else ""))
    live = r.get("live", [])
    n_changed = sum(1 for s in live if s.get("changed"))
    pats = ", ".join(repr(p) for p in res.mode.patterns)
    failed = f"partial replay FAILED ({_plural(n_div, 'divergence')})" if n_div else "partial replay FAILED"
    verdict = "partial replay" if res.exit_code == EXIT_OK else failed
    return (
        f"{verdict}: {r.get('replayed', 0)} steps served from the journal, {len(live) + len(r.get('new_steps', []))} "
        f"run live (matching {pats}), {n_changed} outputs changed, in {secs}"
    )


def _calls_summary(res: ReplayResult) -> str:
    """How the proxied model calls went (``""``: the run has none)."""
    llm = res.llm
    if llm is None:
        return ""
    served = f"{llm['served']} of {llm['recorded']} recorded model calls served from {llm_calls.CALLS}"
    if llm.get("mismatch"):
        return f"{served}, then a call with no recorded answer"
    return f"{served}, every call the agent made was served" if llm["served"] else f"{served}: the agent made no model call"


def result_json(res: ReplayResult) -> dict[str, Any]:
    """The result as one JSON object (``replay --json``): the verdict, the exit code and the agent's report."""
    return {
        "ok": res.exit_code == EXIT_OK,
        "exit_code": res.exit_code,
        "mode": res.mode.kind,
        "patterns": list(res.mode.patterns),
        "run_dir": str(res.run_dir),
        "command": res.command,
        "agent_returncode": res.returncode,
        "seconds": round(res.seconds, 3),
        "summary": format_result(res)[-1],
        "divergences": res.divergences,
        "original_changed": res.original_changed,
        "touched": res.touched,
        "notes": res.notes,
        "report_problem": res.report_problem,
        "report": res.report,
        "llm": res.llm,
    }


def result_junit(res: ReplayResult) -> str:
    """The result as a JUnit XML document (``replay --junit FILE``), as CI systems read test results.

    One test suite for the run, one test case for the replay as a whole (its
    failure message is the verdict, its text every line a person would read), and
    one failed test case per divergence, named after its step and position, so a CI
    page lists which steps diverged.
    """
    from xml.sax.saxutils import escape, quoteattr

    lines = format_result(res)
    cases: list[str] = []
    name = f"replay {res.mode.kind} {res.run_dir.name}"
    body = escape("\n".join(lines))
    if res.exit_code == EXIT_OK:
        cases.append(f'  <testcase classname="agent-supervisor.replay" name={quoteattr(name)} time="{res.seconds:.3f}">'
                     f"<system-out>{body}</system-out></testcase>")
    else:
        cases.append(f'  <testcase classname="agent-supervisor.replay" name={quoteattr(name)} time="{res.seconds:.3f}">'
                     f"<failure message={quoteattr(lines[-1])}>{body}</failure></testcase>")
    for d in res.divergences:
        # the recorded step's name: a "step" divergence names it "expected", the others "step"
        step = f"{d.get('step') or d.get('expected') or '?'} at position {d.get('position', '?')}"
        text = escape("\n".join(format_divergence(d)))
        cases.append(f'  <testcase classname="agent-supervisor.replay.steps" name={quoteattr(step)} time="0">'
                     f"<failure message={quoteattr(str(d.get('kind') or 'divergence'))}>{text}</failure></testcase>")
    failures = sum(1 for c in cases if "<failure" in c)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f"<testsuites><testsuite name={quoteattr('agent-supervisor replay ' + str(res.run_dir))} tests=\"{len(cases)}\" "
        f'failures="{failures}" errors="0" skipped="0" time="{res.seconds:.3f}">\n'
        + "\n".join(cases) + "\n</testsuite></testsuites>\n"
    )


def print_result(res: ReplayResult, out: TextIO | None = None) -> int:
    """Print the result and return the exit code for the command."""
    out = out or sys.stdout
    for line in format_result(res):
        out.write(line + "\n")
    out.flush()
    return res.exit_code
