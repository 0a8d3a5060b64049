"""A run whose state holds code, a long note and nested values, changed by one step: for the diff screen's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from supervisor.core.state import make_patch

CODE_A = """def fetch(url, retries=3):
    for attempt in range(retries):
        try:
            return http.get(url, timeout=10)
        except TimeoutError:
            log.warning("timeout on %s", url)
    raise FetchError(url)


def parse(page):
    return page.json()
"""
CODE_B = CODE_A.replace("timeout=10", "timeout=30").replace(
    '            log.warning("timeout on %s", url)\n',
    '            log.warning("timeout on %s (attempt %d)", url, attempt)\n            time.sleep(2 ** attempt)\n',
)
NOTE = ("The agent searched three sources for durable execution frameworks and kept the ones with a journal: "
        "Temporal, DBOS and Restate; the fourth, a queue, was dropped because it replays nothing.")

STATE_A: dict[str, Any] = {
    "plan": ["search", "summarize"],
    "code": CODE_A,
    "note": NOTE,
    "budget": {"tokens": 12000, "usd": 0.5},
    "draft": "first draft",
}
STATE_B: dict[str, Any] = {
    "plan": ["search", "summarize", "review"],
    "code": CODE_B,
    "note": NOTE.replace("three sources", "four sources").replace("dropped", "left out"),
    "budget": {"tokens": 9000, "usd": 0.5},
    "sources": {"temporal": "https://temporal.io/blog/durable-execution-explained-for-people-who-write-agents",
                "dbos": "https://docs.dbos.dev/architecture"},
}


def make_diff_run(tmp: Path) -> Path:
    """``tmp/diff-run``: the state at step #0 is ``STATE_A``, at step #1 ``STATE_B`` (a step's state is the state
    after its result, which the next record's patch carries)."""
    run = tmp / "diff-run"
    run.mkdir(mode=0o700)
    recs = [
        {"kind": "step", "seq": 0, "step": "draft", "output": "ok"},
        {"kind": "step", "seq": 1, "step": "revise", "output": "ok", "state_patch": make_patch({}, STATE_A)},
        {"kind": "step", "seq": 2, "step": "review", "output": "ok", "state_patch": make_patch(STATE_A, STATE_B)},
    ]
    (run / "journal.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    (run / "run.json").write_bytes(orjson.dumps({"id": "diff-run", "format": 1, "status": "succeeded",
                                                 "command": ["python", "agent.py"], "attempts": 1}))
    return run
