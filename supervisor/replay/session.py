"""The agent side of ``agent-supervisor replay``: replay modes, input hashes and the replay report.

The ``replay`` command starts the agent with ``AGENT_SUPERVISOR_REPLAY`` set to
``strict`` (every step served from the journal, no step function runs) or
``live:PATTERN`` (steps whose names match the fnmatch-style PATTERN run live,
the others are served), and ``AGENT_SUPERVISOR_REPLAY_REPORT`` naming a JSON
file. The SDK keeps a :class:`ReplaySession` that collects what happened
(steps served, steps run live and how their output changed, divergences) and
writes that file when the run closes; the command reads it to print a summary
and choose its exit code. The report is the only file a replay writes, and it
is never inside the run directory (which is, besides, a scratch copy: see
:mod:`supervisor.replay.runner`). docs/replay-fork.md's "replay protocol" documents the
variables and the report's JSON for agents written in other languages.
"""

from __future__ import annotations

import atexit
import fnmatch
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..core import rundir
from ..core.records import LazyRecord, Record, step_name
from ..core.redact import Redactor
from ..errors import DivergenceError, ReplayError

ENV_REPLAY_REPORT = "AGENT_SUPERVISOR_REPLAY_REPORT"
"""Where the SDK writes the replay report (JSON) when a replayed run closes."""

REPORT_FORMAT = 1
PATTERN_SEP = "\n"
"""Several ``--live`` patterns travel in one environment variable, one a line."""

_HASH_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
# Tried first: the same bytes when every key is a str and every value JSON, at about half the cost (orjson's
# non-str-keys path is slower even on str keys); a TypeError falls back to the full options and the repr default.
_HASH_OPTS_STR = orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable_default(value: Any) -> str:
    """Non-JSON inputs hash by their ``repr`` without memory addresses (``<Foo at 0x7f..>`` changes every run)."""
    return _ADDRESS.sub("", repr(value))


def canonical_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A step's inputs as the SDK records them: ``{"args": [...], "kwargs": {...}}``, empty parts left out."""
    inputs: dict[str, Any] = {}
    if args:
        inputs["args"] = list(args)
    if kwargs:
        inputs["kwargs"] = kwargs
    return inputs


def inputs_hash(inputs: Any) -> str:
    """A stable hash of a step's inputs: sha256 of sorted-key JSON, first 16 hex digits.

    Sorted keys make it independent of dict order; values JSON cannot hold hash
    by their address-free ``repr``.
    """
    try:
        data = orjson.dumps(inputs, option=_HASH_OPTS_STR)
    except TypeError:
        data = orjson.dumps(inputs, default=_stable_default, option=_HASH_OPTS)
    return hashlib.sha256(data).hexdigest()[:16]


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON (non-JSON parts become their ``repr``), for the report."""
    return orjson.loads(orjson.dumps(value, default=_stable_default, option=orjson.OPT_NON_STR_KEYS))


@dataclass(frozen=True)
class ReplayMode:
    """``strict`` or ``live`` with the step-name patterns that run live."""

    kind: str
    patterns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, value: str) -> ReplayMode:
        """Parse ``AGENT_SUPERVISOR_REPLAY``; an unknown value is an error, not a silent live run."""
        if value == "strict":
            return cls("strict")
        if value.startswith("live:"):
            pats = tuple(p for p in value[5:].split(PATTERN_SEP) if p)
            if pats:
                return cls("live", pats)
        raise ReplayError(
            f"{rundir.ENV_REPLAY}={value!r} is not a replay mode; use 'strict' or 'live:PATTERN' "
            "(or run 'agent-supervisor replay RUN_DIR --verify -- CMD')"
        )

    def env_value(self) -> str:
        return "strict" if self.kind == "strict" else "live:" + PATTERN_SEP.join(self.patterns)

    def is_live(self, name: str) -> bool:
        """Whether the step ``name`` runs live: fnmatch-style, case-sensitive, ``*`` also matches ``:``."""
        return any(fnmatch.fnmatchcase(name, p) for p in self.patterns)


def open_replay_dir(path: Path) -> Path:
    """The run directory to replay, which must exist: a replay never creates or repairs anything."""
    if not path.is_dir():
        raise ReplayError(f"{path}: no such run directory to replay; pass the directory of a recorded run")
    return path


@dataclass
class ReplaySession:
    """What a replayed run did, collected by the SDK and written as the replay report."""

    mode: ReplayMode
    run_dir: Path
    run_id: str
    steps: list[Record]
    """The journal's finished steps in effective order (read-only here)."""
    report_path: Path | None
    redactor: Redactor
    replayed: int = 0
    inputs_checked: int = 0
    inputs_unchecked: int = 0
    live: list[dict[str, Any]] = field(default_factory=list)
    new_steps: list[dict[str, Any]] = field(default_factory=list)
    input_changes: list[dict[str, Any]] = field(default_factory=list)
    divergences: list[dict[str, Any]] = field(default_factory=list)
    status: str = "running"
    error: str | None = None
    _written: bool = False

    @classmethod
    def from_env(cls, mode_value: str, run_dir: Path, run_id: str, steps: list[Record], redactor: Redactor) -> ReplaySession:
        """The session for ``AGENT_SUPERVISOR_REPLAY``; the report is also written at exit if ``close`` never ran."""
        report = os.environ.get(ENV_REPLAY_REPORT)
        s = cls(ReplayMode.parse(mode_value), run_dir, run_id, steps, Path(report) if report else None, redactor)
        if s.report_path is not None:
            atexit.register(s.write, "exited without closing the run")
        return s

    @property
    def journal_steps(self) -> int:
        return len(self.steps)

    @property
    def nested_steps(self) -> int:
        """The journal's finished steps inside other steps: a served parent's children are never visited."""
        return sum(1 for r in self.steps if (r.nested() if isinstance(r, LazyRecord) else "parent" in r))

    # -- checks made by Run.step
    def check_inputs(self, pos: int, rec: Record, inputs: dict[str, Any]) -> None:
        """Compare a served step's inputs with the recorded ones by hash.

        Strict mode: a difference is a divergence (the step is still served, so
        that every difference in the run is reported, not only the first).
        Live mode: an upstream live step may legitimately change them, so it is
        reported as a warning that the served output may be stale.
        """
        expected = rec.get("inputs_hash")
        if not isinstance(expected, str):
            if "inputs" not in rec:
                self.inputs_unchecked += 1  # a minimal journal: nothing to compare with
                return
            expected = inputs_hash(rec["inputs"])  # a journal written before inputs_hash existed
        self.inputs_checked += 1
        actual = inputs_hash(inputs)
        if actual == expected:
            return
        entry = {
            "position": pos,
            "seq": rec.get("seq"),
            "kind": "inputs",
            "step": step_name(rec),
            "expected": expected,
            "actual": actual,
            "expected_inputs": rec.get("inputs"),
            "actual_inputs": json_safe(inputs),
        }
        if self.mode.kind == "strict":
            self.divergences.append(entry)
        else:
            self.input_changes.append(entry)

    def step_mismatch(self, pos: int, rec: Record, name: str) -> DivergenceError:
        """Another step name at a recorded position: recorded, and returned for the SDK to raise."""
        self.divergences.append(
            {"position": pos, "seq": rec.get("seq"), "kind": "step", "expected": step_name(rec), "actual": name}
        )
        return DivergenceError(pos, step_name(rec), name)

    def missing(self, pos: int, name: str) -> ReplayError:
        """A step beyond the journal that may not run live: recorded, and returned for the SDK to raise."""
        self.divergences.append({"position": pos, "kind": "missing", "expected": None, "actual": name})
        how = "strict replay" if self.mode.kind == "strict" else "partial replay (it does not match --live)"
        return ReplayError(
            f"{how}: the agent asked for step {name!r} at position {pos}, "
            f"but the journal has only {self.journal_steps} finished steps"
        )

    def live_step(self, pos: int, rec: Record | None, name: str, output: Any, dur_ms: float) -> None:
        """A step that ran live: keep the recorded and the new output for the diff."""
        entry = {"position": pos, "step": name, "new_output": json_safe(output), "dur_ms": dur_ms}
        if rec is None:
            self.new_steps.append(entry)
            return
        entry["seq"] = rec.get("seq")
        entry["recorded_output"] = rec.get("output")
        entry["changed"] = entry["recorded_output"] != entry["new_output"]
        self.live.append(entry)

    def live_error(self, pos: int, name: str, e: BaseException) -> None:
        self.error = f"live step {name!r} at position {pos} raised {type(e).__name__}: {e}"

    # -- the end of the run
    def finish(self, position: int, exc: BaseException | None, left: tuple[int, str] | None = None) -> None:
        """Note how the run ended and write the report; a strict replay that stops early left steps unreplayed.

        ``left`` is how many recorded steps were neither served nor run and the name of the first
        (steps that overlapped are matched by name, so the position alone does not say it).
        """
        if self._written:
            return
        if exc is not None and self.error is None and not isinstance(exc, (DivergenceError, ReplayError, SystemExit)):
            self.error = f"{type(exc).__name__}: {exc}"
        elif isinstance(exc, SystemExit) and exc.code not in (0, None) and self.error is None:
            self.error = f"the agent exited with code {exc.code}"
        self.status = "failed" if exc is not None else "closed"
        if left is None:
            n = self.journal_steps - position
            left = (n, step_name(self.steps[position]) if 0 <= position < len(self.steps) else "")
        n, first = left
        if exc is None and n > 0 and self.mode.kind == "strict":
            self.divergences.append(
                {
                    "position": position,
                    "kind": "unfinished",
                    "expected": f"{n} more recorded step(s), next {first!r}" if first else f"{n} more recorded step(s)",
                    "actual": "the agent finished",
                }
            )
        self.write()

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "mode": self.mode.kind,
            "patterns": list(self.mode.patterns),
            "run_dir": str(self.run_dir.resolve()),
            "run_id": self.run_id,
            "pid": os.getpid(),
            "journal_steps": self.journal_steps,
            "nested_steps": self.nested_steps,
            "replayed": self.replayed,
            "inputs_checked": self.inputs_checked,
            "inputs_unchecked": self.inputs_unchecked,
            "live": self.live,
            "new_steps": self.new_steps,
            "input_changes": self.input_changes,
            "divergences": self.divergences,
            "status": self.status,
            "error": self.error,
        }

    def write(self, error: str | None = None) -> None:
        """Write the report once (atomically, secrets redacted) to the file the ``replay`` command named."""
        if self._written or self.report_path is None:
            return
        self._written = True
        if error and self.error is None and self.status == "running":
            self.error = error
        data = orjson.dumps(self.to_dict(), default=_stable_default, option=orjson.OPT_NON_STR_KEYS)
        rundir.atomic_write(self.report_path, self.redactor(data))


_REPORT_LISTS = ("divergences", "live", "new_steps", "input_changes")


def read_report(path: Path) -> dict[str, Any] | None:
    """The report the agent wrote, or ``None`` if it wrote none (it crashed, or does not use the SDK).

    An agent in another language writes it too (docs/replay-fork.md's replay protocol), so
    its shape is checked: a JSON object with ``"format": 1``, a string ``run_dir``,
    lists of objects where lists are expected, a string or null ``error``.
    """
    try:
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except orjson.JSONDecodeError as e:
        raise ReplayError(f"the agent's replay report is not valid JSON ({e}); see 'The replay protocol' in docs/replay-fork.md") from None
    problem = _report_problem(doc)
    if problem:
        raise ReplayError(f"the agent's replay report is not valid: {problem}; see 'The replay protocol' in docs/replay-fork.md")
    assert isinstance(doc, dict)
    return doc


def _report_problem(doc: Any) -> str | None:
    if not isinstance(doc, dict):
        return f"a JSON object is expected, not {type(doc).__name__}"
    if doc.get("format") != REPORT_FORMAT:
        return f'"format" is {doc.get("format")!r}, expected {REPORT_FORMAT}'
    if not isinstance(doc.get("run_dir"), str):
        return '"run_dir" (the run directory the agent replayed) is missing'
    for key in _REPORT_LISTS:
        v = doc.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            return f'"{key}" must be a list of objects'
    if not isinstance(doc.get("error"), (str, type(None))):
        return '"error" must be a string or null'
    for key in ("replayed", "journal_steps", "nested_steps", "inputs_checked", "inputs_unchecked"):
        if not isinstance(doc.get(key, 0), int):
            return f'"{key}" must be an integer'
    return None
