"""``state`` and ``diff`` start from the nearest checkpoint snapshot and apply only the patches after it;
a snapshot that is missing, damaged or another record's is a warning and never a wrong state."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from supervisor.cli.main import main
from supervisor.core import history, stream

N_STEPS = 300


def _journal(run: Path, *, rollback: bool = False) -> dict[str, int]:
    """SDK-shaped steps each setting ``/n``, checkpoints at steps 100 and 200 whose snapshots also hold a
    ``mark`` that no patch writes: a state that shows it came from that snapshot."""
    (run / "checkpoints").mkdir(parents=True)
    lines: list[bytes] = []
    seqs: dict[str, int] = {}
    state: dict[str, Any] = {}

    def add(rec: dict[str, Any]) -> int:
        seq = len(lines)
        rec.update({"seq": seq, "id": f"i{seq}", "ts": f"2026-11-30T10:00:{seq % 60:02d}.000Z"})
        lines.append(orjson.dumps(rec))
        return seq

    add({"kind": "start", "attempt": 1, "pid": 1, "resume": False})
    for i in range(N_STEPS):
        add({"kind": "begin", "step": f"s:{i}", "pos": i, "attempt": 1})
        op = "add" if i == 0 else "replace"
        add({"kind": "step", "step": f"s:{i}", "pos": i, "attempt": 1, "output": i,
             "state_patch": [{"op": op, "path": "/n", "value": i}]})
        state["n"] = i
        if i in (100, 200):
            seq = len(lines)
            name = f"cp{i}"
            fname = f"{len(seqs) + 1:04d}-{name}.json"
            snap = {**state, "mark": name}
            (run / "checkpoints" / fname).write_bytes(orjson.dumps(
                {"name": name, "seq": seq, "pos": i + 1, "ts": "t", "format": 1, "state": snap}))
            rec = {"kind": "checkpoint", "name": name, "pos": i + 1, "file": fname, "ts": "t", "seq": seq, "id": f"i{seq}"}
            lines.append(orjson.dumps(rec))
            seqs[name] = seq
        if rollback and i == 250:
            seqs["rollback"] = add({"kind": "rollback", "checkpoint": "cp100", "checkpoint_seq": seqs["cp100"],
                                    "reason": "test", "by": "cli"})
    seqs["end"] = len(lines) - 1
    (run / "journal.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))
    return seqs


def _cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, str, int]:
    out, err = io.BytesIO(), io.StringIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", err)
    rc = main(argv)
    stdout.flush()
    return out.getvalue(), err.getvalue(), rc


def _state(run: Path, monkeypatch: pytest.MonkeyPatch, at: str = "end") -> tuple[Any, str]:
    out, err, rc = _cli(["state", str(run), "--at", at], monkeypatch)
    assert rc == 0, err
    return orjson.loads(out), err


def test_state_starts_from_the_nearest_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seqs = _journal(tmp_path)
    st, err = _state(tmp_path, monkeypatch)
    assert st == {"n": N_STEPS - 1, "mark": "cp200"} and err == ""  # the mark only the snapshot at 200 holds
    st, _ = _state(tmp_path, monkeypatch, str(seqs["cp200"] - 2))  # step 200's begin: the snapshot at 100
    assert st == {"n": 200, "mark": "cp100"}
    st, _ = _state(tmp_path, monkeypatch, "49")  # step 24's begin, before any snapshot: the patches from the start
    assert st == {"n": 24}
    st, _ = _state(tmp_path, monkeypatch, "cp100")
    assert st == {"n": 100, "mark": "cp100"}


def test_a_snapshot_that_cannot_be_used_is_a_warning_never_a_wrong_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _journal(tmp_path)
    cp = tmp_path / "checkpoints"
    (cp / "0002-cp200.json").write_bytes(b'{"name": "cp200", "seq": ')  # damaged
    st, err = _state(tmp_path, monkeypatch)
    assert st == {"n": N_STEPS - 1, "mark": "cp100"}  # the earlier snapshot, and every patch after it
    assert "0002-cp200.json is not valid JSON" in err and "rebuilt from the journal's patches" in err
    doc = orjson.loads((cp / "0001-cp100.json").read_bytes())
    (cp / "0001-cp100.json").write_bytes(orjson.dumps({**doc, "seq": doc["seq"] + 2}))  # another record's
    st, err = _state(tmp_path, monkeypatch)
    assert st == {"n": N_STEPS - 1}  # no snapshot left: the patches alone
    assert "0001-cp100.json holds the state at seq" in err
    (cp / "0001-cp100.json").unlink()
    st, err = _state(tmp_path, monkeypatch)
    assert st == {"n": N_STEPS - 1} and "0001-cp100.json is missing" in err


def test_state_and_diff_agree_with_the_in_memory_fold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Across a rollback: the snapshot on the abandoned branch (cp200) is not on the path to the end."""
    seqs = _journal(tmp_path, rollback=True)
    h = history.load(tmp_path)
    for at in (seqs["end"], seqs["rollback"], seqs["rollback"] - 1, seqs["cp200"], 7, 0):
        st, _ = _state(tmp_path, monkeypatch, str(at))
        oracle = history.state_at(tmp_path, h, at, after_result=True)
        assert st == oracle, at
    st, _ = _state(tmp_path, monkeypatch)
    assert st["mark"] == "cp100"  # the end is after the rollback to cp100
    out, _err, rc = _cli(["diff", str(tmp_path), str(seqs["cp200"]), "end", "--json"], monkeypatch)
    changes = [orjson.loads(x) for x in out.splitlines()]
    assert rc == 0 and {c["path"] for c in changes} == {"/n", "/mark"}
    pl = stream.plan(tmp_path)
    assert pl.cuts == {seqs["rollback"]: seqs["cp100"]} and pl.last == seqs["end"]
    assert [c["name"] for c in pl.checkpoints] == ["cp100"]  # cp200 was abandoned


def test_bad_points_are_one_line_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _journal(tmp_path)
    _, err, rc = _cli(["state", str(tmp_path), "--at", "99999"], monkeypatch)
    assert rc == 2 and "no record with seq 99999 (the journal has seqs 0 to" in err
    _, err, rc = _cli(["diff", str(tmp_path), "nope", "end"], monkeypatch)
    assert rc == 2 and "no checkpoint named 'nope' (checkpoints: cp100, cp200)" in err
