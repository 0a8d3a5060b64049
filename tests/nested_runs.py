"""Journals with nested steps, written line by line as the SDK writes them (a test need not run the SDK).

Every record of a nested step carries ``"parent"``: the ``id`` of its enclosing step's begin; a top-level step's
records have none. Positions are global; children commit before their parent's step record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

TS = "2026-11-29T10:00:{:02d}.{:03d}Z"


class NestedJournal:
    """Records in the SDK's key order (kind, step, pos, attempt, parent, ..., seq, id, ts), kept as lines."""

    def __init__(self, attempt: int = 1) -> None:
        self.lines: list[bytes] = []
        self.attempt = attempt

    def add(self, rec: dict[str, Any]) -> str:
        """Append a record with its seq, a string id and a time; return the id."""
        n = len(self.lines)
        rid = f"fb{5268150 + n}"
        self.lines.append(orjson.dumps({**rec, "seq": n, "id": rid, "ts": TS.format(n // 1000 % 60, n % 1000)}))
        return rid

    def start(self, attempt: int = 1) -> str:
        self.attempt = attempt
        return self.add({"kind": "start", "attempt": attempt, "pid": 100 + attempt, "resume": attempt > 1})

    def _head(self, kind: str, name: str, pos: int, parent: str | None) -> dict[str, Any]:
        head: dict[str, Any] = {"kind": kind, "step": name, "pos": pos, "attempt": self.attempt}
        if parent is not None:
            head["parent"] = parent
        return head

    def begin(self, name: str, pos: int, parent: str | None = None) -> str:
        return self.add({**self._head("begin", name, pos, parent), "inputs": {"args": [pos]}})

    def step(self, name: str, pos: int, output: Any = None, parent: str | None = None, **extra: Any) -> str:
        rec = {**self._head("step", name, pos, parent), "inputs": {"args": [pos]}}
        if "error" not in extra:
            rec["output"] = output if output is not None else f"{name}-{pos}"
        rec.update(extra)
        return self.add({**rec, "dur_ms": 0.1, "key": f"run:{pos}"})

    def pair(self, name: str, pos: int, output: Any = None, parent: str | None = None) -> str:
        """A step without children: its begin and its step; return the begin's id."""
        b = self.begin(name, pos, parent)
        self.step(name, pos, output, parent)
        return b

    def write(self, run: Path) -> Path:
        run.mkdir(mode=0o700, parents=True, exist_ok=True)
        (run / "journal.jsonl").write_bytes(b"".join(x + b"\n" for x in self.lines))
        (run / "journal.jsonl").chmod(0o600)
        return run


def sample(run: Path) -> Path:
    """outer (pos 1) with inner (2, itself the parent of deep, 3) and inner (4); then a flat step (5).

    seq: 0 start, 1 begin outer, 2 begin inner, 3 begin deep, 4 step deep, 5 step inner, 6 begin inner#4,
    7 step inner#4, 8 step outer, 9 begin flat, 10 step flat."""
    j = NestedJournal()
    j.start()
    outer = j.begin("outer", 1)
    inner = j.begin("inner", 2, outer)
    j.pair("deep", 3, 1, inner)
    j.step("inner", 2, 6, outer)
    j.pair("inner", 4, 8, outer)
    j.step("outer", 1, 14)
    j.pair("flat", 5, "ok")
    return j.write(run)
