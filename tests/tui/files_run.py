"""A run with a workspace, made by the SDK (its ``start`` and checkpoint snapshots), and the ``files`` events the
supervisor records while it watches the workspace (written here with its own ``EventLog``).

Three steps: ``plan`` (no file), ``edit:app`` (changes ``app.py``, creates ``notes.md``, deletes ``scratch.txt``),
``test`` (no file; ``build.log`` appears after it, between steps); checkpoints ``planned`` and ``edited``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from supervisor import Run
from supervisor.core import workspace
from supervisor.core.events import EventLog

APP_V1 = "def answer():\n    return 41\n\n\nprint(answer())\n"
APP_V2 = "def answer():\n    return 42\n\n\nprint(answer())\n"
NOTES = "# notes\nthe answer is 42\n"
SCRATCH = "scratch\n"
BUILD_LOG = "built\n"


@dataclass
class FilesRun:
    run_dir: Path
    ws: Path
    seqs: dict[str, int]
    """``planned``, ``edited`` (checkpoints), ``plan``, ``edit:app``, ``test`` (step records), ``begin:edit:app``."""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make_files_run(root: Path, *, events: bool = True) -> FilesRun:
    """The run (``root/run``) and its workspace (``root/ws``); ``events``: with the supervisor's ``files`` events."""
    ws = root / "ws"
    ws.mkdir()
    (ws / "app.py").write_text(APP_V1)
    (ws / "scratch.txt").write_text(SCRATCH)
    run_dir = root / "run"

    def edit() -> str:
        (ws / "app.py").write_text(APP_V2)
        (ws / "notes.md").write_text(NOTES)
        (ws / "scratch.txt").unlink()
        return "edited"

    with Run(run_dir, workspace=ws) as run:
        run.step("plan", lambda: "plan it")
        run.checkpoint("planned")
        run.step("edit:app", edit)
        run.checkpoint("edited")
        run.step("test", lambda: "ok")
    (ws / "build.log").write_text(BUILD_LOG)
    recs = [orjson.loads(line) for line in (run_dir / "journal.jsonl").read_bytes().splitlines()]
    seqs: dict[str, int] = {}
    for r in recs:
        if r.get("kind") == "checkpoint":
            seqs[r["name"]] = r["seq"]
        elif r.get("kind") == "step":
            seqs[r["step"]] = r["seq"]
        elif r.get("kind") == "begin":
            seqs["begin:" + r["step"]] = r["seq"]
    if events:
        begin = next(r for r in recs if r.get("kind") == "begin" and r["step"] == "edit:app")
        _emit(run_dir, begin, seqs["test"])
    return FilesRun(run_dir, ws, seqs)


def _emit(run_dir: Path, begin: dict[str, Any], between_seq: int) -> None:
    """The events a supervisor watching the workspace writes: the edit step's changes, then ``build.log``
    created after the last step (its content stored, as the supervisor stores what it sees)."""
    workspace.Store(run_dir).put(BUILD_LOG.encode())
    log = EventLog(run_dir)
    try:
        log.emit("files", begin.get("attempt", 1), seq=begin["seq"], during="step", step="edit:app", pos=begin["pos"],
                 changes=[
                     {"path": "app.py", "op": "changed", "before": sha(APP_V1), "after": sha(APP_V2)},
                     {"path": "notes.md", "op": "created", "before": None, "after": sha(NOTES)},
                     {"path": "scratch.txt", "op": "deleted", "before": sha(SCRATCH), "after": None},
                 ])
        log.emit("files", begin.get("attempt", 1), seq=between_seq, during="between",
                 changes=[{"path": "build.log", "op": "created", "before": None, "after": sha(BUILD_LOG)}])
    finally:
        log.close()
