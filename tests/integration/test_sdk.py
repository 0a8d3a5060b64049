"""The agent SDK, with the sample agent as a real process where it matters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from supervisor import EXIT_FAILED, EXIT_ROLLBACK, DivergenceError, FormatError, Run
from supervisor.core.history import load

from ..conftest import ROOT, clean_env, run_agent


def ledger(run_dir: Path) -> list[dict]:
    return [orjson.loads(x) for x in (run_dir / "ledger.jsonl").read_bytes().splitlines()]


def test_crash_in_step_3_then_resume_replays_two_and_executes_three(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = run_agent(run_dir, "--crash-in", "search:q2")
    assert first.returncode == 1 and "crashing hard in search:q2" in first.stderr
    second = run_agent(run_dir, "--crash-in", "search:q2")
    assert second.returncode == 0, second.stderr
    assert "replayed ['plan', 'search:q1']" in second.stdout
    assert "executed ['search:q2', 'summarize', 'write_report']" in second.stdout
    assert "model calls in total: 2" in second.stdout
    assert [e["kind"] for e in ledger(run_dir)].count("model") == 2
    h = load(run_dir)
    # the crash left a begin record without its step: the step in flight
    begins = [r for r in h.effective if r["kind"] == "begin" and r["step"] == "search:q2"]
    assert len(begins) == 2
    assert [s["step"] for s in h.steps] == ["plan", "search:q1", "search:q2", "summarize", "write_report"]
    meta = orjson.loads((run_dir / "run.json").read_bytes())
    assert meta["status"] == "succeeded" and meta["format"] == 1


def test_repeated_failures_roll_back_and_the_agent_changes_strategy(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    codes = [run_agent(run_dir, "--fail", "summarize:99").returncode for _ in range(3)]
    assert codes == [1, 1, EXIT_ROLLBACK]
    h = load(run_dir)
    rb = h.rollbacks[-1]
    assert rb["checkpoint"] == "research-done" and rb["failed_step"] == "summarize" and rb["by"] == "sdk"
    assert "3 consecutive failures" in rb["reason"]
    done = run_agent(run_dir, "--fail", "summarize:99")
    assert done.returncode == 0, done.stderr
    assert "executed ['summarize', 'write_report']" in done.stdout
    assert "rollbacks: 1" in done.stdout
    h = load(run_dir)
    assert len(h.branches) == 1 and {r["step"] for r in h.branches[0].records if r["kind"] == "step"} == {"summarize"}
    # the abandoned failures stay in the file
    assert sum(1 for e in h.entries if e.get("error")) == 3


def test_past_max_rollbacks_the_run_is_marked_failed_and_kept(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    script = tmp_path / "always_fails.py"
    script.write_text(
        "import sys\nfrom supervisor import Run\n"
        "with Run.open(sys.argv[1], max_failures=2, max_rollbacks=1) as run:\n"
        "    run.step('ok', lambda: 1)\n"
        "    run.checkpoint('cp')\n"
        "    run.step('bad', lambda: 1 / 0)\n"
    )
    codes = []
    for _ in range(6):
        p = subprocess.run(
            [sys.executable, str(script), str(run_dir)], capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=30
        )
        codes.append(p.returncode)
        if p.returncode == EXIT_FAILED:
            assert "gave up after 1 rollbacks" in p.stderr
            break
    assert codes == [1, EXIT_ROLLBACK, 1, EXIT_FAILED]
    assert orjson.loads((run_dir / "run.json").read_bytes())["status"] == "failed"
    h = load(run_dir)
    assert h.effective[-1]["kind"] == "note" and h.effective[-1]["status"] == "failed"
    assert sum(1 for e in h.entries if e.get("error")) == 4


def test_max_rollbacks_counts_every_rollback_of_the_run_not_only_the_effective_ones(tmp_path: Path) -> None:
    """A step after a checkpoint that always fails: each rollback abandons the one before it, so counting
    the effective rollbacks never passed 1 and the run rolled back (and paid the model) forever."""
    run_dir = tmp_path / "run"
    script = tmp_path / "always_fails.py"
    ledger = tmp_path / "model_calls.txt"
    script.write_text(
        "import sys\nfrom pathlib import Path\nfrom supervisor import Run\n"
        "def model():\n"
        "    with open(sys.argv[2], 'a') as f:\n"
        "        f.write('call\\n')\n"
        "    return 1\n"
        "with Run.open(sys.argv[1], max_failures=1, max_rollbacks=3) as run:\n"
        "    run.step('ok', lambda: 1)\n"
        "    run.checkpoint('cp')\n"
        "    run.step('model', model)\n"
        "    run.step('bad', lambda: 1 / 0)\n"
    )
    codes = []
    for _ in range(12):  # bounded: the old count never stopped
        p = subprocess.run([sys.executable, str(script), str(run_dir), str(ledger)], capture_output=True, text=True,
                           env=clean_env(), cwd=ROOT, timeout=30)
        codes.append(p.returncode)
        if p.returncode == EXIT_FAILED:
            assert "gave up after 3 rollbacks" in p.stderr
            break
    assert codes == [EXIT_ROLLBACK, EXIT_ROLLBACK, EXIT_ROLLBACK, EXIT_FAILED]
    assert ledger.read_text().count("call") == 4  # one model call per branch, then it stops paying
    assert orjson.loads((run_dir / "run.json").read_bytes())["status"] == "failed"


def test_transient_errors_are_retried_with_backoff(tmp_path: Path) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise TimeoutError("rate limited")
        return "ok"

    with Run.open(tmp_path, transient=(TimeoutError,), retries=2, backoff=0.001) as run:
        assert run.step("call", flaky) == "ok"
    h = load(tmp_path)
    errs = [r for r in h.effective if r.get("error")]
    assert len(errs) == 2 and all(r["transient"] for r in errs)
    assert h.steps[0]["output"] == "ok"


def test_divergence_is_reported_with_position_expected_and_actual(tmp_path: Path) -> None:
    with Run.open(tmp_path) as run:
        run.step("plan", lambda: 1)
        run.step("search:q1", lambda: 2)
    run = Run.open(tmp_path)
    run.step("plan", lambda: 1)
    with pytest.raises(DivergenceError) as exc:
        run.step("search:other", lambda: 3)
    assert (exc.value.position, exc.value.expected, exc.value.actual) == (1, "search:q1", "search:other")
    run.close()


def test_divergence_in_a_process_exits_with_the_permanent_failure_code(tmp_path: Path) -> None:
    with Run.open(tmp_path / "run") as run:
        run.step("plan", lambda: 1)
    script = tmp_path / "changed.py"
    script.write_text("import sys\nfrom supervisor import Run\nwith Run.open(sys.argv[1]) as run:\n    run.step('other', lambda: 1)\n")
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True, env=clean_env(), timeout=30)
    assert p.returncode == EXIT_FAILED
    assert "replay diverged at step position 0" in p.stderr and "Traceback" not in p.stderr


def test_loops_match_by_position_and_state_is_restored(tmp_path: Path) -> None:
    calls = []

    def work(i: int) -> int:
        calls.append(i)
        return i * 10

    with Run.open(tmp_path) as run:
        for i in range(3):
            run.state.setdefault("acc", []).append(run.step("work", work, i))
    assert calls == [0, 1, 2]
    with Run.open(tmp_path) as run:
        outs = [run.step("work", work, i) for i in range(4)]
        assert outs == [0, 10, 20, 30]
        assert run.replayed == ["work"] * 3 and run.executed == ["work"]
        assert run.state == {"acc": [0, 10, 20]}
    assert calls == [0, 1, 2, 3]


def test_decorator_form_and_idempotency_keys(tmp_path: Path) -> None:
    keys = []
    with Run.open(tmp_path / "r") as run:

        @run.task(name=lambda q: f"search:{q}")
        def search(q: str) -> str:
            keys.append(run.key)
            return q.upper()

        assert search("a") == "A" and search("b") == "B"
        assert run.key is None
    assert keys == ["r:0", "r:1"]
    h = load(tmp_path / "r")
    assert [(s["step"], s["key"], s["inputs"]) for s in h.steps] == [
        ("search:a", "r:0", {"args": ["a"]}),
        ("search:b", "r:1", {"args": ["b"]}),
    ]


def test_secrets_never_reach_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "very-secret-value-123")
    with Run.open(tmp_path / "r", secrets=["registered-secret-42"]) as run:
        run.state["auth"] = "Bearer abcdefghijklmnop"
        run.step("call", lambda k: f"used {k} and registered-secret-42", os.environ["OPENAI_API_KEY"])
        run.step("tokens", lambda: "sk-abcdefghijklmnopqrstuvwx ghp_abcdefghijklmnopqrstuvwxyz0123 AKIAABCDEFGHIJKLMNOP")
        run.checkpoint("cp")
    blob = b"".join(p.read_bytes() for p in (tmp_path / "r").rglob("*") if p.is_file())
    for secret in (
        b"very-secret-value-123", b"registered-secret-42", b"abcdefghijklmnop", b"sk-abcdefghij", b"ghp_abcdefghij", b"AKIAABCDEFGH"
    ):
        assert secret not in blob
    assert b"[REDACTED]" in blob


def test_non_json_output_is_a_clear_error_and_inputs_fall_back_to_repr(tmp_path: Path) -> None:
    class Thing:
        def __repr__(self) -> str:
            return "<Thing>"

    with Run.open(tmp_path) as run:
        assert run.step("takes", lambda t: "ok", Thing()) == "ok"
        with pytest.raises(TypeError, match=r"step .returns. returned a value"):
            run.step("returns", lambda: Thing())
    assert load(tmp_path).steps[0]["inputs"] == {"args": ["<Thing>"]}


def test_default_run_dir_resumes_when_the_script_runs_twice(tmp_path: Path) -> None:
    script = tmp_path / "tiny_agent.py"
    script.write_text("from supervisor import Run\nwith Run.open() as run:\n    print(run.step('only', lambda: 'x'), run.replayed)\n")
    outs = [
        subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=clean_env(), timeout=30).stdout
        for _ in range(2)
    ]
    assert outs == ["x []\n", "x ['only']\n"]
    assert (tmp_path / "runs" / "tiny_agent" / "journal.jsonl").exists()


def test_supervisor_environment_names_the_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SUPERVISOR_RUN_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("AGENT_SUPERVISOR_ATTEMPT", "4")
    with Run.open() as run:
        assert run.run_dir == tmp_path / "from-env" and run.attempt == 4


def test_newer_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text('{"format": 99}')
    with pytest.raises(FormatError, match="upgrade agent-supervisor"):
        Run.open(tmp_path)


def test_resume_continues_seq_after_blank_bad_and_torn_lines(tmp_path: Path) -> None:
    from supervisor.core.segments import count_lines

    (tmp_path / "journal.jsonl").write_bytes(b'{"step": "a", "output": 1}\n\nnot json\n{"step": "b", "output": 2}\n{"step": "to')
    with Run.open(tmp_path) as run:
        assert run.step("a", lambda: 0) == 1 and run.step("b", lambda: 0) == 2
        run.step("c", lambda: 3)
    # lines 0 a, 1 blank, 2 not JSON, 3 b; then start 4, begin c 5, step c 6
    recs = load(tmp_path).effective
    assert [(r["seq"], r["kind"], r.get("step")) for r in recs[-3:]] == [(4, "start", None), (5, "begin", "c"), (6, "step", "c")]
    assert count_lines(tmp_path) == 7
    assert (tmp_path / "journal.jsonl.torn").read_bytes() == b'{"step": "to\n'


PYDANTIC_INPUTS = '''
import sys
from pydantic import BaseModel
from supervisor import Run

class Query(BaseModel):
    url: str
    depth: int

with Run.open(sys.argv[1]) as run:
    print(run.step("fetch", lambda q: f"{q.url}:{q.depth}", Query(url="http://example.invalid", depth=2)))
'''


@pytest.mark.timeout(60)
def test_pydantic_inputs_are_journaled_as_json_and_still_match_on_resume(tmp_path: Path) -> None:
    """A pydantic model passed to a step was journaled as its repr string (issue 26, item 12): now as its JSON dump,
    and a resume still serves the step without a changed-inputs warning."""
    agent = tmp_path / "agent.py"
    agent.write_text(PYDANTIC_INPUTS)
    runs = [subprocess.run([sys.executable, str(agent), str(tmp_path / "run")], capture_output=True, text=True,
                           timeout=60, env=clean_env(), cwd=ROOT) for _ in range(2)]
    assert [r.stdout for r in runs] == ["http://example.invalid:2\n"] * 2
    assert "changed since it was recorded" not in runs[1].stderr, runs[1].stderr
    step = next(r for r in load(tmp_path / "run").steps if r["step"] == "fetch")
    assert step["inputs"] == {"args": [{"url": "http://example.invalid", "depth": 2}]}


def test_every_run_gets_its_own_uid(tmp_path: Path) -> None:
    """Two runs of one directory name (a directory deleted and made again) never share the id traces derive from
    (issue 29, item 1); reopening a run keeps it."""
    uids = []
    for _ in range(2):
        run = Run.open(tmp_path / "agent")
        run.step("a", lambda: 1)
        run.close()
        meta = orjson.loads((tmp_path / "agent" / "run.json").read_bytes())
        again = Run.open(tmp_path / "agent")
        again.close()
        assert orjson.loads((tmp_path / "agent" / "run.json").read_bytes())["uid"] == meta["uid"]
        uids.append(meta["uid"])
        import shutil

        shutil.rmtree(tmp_path / "agent")
    assert len(uids[0]) == 32 and uids[0] != uids[1]
