"""Helpers for the model-call tests: the fake upstream as a process of its own, the agents, their runs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...conftest import clean_env, wait_for

HERE = Path(__file__).resolve().parent
PY = sys.executable
FAKE_UPSTREAM = HERE / "fake_upstream.py"

OPENAI_KEY = "sk-test-" + os.urandom(12).hex()
ANTHROPIC_KEY = "sk-ant-test-" + os.urandom(12).hex()
"""The agents' credentials: random per test session, so finding one in a file is never a coincidence."""


def key_sha(key: str) -> str:
    """How the fake upstream names the credential a request carried (``key_sha`` of its counts)."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Agent:
    name: str
    argv: tuple[str, ...]
    calls: int
    """Model calls the agent makes (what it asks for, a retry not counted)."""
    requests: dict[str, int]
    """Requests a fresh upstream serves for one run, by path (the openai agent's 429 and its retry are two)."""
    statuses: tuple[int, ...] = ()
    """The statuses other than 200 among them."""
    slow: bool = False
    """One of its calls is a ``SLOW`` stream (about a second long)."""
    needs: tuple[str, ...] = field(default=())

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def missing(self) -> str | None:
        for tool in self.needs:
            if shutil.which(tool) is None:
                return f"{tool!r} is not installed"
        return None


AGENTS = {
    a.name: a
    for a in (
        Agent("openai", (PY, str(HERE / "openai_agent.py")), calls=7,
              requests={"/v1/chat/completions": 6, "/v1/responses": 2}, statuses=(429,)),
        Agent("anthropic", (PY, str(HERE / "anthropic_agent.py")), calls=6, requests={"/v1/messages": 6}, slow=True),
        Agent("node", ("node", str(HERE / "node_agent.mjs")), calls=6, requests={"/v1/chat/completions": 6},
              slow=True, needs=("node",)),
        Agent("curl", ("bash", str(HERE / "curl_agent.sh")), calls=6,
              requests={"/v1/chat/completions": 3, "/v1/messages": 3}, needs=("bash", "curl")),
    )
}
ENV_AGENT = (PY, str(HERE / "env_agent.py"))


def base_env() -> dict[str, str]:
    """The test's environment without supervisor variables and without any model endpoint or key of the
    user's (``OPENAI_*``, ``ANTHROPIC_*``): the agents see only what a test gives them."""
    env = {k: v for k, v in clean_env().items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env["PYTHON"] = PY  # the curl agent's JSON helper: this interpreter (a pyenv shim costs 0.3 s a call)
    return env


def agent_env(upstream_url: str, out: Path, **extra: str) -> dict[str, str]:
    """An agent's environment pointing it straight at an upstream (``url`` without a path)."""
    return {
        **base_env(),
        "OPENAI_BASE_URL": f"{upstream_url}/v1",
        "OPENAI_API_KEY": OPENAI_KEY,
        "ANTHROPIC_BASE_URL": upstream_url,
        "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
        "AGENT_OUT": str(out),
        **extra,
    }


class UpstreamProcess:
    """``fake_upstream.py`` as a process of its own (the tests kill agents, never it); a context manager."""

    def __init__(self, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.port_file = work / "upstream.port"
        self.count_file = work / "upstream.counts.json"
        self.log = work / "upstream.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [PY, str(FAKE_UPSTREAM), "--port-file", str(self.port_file), "--count-file", str(self.count_file)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=base_env(),
            )
        wait_for(lambda: self.port_file.exists() or self.proc.poll() is not None, timeout=20,
                 what="the fake upstream's port file")
        if self.proc.poll() is not None:
            raise RuntimeError(f"the fake upstream exited {self.proc.returncode}: {self.log.read_text()}")
        self.port = int(self.port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}"

    def counts(self) -> dict[str, Any]:
        """The counts file (rewritten atomically at each request's arrival and end)."""
        return json.loads(self.count_file.read_bytes())

    def in_flight(self) -> int:
        return sum(1 for r in self.counts()["requests"] if r["state"] == "started")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self) -> UpstreamProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def served(counts: dict[str, Any]) -> Counter[tuple[str, str, int]]:
    """The requests of a counts snapshot as a multiset of (path, body hash, status)."""
    return Counter((r["path"], r["body_sha"], r["status"]) for r in counts["requests"])


@dataclass
class DirectRun:
    output: str
    counts: dict[str, Any]
    stdout: str


def run_direct(agent: Agent, work: Path, timeout: float = 60.0) -> DirectRun:
    """Run ``agent`` straight against a fresh upstream of its own (no proxy); fail the test unless it exits 0."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "answer.txt"
    with UpstreamProcess(work) as up:
        r = subprocess.run(list(agent.argv), capture_output=True, text=True, timeout=timeout,
                           env=agent_env(up.url, out), cwd=work, stdin=subprocess.DEVNULL)
        counts = up.counts()
    assert r.returncode == 0, f"{agent.name} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return DirectRun(out.read_text(), counts, r.stdout)


_REFS: dict[str, DirectRun] = {}


def direct_reference(agent: Agent, tmp_path_factory: Any) -> DirectRun:
    """``run_direct`` once per session and agent: the reference the proxied runs are compared with."""
    if agent.name not in _REFS:
        _REFS[agent.name] = run_direct(agent, tmp_path_factory.mktemp(f"direct-{agent.name}"))
    return _REFS[agent.name]
