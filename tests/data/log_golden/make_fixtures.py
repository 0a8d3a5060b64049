"""Build the golden journals and the expected outputs of ``log``/``state``/``diff`` (by the code before streaming).

    python tests/data/log_golden/make_fixtures.py OLD_TREE [SDK_RUNS]

The journals (``<case>/``) are written in the SDK's shapes, key order included, so the
streaming reader's canonical fast path is what they test, with rollbacks (nested, to
the start, naming no checkpoint), a fork and notes, transient and final failures,
overlapping steps, steps in flight and interrupted, damaged and foreign lines, hand-written
lines and rotated segments. ``OLD_TREE`` is a work tree of the commit before the streaming
commands (``git worktree add /tmp/wt_before e9ad7a4``): its ``agent-supervisor`` writes
``expected/<case>/<command>.out`` and ``.err``, which ``tests/unit/test_log_stream.py`` compares byte for byte.
``async`` and ``sdk-rollbacks`` are journals the real SDK wrote (copied in once).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SAMPLES = ROOT / "sample_runs" / "runs"


class J:
    """A journal written in the SDK's key order."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.n = 0

    def ts(self) -> str:
        return f"2026-11-30T10:{self.n // 60:02d}:{self.n % 60:02d}.{self.n % 1000:03d}Z"

    def add(self, rec: dict[str, Any]) -> int:
        seq = len(self.lines)
        rec = {**rec, "seq": seq, "id": f"g{seq:x}", "ts": self.ts()}
        self.lines.append(orjson.dumps(rec))
        self.n += 1
        return seq

    def raw(self, line: bytes) -> None:
        self.lines.append(line)
        self.n += 1

    def start(self, attempt: int, resume: bool) -> int:
        return self.add({"kind": "start", "attempt": attempt, "pid": 100 + attempt, "resume": resume, "argv": ["a.py"]})

    def begin(self, name: str, pos: int, attempt: int) -> int:
        return self.add({"kind": "begin", "step": name, "pos": pos, "attempt": attempt, "inputs": {"args": [name]}})

    def step(self, name: str, pos: int, attempt: int, output: Any = None, *, error: str | None = None,
             transient: bool = False, patch: list[Any] | None = None, **extra: Any) -> int:
        rec: dict[str, Any] = {"kind": "step", "step": name, "pos": pos, "attempt": attempt, "inputs": {"args": [name]}}
        if error is not None:
            rec["error"] = {"type": "Boom", "message": error}
            if transient:
                rec["transient"] = True
        else:
            rec["output"] = output
        rec["dur_ms"] = 0.5
        rec.update(extra)
        if patch:
            rec["state_patch"] = patch
        return self.add(rec)

    def both(self, name: str, pos: int, attempt: int, output: Any = None, **kw: Any) -> int:
        self.begin(name, pos, attempt)
        return self.step(name, pos, attempt, output, **kw)

    def checkpoint(self, run: Path, name: str, pos: int, state: Any, patch: list[Any] | None = None) -> int:
        number = len(list((run / "checkpoints").glob("*.json"))) + 1
        fname = f"{number:04d}-{name}.json"
        seq = len(self.lines)
        ts = self.ts()
        doc = {"name": name, "seq": seq, "pos": pos, "ts": ts, "format": 1, "state": state}
        (run / "checkpoints" / fname).write_bytes(orjson.dumps(doc))
        rec: dict[str, Any] = {"kind": "checkpoint", "name": name, "pos": pos}
        if patch:
            rec["state_patch"] = patch
        rec.update({"file": fname, "ts": ts, "seq": seq, "id": f"g{seq:x}"})
        self.lines.append(orjson.dumps(rec))
        self.n += 1
        return seq

    def rollback(self, cp: dict[str, Any] | None, reason: str) -> int:
        return self.add({"kind": "rollback", "checkpoint": cp["name"] if cp else None,
                         "checkpoint_seq": cp["seq"] if cp else None, "reason": reason, "by": "cli"})

    def write(self, path: Path) -> None:
        path.write_bytes(b"".join(x + b"\n" for x in self.lines))


def _run(case: str) -> Path:
    run = HERE / case
    if run.exists():
        shutil.rmtree(run)
    (run / "checkpoints").mkdir(parents=True)
    return run


def nested() -> None:
    """Nested rollbacks, a rollback to the start and one naming no checkpoint; fork, notes, failures,
    concurrent steps, a step in flight at the end and one interrupted by a crash."""
    run = _run("nested")
    j = J()
    j.start(1, False)
    j.both("plan", 0, 1, "p", patch=[{"op": "add", "path": "/plan", "value": "p"}])
    a = j.checkpoint(run, "a", 1, {"plan": "p"})
    j.both("search:q1", 1, 1, [1, 2], patch=[{"op": "add", "path": "/n", "value": 1}])
    j.begin("search:q2", 2, 1)
    j.step("search:q2", 2, 1, error="timeout", transient=True)
    j.step("search:q2", 2, 1, {"hits": {"b": 2, "a": 1}}, patch=[{"op": "replace", "path": "/n", "value": 2}])
    b = j.checkpoint(run, "b", 3, {"plan": "p", "n": 2}, patch=[{"op": "add", "path": "/b", "value": True}])
    j.both("write", 3, 1, "draft 1", patch=[{"op": "add", "path": "/draft", "value": 1}])
    j.begin("review", 4, 1)  # interrupted by the crash below
    j.start(2, True)
    j.add({"kind": "note", "message": "changed inputs", "step": "write", "pos": 3})
    j.both("review", 4, 2, "ok")
    j.rollback({"name": "b", "seq": b}, "review said no")
    j.start(3, True)
    j.both("write", 3, 3, "draft 2", patch=[{"op": "add", "path": "/draft", "value": 2}])
    j.rollback({"name": "a", "seq": a}, "start over from a")  # abandons the rollback to b too
    j.both("search:q1", 1, 3, [3], patch=[{"op": "add", "path": "/n", "value": 10}])
    # two steps at once (asyncio.gather): begins before steps, steps out of call order
    j.begin("fetch:x", 2, 3)
    j.begin("fetch:y", 3, 3)
    j.step("fetch:y", 3, 3, "y", patch=[{"op": "add", "path": "/y", "value": 1}])
    j.step("fetch:x", 2, 3, "x", patch=[{"op": "add", "path": "/x", "value": 1}])
    j.add({"kind": "fork", "from_run": "other", "at_seq": 5, "reason": "try again"})
    j.rollback({"name": "gone", "seq": 999}, "names no checkpoint")
    j.both("final", 4, 3, "done", patch=[{"op": "add", "path": "/final", "value": "done"}])
    j.step("boom", 5, 3, error="for good")
    j.checkpoint(run, "c", 5, {"plan": "p", "n": 10, "x": 1, "y": 1, "final": "done"})
    j.both("more", 5, 3, {"k": "\u00e9\u2603 \"q\" \\ \n tab\t"}, patch=[{"op": "add", "path": "/more", "value": 1}])
    j.both("model:gpt-x", 6, 3, "hi", call={"kind": "model", "model": "gpt-x", "provider": "openai"},
           usage=[{"model": "gpt-x", "provider": "openai", "input_tokens": 10, "output_tokens": 5}])
    j.both("tool:search", 7, 3, "found", call={"kind": "tool", "tool": "search", "call_id": "c1"})
    j.rollback(None, "from the start")
    j.start(4, True)
    j.both("plan", 0, 4, "p2", patch=[{"op": "add", "path": "/plan", "value": "p2"}])
    j.both("model:gpt-4o", 1, 4, "answer", call={"kind": "model", "model": "gpt-4o", "provider": "openai"},
           usage=[{"model": "gpt-4o", "provider": "openai", "input_tokens": 1200, "output_tokens": 300, "cached_tokens": 1000}])
    j.both("model:unknown", 2, 4, "x", call={"kind": "model", "model": "no-such-model", "provider": "nobody"},
           usage=[{"input_tokens": 7, "output_tokens": 3}])
    j.both("tool:search", 3, 4, "found", call={"kind": "tool", "tool": "search", "call_id": "c2"})
    j.begin("long", 4, 4)  # in flight at the end
    j.write(run / "journal.jsonl")


def damaged() -> None:
    """``nested`` with damaged, foreign, blank, text-prefixed and hand-written lines, and a snapshot gone."""
    src = HERE / "nested"
    run = _run("damaged")
    for p in (src / "checkpoints").iterdir():
        shutil.copy(p, run / "checkpoints" / p.name)
    (run / "checkpoints" / "0002-b.json").unlink()  # a snapshot missing: state rebuilt from the patches
    lines = (src / "journal.jsonl").read_bytes().split(b"\n")[:-1]
    lines[5] = b"\x00" * len(lines[5])  # a NUL-filled step line
    lines[12] = lines[12][: len(lines[12]) // 2]  # a line cut short (begin of review, attempt 2)
    lines[16] = b"Traceback (most recent call last): the agent printed this"  # foreign
    lines[20] = b""  # blank
    lines[24] = b'2026-11-30 10:00:01 | INFO | ' + lines[24]  # text prefix
    lines.insert(27, b'{"step": "hand", "output": {"x": 1}, "ts": "2026-11-30T11:00:00Z"}')
    lines.insert(28, b'{"kind": "step", "step": "spaced", "pos": 40, "output": 1.50, "seq": 28, "ts": "2026-11-30T11:00:01Z"}')
    lines.insert(29, b'[1, 2, 3]')
    lines[-4] = lines[-4][:40] + b"\xff\xfe" + lines[-4][42:]  # invalid UTF-8 inside a step line
    (run / "journal.jsonl").write_bytes(b"".join(x + b"\n" for x in lines))


def rotated() -> None:
    """``nested`` split into two sealed segments and the active file."""
    src = HERE / "nested"
    run = _run("rotated")
    for p in (src / "checkpoints").iterdir():
        shutil.copy(p, run / "checkpoints" / p.name)
    lines = (src / "journal.jsonl").read_bytes().split(b"\n")[:-1]
    cuts = [0, 11, 25, len(lines)]
    names = ["journal.000001.jsonl", "journal.000002.jsonl", "journal.jsonl"]
    for name, a, b in zip(names, cuts, cuts[1:], strict=False):
        (run / name).write_bytes(b"".join(x + b"\n" for x in lines[a:b]))


def handwritten() -> None:
    """The minimal hand-written format: no kind, no seq, no pos, json.dumps spacing, a rollback by name."""
    run = _run("handwritten")
    recs: list[dict[str, Any]] = [
        {"step": "a", "output": 1},
        {"step": "b", "result": 2, "time": "2026-11-30T09:00:00Z"},
        {"kind": "checkpoint", "name": "cp", "file": "missing.json", "state_patch": [{"op": "add", "path": "/a", "value": 1}]},
        {"step": "c", "output": 3, "seq": 77},
        {"kind": "begin", "step": "d"},
        {"step": "d", "error": "bad"},
        {"kind": "rollback", "checkpoint": "cp", "reason": "by hand"},
        {"step": "c", "output": 4, "state_patch": [{"op": "add", "path": "/c", "value": 4}]},
        {"kind": "begin", "step": "e"},
        {"kind": "begin", "step": "f"},
    ]
    import json

    (run / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def sdk_copies(sources: dict[str, Path]) -> None:
    for case, src in sources.items():
        run = _run(case)
        shutil.copy(src / "journal.jsonl", run / "journal.jsonl")
        if (src / "checkpoints").is_dir():
            for p in (src / "checkpoints").iterdir():
                shutil.copy(p, run / "checkpoints" / p.name)


CASES = ["nested", "damaged", "rotated", "handwritten", "async", "sdk-rollbacks"]
SAMPLE_CASES = ["clean", "crashed-resumed", "rolled-back"]


def commands(case: str) -> dict[str, list[str]]:
    """The commands compared for a case (name -> arguments after RUN_DIR)."""
    cmds = {
        "log": [], "log-json": ["--json"], "log-all": ["--all"], "log-all-json": ["--all", "--json"],
        "state": [], "state-at-5": ["--at", "5"],
    }
    if case in ("nested", "damaged", "rotated"):
        cmds.update({"state-at-14": ["--at", "14"], "state-at-19": ["--at", "19"], "state-at-a": ["--at", "a"],
                     "diff-3-30": ["3", "30"], "diff-3-30-json": ["3", "30", "--json"], "state-at-38": ["--at", "38"]})
    return cmds


def command_line(cmd: str, run: str, args: list[str]) -> list[str]:
    if cmd.startswith("diff"):
        return ["diff", run, *args]
    return [cmd.split("-")[0], run, *args]


def expected(old: Path) -> None:
    out_dir = HERE / "expected"
    shutil.rmtree(out_dir, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")}
    env["PYTHONPATH"] = str(old)
    for case in CASES + SAMPLE_CASES:
        cwd = SAMPLES if case in SAMPLE_CASES else HERE
        (out_dir / case).mkdir(parents=True)
        for name, args in commands(case).items():
            p = subprocess.run([sys.executable, "-m", "supervisor", *command_line(name, case, args)],
                               capture_output=True, cwd=cwd, env=env, timeout=60)
            (out_dir / case / f"{name}.out").write_bytes(p.stdout)
            (out_dir / case / f"{name}.err").write_bytes(p.stderr + f"exit {p.returncode}\n".encode())


def main() -> None:
    old = Path(sys.argv[1])
    nested()
    damaged()
    rotated()
    handwritten()
    if len(sys.argv) > 2:  # where the real SDK's journals were written (the agents' runs)
        sdk_copies({"async": Path(sys.argv[2]) / "async", "sdk-rollbacks": Path(sys.argv[2]) / "rb4"})
    expected(old)


if __name__ == "__main__":
    main()
