"""Breakpoints, pauses and the answers a person gives: the files every process shares (the SDK pauses, the
CLI and the dashboard answer, the supervisor watches).

- ``breakpoints.json`` in the run directory: ``{"patterns": [GLOB, ...], "next": bool}``. A live step whose
  name matches a pattern (``fnmatch``, case-sensitive) pauses before its function runs; the pattern
  ``interrupted`` pauses a step whose previous attempt was cut off by a crash (its ``begin`` without its
  ``step``); ``next``: pause before the next live step, whatever its name (the "step" choice). Written whole
  (temporary file, ``fsync``, rename) under ``breakpoints.lock``, so the CLI, the dashboard and the SDK never
  lose each other's changes.
- A ``pause`` record (journal): a live step waits: ``step``, ``pos``, ``k``, ``parent``, ``inputs``, ``reason``
  (``breakpoint``, ``interrupted``, ``next``, ``ask``), ``pattern``; for ``run.ask``: ``prompt``, ``choices``,
  ``default``. It stays the step's pause until a ``choice`` record names its ``seq`` (``pause``): after a
  crash, the same call pauses again under the same record.
- ``answers/<seq>.json``: the person's answer to the pause of that seq, ``{"choice": ..., ...}``, written
  whole by ``continue``/``answer`` or the dashboard; the agent journals it as a ``choice`` record (its
  ``choice`` and value, ``by``, ``answered``: when it was given), then deletes the file. An answer given
  while no agent runs waits there for the next attempt.
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import SupervisorError
from . import rundir
from .records import Kind, Record

BREAKPOINTS = "breakpoints.json"
BREAKPOINTS_LOCK = "breakpoints.lock"
ANSWERS = "answers"
INTERRUPTED = "interrupted"
"""The breakpoint pattern of a step whose previous attempt was cut off by a crash."""
LOOK_S = 0.02
"""How stale a process's view of the breakpoints may be (seconds): breakpoints set meanwhile take effect after it."""

PAUSE = Kind.PAUSE.value
CHOICE = Kind.CHOICE.value
CHOICES = ("continue", "step", "all", "inputs", "output", "abort", "answer")
"""What a person may answer a pause: run it; run it and pause before the next live step; clear every breakpoint
and run on; run it with other ``inputs``; skip it with a given ``output``; stop the run (resumable later);
``answer``: the value of a ``run.ask``."""


# ---------------------------------------------------------------------------------- breakpoints
def read_breakpoints(run_dir: Path) -> dict[str, Any]:
    """``breakpoints.json`` (``{"patterns": [], "next": False}`` without it); a damaged file is an error."""
    try:
        raw = (run_dir / BREAKPOINTS).read_bytes()
    except FileNotFoundError:
        return {"patterns": [], "next": False}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise SupervisorError(f"{run_dir / BREAKPOINTS} is not JSON ({e}); fix it or remove it "
                              f"(agent-supervisor break {run_dir} --clear)") from None
    pats = doc.get("patterns") if isinstance(doc, dict) else None
    if not isinstance(pats, list) or not all(isinstance(p, str) for p in pats):
        raise SupervisorError(f'{run_dir / BREAKPOINTS}: "patterns" must be a list of strings; fix it or run '
                              f"agent-supervisor break {run_dir} --clear")
    return {"patterns": pats, "next": bool(doc.get("next"))}


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    fd = os.open(run_dir / BREAKPOINTS_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, rundir.FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def change_breakpoints(run_dir: Path, *, add: Iterable[str] = (), remove: Iterable[str] | None = (),
                       next_step: bool | None = None) -> dict[str, Any]:
    """Add and remove patterns (``remove=None``: all of them), set ``next``; the file as written."""
    with _locked(run_dir):
        doc = read_breakpoints(run_dir)
        pats: list[str] = [] if remove is None else [p for p in doc["patterns"] if p not in set(remove)]
        for p in add:
            if p not in pats:
                pats.append(p)
        doc = {"patterns": pats, "next": doc["next"] if next_step is None else next_step}
        rundir.atomic_write(run_dir / BREAKPOINTS, orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        return doc


class Breakpoints:
    """A process's view of ``breakpoints.json``, read again only when the run directory changed (the file is
    always replaced whole, by a rename: a new entry in the directory) or half a second passed (a file system
    whose times are coarse): one ``fstat`` of the directory a look, no exception for a file that is not there.
    Looked at most every :data:`LOOK_S` (a change shows within it): the ``fstat`` between a step's two writes cost
    it 5 us on ext4, not the 1 us it costs alone. :meth:`stale` makes the next read look (after a pause, whose
    answer may come with new breakpoints). A damaged file keeps the last good breakpoints; :attr:`error` says why
    (``new_error``: not said yet)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.doc: dict[str, Any] = {"patterns": [], "next": False}
        self.error: str | None = None
        self.new_error = False
        self._key: Any = None
        self._fresh_until = 0.0
        self._look_after = 0.0
        self._fd = -1
        try:  # opened now, not at the first read: the threads whose first steps race would each open one
            self._fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)  # fstat: half a path's stat
        except OSError:
            pass  # no directory yet: opened at the first read that finds one

    def stale(self) -> None:
        """The next :meth:`read` looks at the directory, however recent the last look."""
        self._look_after = 0.0

    def read(self) -> dict[str, Any]:
        now = time.monotonic()
        if now < self._look_after:
            return self.doc
        self._look_after = now + LOOK_S
        if self._fd < 0:
            self._fd = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY)
        st = os.fstat(self._fd)
        key = (st.st_ino, st.st_mtime_ns)
        if key == self._key and now < self._fresh_until:
            return self.doc
        self._key, self._fresh_until = key, now + 0.5
        try:
            self.doc = read_breakpoints(self.run_dir)
            self.error = None
        except SupervisorError as e:
            self.new_error = str(e) != self.error
            self.error = str(e)
        return self.doc

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def matches(doc: dict[str, Any], name: str) -> str | None:
    """The first pattern of ``doc`` that ``name`` matches (``interrupted`` is no name pattern)."""
    for p in doc["patterns"]:
        if p != INTERRUPTED and fnmatch.fnmatchcase(name, p):
            return str(p)
    return None


# ---------------------------------------------------------------------------------- pauses and answers
def open_pauses(records: Iterable[Any]) -> list[Record]:
    """The ``pause`` records among ``records`` (a journal's, in order; ``llm.jsonl``'s, their ``source`` ``llm``)
    that no ``choice`` of the same file answered yet."""
    pending: dict[Any, Record] = {}
    for r in records:
        if type(r) is not dict:
            continue
        kind = r.get("kind")
        if kind == PAUSE:
            pending[(r.get("source"), r.get("seq"))] = r
        elif kind == CHOICE:
            pending.pop((r.get("source"), r.get("pause")), None)
    return list(pending.values())


def answer_path(run_dir: Path, seq: int, source: str | None = None) -> Path:
    """Where the answer to the pause of ``seq`` goes: ``answers/SEQ.json`` for the journal's, ``answers/llm-SEQ.json``
    for a model call the proxy holds (``source`` ``llm``: the seq is one of ``llm.jsonl``)."""
    return run_dir / ANSWERS / (f"{source}-{seq}.json" if source else f"{seq}.json")


def write_answer(run_dir: Path, seq: int, answer: dict[str, Any], source: str | None = None) -> Path:
    """Give the answer to the pause of ``seq`` (a later answer before the agent took it replaces it)."""
    d = run_dir / ANSWERS
    d.mkdir(mode=rundir.DIR_MODE, exist_ok=True)
    path = answer_path(run_dir, seq, source)
    rundir.atomic_write(path, orjson.dumps({**answer, "answered": rundir.utc_now()}) + b"\n")
    return path


def read_answer(run_dir: Path, seq: int, source: str | None = None) -> dict[str, Any] | None:
    """The answer given to the pause of ``seq``, if any (one that does not parse is none: being written)."""
    try:
        doc = orjson.loads(answer_path(run_dir, seq, source).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) and doc.get("choice") in CHOICES else None


def check_inputs(value: Any, pause: Record | None = None) -> dict[str, Any]:
    """Inputs given by hand, as the SDK records them: ``{"args": [...], "kwargs": {...}}`` (either may be absent);
    for a model call the proxy holds (``pause`` from ``llm.jsonl``), the request body: any JSON object."""
    if pause is not None and pause.get("source") == "llm":
        if not isinstance(value, dict):
            raise SupervisorError("a held model call's inputs are its request body: a JSON object such as "
                                  '{"model": "...", "messages": [...]}')
        return value
    if not isinstance(value, dict) or not set(value) <= {"args", "kwargs"}:
        raise SupervisorError('inputs are {"args": [...], "kwargs": {...}} as the step recorded them '
                              "(see its pause: agent-supervisor status RUN --json)")
    if not isinstance(value.get("args", []), list) or not isinstance(value.get("kwargs", {}), dict):
        raise SupervisorError('"args" must be a list and "kwargs" an object')
    return value


def pause_text(p: Record) -> str:
    """One line for a pause: where and why."""
    why = {"breakpoint": f"breakpoint {p.get('pattern')!r}", INTERRUPTED: "its last attempt was cut off by a crash",
           "next": "stepping", "ask": "a question"}.get(str(p.get("reason")), str(p.get("reason")))
    what = f"question {p.get('prompt')!r}" if p.get("reason") == "ask" else f"before step {p.get('step')!r}"
    return f"paused {what} (position {p.get('pos')}, pause seq {p.get('seq')}; {why})"


def is_pause_kind(kind: Any) -> bool:
    return kind in (PAUSE, CHOICE)


def paused_field(open_pauses: dict[Any, Any]) -> dict[str, Any] | None:
    """The status's ``paused``: the first open pause (``step``, ``pos``, ``inputs``, ``reason``, ``seq``; ``prompt``
    and ``choices`` for a question), or ``None``; ``others`` counts the other open pauses."""
    if not open_pauses:
        return None
    first = next(iter(open_pauses.values()))
    out = {k: first.get(k) for k in ("step", "pos", "inputs", "reason", "pattern", "prompt", "choices") if k in first}
    out["seq"] = first.get("seq")
    if len(open_pauses) > 1:
        out["others"] = len(open_pauses) - 1
    return out
