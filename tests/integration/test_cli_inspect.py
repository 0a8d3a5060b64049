"""``log``, ``state`` and ``diff`` as a user runs them, bad input included."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ..conftest import run_agent, run_cli


@pytest.fixture(scope="module")
def crashed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    run_agent(run_dir, "--crash-in", "search:q2")
    assert run_agent(run_dir, "--crash-in", "search:q2").returncode == 0
    return run_dir


def test_log_prints_the_effective_history(crashed_run: Path) -> None:
    p = run_cli("log", str(crashed_run))
    assert p.returncode == 0 and p.stderr == ""
    lines = p.stdout.splitlines()
    assert len(lines) == 15
    assert "start" in lines[0] and "attempt 1" in lines[0]
    assert any("checkpoint plan-done" in line for line in lines)
    assert "write_report" in lines[-1]


def test_log_json_is_normalised_jsonl(crashed_run: Path) -> None:
    p = run_cli("log", str(crashed_run), "--json")
    recs = [orjson.loads(x) for x in p.stdout.splitlines()]
    assert [r["seq"] for r in recs] == list(range(15))
    assert {r["kind"] for r in recs} == {"start", "begin", "step", "checkpoint"}


def test_log_all_marks_abandoned_branches(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    for _ in range(4):
        run_agent(run_dir, "--fail", "summarize:99")
    plain = run_cli("log", str(run_dir)).stdout.splitlines()
    every = run_cli("log", str(run_dir), "--all").stdout.splitlines()
    marked = [line for line in every if line.startswith("~ ")]
    assert len(marked) == len(every) - len(plain) > 0
    assert all("summarize" in line or "start" in line for line in marked)
    js = [orjson.loads(x) for x in run_cli("log", str(run_dir), "--all", "--json").stdout.splitlines()]
    assert sum(1 for r in js if r.get("abandoned")) == len(marked)


def test_bad_lines_are_reported_with_line_numbers_and_do_not_fail(tmp_path: Path) -> None:
    (tmp_path / "journal.jsonl").write_text('{"step": "a", "output": 1}\nnot json at all\n{"step": "b", "output": 2}\n')
    p = run_cli("log", str(tmp_path))
    assert p.returncode == 0
    assert "journal.jsonl:2: skipped, not JSON" in p.stderr
    assert len(p.stdout.splitlines()) == 2


def test_state_and_diff(crashed_run: Path) -> None:
    st = orjson.loads(run_cli("state", str(crashed_run)).stdout)
    assert st["summary"].startswith("answer-") and len(st["findings"]) == 2
    at_cp = orjson.loads(run_cli("state", str(crashed_run), "--at", "plan-done").stdout)
    assert set(at_cp) == {"plan", "queries"}
    d = run_cli("diff", str(crashed_run), "plan-done", "research-done")
    assert d.returncode == 0
    assert d.stdout.splitlines() == ['+ /findings: ["durable agents q1 result 0","durable agents q2 result 0"]']
    js = [orjson.loads(x) for x in run_cli("diff", str(crashed_run), "plan-done", "14", "--json").stdout.splitlines()]
    assert {c["path"] for c in js} == {"/findings", "/summary"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["log", "/nonexistent/run"], "no such run directory"),
        (["state", "{crashed}", "--at", "999"], "no record with seq 999"),
        (["diff", "{crashed}", "nope", "0"], "no checkpoint named 'nope'"),
        (["log", "{file}"], "is a file, not a run directory"),
        (["log", "{newer}"], "newer than this version reads"),
        (["log"], "the following arguments are required"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(crashed_run: Path, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "afile.txt").write_text("x")
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / "run.json").write_text('{"format": 7}')
    args = [a.format(crashed=crashed_run, file=tmp_path / "afile.txt", newer=newer) for a in args]
    p = run_cli(*args)
    assert p.returncode == 2
    assert message in p.stderr
    assert "Traceback" not in p.stderr


def test_unreadable_journal_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "journal.jsonl").mkdir()  # root reads everything, but not a directory as a file
    p = run_cli("log", str(tmp_path))
    assert p.returncode == 2
    assert "journal.jsonl is a directory, not a regular file" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_log_into_a_closed_pipe_is_a_quiet_exit(tmp_path: Path, extra: list[str]) -> None:
    """``log RUN | head -1``: no "Broken pipe; check the path", no traceback; the status of a tool killed by SIGPIPE.
    (The streaming log writes a chunk's lines at once: a write cut short by the closed pipe must still fail.)"""
    import subprocess
    import sys

    from supervisor.core.journal_writer import JournalWriter

    from ..conftest import ROOT, clean_env

    with JournalWriter(tmp_path, durable=False) as w:
        for i in range(20_000):  # far more than a pipe buffer holds
            w.append({"kind": "step", "step": f"s{i}", "output": "x" * 40})
    proc = subprocess.Popen([sys.executable, "-m", "supervisor", "log", str(tmp_path), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=clean_env(), cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as head does after its line
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(30) == 141, err
    assert b"s0" in first
    assert err == b"", err


@pytest.mark.parametrize(
    "argv",
    [
        ["rollback", "{d}", "--to", "start"],
        ["state", "{d}"],
        ["log", "{d}"],
        ["status", "{d}"],
        ["diff", "{d}", "0", "1"],
        ["fork", "{d}", "--at", "0"],
        ["replay", "{d}", "--verify", "--", "true"],
    ],
)
def test_a_directory_that_is_not_a_run_is_one_line_exit_2_and_nothing_written(tmp_path: Path, argv: list[str]) -> None:
    d = tmp_path / "notes"
    d.mkdir()
    (d / "todo.txt").write_text("not a run\n")
    before = sorted(p.name for p in d.iterdir())
    r = run_cli(*[a.format(d=d) for a in argv])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "is not a run directory" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""
    assert sorted(p.name for p in d.iterdir()) == before, "a command wrote into a directory that is not a run"
