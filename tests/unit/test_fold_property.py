"""Property: every consumer of the one fold agrees with a plain reference fold written here.

Random journals with rollbacks (to a named checkpoint, by ``checkpoint_seq``, to
the start, to a checkpoint that does not exist), forks, failed steps, bad lines
(not JSON, JSON after a text prefix, blank), other spacing (``json.dumps``
defaults, records without ``kind``), concurrent steps (a gather: begins and
steps carrying their ``pos``, the steps committed in a random order, some
failed) and rotation into several segments are
written as real files. Then ``history.fold`` (parsed and lazy), ``Fold(keep=False)``,
the SDK's resume (``Run.open`` on a copy, every step replayed), the TUI model
after ``adopt(scan_journal(...))`` and after live appends, the runs list's count
and every "state at" must give the reference's effective history, step count and state.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor import Run
from supervisor.core import checkpoints
from supervisor.core.history import Fold, fold, state_at
from supervisor.core.journal_reader import JournalReader
from supervisor.core.records import LazyRecord
from supervisor.core.segments import segment_paths
from supervisor.core.state import apply_patch
from supervisor.views.runs import _count_steps
from supervisor.views.scan import scan_journal
from supervisor.views.timeline import TimelineModel

from ..conftest import wait_for

STYLES = ("writer", "writer", "writer", "spaced", "nokind", "prefixed")
NAMES = ("a", "b", "c")  # few names: a rollback by name must find the latest effective one

OP = st.one_of(
    st.tuples(st.just("step"), st.booleans(), st.sampled_from(STYLES), st.integers(0, 3)),  # failed?, style, output shape
    # 0 no file, 1 file, 2 missing file
    st.tuples(st.just("checkpoint"), st.sampled_from(NAMES), st.sampled_from(STYLES), st.integers(0, 2)),
    st.tuples(st.just("rollback"), st.sampled_from(["name", "seq", "start", "missing"]), st.sampled_from(STYLES), st.integers(0, 3)),
    st.tuples(st.just("note"), st.booleans(), st.sampled_from(STYLES), st.just(0)),  # with a state patch?
    st.tuples(st.just("begin"), st.just(False), st.sampled_from(STYLES), st.just(0)),
    st.tuples(st.just("start"), st.just(False), st.sampled_from(STYLES), st.just(0)),
    st.tuples(st.just("fork"), st.just(False), st.sampled_from(STYLES), st.just(0)),
    st.tuples(
        st.just("bad"), st.sampled_from(["text", "array", "blank", "prefixed-broken", "damaged", "damaged"]), st.just("writer"), st.just(0)
    ),
    st.tuples(st.just("rotate"), st.just(False), st.just("writer"), st.just(0)),
    # concurrent steps: width, style, a seed for the order they finish in and which fail
    st.tuples(st.just("gather"), st.integers(1, 5), st.sampled_from(("writer", "writer", "spaced")), st.integers(0, 10**6)),
)


# ---------------------------------------------------------------------- the reference, written plainly


def ref_effective(lines: list[dict[str, Any] | None], upto: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """The effective history of ``lines[: upto + 1]``: (seq, record) pairs, rollbacks cut by hand."""
    eff: list[tuple[int, dict[str, Any]]] = []
    for seq, rec in enumerate(lines):
        if upto is not None and seq > upto:
            break
        if rec is None:
            continue
        if kind_of(rec) == "rollback":
            cp_seq, name = rec.get("checkpoint_seq"), rec.get("checkpoint")
            keep: int | None = None
            if cp_seq is None and name in (None, "", "start"):
                keep = 0
            else:
                for i in range(len(eff) - 1, -1, -1):
                    s, r = eff[i]
                    if kind_of(r) != "checkpoint":
                        continue
                    if (cp_seq is not None and s == cp_seq) or (cp_seq is None and name in (r.get("name"), r.get("file"))):
                        keep = i + 1
                        break
            if keep is not None:  # a rollback naming no effective checkpoint cuts nothing
                eff = eff[:keep]
        eff.append((seq, rec))
    return eff


def kind_of(rec: dict[str, Any]) -> str:
    k = rec.get("kind")
    return "step" if k is None else str(k)


def ref_positions(eff: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, int]]:
    """(pos, seq) of the successful steps and damaged lines (a step that cannot be served), in pos order
    (file order for one pos): a step's written ``pos``, else the one after the highest so far."""
    out: list[tuple[int, int]] = []
    top = -1
    for s, r in eff:
        if (kind_of(r) == "step" and r.get("error") is None) or kind_of(r) == "damaged":
            p = r.get("pos") if isinstance(r.get("pos"), int) else top + 1
            out.append((p, s))
            top = max(top, p)
    return sorted(out)


def ok_steps(eff: list[tuple[int, dict[str, Any]]]) -> list[int]:
    """The seqs of the step positions, in pos order."""
    return [s for _, s in ref_positions(eff)]


def ref_state(lines: list[dict[str, Any] | None], seq: int) -> Any:
    """Every state patch on the effective path to ``seq``, from an empty state (no snapshot used)."""
    doc: Any = {}
    for _, r in ref_effective(lines, seq):
        if r.get("state_patch"):
            doc = apply_patch(doc, r["state_patch"])
    return doc


def ref_state_at(lines: list[dict[str, Any] | None], seq: int) -> Any:
    """The state at ``seq`` as readers show it: for a step (or begin), after its result, i.e. through the
    next record that saves the state (a successful step, a checkpoint, a record with a patch), stopping
    before a rollback."""
    end = seq
    r = lines[seq]
    if r is not None and kind_of(r) == "begin" and isinstance(r.get("pos"), int) and "attempt" in r:
        # a begin with its pos: the state after its own step's record (others' records between included)
        for s in range(seq + 1, len(lines)):
            x = lines[s]
            if x is None:
                continue
            if kind_of(x) == "rollback":
                break
            if kind_of(x) == "step" and x.get("pos") == r["pos"]:  # its step: done, or failed
                return ref_state(lines, s)
        return ref_state(lines, seq)
    if r is not None and kind_of(r) in ("step", "begin"):
        for s in range(seq + 1, len(lines)):
            r = lines[s]
            if r is None:
                continue
            k = kind_of(r)
            if k == "rollback":
                break
            end = s
            if (k == "step" and r.get("error") is None) or k == "checkpoint" or r.get("state_patch"):
                break
    return ref_state(lines, end)


# ---------------------------------------------------------------------- writing journals


@dataclass
class Journal:
    run: Path
    lines: list[dict[str, Any] | None] = field(default_factory=list)
    """The record of each line as written (``None``: not a record)."""
    segments: list[list[bytes]] = field(default_factory=lambda: [[]])
    raw: list[bytes] = field(default_factory=list)  # each line's bytes
    cps: list[int] = field(default_factory=list)  # seqs of the checkpoints written, in order

    def write(self) -> None:
        """All segments: sealed ones numbered in order, the last one active."""
        for p in self.run.glob("journal*.jsonl"):
            p.unlink()
        for i, seg in enumerate(self.segments):
            name = "journal.jsonl" if i == len(self.segments) - 1 else f"journal.{i + 1:06d}.jsonl"
            (self.run / name).write_bytes(b"".join(line + b"\n" for line in seg))

    def add(self, op: tuple[str, Any, str, int]) -> None:
        kind, arg, style, extra = op
        seq = len(self.lines)
        rec: dict[str, Any]
        if kind == "rotate":
            self.segments.append([])
            return
        if kind == "gather":
            self.gather(arg, style, extra)
            return
        if kind == "bad":
            raw = {"text": b"not json at all", "array": b"[1, 2, 3]", "blank": b"",
                   "prefixed-broken": b"2026-11-29 10:00:01 | INFO | {broken",
                   # a writer line cut short in the middle of the file (the TUI scan parses it: a needle hits it)
                   "damaged": b'{"kind":"step","seq":%d,"step":"x","error":{"message":"cut' % seq}[arg]
            # a damaged record (a cut line, a record after a text prefix cut short) keeps its place and
            # holds a step position; text and JSON non-objects never were records
            self.lines.append({"kind": "damaged"} if arg in ("damaged", "prefixed-broken") else None)
            self.segments[-1].append(raw)
            self.raw.append(raw)
            return
        if kind == "step":
            rec = {"kind": "step", "seq": seq, "step": f"s{seq}", "attempt": 1}
            if arg:
                rec["error"] = {"type": "Boom", "message": f"failed {seq}"}
            else:
                outputs = [seq, {"i": seq}, {"kind": "rollback", "error": None, "nested": {"kind": "checkpoint"}}, f'"error": {seq}']
                rec["output"] = outputs[extra]
                rec["state_patch"] = [{"op": "add", "path": f"/k{seq}", "value": seq}, {"op": "replace", "path": "/last", "value": seq}]
        elif kind == "checkpoint":
            rec = {"kind": "checkpoint", "seq": seq, "name": arg,
                   "state_patch": [{"op": "replace", "path": "/cp", "value": f"{arg}@{seq}"}]}
            self.cps.append(seq)
        elif kind == "rollback":
            back = self.cps[-1 - extra % len(self.cps)] if self.cps else None
            if arg == "start" or back is None:
                rec = {"kind": "rollback", "seq": seq, "checkpoint": None, "checkpoint_seq": None}
            elif arg == "missing":
                rec = {"kind": "rollback", "seq": seq, "checkpoint": "nope", "checkpoint_seq": None}
            elif arg == "name":
                rec = {"kind": "rollback", "seq": seq, "checkpoint": self.lines[back]["name"]}  # type: ignore[index]
            else:
                rec = {"kind": "rollback", "seq": seq, "checkpoint": self.lines[back]["name"], "checkpoint_seq": back}  # type: ignore[index]
            rec["reason"] = "test"
        elif kind == "note":
            rec = {"kind": "note", "seq": seq, "message": "a note with \"error\": in it"}
            if arg:
                rec["state_patch"] = [{"op": "replace", "path": "/note", "value": seq}]
        elif kind == "begin":
            rec = {"kind": "begin", "seq": seq, "step": f"s{seq}"}
        elif kind == "start":
            rec = {"kind": "start", "seq": seq, "attempt": len(self.lines)}
        else:
            rec = {"kind": "fork", "seq": seq, "origin": {"seq": 0}}
        if kind == "checkpoint" and extra:
            # the snapshot holds the true state; a missing file makes readers fall back to the patches
            self.lines.append(rec)
            if extra == 1:
                rec["file"] = checkpoints.write_checkpoint(self.run, arg, seq=seq, pos=0, ts="t", state=ref_state(self.lines, seq))
            else:
                rec["file"] = f"9{seq:04d}-gone.json"
        else:
            self.lines.append(rec)
        self.raw.append(encode(rec, style))
        self.segments[-1].append(self.raw[-1])


    def gather(self, width: int, style: str, seed: int) -> None:
        """``width`` steps called at once (pos in call order after the highest so far), finishing in a
        random order, some failing; written in the SDK's key order (kind, step, pos, attempt first)."""
        rng = random.Random(seed)
        pos = ref_positions(ref_effective(self.lines))
        top = max((p for p, _ in pos), default=-1)
        calls = list(range(top + 1, top + 1 + width))
        names: dict[int, str] = {}
        started: list[int] = []
        order: list[tuple[str, int]] = []
        while calls or started:
            if calls and (not started or rng.random() < 0.5):
                p = calls.pop(0)
                started.append(p)
                order.append(("begin", p))
            else:
                order.append(("step", started.pop(rng.randrange(len(started)))))
        for what, p in order:
            seq = len(self.lines)
            if what == "begin":
                names[p] = f"g{seq}"
                rec: dict[str, Any] = {"kind": "begin", "step": names[p], "pos": p, "attempt": 1, "seq": seq}
            else:
                rec = {"kind": "step", "step": names[p], "pos": p, "attempt": 1}
                if rng.random() < 0.2:
                    rec["error"] = {"type": "Boom", "message": f"failed {seq}"}
                else:
                    rec["output"] = {"g": p, "seq": seq}
                    rec["state_patch"] = [{"op": "add", "path": f"/g{seq}", "value": p}, {"op": "replace", "path": "/last", "value": seq}]
                rec["seq"] = seq
            self.lines.append(rec)
            self.raw.append(encode(rec, style))
            self.segments[-1].append(self.raw[-1])


def encode(rec: dict[str, Any], style: str) -> bytes:
    if style == "writer":
        return orjson.dumps(rec)  # kind first, compact: as this package's writer
    body = {k: v for k, v in rec.items() if k != "seq"}  # a hand-written line: its position is its seq
    if style == "nokind" and body.get("kind") == "step":
        del body["kind"]
    if style == "prefixed":
        return b"2026-11-29 10:00:01 | INFO | " + orjson.dumps(body)
    return json.dumps(body).encode()  # ", " and ": " spacing


def build(run: Path, ops: list[tuple[str, Any, str, int]]) -> Journal:
    run.mkdir(mode=0o700)
    j = Journal(run)
    for op in ops:
        j.add(op)
    j.write()
    return j


# ---------------------------------------------------------------------- the property

OPS = st.lists(OP, min_size=4, max_size=60)
MORE = st.lists(OP, max_size=20)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(OPS, MORE, st.lists(st.integers(0, 10_000), max_size=4), st.booleans())
def test_every_consumer_folds_like_the_reference(
    ops: list[tuple[str, Any, str, int]], more: list[tuple[str, Any, str, int]], picks: list[int], writer_only: bool
) -> None:
    if writer_only:  # all lines in this package's form: the TUI scan's C-speed path
        ops = [(k, a, "writer", e) for k, a, _, e in ops if k != "bad" or a == "damaged"]
        more = [(k, a, "writer", e) for k, a, _, e in more if k != "bad" or a == "damaged"]
    base = Path(tempfile.mkdtemp(prefix="foldprop-"))
    try:
        run = base / "run"
        j = build(run, ops)
        lines = j.lines
        eff = ref_effective(lines)
        eff_seqs = [s for s, _ in eff]
        steps = ok_steps(eff)
        cps = [s for s, r in eff if kind_of(r) == "checkpoint"]
        rbs = [s for s, r in eff if kind_of(r) == "rollback"]
        records = {s for s, r in enumerate(lines) if r is not None}
        abandoned = records - set(eff_seqs)
        points = pick(picks, len(lines))

        # history.fold over parsed records
        h = fold(JournalReader(run).load())
        assert [r["seq"] for r in h.effective] == eff_seqs
        assert [r["seq"] for r in h.steps] == steps
        assert [r["pos"] for r in h.steps] == [p for p, _ in ref_positions(eff)]
        assert [r["seq"] for r in h.checkpoints] == cps
        assert [r["seq"] for r in h.rollbacks] == rbs
        assert h.abandoned_seqs == abandoned

        # the counting fold
        f = Fold(keep=False)
        f.extend(JournalReader(run).load())
        assert f.step_count == len(steps)
        assert [r["seq"] for r in f.checkpoints] == cps
        assert [r["seq"] for r in f.rollbacks] == rbs

        # the SDK's lazy view (begin lines left out), folded one entry at a time
        lazy = Fold()
        for e in JournalReader(run).load(lazy=True):
            lazy.add(e)
        begins = {s for s, raw in enumerate(j.raw) if raw.startswith(b'{"kind":"begin",')}  # the writer's only
        assert [r["seq"] for r in lazy.history.effective] == [s for s in eff_seqs if s not in begins]
        assert [r["seq"] for r in lazy.history.steps] == steps
        assert lazy.step_count == len(steps)
        plain = [s for s in steps if j.raw[s].startswith(b'{"kind":"step",') and b'"error"' not in j.raw[s]]
        assert [s.seq for s in lazy.history.steps if isinstance(s, LazyRecord)] == plain  # unparsed until replayed

        # every state at: history (a History's entries) at some points and the end
        for p in points:
            assert state_at(run, h, p, after_result=True) == ref_state_at(lines, p), p
            assert state_at(run, h, p) == ref_state(lines, p), p  # right after the record: what a replay rebuilds

        # the runs list
        assert _count_steps(run, segment_paths(run)) == str(len(steps))

        # the TUI model after the scan, then after live appends (and rotations)
        m = TimelineModel(run, tail_rows=5)
        m.open()
        m.adopt(scan_journal(run))
        check_model(m, lines, points)
        check_rows(m, j)
        for op in more:
            j.add(op)
        if more:
            append_live(j)
            wait_for(lambda: caught_up(m, len(j.lines)), what="the model to read the appended lines")
            lines = j.lines
            check_model(m, lines, pick(picks, len(lines)))
            check_rows(m, j)
            assert _count_steps(run, segment_paths(run)) == str(len(ok_steps(ref_effective(lines))))

        # the SDK resume: a copy opened by Run replays every effective step with the state as recorded
        check_sdk_resume(base, run, lines)
    finally:
        shutil.rmtree(base)


def pick(picks: list[int], n: int) -> list[int]:
    """Some seqs and the last one (none in an empty journal)."""
    return sorted({p % n for p in picks} | {n - 1}) if n else []


def check_model(m: TimelineModel, lines: list[dict[str, Any] | None], points: list[int]) -> None:
    eff = ref_effective(lines)
    records = {s for s, r in enumerate(lines) if r is not None}
    assert m.count == len(lines)
    assert m.effective_steps == len(ok_steps(eff))
    assert {s for s in range(m.count) if m.is_abandoned(s)} & records == records - {s for s, _ in eff}
    assert m.effective_checkpoints == [s for s, r in eff if kind_of(r) == "checkpoint"]
    for p in points:  # from the nearest snapshot, then forward from the last answer
        assert m.state_at(p) == ref_state_at(lines, p), p
    m.forget_state()
    for p in reversed(points):
        assert m.state_at(p) == ref_state_at(lines, p), p


def check_rows(m: TimelineModel, j: Journal) -> None:
    """One row per step: every begin of a gather (the SDK's form) folds into its step's row (its step is
    always written: a success or a failure); rows map to seqs and back."""
    sdk_begins = [s for s, raw in enumerate(j.raw) if raw.startswith(b'{"kind":"begin","step":')]
    assert all(m.is_hidden(s) for s in sdk_begins)
    assert set(m.hidden) <= {s for s, r in enumerate(j.lines) if r is not None and kind_of(r) == "begin"}
    seqs = [m.row_item(r)[1] for r in range(m.rows) if m.row_item(r)[0] == "rec"]
    assert seqs == [s for s in range(m.count) if not m.is_hidden(s)]


def caught_up(m: TimelineModel, count: int) -> bool:
    m.poll()
    return m.count == count


def append_live(j: Journal) -> None:
    """Write what ``more`` added: appended to the active file, or sealed by a rotation (a rename, as the writer does)."""
    existing = segment_paths(j.run)
    active = j.run / "journal.jsonl"
    n_old = len(existing)  # segments on disk; the last of them is the active file
    for i in range(n_old - 1, len(j.segments)):
        data = b"".join(line + b"\n" for line in j.segments[i])
        if i == n_old - 1:
            with open(active, "ab") as fh:
                fh.write(data[len(active.read_bytes()):])
        else:
            os.rename(active, j.run / f"journal.{i:06d}.jsonl")
            active.write_bytes(data)


def check_sdk_resume(base: Path, run: Path, lines: list[dict[str, Any] | None]) -> None:
    copy = base / "resumed"
    shutil.copytree(run, copy)
    eff = ref_effective(lines)
    # the resume stops (exit 78) at the first damaged line it would pass
    first_damaged = next((s for s, x in eff if kind_of(x) == "damaged"), None)
    with pytest.raises(SystemExit) if first_damaged is not None else contextlib.nullcontext() as stopped, Run.open(copy) as r:
        assert len(r.history.steps) == len(ok_steps(eff))
        furthest = -1
        for s in ok_steps(eff):  # in pos order: concurrent steps were committed in another order
            rec = lines[s]
            assert rec is not None
            if first_damaged is not None and s >= first_damaged:
                r.step("any", _must_not_run)
            out = r.step(str(rec["step"]), _must_not_run)
            assert out == rec["output"]
            furthest = max(furthest, s)  # the state as the journal has it after the furthest record served
            assert r.state == ref_state(lines, furthest), s
        assert len(r.rollbacks) == len([1 for _, x in eff if kind_of(x) == "rollback"])
    if stopped is not None:
        assert stopped.value.code == 78


def _must_not_run() -> Any:
    raise AssertionError("a recorded step ran again")
