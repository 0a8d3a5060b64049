"""Regenerate the recorded runs in ``sample_runs/runs/`` with the real supervisor and sample agent.

    .venv/bin/python sample_runs/make_samples.py

- ``clean``: the research agent, no trouble;
- ``crashed-resumed``: it crashes hard (``os._exit(1)``) inside ``search:q2`` on its
  first attempt; the supervisor restarts it with ``--resume``; it replays ``plan``
  and ``search:q1`` and finishes;
- ``rolled-back``: ``summarize`` fails three times in a row; the SDK rolls back to
  the ``research-done`` checkpoint; the agent changes strategy and finishes. The
  three failures stay in the journal as an abandoned branch.

Open them with ``agent-supervisor replay sample_runs/runs/crashed-resumed``.
Timestamps, pids and ids differ on each regeneration; steps and outputs do not.

The runs are shipped, so they hold no path of the machine that made them
(``tests/unit/test_no_absolute_paths.py`` checks): the supervisor runs in
``sample_runs/`` with ``--run-dir runs/NAME`` and the command ``python
research_agent.py`` (the venv's ``bin`` first on PATH, so ``python`` is this
interpreter); afterwards the two absolute paths the supervisor records are
written relative to the run directory: ``cwd`` in ``run.json`` (``../..``,
which ``replay`` takes from the run directory) and ``run_dir`` in the
``supervisor-start`` event (``.``); and in the tracebacks of the failed steps
(journal, exit events, ``agent.log``) the repository's absolute path is cut,
so they read ``File "sample_runs/research_agent.py"``. ``replay --verify``
runs a recorded ``python`` with the interpreter that runs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson

from supervisor.core import rundir

HERE = Path(__file__).resolve().parent
AGENT = HERE / "research_agent.py"
SCENARIOS: dict[str, list[str]] = {
    "clean": [],
    "crashed-resumed": ["--crash-in", "search:q2"],
    "rolled-back": ["--fail", "summarize:3"],
}


def make(name: str, agent_args: list[str], root: Path) -> Path:
    run_dir = root / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    cmd = [
        sys.executable, "-m", "supervisor", "supervise", "--run-dir", os.path.relpath(run_dir, HERE), "-q",
        "--backoff-initial", "0.05", "--", "python", AGENT.name, *agent_args,
    ]
    subprocess.run(
        cmd, check=True, env=env, cwd=HERE,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
    )
    for transient in ("journal.lock", "supervisor.lock", "control.sock"):
        (run_dir / transient).unlink(missing_ok=True)
    make_portable(run_dir)
    return run_dir


def make_portable(run_dir: Path) -> None:
    """Write the absolute paths the supervisor recorded relative to the run directory (see the module's docstring)."""
    meta = rundir.read_run_json(run_dir)
    rundir.update_run_json(run_dir, cwd=os.path.relpath(str(meta["cwd"]), run_dir.resolve()))
    events = run_dir / "supervisor.jsonl"
    lines = []
    for raw in events.read_bytes().splitlines():
        ev = orjson.loads(raw)
        if ev.get("event") == "supervisor-start" and isinstance(ev.get("run_dir"), str):
            ev["run_dir"] = os.path.relpath(ev["run_dir"], run_dir.resolve())
        lines.append(orjson.dumps(ev) + b"\n")
    events.write_bytes(b"".join(lines))
    repo = str(HERE.parent).encode() + b"/"
    for p in sorted(run_dir.rglob("*")):
        if p.is_file() and repo in (data := p.read_bytes()):
            p.write_bytes(data.replace(repo, b""))


def main() -> int:
    root = HERE / "runs"
    root.mkdir(exist_ok=True)
    for name, args in SCENARIOS.items():
        print(f"recorded {make(name, args, root)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
