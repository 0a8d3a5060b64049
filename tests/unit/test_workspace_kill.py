"""``kill -9`` in the middle of a snapshot: no snapshot is committed, every object in place is whole, and the
next snapshot works (a real child process, a real SIGKILL)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.core import workspace as ws
from tests.conftest import ROOT, clean_env, wait_for

CHILD = """
import sys
from pathlib import Path
from supervisor.core import workspace as ws
run_dir = Path(sys.argv[1])
ws.take(run_dir, ws.settings_of(run_dir), for_="start", seq=None, by="sdk")
print("done")
"""


def started(store: Path) -> bool:
    """A snapshot is writing: a temporary file (other than the clock) or an object exists."""
    try:
        tmp = [n for n in os.listdir(store / "tmp") if n != "clock"]
        return bool(tmp) or bool(os.listdir(store / "objects"))
    except FileNotFoundError:
        return False


@pytest.mark.timeout(60)
def test_sigkill_during_a_snapshot_leaves_no_snapshot_and_the_next_one_works(tmp_path: Path) -> None:
    root = tmp_path / "work"
    for d in range(12):
        (root / f"d{d}").mkdir(parents=True)
        for i in range(50):  # 600 files, 60 MB: long enough to be killed in the middle
            (root / f"d{d}/f{i}.bin").write_bytes(hashlib.sha256(f"{d}/{i}".encode()).digest() * 3200)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    settings = ws.Settings(root.resolve())
    ws.declare(run_dir, settings)
    store = run_dir / "workspace"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(run_dir)], cwd=ROOT, env=clean_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: started(store) or child.poll() is not None, timeout=30, interval=0.001,
                 what="the snapshot to start writing")
        os.kill(child.pid, signal.SIGKILL)
    finally:
        out, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, (out, err)  # killed, not finished
    assert ws.Store(run_dir).index() == [] and ws.committed(run_dir) == []
    for p in (store / "objects").rglob("*"):
        if p.is_file():  # an object in place is whole: written, synced, then renamed
            assert hashlib.sha256(p.read_bytes()).hexdigest() == p.parent.name + p.name
    ref = ws.take(run_dir, settings, for_="start", seq=None, by="sdk")
    assert ws.committed(run_dir) == [ref] and ref.files == 600
    assert os.listdir(store / "tmp") == ["clock"]  # the killed snapshot's temporary files swept
    m = ws.Store(run_dir).manifest(ref.snapshot)
    copy = tmp_path / "copy"
    ws.materialize(run_dir, m, copy)
    for rel in m.files:
        assert (copy / rel).read_bytes() == (root / rel).read_bytes()
