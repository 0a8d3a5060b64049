"""A runs root of five runs for the runs list's tests and snapshots: four whose ``run.json`` id is ``run`` (the word
an agent gives every run it starts by hand), one status each, long commands, fixed times."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson

from .conftest import DATA

DAY = 1_795_953_600.0
"""2026-11-29 12:00 UTC: noon, so the date the list shows is the same in every time zone from -11 to +11."""

RUNS: list[tuple[str, str, int, list[str]]] = [
    # directory, run.json status, attempts, command; the first is the newest
    ("20261129-101500-c3d4-research", "running", 2, ["python", "agents/research_agent.py", "--topic",
                                                     "durable execution of long-running agents", "--max-steps", "400"]),
    ("20261129-101200-b2c3-summarize", "failed", 5, ["python", "agents/summarize.py", "--fail", "summarize:3"]),
    ("20261129-100900-a1b2-triage", "stopped", 1, ["node", "triage.js"]),
    ("20261129-100016-aaaa", "succeeded", 3, ["python", "sample_runs/research_agent.py", "--crash-in", "search:q2"]),
    ("minimal", "", 0, []),
]
"""``running`` with no supervisor alive reads as ``crashed``; ``minimal`` is a bare journal (``unknown``)."""


def make_runs_root(root: Path) -> Path:
    """The runs under ``root`` (created), each a copy of the recorded rolled-back run (5 steps), ``minimal`` of
    the bare journal (4 steps)."""
    root.mkdir(mode=0o700)
    for i, (name, status, attempts, command) in enumerate(RUNS):
        run = root / name
        if name == "minimal":
            run.mkdir(mode=0o700)
            shutil.copy(DATA / "minimal.jsonl", run / "journal.jsonl")
        else:
            shutil.copytree(DATA / "rolled_back_run", run)
            meta = orjson.loads((run / "run.json").read_bytes())
            meta.update(id="run", status=status, attempts=attempts, command=command)
            if status == "running":
                del meta["ended"]
            (run / "run.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
        stamp = DAY - 60 * i  # newest first, a minute apart
        for f in [*run.rglob("*"), run]:
            os.utime(f, (stamp, stamp))
    return root
