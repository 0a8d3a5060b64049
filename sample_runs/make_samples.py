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
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

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
    cmd = [
        sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run_dir), "-q",
        "--backoff-initial", "0.05", "--", sys.executable, str(AGENT), *agent_args,
    ]
    subprocess.run(cmd, check=True, env=env, cwd=HERE.parent, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    for transient in ("journal.lock", "supervisor.lock", "control.sock"):
        (run_dir / transient).unlink(missing_ok=True)
    return run_dir


def main() -> int:
    root = HERE / "runs"
    root.mkdir(exist_ok=True)
    for name, args in SCENARIOS.items():
        print(f"recorded {make(name, args, root)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
