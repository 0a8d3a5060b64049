"""The effective history: the journal with rollbacks folded in.

A ``rollback`` record names a checkpoint. The effective history is everything up
to that checkpoint plus everything after the rollback record; the records in
between are an abandoned branch, kept in the file and shown as such.

Positions: the ``pos`` of a record is the number of successful steps before it
in the effective history. Resume matches steps by ``pos``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from . import checkpoints, state
from .journal import Entry, JournalReader
from .records import BadLine, LazyRecord, Record, step_name

__all__ = ["BadLine", "Branch", "History", "fold", "load", "rollback_record", "state_at"]


@dataclass
class Branch:
    """Records abandoned by the rollback at ``rollback_seq``."""

    rollback_seq: int
    checkpoint: str | None
    records: list[Record]


@dataclass
class History:
    """A journal folded into its effective history and abandoned branches."""

    entries: list[Entry]
    effective: list[Record] = field(default_factory=list)
    steps: list[Record] = field(default_factory=list)
    """Successful steps in effective order: ``steps[pos]``."""
    branches: list[Branch] = field(default_factory=list)
    problems: list[BadLine] = field(default_factory=list)

    @property
    def abandoned_seqs(self) -> set[int]:
        return {r["seq"] for b in self.branches for r in b.records}

    _kinds_upto: int = field(default=0, repr=False)
    _by_kind: dict[str, list[Record]] = field(default_factory=lambda: {"checkpoint": [], "rollback": []}, repr=False)

    def _of_kind(self, kind: str) -> list[Record]:
        # after fold the effective history only grows at the end: index just the new part
        n = len(self.effective)
        if self._kinds_upto > n:
            self._kinds_upto = 0
            self._by_kind = {"checkpoint": [], "rollback": []}
        for r in self.effective[self._kinds_upto :]:
            if not isinstance(r, LazyRecord):  # lazy ones are steps and begins
                bucket = self._by_kind.get(r.get("kind", "step"))
                if bucket is not None:
                    bucket.append(r)
        self._kinds_upto = n
        return self._by_kind[kind]

    @property
    def checkpoints(self) -> list[Record]:
        """Checkpoint records of the effective history, in order."""
        return self._of_kind("checkpoint")

    @property
    def rollbacks(self) -> list[Record]:
        """Rollback records of the effective history, in order."""
        return self._of_kind("rollback")

    def consecutive_failures(self, pos: int | None = None) -> int:
        """Failed attempts of the step at ``pos`` (default: the next one) since the last success."""
        pos = len(self.steps) if pos is None else pos
        n = 0
        for r in reversed(self.effective):
            if r.get("kind") == "rollback":
                break
            if r.get("kind") == "step":
                if r.get("error") is None:
                    break
                if r.get("pos") == pos and not r.get("transient"):
                    n += 1
        return n

    def in_flight(self) -> Record | None:
        """The ``begin`` record of a step that never finished (the step a crash interrupted)."""
        for r in reversed(self.effective):
            k = r.get("kind")
            if k == "begin":
                return r
            if k in ("step", "rollback", "start"):
                return None
        return None

    def find_checkpoint(self, ref: str) -> Record | None:
        """The latest effective checkpoint whose name, file or seq is ``ref``."""
        for r in reversed(self.effective):
            if r.get("kind") == "checkpoint" and ref in (r.get("name"), r.get("file"), str(r.get("seq"))):
                return r
        return None


def fold(entries: list[Entry]) -> History:
    """Fold rollbacks into the effective history; give every record its ``pos``."""
    h = History(entries)
    eff = h.effective
    steps = h.steps
    ok_upto: list[int] = []  # ok_upto[i]: successful steps in eff[: i + 1]
    for e in entries:
        if isinstance(e, LazyRecord):  # the resume fast path: no parsing, no dict lookups
            e.pos = len(steps)
            if e.kind == "step":
                steps.append(e)
            eff.append(e)
            ok_upto.append(len(steps))
            continue
        if isinstance(e, BadLine):
            h.problems.append(e)
            continue
        kind = e["kind"]
        if kind == "step" and e.get("error") is None:
            e["pos"] = len(steps)
            steps.append(e)
        elif kind == "rollback":
            idx = _rollback_target(eff, e)
            if idx is None:
                h.problems.append(
                    BadLine("journal", 0, e["seq"], "rollback names a checkpoint not in the effective history", "")
                )
            else:
                n_ok = ok_upto[idx] if idx >= 0 else 0
                h.branches.append(Branch(e["seq"], e.get("checkpoint"), eff[idx + 1 :]))
                del eff[idx + 1 :]
                del ok_upto[idx + 1 :]
                del steps[n_ok:]
            e["pos"] = len(steps)
        else:
            e["pos"] = len(steps)
        eff.append(e)
        ok_upto.append(len(steps))
    return h


def _rollback_target(eff: list[Record], rb: Record) -> int | None:
    """Index in ``eff`` of the checkpoint a rollback names; -1 for the start of the run."""
    cp_seq = rb.get("checkpoint_seq")
    name = rb.get("checkpoint")
    if cp_seq is None and name in (None, "", "start"):
        return -1
    for i in range(len(eff) - 1, -1, -1):
        r = eff[i]
        if r.get("kind") != "checkpoint":
            continue
        if cp_seq is not None:
            if r.get("seq") == cp_seq:
                return i
        elif name in (r.get("name"), r.get("file")):
            return i
    return None


def load(source: Path) -> History:
    """Read and fold a run directory's journal (or a bare ``.jsonl`` file)."""
    return fold(JournalReader(source).load())


def state_at(run_dir: Path, history: History, seq: int) -> Any:
    """The agent's state right after the record at ``seq``, abandoned branches included.

    Starts from the latest checkpoint snapshot on the way to ``seq`` and applies
    the ``state_patch`` of every record after it.
    """
    prefix = [e for e in history.entries if _seq(e) <= seq]
    records = [e for e in prefix if not isinstance(e, BadLine)]
    path = fold(prefix).effective if any(r.get("kind") == "rollback" for r in records) else records
    doc: Any = {}
    start = 0
    for i in range(len(path) - 1, -1, -1):
        r = path[i]
        if r.get("kind") == "checkpoint" and r.get("file"):
            try:
                doc = checkpoints.load_checkpoint(run_dir, r["file"])["state"]
                start = i + 1
                break
            except CheckpointError:
                continue
    for r in path[start:]:
        patch = r.get("state_patch")
        if patch:
            doc = state.apply_patch(doc, patch)
    return doc


def _seq(e: Entry) -> int:
    return e.seq if isinstance(e, BadLine) else int(e["seq"])


def describe(rec: Record) -> str:
    """A short human label of a record for messages: ``#12 step search:q2``."""
    kind = rec.get("kind", "step")
    label = step_name(rec) if kind in ("step", "begin") else rec.get("name") or rec.get("checkpoint") or ""
    return f"#{rec.get('seq')} {kind} {label}".rstrip()


def rollback_record(target: Record | None, reason: str, *, by: str, failed_step: str | None = None) -> Record:
    """The record that rolls the effective history back to checkpoint ``target`` (``None``: the start).

    Every writer of rollbacks (the SDK's failure policy, the supervisor, the CLI,
    the TUI) builds it here, so they all fold the same way.
    """
    rec: Record = {
        "kind": "rollback",
        "checkpoint": target.get("name") if target else None,
        "checkpoint_seq": target.get("seq") if target else None,
        "reason": reason,
        "by": by,
    }
    if failed_step is not None:
        rec["failed_step"] = failed_step
    return rec
