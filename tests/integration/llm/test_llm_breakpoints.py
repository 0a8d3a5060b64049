"""A breakpoint on ``llm:*`` holds a proxied model call before it goes upstream (issue 24): an agent that knows
nothing of this package (plain ``urllib``), ``supervise --llm-proxy --break``, the CLI as a person types it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from ...conftest import ROOT, wait_for
from ..supervisor_util import PY, Supervised
from .util import UpstreamProcess, agent_env

AGENT = '''
import json, os, urllib.request
base = os.environ["OPENAI_BASE_URL"]
out = []
for q in ("first question", "second question", "third question"):
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": q}]}).encode()
    req = urllib.request.Request(base + "/chat/completions", data=body, method="POST",
                                 headers={"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    with urllib.request.urlopen(req, timeout=60) as r:
        out.append(json.loads(r.read())["choices"][0]["message"]["content"])
open(os.environ["AGENT_OUT"], "w").write(json.dumps(out))
'''

GIVEN = {"id": "given-1", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "answered by a person"},
                      "finish_reason": "stop"}]}


def _cli(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "supervisor", *map(str, args)], capture_output=True, text=True, timeout=60,
                          cwd=ROOT)


def _held(sup: Supervised, n: int) -> dict[str, Any] | None:
    """The status's pause once the ``n``-th call is held (its ``pause`` record in ``llm.jsonl``)."""
    if sum(1 for r in _llm(sup.run_dir) if r.get("kind") == "pause") < n:
        return None
    p: dict[str, Any] | None = sup.try_status().get("paused")
    return p if p and p.get("seq") is not None and p.get("reason") == "breakpoint" else None


def _llm(run: Path) -> list[dict[str, Any]]:
    path = run / "llm.jsonl"
    return [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []


@pytest.mark.timeout(120)
def test_a_breakpoint_holds_a_model_call_before_it_goes_upstream(tmp_path: Path) -> None:
    agent, out = tmp_path / "agent.py", tmp_path / "out.json"
    agent.write_text(AGENT)
    run = tmp_path / "run"
    with UpstreamProcess(tmp_path / "up") as up, Supervised(
        run, [PY, str(agent)], "-q", "--llm-proxy", "--break", "llm:openai:*", "--hang-timeout", "1",
        env=agent_env(up.url, out), out_dir=tmp_path,
    ) as sup:
        first = wait_for(lambda: _held(sup, 1), timeout=30, what="the first call held")
        assert first["step"] == "llm:openai:gpt-4o-mini" and first["inputs"]["messages"][0]["content"] == "first question"
        assert up.counts()["total"] == 0  # held: nothing went upstream
        # edit the request body, then run it
        edited = {**first["inputs"], "messages": [{"role": "user", "content": "an edited question"}]}
        assert _cli("continue", run, "--inputs", json.dumps(edited)).returncode == 0
        wait_for(lambda: _held(sup, 2), timeout=30, what="the second call held")
        assert up.counts()["total"] == 1
        # skip the second: the answer is given by hand, never asked upstream
        r = _cli("continue", run, "--output", json.dumps(GIVEN))
        assert r.returncode == 0, r.stderr
        wait_for(lambda: _held(sup, 3), timeout=30, what="the third call held")
        assert _cli("continue", run, "--all").returncode == 0
        assert sup.wait(60) == 0, sup.stderr()[-2000:]
        assert up.counts()["total"] == 2
        assert sup.events("hang") == []  # held well past --hang-timeout 1
        assert [e["step"] for e in sup.events("paused")] == ["llm:openai:gpt-4o-mini"] * 3
    answers = json.loads(out.read_text())
    assert answers[1] == "answered by a person"
    steps = [r for r in _llm(run) if r.get("kind", "step") == "step"]
    assert steps[0]["given_inputs"]["messages"][0]["content"] == "an edited question"
    assert steps[1]["given"] is True and steps[1]["output"]["body"] == GIVEN
    assert [r["choice"] for r in _llm(run) if r.get("kind") == "choice"] == ["inputs", "output", "all"]
