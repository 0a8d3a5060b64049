"""Checkpoint writes under ``kill -9``: no temporary file stays behind, and one checkpoint record has one file.

Real agents, killed with a real SIGKILL at the two points that matter (the
temporary file written but not renamed; the file renamed but its journal record
not written), then at random points of a run that checkpoints all the time.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from supervisor.core import checkpoints
from supervisor.core.history import load

from ..conftest import ROOT, clean_env, wait_for

AGENT = r'''
import os, signal, sys
from pathlib import Path
from supervisor import Run
from supervisor.core import checkpoints

run_dir, kill_at, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if kill_at == "before-rename":  # the temporary file is written and fsynced, the rename never comes
    real_replace = os.replace
    def replace(src, dst):
        if "checkpoints" in str(src) and str(src).endswith(".tmp"):
            os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst)
    os.replace = replace
elif kill_at == "after-file":  # the file is in place, its journal record never comes
    real_write = checkpoints.write_checkpoint
    def write(*a, **k):
        real_write(*a, **k)
        os.kill(os.getpid(), signal.SIGKILL)
    checkpoints.write_checkpoint = write

with Run.open(run_dir) as run:
    for i in range(rounds):
        run.step(f"work:{i}", lambda: i)
        run.state["round"] = i
        run.state["blob"] = [f"{i}-{k}" * 20 for k in range(2000)]
        run.checkpoint(f"round {i}")
    run.step("done", lambda: "done")
'''


def _cmd(tmp: Path, run_dir: Path, kill_at: str, rounds: int) -> list[str]:
    script = tmp / "agent.py"
    if not script.exists():
        script.write_text(AGENT)
    return [sys.executable, str(script), str(run_dir), kill_at, str(rounds)]


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=clean_env(), cwd=ROOT, capture_output=True, text=True, timeout=60)


def tmp_files(run_dir: Path) -> list[str]:
    return sorted(n for n in os.listdir(run_dir / "checkpoints") if n.endswith(".tmp"))


def check_one_file_per_record(run_dir: Path) -> list[str]:
    """Every checkpoint record names its own file, and every file is named by a record; no temporary files."""
    h = load(run_dir)
    named = [e["file"] for e in h.entries if isinstance(e, dict) and e.get("kind") == "checkpoint"]
    files = [p.name for p in checkpoints.checkpoint_files(run_dir)]
    assert len(named) == len(set(named)), named
    assert sorted(named) == sorted(files), (named, files)
    assert tmp_files(run_dir) == []
    for e in h.entries:  # each file is the state its record was written with
        if isinstance(e, dict) and e.get("kind") == "checkpoint":
            doc = checkpoints.load_checkpoint(run_dir, e["file"])
            assert (doc["seq"], doc["name"], doc["pos"]) == (e["seq"], e["name"], e["pos"])
    return named


@pytest.mark.timeout(60)
def test_a_kill_before_the_rename_leaves_no_tmp_after_the_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    r = _run(_cmd(tmp_path, run_dir, "before-rename", 1))
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert len(tmp_files(run_dir)) == 1  # the kill left it: the window is real
    assert checkpoints.checkpoint_files(run_dir) == []
    r = _run(_cmd(tmp_path, run_dir, "none", 1))
    assert r.returncode == 0, r.stderr
    assert check_one_file_per_record(run_dir) == ["0001-round-0.json"]


@pytest.mark.timeout(60)
def test_a_kill_between_the_file_and_its_record_gives_one_file(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    r = _run(_cmd(tmp_path, run_dir, "after-file", 1))
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert [p.name for p in checkpoints.checkpoint_files(run_dir)] == ["0001-round-0.json"]
    assert not any(isinstance(e, dict) and e.get("kind") == "checkpoint" for e in load(run_dir).entries)
    r = _run(_cmd(tmp_path, run_dir, "none", 1))
    assert r.returncode == 0, r.stderr
    assert check_one_file_per_record(run_dir) == ["0001-round-0.json"]  # written again under its name, not a 0002


@pytest.mark.timeout(60)
def test_a_file_a_record_names_is_never_reused(tmp_path: Path) -> None:
    """The same checkpoint name at the same position again (after a rollback) is a new file."""
    from supervisor import Run

    run_dir = tmp_path / "run"
    with Run.open(run_dir) as run:
        run.step("a", lambda: 1)
        run.state["n"] = 1
        first = run.checkpoint("cp")
        run.state["n"] = 2
        second = run.checkpoint("cp")  # same name, same position: its own file
    assert (first, second) == ("0001-cp.json", "0002-cp.json")
    assert checkpoints.load_checkpoint(run_dir, first)["state"] == {"n": 1}
    check_one_file_per_record(run_dir)


def test_stale_tmp_files_of_dead_writers_only_are_cleaned(tmp_path: Path) -> None:
    d = tmp_path / "run" / "checkpoints"
    d.mkdir(parents=True)
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    dead, live = p.pid, os.getppid()
    names = [
        f".0001-cp.json.{dead}.a1b2c3.tmp",  # a killed write: cleaned
        f".0002-cp.json.{live}.a1b2c3.tmp",  # a live process may be writing it: kept
        "notes.tmp",  # not a checkpoint's temporary file: kept
        f".journal.jsonl.{dead}.a1b2c3.tmp",  # not a checkpoint's: kept
    ]
    for n in names:
        (d / n).write_bytes(b"x")
    assert checkpoints.clean_stale_tmp(tmp_path / "run") == [names[0]]
    assert sorted(os.listdir(d)) == sorted(names[1:])


@pytest.mark.timeout(60)
def test_random_kills_during_checkpoints_leave_one_file_per_record_and_no_tmp(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cmd = _cmd(tmp_path, run_dir, "none", 40)
    rng = random.Random(int(os.environ.get("SEED", "0")) or None)
    kills = 0
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline and kills < 8:
        with open(tmp_path / "stderr", "wb") as err:
            p = subprocess.Popen(cmd, env=clean_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        before = len(checkpoints.checkpoint_files(run_dir)) if (run_dir / "checkpoints").exists() else 0
        # wait until this attempt writes checkpoints, then kill it at a random moment
        wait_for(
            lambda: p.poll() is not None
            or ((run_dir / "checkpoints").exists() and len(checkpoints.checkpoint_files(run_dir)) > before),
            timeout=30,
            what="a checkpoint of this attempt",
        )
        time.sleep(rng.uniform(0, 0.05))
        if p.poll() is not None:
            break  # finished before the kill
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
        kills += 1
    if p.poll() is None:
        p.wait(30)
    r = _run(cmd)  # the last attempt runs to the end
    assert r.returncode == 0, r.stderr
    assert kills >= 3, f"only {kills} kills"
    named = check_one_file_per_record(run_dir)
    assert len(named) == 40
    st = orjson.loads(_run([sys.executable, "-m", "supervisor", "state", str(run_dir)]).stdout)
    assert st["round"] == 39
