"""A test agent whose steps are model and tool calls with recorded token usage (issue 12's tests).

    python tests/integration/usage_agent.py RUN_DIR [--crash-in STEP --crash-marker FILE] [--fail STEP] [--secret VALUE]

Each model step records ``run.usage`` with fixed token counts (``CALLS``), so the
tests can price them by hand. ``--crash-in`` crashes hard (``os._exit(1)``) inside
that step the first time (while ``--crash-marker`` does not exist; it is created
first); ``--fail`` makes that step raise once the first time (a failed step record).
``--secret`` puts a value in the first model step's inputs and output (to test redaction);
``--wait-after STEP --wait-file F`` waits after STEP until F exists (up to 30 s).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from supervisor import Run

# (step name, call, usage (input, output, cached) or None for a tool)
CALLS: list[tuple[str, dict[str, str], tuple[int, int, int] | None]] = [
    ("model:gpt-4o", {"kind": "model", "model": "gpt-4o", "provider": "openai"}, (1200, 300, 200)),
    ("tool:search", {"kind": "tool", "tool": "search", "call_id": "call_1"}, None),
    ("model:claude-sonnet-4-5", {"kind": "model", "model": "claude-sonnet-4-5", "provider": "anthropic"}, (2000, 500, 1500)),
    ("checkpoint", {}, None),
    ("model:local-llama", {"kind": "model", "model": "local-llama", "provider": "ollama"}, (800, 100, 0)),
    ("tool:write", {"kind": "tool", "tool": "write", "call_id": "call_2"}, None),
    ("model:gpt-4o-mini", {"kind": "model", "model": "gpt-4o-mini", "provider": "openai"}, (5000, 1000, 0)),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("--resume", action="store_true")  # added by the supervisor on restarts
    p.add_argument("--crash-in")
    p.add_argument("--crash-marker")
    p.add_argument("--fail")
    p.add_argument("--secret", default="")
    p.add_argument("--wait-after", help="after this step, wait until --wait-file exists (a test looks meanwhile)")
    p.add_argument("--wait-file")
    args = p.parse_args(argv)
    run = Run.open(args.run_dir)
    failed_once = Path(args.run_dir) / "failed-once"

    def call(name: str, usage: tuple[int, int, int] | None, call: dict[str, str], prompt: str) -> str:
        if name == args.crash_in and args.crash_marker and not os.path.exists(args.crash_marker):
            Path(args.crash_marker).touch()
            os._exit(1)
        if usage is not None:
            run.usage(model=call["model"], provider=call["provider"], input_tokens=usage[0],
                      output_tokens=usage[1], cached_tokens=usage[2])
        if name == args.fail and not failed_once.exists():
            failed_once.touch()
            raise RuntimeError(f"{name} failed")
        return f"answer of {name} to {prompt}"

    for i, (name, c, usage) in enumerate(CALLS):
        if name == "checkpoint":
            run.checkpoint("researched")
            continue
        prompt = f"prompt {i} {args.secret}" if i == 0 and args.secret else f"prompt {i}"
        for _ in range(2):  # a failed step is tried again once
            try:
                run.state[name] = run.with_options(call=c).step(name, call, name, usage, c, prompt)
                break
            except RuntimeError:
                continue
        if name == args.wait_after and args.wait_file:
            deadline = time.monotonic() + 30
            while not os.path.exists(args.wait_file) and time.monotonic() < deadline:
                time.sleep(0.02)
    run.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
