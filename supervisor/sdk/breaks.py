"""Breakpoints and a person in the loop, in the agent: a live step that matches pauses before its function runs
(a ``pause`` record), waits for a person's answer (``answers/<seq>.json``: ``core.pauses``), journals it (a
``choice`` record) and carries it out; ``run.ask`` is a step whose output a person gives.

Only live steps pause: a served step never reaches here. A pause holds only its own step (the wait is outside
the SDK's lock: concurrent steps go on). A pause outlives a crash: the same call of the next attempt (its name,
``k`` and whether it is nested) waits under the same record and takes an answer given meanwhile. With no
breakpoint set, a live step pays one ``fstat`` of the run directory (``tests/bench/bench_breakpoints.py``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import pauses
from ..core.records import Kind, Record, step_name
from ..core.rundir import EXIT_ABORTED
from ..errors import AskTimeout, SupervisorError
from .exits import exit_agent
from .options import CURRENT, Call, asyncio_mod
from .recorder import Recorder

POLL_S = 0.05
"""How often a paused step looks for its answer."""


Sticky = tuple[str, int, bool]
"""A pause's call: its name, ``k`` and whether it is nested (an open pause of an earlier attempt is taken up by it)."""


class Gate:
    """The run's breakpoints (re-read when the file changes) and the open pauses of earlier attempts."""

    def __init__(self, run_dir: Path, recorder: Recorder, lock: threading.Lock, earlier: list[Record]) -> None:
        self.run_dir = run_dir
        self.recorder = recorder
        self.lock = lock
        self.file = pauses.Breakpoints(run_dir)
        self.sticky: dict[Sticky, Record] = {_sticky_of(p): p for p in pauses.open_pauses(earlier)}
        self._interrupted: set[Sticky] | None = None

    # ------------------------------------------------------------------ deciding
    def _breakpoints(self) -> dict[str, Any]:
        """The breakpoints as the file holds them now (a damaged file: the last good ones, and a note once)."""
        doc = self.file.read()
        if self.file.new_error:
            self.file.new_error = False
            self.recorder.note("breakpoints unreadable", error=self.file.error)
        return doc

    def close(self) -> None:
        """Let go of the run directory's descriptor (the run is closed: nothing pauses any more)."""
        self.file.close()

    def pause_of(self, c: Call) -> Record | None:
        """The pause a live call waits in (its record written), or ``None``: it runs."""
        key = (c.name, c.k, c.parent is not None)
        old = self.sticky.pop(key, None)
        if old is not None:
            return old  # paused when the last attempt ended: it waits again, under the same record
        doc = self._breakpoints()
        if not doc["patterns"] and not doc["next"]:
            return None
        if doc["next"]:
            pauses.change_breakpoints(self.run_dir, next_step=False)
            return self._pause(c, "next")
        pattern = pauses.matches(doc, c.name)
        if pattern is not None:
            return self._pause(c, "breakpoint", pattern=pattern)
        if pauses.INTERRUPTED in doc["patterns"] and key in self._interrupted_calls():
            return self._pause(c, pauses.INTERRUPTED)
        return None

    def _interrupted_calls(self) -> set[Sticky]:
        """The calls an earlier attempt began and never ended (read from the files once, when first asked)."""
        if self._interrupted is None:
            from ..core.journal_reader import JournalReader

            last: dict[Sticky, str] = {}
            for r in JournalReader(self.run_dir).load():
                if type(r) is dict and r.get("kind") in (Kind.BEGIN, Kind.STEP) and r.get("attempt") != self.recorder.attempt:
                    last[(step_name(r), int(r.get("k") or 0), "parent" in r)] = str(r.get("kind"))
            self._interrupted = {k for k, kind in last.items() if kind == Kind.BEGIN}
        return self._interrupted

    def _pause(self, c: Call, reason: str, **fields: Any) -> Record:
        rec: Record = {"kind": Kind.PAUSE, "step": c.name, "pos": c.pos, "attempt": self.recorder.attempt}
        if c.k:
            rec["k"] = c.k
        if c.parent is not None and c.parent.bid is not None:
            rec["parent"] = c.parent.bid
        if c.inputs:
            rec["inputs"] = c.inputs
        rec["reason"] = reason
        rec.update(fields)
        with self.lock:
            self.recorder.append(rec)
        return rec

    # ------------------------------------------------------------------ waiting
    def wait(self, pause: Record, timeout: float | None = None) -> dict[str, Any] | None:
        """Block until the pause is answered (``None``: ``timeout`` seconds passed first)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            a = pauses.read_answer(self.run_dir, int(pause["seq"]))
            if a is not None:
                self.file.stale()  # the answer may come with new breakpoints: the next step reads them
                return a
            if end is not None and time.monotonic() >= end:
                return None
            time.sleep(POLL_S)

    async def await_(self, pause: Record, timeout: float | None = None) -> dict[str, Any] | None:
        """:meth:`wait` for a task: the loop runs the other tasks meanwhile."""
        asyncio = asyncio_mod()
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            a = pauses.read_answer(self.run_dir, int(pause["seq"]))
            if a is not None:
                self.file.stale()
                return a
            if end is not None and time.monotonic() >= end:
                return None
            await asyncio.sleep(POLL_S)

    # ------------------------------------------------------------------ carrying out
    def take(self, c: Call, pause: Record, answer: dict[str, Any], fn: Callable[..., Any], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        """Journal the answer (a ``choice`` record), then carry it out: what to call, with what."""
        choice = str(answer["choice"])
        rec: Record = {"kind": Kind.CHOICE, "pause": pause["seq"], "step": c.name, "pos": c.pos, "choice": choice}
        for f in ("inputs", "output", "by", "answered"):
            if f in answer:
                rec[f] = answer[f]
        with self.lock:
            self.recorder.append(rec)
        try:
            os.unlink(pauses.answer_path(self.run_dir, int(pause["seq"])))
        except FileNotFoundError:
            pass  # taken already (a concurrent reader): the choice record is what counts
        if choice == "abort":
            exit_agent(f"agent-supervisor: aborted at step {c.name!r} by a person (pause seq {pause['seq']}); nothing "
                       "is lost: run the agent again (or supervise --run-dir) to go on", EXIT_ABORTED)
        if choice == "all":
            pauses.change_breakpoints(self.run_dir, remove=None, next_step=False)
        elif choice == "step":
            pauses.change_breakpoints(self.run_dir, next_step=True)
        elif choice == "inputs":
            given = pauses.check_inputs(answer.get("inputs"))
            c.extra = {"given_inputs": given}
            return fn, tuple(given.get("args", ())), dict(given.get("kwargs", {}))
        elif choice == "output":
            value = answer.get("output")
            c.extra = {"given": True}
            return _given(value), (), {}
        return fn, args, kwargs


def _given(value: Any) -> Callable[..., Any]:
    def given(*_: Any, **__: Any) -> Any:
        return value

    return given


def _sticky_of(p: Record) -> Sticky:
    return (step_name(p), int(p.get("k") or 0), "parent" in p)


# ---------------------------------------------------------------------------------- run.ask
def ask_pause(gate: Gate, prompt: str, choices: list[Any] | None, default: Any) -> Record:
    """The pause of the ``run.ask`` step running in this thread or task (taken up after a crash)."""
    c = CURRENT.get()
    assert c is not None, "run.ask runs as a step"
    old = gate.sticky.pop((c.name, c.k, c.parent is not None), None)
    if old is not None:
        return old
    fields: dict[str, Any] = {"prompt": prompt}
    if choices is not None:
        fields["choices"] = choices
    if default is not None:
        fields["default"] = default
    return gate._pause(c, "ask", **fields)


def ask_result(gate: Gate, pause: Record, answer: dict[str, Any] | None, choices: list[Any] | None, default: Any,
               timeout: float | None) -> Any:
    """The answer's value (journaled as a ``choice``); the default past the timeout, or :class:`AskTimeout`."""
    c = CURRENT.get()
    assert c is not None
    if answer is None:
        if default is None:
            raise AskTimeout(f"run.ask({pause.get('prompt')!r}) got no answer in {timeout} s and has no default; "
                             "answer it with agent-supervisor answer RUN VALUE, or give default=...")
        answer = {"choice": "answer", "answer": default, "by": "timeout"}
    value = answer.get("answer")
    rec: Record = {"kind": Kind.CHOICE, "pause": pause["seq"], "step": c.name, "pos": c.pos, "choice": "answer",
                   "answer": value}
    for f in ("by", "answered"):
        if f in answer:
            rec[f] = answer[f]
    with gate.lock:
        gate.recorder.append(rec)
    try:
        os.unlink(pauses.answer_path(gate.run_dir, int(pause["seq"])))
    except FileNotFoundError:
        pass  # taken already (a concurrent reader): the choice record just written is what counts
    if choices is not None and value not in choices:
        raise SupervisorError(f"the answer {value!r} is not one of the choices {choices!r}")
    return value

