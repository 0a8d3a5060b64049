"""The model-call proxy (``supervise --llm-proxy``, ``llm-proxy``) against unmodified agents, written to
/work/llm-proxy-spec.md: openai and anthropic Python clients, Node's fetch, bash + curl.

Each agent runs against a fresh fake upstream (``fake_upstream.py``, a process of its own). A clean run
under the proxy records every request and costs the upstream exactly what the agent costs it without the
proxy. The torture run SIGKILLs the agent at random moments (some mid-stream, in the slow call) and
lets it start over: the upstream still serves each request once (the restarted agent gets the recorded
answers) and the final answer is the clean run's. No file of a run directory holds a credential; a request
without the proxy's secret gets 403 and goes nowhere.

Between a kill and the next attempt the test pauses restarts and waits until every request the upstream
saw is recorded: the spec rebuilds the serving table at each spawn, and a proxy still reading a dead
client's stream to its end must not be raced by the same call from the next attempt.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest

from supervisor.errors import ControlUnavailable

from ...conftest import ROOT, wait_for
from ..supervisor_util import Supervised, alive
from . import fake_upstream
from .util import (
    AGENTS,
    ANTHROPIC_KEY,
    ENV_AGENT,
    OPENAI_KEY,
    PY,
    Agent,
    DirectRun,
    UpstreamProcess,
    agent_env,
    base_env,
    direct_reference,
    key_sha,
    served,
)

OPTS = ("-q", "--llm-proxy", "--no-resume-flag", "--backoff-initial", "0.05", "--backoff-max", "0.2",
        "--rollback-after", "0", "--give-up-after", "50")
"""The agents take no flags; no crash-loop rollback (it would abandon recorded calls); fast restarts."""

KILLS = {"openai": 5, "anthropic": 3, "node": 7, "curl": 7}
"""Kills per agent in the torture run (22 across the four agents; at least 3 of each must land). The
Python agents get fewer: each attempt costs 1.5 to 3 s of imports (anthropic's alone is 3 s of CPU), and the
suite stays under 8 minutes on 2 cores; node and curl start in milliseconds."""
MIN_KILLS = 3

ROUTE = {  # the upstream's path -> (provider, api, the path after the proxy's route)
    "/v1/chat/completions": ("openai", "chat", "/chat/completions"),
    "/v1/responses": ("openai", "responses", "/responses"),
    "/v1/messages": ("anthropic", "messages", "/v1/messages"),
}
UPSTREAM_PATH = {(prov, path): up for up, (prov, _, path) in ROUTE.items()}
HEADER_ALLOWLIST = {"content-type", "anthropic-version", "anthropic-beta", "openai-beta", "request-id",
                    "x-request-id", "openai-processing-ms"}

def reference(agent: Agent, tmp_path_factory: pytest.TempPathFactory) -> DirectRun:
    """The agent's run straight against a fresh upstream (no proxy), once per session."""
    return direct_reference(agent, tmp_path_factory)


def need(agent: Agent) -> None:
    if (why := agent.missing()) is not None:
        pytest.skip(why)


# ---------------------------------------------------------------- reading llm.jsonl


def llm_lines(run_dir: Path) -> list[dict[str, Any]]:
    """The complete lines of llm.jsonl, parsed (a last line still being written is left out)."""
    try:
        raw = (run_dir / "llm.jsonl").read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for line in raw.split(b"\n")[:-1]:
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append({"kind": "unparsable", "raw": line.decode(errors="replace")})
    return out


def n_lines(run_dir: Path) -> int:
    try:
        return (run_dir / "llm.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def steps_of(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in lines if r.get("kind") == "step"]


def n_steps(run_dir: Path) -> int:
    return len(steps_of(llm_lines(run_dir)))


def expanded(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step records with every ``{"$blob": H}`` replaced, blobs defined in file order (the spec's rule)."""
    blobs: dict[str, Any] = {}

    def sub(v: Any) -> Any:
        if isinstance(v, dict):
            if set(v) == {"$blob"}:
                assert v["$blob"] in blobs, f"blob {v['$blob']} used before any line defined it"
                return sub(blobs[v["$blob"]])
            return {k: sub(x) for k, x in v.items()}
        if isinstance(v, list):
            return [sub(x) for x in v]
        return v

    lists: dict[tuple[int, str], list[Any]] = {}
    out = []
    for r in lines:
        for h, v in (r.get("blobs") or {}).items():
            blobs.setdefault(h, v)
        if r.get("kind") == "step":
            inputs = dict(r.get("inputs") or {})
            body = dict(inputs.get("body") or {})
            for name in ("messages", "input"):  # {"$prefix": SEQ, "n": N, "items": [...]}: the layout's rule
                v = body.get(name)
                if isinstance(v, dict) and "$prefix" in v:
                    base = lists[(v["$prefix"], name)]
                    assert v["n"] <= len(base), "a prefix longer than the list it names"
                    body[name] = base[: v["n"]] + v["items"]
            inputs["body"] = body
            rec = {**r, "inputs": sub(inputs)}
            for name in ("messages", "input"):
                if isinstance(rec["inputs"]["body"].get(name), list):
                    lists[(r["seq"], name)] = rec["inputs"]["body"][name]
            out.append(rec)
    return out


def canon_hash(obj: Any) -> str:
    return hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def check_records(run_dir: Path, counts: dict[str, Any], agent: Agent) -> list[dict[str, Any]]:
    """Every request the upstream served is one step record of llm.jsonl that says what it was and holds
    exactly the answer the upstream sent (what ``fake_upstream.render`` makes of the recorded body)."""
    lines = llm_lines(run_dir)
    assert not [r for r in lines if r.get("kind") == "unparsable"], "a line of llm.jsonl is not JSON"
    seqs = [r["seq"] for r in lines if "seq" in r]
    assert seqs == list(range(len(seqs))), f"llm.jsonl's seq is not dense from 0: {seqs}"
    steps = expanded(lines)
    assert len(steps) == counts["total"] == agent.total, (
        f"{len(steps)} call records, the upstream served {counts['total']}, the agent makes {agent.total}")
    seen = Counter()
    for r in steps:
        call, inputs = r["call"], r["inputs"]
        assert call["kind"] == "model" and call["via"] == "proxy", call
        prov = call["provider"]
        up_path = UPSTREAM_PATH[(prov, inputs["path"])]
        assert call["api"] == ROUTE[up_path][1], (call, inputs["path"])
        body = inputs["body"]
        assert r["step"] == f"llm:{prov}:{body['model']}" and call["model"] == body["model"]
        assert call["stream"] == bool(body.get("stream"))
        assert inputs["method"] == "POST"
        assert r["key"] == canon_hash([prov, "POST", inputs["path"], body]), "key is not the spec's identity"
        assert r["match"] == canon_hash([prov, "POST", inputs["path"], body["model"]])
        assert r["k"] == 0, "every body differs within an attempt (a failed call does not count)"
        assert ("output" in r) != ("error" in r), "a record has exactly one of output / error"
        for hdrs in (inputs.get("headers") or {}, (r.get("output") or r.get("error") or {}).get("headers") or {}):
            assert {k.lower() for k in hdrs} <= HEADER_ALLOWLIST, hdrs
        if "error" in r:
            err = r["error"]
            assert err["status"] in agent.statuses and err["type"] == "HTTPError", err
            seen[(up_path, err["status"])] += 1
            continue
        out = r["output"]
        assert out["status"] == 200
        want, use = fake_upstream.render(up_path, body)
        if call["stream"]:
            assert isinstance(want, list)
            assert out["events"] == [e.decode().removesuffix("\n\n") for e in want], "the stream as recorded"
        else:
            assert out["body"] == want, "the answer as recorded"
        says_usage = not (call["stream"] and up_path == "/v1/chat/completions"
                          and not (body.get("stream_options") or {}).get("include_usage"))
        if not says_usage:  # a chat stream without include_usage carries no usage: none is guessed
            assert "usage" not in r, r.get("usage")
            seen[(up_path, 200)] += 1
            continue
        (u,) = r["usage"]
        assert (u["input_tokens"], u["output_tokens"], u["cached_tokens"]) == (
            use["input_tokens"], use["output_tokens"], use["cached_tokens"]), (u, use)
        assert u["provider"] == prov and u["model"] == body["model"]
        seen[(up_path, 200)] += 1
    assert seen == Counter((q["path"], q["status"]) for q in counts["requests"])
    return steps


def check_no_credentials(run_dir: Path) -> None:
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "llm.jsonl" for p in files)
    for p in files:
        data = p.read_bytes()
        for key in (OPENAI_KEY, ANTHROPIC_KEY):
            assert key.encode() not in data, f"{p.relative_to(run_dir)} holds a credential"


def check_upstream_saw_the_agents_keys(counts: dict[str, Any]) -> None:
    for q in counts["requests"]:
        want = key_sha(ANTHROPIC_KEY) if q["path"] == "/v1/messages" else key_sha(OPENAI_KEY)
        assert q["key_sha"] == want, f"the proxy did not forward the agent's own credentials: {q}"


def notes(run_dir: Path, message: str) -> list[dict[str, Any]]:
    return [r for r in llm_lines(run_dir) if r.get("kind") == "note" and r.get("message") == message]


# ---------------------------------------------------------------- (a) a clean run


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", list(AGENTS))
def test_clean_run_records_every_call(name: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    agent = AGENTS[name]
    need(agent)
    ref = reference(agent, tmp_path_factory)
    out = tmp_path / "answer.txt"
    run_dir = tmp_path / "run"
    with UpstreamProcess(tmp_path / "up") as up, \
            Supervised(run_dir, list(agent.argv), *OPTS, env=agent_env(up.url, out), out_dir=tmp_path) as sup:
        code = sup.wait(90)
        assert code == 0, sup.stderr()[-3000:]
        counts = up.counts()
    assert out.read_text() == ref.output, "the agent's answer through the proxy differs from its direct run"
    assert served(counts) == served(ref.counts), "the upstream served other requests than without the proxy"
    check_upstream_saw_the_agents_keys(counts)
    assert notes(run_dir, "llm call served") == [], "nothing to serve in a first attempt"
    steps = check_records(run_dir, counts, agent)
    assert {r["attempt"] for r in steps} == {1}
    check_no_credentials(run_dir)
    # the reader of the spec's Python API sees the same calls, blobs expanded
    from supervisor.core import llm_calls

    read = [{k: v for k, v in r.items() if k not in ("source", "blobs")} for r in llm_calls.step_calls(run_dir)]
    assert read == [{k: v for k, v in r.items() if k != "blobs"} for r in steps]
    assert all(r["source"] == "llm" for r in llm_calls.step_calls(run_dir))


# ---------------------------------------------------------------- (b) the torture run


def slow_started(up: UpstreamProcess) -> bool:
    return any(q["slow"] for q in up.counts()["requests"])


def control(sup: Supervised, cmd: str) -> bool:
    """Send ``cmd``; False if the supervisor is exiting (its agent finished meanwhile)."""
    try:
        sup.request({"cmd": cmd})
        return True
    except ControlUnavailable:
        try:
            sup.wait(15)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the supervisor did not answer {cmd!r} and does not exit") from None
        return False


def quiet(up: UpstreamProcess, run_dir: Path) -> bool:
    """No request in flight at the upstream, and each one it saw is recorded (a dead client's too)."""
    c = up.counts()
    return all(q["state"] != "started" for q in c["requests"]) and n_steps(run_dir) == c["total"]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", list(AGENTS))
def test_kill_9_at_random_moments_costs_nothing_twice(name: str, tmp_path: Path,
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    agent = AGENTS[name]
    need(agent)
    seed = int(os.environ.get("LLM_TORTURE_SEED", "0")) or random.randrange(1, 10**6)
    rng = random.Random(f"{seed}-{name}")
    print(f"llm torture seed {seed} (rerun with LLM_TORTURE_SEED={seed})")
    ref = reference(agent, tmp_path_factory)
    out = tmp_path / "answer.txt"
    run_dir = tmp_path / "run"
    modes: list[str] = []
    with UpstreamProcess(tmp_path / "up") as up, \
            Supervised(run_dir, list(agent.argv), *OPTS, env=agent_env(up.url, out), out_dir=tmp_path) as sup:
        last_pid = None
        while len(modes) < KILLS[name]:
            st = wait_for(
                lambda: sup.proc.poll() is not None
                or (lambda s: s if s.get("state") == "running" and s.get("pid") not in (None, last_pid) else None)(
                    sup.try_status()),
                timeout=60, what=f"a new attempt (kills so far: {modes})",
            )
            if sup.proc.poll() is not None:
                break  # the agent finished before all kills landed: the count below says if enough did
            pid = last_pid = st["pid"]
            lines0, steps0 = n_lines(run_dir), n_steps(run_dir)
            if agent.slow and not modes:
                mode = "mid-slow-stream"
                wait_for(lambda: slow_started(up) or not alive(pid), timeout=60, what="the slow request's start")
                time.sleep(rng.uniform(0.0, 0.5))  # the random moment inside the ~1 s stream (not a wait for a condition)
            elif steps0 < agent.total - 2 and rng.random() < 0.6:
                mode = "after-a-live-call"
                wait_for(lambda: n_steps(run_dir) > steps0 or not alive(pid), timeout=60, interval=0.005,
                         what="a new call record")
                time.sleep(rng.uniform(0.0, 0.015))  # the random moment of the kill
            else:
                mode = "in-replay"
                m = rng.randint(1, max(1, steps0 - 2))
                wait_for(lambda: n_lines(run_dir) >= lines0 + m or not alive(pid), timeout=60, interval=0.005,
                         what=f"{m} new line(s) in llm.jsonl")
            if not control(sup, "pause"):
                break
            try:
                os.kill(pid, signal.SIGKILL)
                modes.append(mode)
            except ProcessLookupError:
                pass  # it finished meanwhile
            wait_for(lambda: sup.proc.poll() is not None or sup.try_status().get("state") == "paused",
                     timeout=30, what="the attempt's end")
            if sup.proc.poll() is not None:
                break
            wait_for(lambda: quiet(up, run_dir), timeout=30,
                     what="every request the upstream saw recorded in llm.jsonl (a killed client's call too)")
            if not control(sup, "resume"):
                break
        code = sup.wait(120)
        assert code == 0, sup.stderr()[-3000:]
        counts = up.counts()
    print(f"{agent.name}: {len(modes)} kills: {Counter(modes)}")
    assert len(modes) >= MIN_KILLS, f"only {len(modes)} kills landed before the agent finished: {modes}"
    killed = [e for e in sup.events("exit") if e.get("signal") == "SIGKILL"]
    assert len(killed) == len(modes)
    assert out.read_text() == ref.output, "the final answer differs from an uncrashed run's"
    assert served(counts) == served(ref.counts), (
        "the upstream served a request twice (or one it never saw without the proxy): "
        f"{sorted((served(counts) - served(ref.counts)).elements())}")
    check_upstream_saw_the_agents_keys(counts)
    steps = check_records(run_dir, counts, agent)
    assert len({r["attempt"] for r in steps}) >= 2
    recorded = {r["seq"] for r in steps if "output" in r}
    notes_served = notes(run_dir, "llm call served")
    assert notes_served, "a restarted agent was served no recorded call"
    assert {n["served"] for n in notes_served} <= recorded
    assert notes(run_dir, "llm call diverged") == []
    check_no_credentials(run_dir)


# ---------------------------------------------------------------- (d) the secret, the environment


def request(url: str, body: Any | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.timeout(60)
def test_the_agents_environment_and_the_secret(tmp_path: Path) -> None:
    out, release = tmp_path / "env.json", tmp_path / "release"
    run_dir = tmp_path / "run"
    chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello proxy"}]}
    msg = {"model": "claude-haiku-4-5", "max_tokens": 9, "messages": [{"role": "user", "content": "hello proxy"}]}
    oai = {"Authorization": f"Bearer {OPENAI_KEY}"}
    ant = {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01"}
    with UpstreamProcess(tmp_path / "up") as up, \
            Supervised(run_dir, list(ENV_AGENT), *OPTS, env=agent_env(up.url, out, AGENT_RELEASE=str(release)),
                       out_dir=tmp_path) as sup:
        wait_for(lambda: out.exists() or sup.proc.poll() is not None, timeout=30, what="the agent's environment")
        assert sup.proc.poll() is None, sup.stderr()[-2000:]
        env = json.loads(out.read_text())
        root = env["AGENT_SUPERVISOR_LLM_PROXY"]
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/([0-9a-f]{32})", root or "")
        assert m, f"AGENT_SUPERVISOR_LLM_PROXY={root!r}"
        port, secret = int(m[1]), m[2]
        assert env["OPENAI_BASE_URL"] == env["OPENAI_API_BASE"] == f"{root}/openai"
        assert env["ANTHROPIC_BASE_URL"] == f"{root}/anthropic"
        # it listens on the loopback only
        listening = [c for c in psutil.Process(sup.pid).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
        assert [c.laddr.ip for c in listening] == ["127.0.0.1"]
        base = f"http://127.0.0.1:{port}"
        other = format(int(secret, 16) ^ 1, "032x")  # the secret with its last bit flipped
        for url in (f"{base}/", f"{base}/openai/chat/completions", f"{base}/{other}/openai/chat/completions",
                    f"{base}/{secret[:-1]}/openai/chat/completions", f"{base}/{secret.upper()}x/openai/chat/completions",
                    f"{base}/x{secret}/openai/chat/completions"):
            assert request(url, chat, oai)[0] == 403, url
            assert request(url)[0] == 403, url
        assert request(f"{base}/{other}/anthropic/v1/messages", msg, ant)[0] == 403
        assert up.counts()["total"] == 0, "a request without the secret reached the upstream"
        # with the secret, both routes reach the upstream with the agent's credentials
        status, raw = request(f"{root}/openai/chat/completions", chat, oai)
        assert status == 200 and json.loads(raw) == fake_upstream.render("/v1/chat/completions", chat)[0]
        status, raw = request(f"{root}/anthropic/v1/messages", msg, ant)
        assert status == 200 and json.loads(raw) == fake_upstream.render("/v1/messages", msg)[0]
        counts = up.counts()
        assert [q["path"] for q in counts["requests"]] == ["/v1/chat/completions", "/v1/messages"]
        check_upstream_saw_the_agents_keys(counts)
        release.touch()
        assert sup.wait(30) == 0, sup.stderr()[-2000:]
    assert [r["call"]["provider"] for r in steps_of(llm_lines(run_dir))] == ["openai", "anthropic"]
    check_no_credentials(run_dir)


# ---------------------------------------------------------------- the proxy without a supervisor


class ProxyProcess:
    """``agent-supervisor llm-proxy RUN_DIR``: its ``export`` lines read from stdout."""

    def __init__(self, run_dir: Path, upstream_url: str, log: Path) -> None:
        env = {**base_env(), "OPENAI_BASE_URL": f"{upstream_url}/v1", "ANTHROPIC_BASE_URL": upstream_url}
        self.err = open(log, "wb")
        self.proc = subprocess.Popen([PY, "-m", "supervisor", "llm-proxy", str(run_dir)], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self.err, env=env, cwd=ROOT, text=True)
        self.log = log
        self.exports: dict[str, str] = {}
        assert self.proc.stdout is not None
        while "AGENT_SUPERVISOR_LLM_PROXY" not in self.exports or "ANTHROPIC_BASE_URL" not in self.exports \
                or "OPENAI_BASE_URL" not in self.exports:
            line = self.proc.stdout.readline()  # pytest's timeout bounds a proxy that prints nothing
            if not line:
                raise AssertionError(f"llm-proxy exited {self.proc.wait()} before its exports: {log.read_text()}")
            if m := re.match(r"export (\w+)=['\"]?([^'\";\s]+)", line.strip()):
                self.exports[m[1]] = m[2]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.mark.timeout(90)
def test_llm_proxy_command_serves_an_agent_run_again_by_hand(tmp_path: Path,
                                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    """Each start of ``llm-proxy`` is one attempt: the curl agent run again through a restarted proxy is
    served every call from the record, and the upstream sees nothing new."""
    agent = AGENTS["curl"]
    need(agent)
    ref = reference(agent, tmp_path_factory)
    run_dir = tmp_path / "run"
    with UpstreamProcess(tmp_path / "up") as up:
        answers = []
        for i in range(2):
            with ProxyProcess(run_dir, up.url, tmp_path / f"proxy{i}.err") as proxy:
                out = tmp_path / f"answer{i}.txt"
                env = {**agent_env(up.url, out), **proxy.exports}
                r = subprocess.run(list(agent.argv), capture_output=True, text=True, timeout=60, env=env,
                                   stdin=subprocess.DEVNULL)
                assert r.returncode == 0, r.stdout + r.stderr + proxy.log.read_text()
                answers.append(out.read_text())
            assert proxy.proc.returncode == 0, proxy.log.read_text()
        counts = up.counts()
    assert answers == [ref.output, ref.output]
    assert served(counts) == served(ref.counts), "the second run went to the upstream again"
    check_records(run_dir, counts, agent)
    assert len(notes(run_dir, "llm call served")) == agent.calls
    check_no_credentials(run_dir)


@pytest.mark.timeout(90)
def test_a_run_resumed_without_its_command_keeps_the_proxy(tmp_path: Path,
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    """``supervise --run-dir D`` with no command reuses the recorded one: behind the proxy again, as recorded in
    run.json, so the calls are served (a resume without the flag would pay for every call again)."""
    agent = AGENTS["curl"]
    need(agent)
    out = tmp_path / "answer.txt"
    run_dir = tmp_path / "run"
    with UpstreamProcess(tmp_path / "up") as up:
        env = agent_env(up.url, out)
        with Supervised(run_dir, list(agent.argv), *OPTS, env=env, out_dir=tmp_path) as sup:
            assert sup.wait(60) == 0, sup.stderr()[-3000:]
        first = up.counts()["total"]
        out.unlink()
        with Supervised(run_dir, None, "-q", env=env, out_dir=tmp_path) as sup:  # no --llm-proxy, no command
            assert sup.wait(60) == 0, sup.stderr()[-3000:]
        assert up.counts()["total"] == first, "the resumed run paid for its calls again"
    assert out.read_text() == direct_reference(agent, tmp_path_factory).output
    assert len(notes(run_dir, "llm call served")) == agent.total


@pytest.mark.timeout(90)
def test_live_export_sends_the_proxied_calls(tmp_path: Path) -> None:
    """``supervise --llm-proxy --otlp-endpoint``: each call is a live span, with the ids ``export`` gives it."""
    from ..test_export_otlp import Receiver, export_json, pb_attrs, spans_of

    agent = AGENTS["curl"]
    need(agent)
    out = tmp_path / "answer.txt"
    run_dir = tmp_path / "run"
    receiver = Receiver()
    try:
        with UpstreamProcess(tmp_path / "up") as up, \
                Supervised(run_dir, list(agent.argv), *OPTS, "--otlp-endpoint", receiver.url,
                           env=agent_env(up.url, out), out_dir=tmp_path) as sup:
            assert sup.wait(60) == 0, sup.stderr()[-3000:]
        got = receiver.spans()
    finally:
        receiver.close()
    calls = [s for s in got if pb_attrs(s).get("agent_supervisor.source") == "llm"]
    assert len(calls) == agent.total
    want = {s["spanId"] for s in spans_of(export_json(run_dir, tmp_path / "t.json"))}
    assert {s.span_id.hex() for s in calls} <= want  # the file export names the same spans
    root = next(s for s in got if not s.parent_span_id)
    assert pb_attrs(root)["gen_ai.aggregated_usage.input_tokens"] == sum(
        pb_attrs(s).get("gen_ai.usage.input_tokens", 0) for s in calls)
