"""A run directory for the Gantt tests: 8 overlapping searches and a flaky tool, two attempts, fixed times.

Written line by line in the writer's form (key order, no spaces), with times fixed so that snapshots do not move:

- attempt 1: ``plan``; ``search:q0``..``search:q7`` and ``tool:fetch`` at once; ``tool:fetch`` fails twice
  (``transient``: retried) and succeeds on its third try; ``search:q7`` fails; ``summarize`` is in flight when
  the process crashes;
- attempt 2 resumes (9 steps served): ``search:q7`` runs again, ``summarize`` with a nested ``llm:draft``, then
  ``tool:publish`` in flight at the end (the run is stopped: no clock moves it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

T0 = "2026-11-30T10:00:"


class _Journal:
    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.attempt = 0

    def add(self, rec: dict[str, Any], t: float) -> dict[str, Any]:
        seq = len(self.lines)
        rec = {**rec, "seq": seq, "id": f"g{seq}", "ts": f"{T0}{t:06.3f}Z"}
        self.lines.append(orjson.dumps(rec))
        return rec

    def start(self, t: float, served: int) -> None:
        self.attempt += 1
        self.add({"kind": "start", "attempt": self.attempt, "pid": 100 + self.attempt, "resume": self.attempt > 1,
                  "replayable_steps": served}, t)

    def begin(self, name: str, pos: int, t: float, parent: str | None = None) -> str:
        rec: dict[str, Any] = {"kind": "begin", "step": name, "pos": pos, "attempt": self.attempt}
        if parent:
            rec["parent"] = parent
        rec["inputs"] = {"args": [name]}
        return str(self.add(rec, t)["id"])

    def step(self, name: str, pos: int, t: float, dur: float, *, error: str = "", transient: bool = False,
             parent: str | None = None) -> None:
        rec: dict[str, Any] = {"kind": "step", "step": name, "pos": pos, "attempt": self.attempt}
        if parent:
            rec["parent"] = parent
        rec["inputs"] = {"args": [name]}
        if error:
            rec["error"] = {"type": "ConnectionError", "message": error}
        else:
            rec["output"] = f"out-{name}"
        rec["dur_ms"] = round(dur * 1000, 3)
        if transient:
            rec["transient"] = True
        self.add(rec, t)


def make_gantt_run(root: Path, name: str = "gantt_run") -> Path:
    """Write the run directory ``root/name`` and return it."""
    run = root / name
    run.mkdir(mode=0o700, parents=True)
    j = _Journal()
    j.start(0.0, 0)
    j.begin("plan", 0, 0.010)
    j.step("plan", 0, 0.400, 0.390)
    for i in range(8):
        j.begin(f"search:q{i}", i + 1, 0.410 + i * 0.001)
    j.begin("tool:fetch", 9, 0.420)
    ends = sorted((0.410 + i * 0.001 + 0.3 + 0.15 * (i * 5 % 8), i) for i in range(7))
    tries = [(0.900, 0.480, "connection reset"), (1.300, 0.300, "connection reset"), (1.700, 0.250, "")]
    events = [(t, "search", i) for t, i in ends] + [(t, "fetch", k) for k, (t, _, _) in enumerate(tries)]
    events.append((1.500, "q7", 0))
    for t, what, i in sorted(events):
        if what == "search":
            j.step(f"search:q{i}", i + 1, t, t - 0.410 - i * 0.001)
        elif what == "fetch":
            _, dur, err = tries[i]
            j.step("tool:fetch", 9, t, dur, error=err, transient=bool(err))
        else:
            j.step("search:q7", 8, t, t - 0.417, error="search backend down")
    j.begin("summarize", 10, 1.750)
    j.start(2.500, 9)  # the crash: summarize was interrupted
    j.begin("search:q7", 8, 2.600)
    j.step("search:q7", 8, 2.900, 0.300)
    sid = j.begin("summarize", 10, 2.950)
    j.begin("llm:draft", 11, 3.000, parent=sid)
    j.step("llm:draft", 11, 3.400, 0.400, parent=sid)
    j.step("summarize", 10, 3.500, 0.550)
    j.begin("tool:publish", 12, 3.600)
    j.add({"kind": "note", "message": "publishing"}, 4.000)
    (run / "journal.jsonl").write_bytes(b"\n".join(j.lines) + b"\n")
    meta = {"id": name, "created": f"{T0}00.000Z", "format": 1, "command": ["python", "agent.py"], "cwd": ".",
            "status": "stopped", "attempts": 2}
    (run / "run.json").write_text(json.dumps(meta, indent=2))
    for p in run.iterdir():
        p.chmod(0o600)
    return run
