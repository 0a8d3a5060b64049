"""One damaged step line in the middle of a real SDK journal: every reader keeps its position and agrees.

Three shapes of damage to the line of step ``s10`` of 20: cut in half, one ``\\xff`` byte,
overwritten with NUL bytes (its newline kept). Readers: ``JournalReader`` (full and the SDK's
lazy view), the fold, the TUI's fast scan and model, ``agent-supervisor log``, the SDK's resume
(it stops with one line naming the line and the repair, exit 78, nothing run, nothing served
for another step) and ``supervise``. The repair it names (a rollback) then lets the run finish.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from supervisor.core.events import read_events
from supervisor.core.history import DAMAGED, Fold, fold, load
from supervisor.core.journal_reader import JournalReader
from supervisor.core.records import BadLine, LazyRecord
from supervisor.views.scan import scan_journal
from supervisor.views.timeline import TimelineModel

from ..conftest import ROOT, clean_env, run_cli
from .supervisor_util import Supervised

N = 20
DAMAGED_STEP = 10

# Every step has the same name and only its input tells it apart: a shifted position would serve
# one step's output for another's without any divergence being noticed.
AGENT = textwrap.dedent(
    """
    import sys
    from supervisor import Run

    run_dir, ledger = sys.argv[1], sys.argv[2]

    def search(i):
        with open(ledger, "a") as f:
            f.write(f"{i}\\n")
        return {"i": i, "hits": [f"r{i}"]}

    with Run.open(run_dir) as run:
        for i in range(N):
            run.state["last"] = i
            out = run.step("search", search, i)
            assert out["i"] == i, f"step {i} was served the output of step {out['i']}"
            if i == 4:
                run.checkpoint("half")
    print("done", len(run.replayed), len(run.executed))
    """
).replace("range(N)", f"range({N})")


def _agent(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    return script, tmp_path / "ledger.txt"


def _run(script: Path, run_dir: Path, ledger: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), str(run_dir), str(ledger)], check=False, capture_output=True, text=True,
                          env=clean_env(), cwd=ROOT, timeout=30)


def _damage(path: Path, seq: int, shape: str) -> tuple[int, int]:
    """Damage line ``seq`` of ``path``; return its line number and byte offset."""
    lines = path.read_bytes().split(b"\n")
    line = lines[seq]
    assert orjson.loads(line)["kind"] == "step"
    if shape == "cut":
        half = line[: len(line) // 2]
        if half.endswith(b"}"):  # the middle fell right after a value (dur_ms and the path vary the length)
            half = half[:-1]
        lines[seq] = half
    elif shape == "xff":
        i = line.index(b'"hits"') + 3
        lines[seq] = line[:i] + b"\xff" + line[i + 1 :]
    else:
        lines[seq] = b"\0" * len(line)
    path.write_bytes(b"\n".join(lines))
    return seq + 1, sum(len(x) + 1 for x in lines[:seq])


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, Path, Path, int]:
    script, ledger = _agent(tmp_path)
    run_dir = tmp_path / "run"
    p = _run(script, run_dir, ledger)
    assert p.returncode == 0 and p.stdout.split() == ["done", "0", str(N)], p.stderr
    recs = [orjson.loads(x) for x in (run_dir / "journal.jsonl").read_bytes().splitlines()]
    seq = next(r["seq"] for r in recs if r["kind"] == "step" and r["pos"] == DAMAGED_STEP)
    return script, ledger, run_dir, seq


SHAPES = ["cut", "xff", "nul"]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_reader_keeps_the_damaged_steps_position(recorded: tuple[Path, Path, Path, int], shape: str) -> None:
    _, _, run_dir, seq = recorded
    journal = run_dir / "journal.jsonl"
    line_no, offset = _damage(journal, seq, shape)

    # the reader: a BadLine in its place, with its file, line and byte offset
    entries = JournalReader(run_dir).load()
    bad = [e for e in entries if isinstance(e, BadLine)]
    assert [(b.seq, b.line, b.offset, b.path) for b in bad] == [(seq, line_no, offset, str(journal))]
    assert bad[0].holds_step and not bad[0].foreign

    # the fold: the damaged line is a step that cannot be served, at position 10; nothing after it shifts
    h = fold(entries)
    assert len(h.steps) == N and [s["pos"] for s in h.steps] == list(range(N))
    assert h.steps[DAMAGED_STEP]["kind"] == DAMAGED and h.steps[DAMAGED_STEP]["seq"] == seq
    assert [s.get("output", {}).get("i") for s in h.steps] == [i if i != DAMAGED_STEP else None for i in range(N)]
    assert h.damaged == [h.steps[DAMAGED_STEP]]
    counting = Fold(keep=False)
    counting.extend(JournalReader(run_dir).load())
    assert counting.step_count == N and counting.problem_count == 1

    # the SDK's lazy view: same positions (a cut or \xff step line stays unparsed until replayed)
    lazy = fold(JournalReader(run_dir).load(lazy=True))
    assert len(lazy.steps) == N and lazy.steps[DAMAGED_STEP]["seq"] == seq
    if shape != "nul":
        assert isinstance(lazy.steps[DAMAGED_STEP], LazyRecord)
    assert all(lazy.steps[i]["seq"] == h.steps[i]["seq"] for i in range(N))

    # the TUI's fast scan and model: the same effective step count, the line flagged as bad
    scan = scan_journal(run_dir)
    f = Fold(keep=False)
    f.extend(scan.markers)
    assert f.step_count == N
    assert [m.seq for m in scan.markers if m.kind == DAMAGED] == [seq]
    m = TimelineModel(run_dir, tail_rows=5)
    m.open()
    m.adopt(scan)
    assert m.effective_steps == N and seq in m.bad_seqs

    # log: the line is shown in its place, named in one warning; the steps after it keep their positions
    p = run_cli("log", str(run_dir))
    assert p.returncode == 0
    assert p.stderr.count("warning:") == 1 and f"journal.jsonl:{line_no}: damaged line (seq {seq}, byte {offset})" in p.stderr
    rows = p.stdout.splitlines()
    assert len(rows) == len(h.effective)
    row = next(r for r in rows if r.split()[0] == str(seq))
    assert "damaged" in row and f"journal.jsonl:{line_no}" in row and "step position 10" in row
    js = [orjson.loads(x) for x in run_cli("log", str(run_dir), "--json").stdout.splitlines()]
    assert [r["pos"] for r in js if r["kind"] in ("step", DAMAGED) and r.get("holds_step", True)] == list(range(N))
    assert next(r for r in js if r["seq"] == seq)["offset"] == offset


@pytest.mark.parametrize("shape", SHAPES)
def test_the_sdk_stops_at_the_damaged_step_naming_it_and_the_repair_works(
    recorded: tuple[Path, Path, Path, int], shape: str
) -> None:
    script, ledger, run_dir, seq = recorded
    line_no, _ = _damage(run_dir / "journal.jsonl", seq, shape)
    ran = ledger.read_text()
    p = _run(script, run_dir, ledger)
    assert p.returncode == 78, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"journal.jsonl:{line_no} (seq {seq}" in err[0] and "position 10" in err[0]
    assert "code changed" not in err[0] and "diverged" not in err[0]
    assert f"agent-supervisor rollback {run_dir} --to " in err[0]
    assert ledger.read_text() == ran, "no step ran: the ten before the line were served, none after it"
    notes = [r for r in (e for e in JournalReader(run_dir).load() if not isinstance(e, BadLine)) if r["kind"] == "note"]
    assert notes and notes[-1]["damaged"]["seq"] == seq

    # the repair the message names: a rollback to the checkpoint before the line; the run then finishes
    cmd = err[0].split("'agent-supervisor ")[1].split("'")[0].split()
    r = run_cli(*cmd)
    assert r.returncode == 0, r.stderr
    p = _run(script, run_dir, ledger)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["done", "5", str(N - 5)], "steps 0-4 served, 5-19 run again after the rollback"
    assert load(run_dir).damaged == []


def test_supervise_names_the_damaged_line(recorded: tuple[Path, Path, Path, int]) -> None:
    """Under ``supervise`` the agent's one line reaches the supervisor's stderr and its exit event:
    the run is not marked failed without a word about the line."""
    script, ledger, run_dir, seq = recorded
    line_no, _ = _damage(run_dir / "journal.jsonl", seq, "nul")
    sup = Supervised(run_dir, [sys.executable, str(script), str(run_dir), str(ledger)], "--no-resume-flag")
    code = sup.wait(timeout=30)
    assert code != 0
    assert f"journal.jsonl:{line_no} (seq {seq}" in sup.stderr()
    exits = [e for e in read_events(run_dir) if e.get("event") == "exit"]
    assert exits and any(f"journal.jsonl:{line_no}" in line for line in exits[-1].get("stderr_tail") or [])
    # the failure's reason keeps the agent's line: in run.json, and so in 'status' after the supervisor is gone
    meta = orjson.loads((run_dir / "run.json").read_bytes())
    assert meta["status"] == "failed" and f"journal.jsonl:{line_no}" in meta["reason"], meta
    st = run_cli("status", str(run_dir))
    assert f"journal.jsonl:{line_no}" in st.stdout, st.stdout


def test_replay_verify_names_the_damaged_line(recorded: tuple[Path, Path, Path, int]) -> None:
    _, ledger, run_dir, seq = recorded
    line_no, _ = _damage(run_dir / "journal.jsonl", seq, "cut")
    ran = ledger.read_text()
    p = run_cli("replay", str(run_dir), "--verify")
    assert p.returncode != 0
    assert f"journal.jsonl:{line_no} (seq {seq}" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert ledger.read_text() == ran


def _line_of(run_dir: Path, pred: object) -> int:
    recs = [orjson.loads(x) for x in (run_dir / "journal.jsonl").read_bytes().splitlines()]
    return next(r["seq"] for r in recs if pred(r))  # type: ignore[operator]


def test_a_damaged_begin_line_costs_nothing(recorded: tuple[Path, Path, Path, int]) -> None:
    """A cut ``begin`` line shows its kind: no step position, and the resume passes it."""
    script, ledger, run_dir, _ = recorded
    seq = _line_of(run_dir, lambda r: r["kind"] == "begin" and r["pos"] == DAMAGED_STEP)
    lines = (run_dir / "journal.jsonl").read_bytes().split(b"\n")
    lines[seq] = lines[seq][:20]
    (run_dir / "journal.jsonl").write_bytes(b"\n".join(lines))
    h = load(run_dir)
    assert len(h.steps) == N and h.damaged == [] and len(h.problems) == 1
    scan = scan_journal(run_dir)
    f = Fold(keep=False)
    f.extend(scan.markers)
    assert f.step_count == N and [m.seq for m in scan.markers if m.kind == DAMAGED] == [seq]
    ran = ledger.read_text()
    p = _run(script, run_dir, ledger)
    assert p.returncode == 0 and p.stdout.split() == ["done", str(N), "0"], p.stderr
    assert ledger.read_text() == ran


def test_a_damaged_checkpoint_line_holds_no_step_but_stops_the_resume(recorded: tuple[Path, Path, Path, int]) -> None:
    """A cut ``checkpoint`` line is not a step (its first bytes say so), but a resume needs what it held:
    the SDK stops there and names a rollback to the start (no checkpoint before it)."""
    script, ledger, run_dir, _ = recorded
    seq = _line_of(run_dir, lambda r: r["kind"] == "checkpoint")
    lines = (run_dir / "journal.jsonl").read_bytes().split(b"\n")
    lines[seq] = lines[seq][:30]
    (run_dir / "journal.jsonl").write_bytes(b"\n".join(lines))
    h = load(run_dir)
    assert len(h.steps) == N and [d["seq"] for d in h.damaged] == [seq] and h.damaged[0]["was"] == "checkpoint"
    scan = scan_journal(run_dir)
    f = Fold(keep=False)
    f.extend(scan.markers)
    assert f.step_count == N
    p = _run(script, run_dir, ledger)
    assert p.returncode == 78 and "a 'checkpoint' record" in p.stderr and "--to start" in p.stderr, p.stderr
    assert run_cli("rollback", str(run_dir), "--to", "start").returncode == 0
    p = _run(script, run_dir, ledger)
    assert p.returncode == 0 and p.stdout.split() == ["done", "0", str(N)], p.stderr


def test_tail_and_index_place_a_damaged_line_as_a_full_read_does(recorded: tuple[Path, Path, Path, int]) -> None:
    """The TUI reads the last screen with tail() and rows with index()/get(): the same file, line and offset."""
    _, _, run_dir, seq = recorded
    line_no, offset = _damage(run_dir / "journal.jsonl", seq, "xff")
    n = len((run_dir / "journal.jsonl").read_bytes().splitlines())
    tail = [e for e in JournalReader(run_dir).tail(n - seq) if isinstance(e, BadLine)]
    r = JournalReader(run_dir)
    r.index()
    got = r.get(seq)
    ranged = [e for e in r.get_range(seq - 2, seq + 2) if isinstance(e, BadLine)]
    for bad in (tail[0], got, ranged[0]):
        assert isinstance(bad, BadLine) and (bad.seq, bad.line, bad.offset) == (seq, line_no, offset), bad
        assert "not valid UTF-8" in bad.reason and bad.holds_step
