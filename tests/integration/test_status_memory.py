"""``status`` reads what it needs in flat memory (issue 28, item 16: it peaked at 475 MB on 1,000,000 records, the
usage fold keeping every page of the journal's map resident). Measured as a child's peak RSS, two journal sizes
apart by ten times: the peak must not follow the journal's size."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest

from ..conftest import clean_env
from .supervisor_util import PY


def _journal(run: Path, steps: int, *, foreign: bool) -> None:
    """A finished run of ``steps`` begin/step pairs of about 300 bytes in the writer's form (or, ``foreign``,
    with sorted keys and spaces: a journal written by another language)."""
    run.mkdir()
    (run / "run.json").write_bytes(orjson.dumps({"id": "r", "format": 1, "status": "succeeded", "command": ["a"]}))
    lines = [orjson.dumps({"kind": "start", "attempt": 1, "pid": 1, "resume": False, "seq": 0, "id": "s0",
                           "ts": "2026-12-05T10:00:00.000Z"})]
    pad = "x" * 150
    for i in range(steps):
        seq = 1 + 2 * i
        ts = "2026-12-05T10:00:00.001Z"
        begin = {"kind": "begin", "step": f"work:{i}", "pos": i, "attempt": 1, "inputs": {"args": [i]},
                 "seq": seq, "id": f"b{seq}", "ts": ts}
        step = {"kind": "step", "step": f"work:{i}", "pos": i, "attempt": 1, "inputs": {"args": [i]},
                "inputs_hash": "94b266eb06179852", "output": f"{pad}{i}", "dur_ms": 0.1,
                "seq": seq + 1, "id": f"b{seq + 1}", "ts": ts}
        if foreign:
            lines += [orjson.dumps(begin, option=orjson.OPT_SORT_KEYS), orjson.dumps(step, option=orjson.OPT_SORT_KEYS)]
        else:
            lines += [orjson.dumps(begin), orjson.dumps(step)]
    (run / "journal.jsonl").write_bytes(b"\n".join(lines) + b"\n")


def _peak_kib(run: Path) -> int:
    """The peak RSS of ``agent-supervisor status RUN`` (KiB), from ``wait4``."""
    proc = subprocess.Popen([PY, "-m", "supervisor", "status", str(run)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=clean_env())
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0
    return int(usage.ru_maxrss)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("foreign", [False, True], ids=["sdk", "foreign"])
def test_status_memory_does_not_follow_the_journal(tmp_path: Path, foreign: bool) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    _journal(small, 10_000, foreign=foreign)
    _journal(large, 100_000, foreign=foreign)
    size = (large / "journal.jsonl").stat().st_size
    assert size > 40 * 1024 * 1024
    grew = _peak_kib(large) - _peak_kib(small)
    print(f"status peak grew {grew} KiB for {size >> 20} MiB more journal")
    assert grew < 16 * 1024, f"status peak grew {grew >> 10} MiB for a journal of {size >> 20} MiB"
