"""The state after a resume is the state the agent had, byte for byte: real agents, a real ``kill -9``.

The step functions change ``run.state`` themselves, so on resume (where they do
not run) the state comes from the recorded patches alone: a change Python's
``==`` does not see (``1 -> True``, ``1 -> 1.0``) or a shrunk list must be in them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from supervisor import Run
from supervisor.core.journal_reader import JournalReader

from ..conftest import ROOT, clean_env, run_cli, wait_for

AGENT = r'''
import sys, time
from pathlib import Path
import orjson
from supervisor import Run

run_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
with Run.open(run_dir) as run:
    def init():
        run.state["v"] = 1
        run.state["f"] = 1
        run.state["flags"] = [1, 0, 1]
        run.state["queue"] = [{"url": f"https://example.com/{i}", "depth": i % 3} for i in range(3000)]
        run.state["by_id"] = {}
        return "init"

    def change():
        run.state["v"] = True
        run.state["f"] = 1.0
        run.state["flags"][1] = False
        run.state["queue"].pop(0)
        run.state["by_id"][7] = "seven"
        return "changed"

    run.step("init", init)
    run.step("change", change)
    # JSON's rule for keys, in memory too: the int key is the string "7" from the step on
    keys = sorted(run.state["by_id"])
    (out / f"state.{run.attempt}.json").write_bytes(orjson.dumps({"state": run.state, "keys": keys}))
    if run.attempt == 1:
        (out / "ready").touch()
        time.sleep(600)  # killed here with SIGKILL
'''


def _agent(run_dir: Path, out: Path) -> list[str]:
    script = out / "agent.py"
    script.write_text(AGENT)
    return [sys.executable, str(script), str(run_dir), str(out)]


@pytest.mark.timeout(60)
def test_state_survives_kill_9_byte_for_byte(tmp_path: Path) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "out"
    out.mkdir()
    cmd = _agent(run_dir, out)
    with open(out / "stderr.1", "wb") as err:
        p = subprocess.Popen(cmd, env=clean_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for(lambda: (out / "ready").exists() or p.poll() is not None, timeout=30, what="the agent's first attempt")
        assert p.poll() is None, (out / "stderr.1").read_text()
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == -signal.SIGKILL
    r = subprocess.run(cmd, env=clean_env(), cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr

    before = (out / "state.1.json").read_bytes()
    after = (out / "state.2.json").read_bytes()
    assert after == before  # the resumed state is the one the agent had, as JSON bytes
    doc = orjson.loads(after)
    assert doc["keys"] == ["7"]
    st = doc["state"]
    assert st["v"] is True and type(st["f"]) is float and st["flags"] == [1, False, 1] and st["flags"][0] is not True
    assert len(st["queue"]) == 2999 and st["queue"][0]["url"] == "https://example.com/1"

    # the pop(0) is one small remove, not the queue written again
    steps = [e for e in JournalReader(run_dir).load() if isinstance(e, dict) and e.get("step") == "change" and e.get("kind") == "step"]
    assert len(steps) == 1
    patch = steps[0]["state_patch"]
    assert {"op": "remove", "path": "/queue/0"} in patch
    assert len(orjson.dumps(patch)) < 300, patch

    # the CLI's state at the end is the same bytes
    cli = run_cli("state", str(run_dir))
    assert cli.returncode == 0, cli.stderr
    assert orjson.dumps(orjson.loads(cli.stdout)) == orjson.dumps(st)


def _resume_state(run_dir: Path, script: list[tuple[str, object]]) -> bytes:
    """Reopen the run, replay the steps of ``script`` (their functions are not run) and dump the state."""
    with Run.open(run_dir) as run:
        for name, _ in script:
            run.step(name, lambda: None)
        return orjson.dumps(run.state)


def test_a_step_that_only_turns_1_into_true_is_replayed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:

        def one() -> str:
            run.state["v"] = 1
            return "one"

        def true() -> str:
            run.state["v"] = True
            return "true"

        run.step("one", one)
        run.step("true", true)
        had = orjson.dumps(run.state)
    assert _resume_state(run_dir, [("one", None), ("true", None)]) == had


def test_a_change_after_the_last_step_from_1_to_true_is_kept(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        run.state["v"] = 1
        run.step("one", lambda: "one")
        run.state["v"] = True  # after the last step: the 'state at exit' note must carry it
        had = orjson.dumps(run.state)
    with Run.open(run_dir) as run:
        run.step("one", lambda: None)  # replayed
        run.step("two", lambda: None)  # live: the state is the journal's, the note included
        assert orjson.dumps(run.state) == had
