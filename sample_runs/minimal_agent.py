"""A durable loop written by hand, without the SDK: the journal is just ``{"step", "output"}`` lines.

It shows that the supervisor needs nothing but the file contract. On start it
reads ``journal.jsonl`` (in ``$AGENT_SUPERVISOR_RUN_DIR`` or ``--run-dir``),
skips the steps already there, and appends each new step with ``fsync``. Side
effects go to ``ledger.jsonl`` so tests can count them.

    agent-supervisor supervise -- python sample_runs/minimal_agent.py --steps 5 --crash-at 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def done_steps(journal: Path) -> dict[str, object]:
    """The outputs of the steps already committed (complete lines only)."""
    try:
        data = journal.read_bytes()
    except FileNotFoundError:
        return {}
    done: dict[str, object] = {}
    for raw in data[: data.rfind(b"\n") + 1].splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict) and "step" in rec and "output" in rec:
            done[str(rec["step"])] = rec["output"]
    return done


def append_line(path: Path, obj: dict[str, object]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(obj) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=None)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--crash-at", type=int, default=-1, help="exit 1 before step N on the first attempt")
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    run_dir = args.run_dir or Path(os.environ.get("AGENT_SUPERVISOR_RUN_DIR", "runs/minimal_agent"))
    run_dir.mkdir(parents=True, exist_ok=True)
    journal, ledger = run_dir / "journal.jsonl", run_dir / "ledger.jsonl"
    attempt = int(os.environ.get("AGENT_SUPERVISOR_ATTEMPT", "1"))
    done = done_steps(journal)
    print(f"minimal_agent: attempt {attempt}, resume={args.resume}, {len(done)} steps already done", flush=True)
    total = 0
    for i in range(args.steps):
        name = f"step-{i}"
        if name in done:
            total += int(done[name])  # type: ignore[call-overload]
            continue
        if i == args.crash_at and attempt == 1:
            print(f"minimal_agent: crashing before {name}", file=sys.stderr, flush=True)
            os._exit(1)
        append_line(ledger, {"step": name, "pid": os.getpid()})
        out = i * 10
        append_line(journal, {"step": name, "output": out})
        total += out
    print(f"minimal_agent: total {total}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
