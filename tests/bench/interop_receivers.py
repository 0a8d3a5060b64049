"""Interoperability check against real OpenTelemetry receivers (issue 29): Arize Phoenix and MLflow's tracking server.

Not a test of the suite (the receivers take minutes to install and seconds to start): run it by hand,

    .venv/bin/python tests/bench/interop_receivers.py [--only phoenix|mlflow] [--spans 20000]

Each receiver is installed from the package registry in a venv of its own under
``~/.cache/agent-supervisor-interop/`` (``$AGENT_SUPERVISOR_INTEROP_CACHE``; kept for the next run), started on a
loopback port with its data in a temporary directory, sent runs made with this checkout's SDK and ``supervise``,
and read back through its HTTP API (Phoenix: ``/v1/projects/{name}/spans``; MLflow: the traces search and
``get-trace-artifact``). Each check prints PASS or FAIL; the exit code is the number of FAILs.

The runs: the sample research agent crashed in a step (attempt 1), resumed (attempt 2), rolled back to its first
checkpoint while it ran (``agent-supervisor rollback``) and resumed to the end (attempt 3), sent live
(``supervise --otlp-endpoint``) and again by ``export --otlp-endpoint --content`` (each to a project or
experiment of its own); two runs of one directory name; a hand-written journal of ``--spans`` spans' worth.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
AGENT = ROOT / "sample_runs" / "research_agent.py"
CACHE = Path(os.environ.get("AGENT_SUPERVISOR_INTEROP_CACHE") or Path.home() / ".cache" / "agent-supervisor-interop")
RESULTS: list[tuple[str, str, bool, str]] = []


def check(receiver: str, what: str, ok: bool, detail: str = "") -> None:
    RESULTS.append((receiver, what, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}  {receiver:8} {what:44} {detail}", flush=True)


def wait(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise TimeoutError(f"{what}: not after {timeout:.0f} s")


def http(url: str, body: Any = None, headers: dict[str, str] | None = None, timeout: float = 60) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def venv(name: str, package: str) -> Path:
    """The receiver's own venv, made and filled from the registry once (``.ok`` marks a finished install)."""
    home = CACHE / name
    if not (home / ".ok").exists():
        print(f"installing {package} in {home} (minutes, once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
        subprocess.run([str(home / "bin" / "pip"), "install", "-q", package], check=True)
        (home / ".ok").write_text(package)
    return home


class Server:
    """A receiver process of our own (its own session: stopped with its children)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def up(self, url: str, timeout: float = 180) -> None:
        def answers() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the receiver exited: {self.log.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(url, timeout=2).close()
                return True
            except OSError:
                return False

        wait(answers, timeout, f"{url} answering")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# ------------------------------------------------------------------------------------------------ the receivers


class Phoenix:
    name = "phoenix"

    def __init__(self, work: Path) -> None:
        home = venv("phoenix", "arize-phoenix")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = Server([str(home / "bin" / "phoenix"), "serve"], {
            "PHOENIX_WORKING_DIR": str(work / "phoenix"), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(free_port())}, work / "phoenix.log")
        self.server.up(self.url + "/healthz")

    def project(self, name: str) -> dict[str, str]:
        """The environment that routes an export to project ``name`` (Phoenix reads the resource)."""
        return {"OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={name}"}

    def spans(self, project: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            q = f"{self.url}/v1/projects/{project}/spans?limit=1000" + (f"&cursor={cursor}" if cursor else "")
            try:
                page = http(q)
            except urllib.error.HTTPError as e:
                if e.code == 404:
                    return []
                raise
            out += [{"trace": s["context"]["trace_id"], "name": s["name"], "parent": s.get("parent_id"),
                     "status": s.get("status_code"), "kind": s.get("span_kind"), "attrs": s.get("attributes") or {}}
                    for s in page["data"]]
            cursor = page.get("next_cursor")
            if not cursor:
                return out


class MLflow:
    name = "mlflow"

    def __init__(self, work: Path) -> None:
        home = venv("mlflow", "mlflow")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = Server([str(home / "bin" / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(self.port),
                              "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}",
                              "--default-artifact-root", str(work / "mlflow-artifacts"), "--workers", "1"], {}, work / "mlflow.log")
        self.server.up(self.url + "/health")
        self.experiments: dict[str, str] = {}

    def project(self, name: str) -> dict[str, str]:
        if name not in self.experiments:
            got = http(f"{self.url}/api/2.0/mlflow/experiments/create", {"name": name})
            self.experiments[name] = got["experiment_id"]
        return {"OTEL_EXPORTER_OTLP_HEADERS": f"x-mlflow-experiment-id={self.experiments[name]}"}

    def spans(self, project: str) -> list[dict[str, Any]]:
        exp = self.experiments[project]
        out: list[dict[str, Any]] = []
        token = ""
        while True:
            page = http(f"{self.url}/api/2.0/mlflow/traces?experiment_ids={exp}&max_results=100"
                        + (f"&page_token={token}" if token else ""))
            for t in page.get("traces") or []:
                rid = t["request_id"]
                doc = http(f"{self.url}/ajax-api/3.0/mlflow/get-trace-artifact?request_id={rid}")
                out += [self._span(s, t.get("status")) for s in doc["spans"]]
            token = page.get("next_page_token") or ""
            if not token:
                return out

    @staticmethod
    def _span(s: dict[str, Any], trace_state: str | None) -> dict[str, Any]:
        attrs = {}
        for k, v in (s.get("attributes") or {}).items():
            try:
                attrs[k] = json.loads(v) if isinstance(v, str) else v
            except ValueError:
                attrs[k] = v
        code = (s.get("status") or {}).get("code", "")
        return {"trace": base64.b64decode(s["trace_id"]).hex(), "name": s["name"], "parent": s.get("parent_span_id"),
                "status": code.replace("STATUS_CODE_", ""), "kind": attrs.get("mlflow.spanType"), "attrs": attrs,
                "trace_state": trace_state}


# ------------------------------------------------------------------------------------------------ the runs


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_SUPERVISOR_", "OTEL_"))}
    return subprocess.run([PY, "-m", "supervisor", *args], capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})}, cwd=ROOT)


def steps_done(run: Path, name: str) -> bool:
    path = run / "journal.jsonl"
    return path.exists() and any(
        json.loads(line).get("step") == name and json.loads(line).get("kind", "step") == "step"
        for line in path.read_text().splitlines() if line.strip())


def crashed_rolled_back_resumed(run: Path, endpoint: str | None, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Attempt 1 crashes in ``search:q2``; attempt 2 resumes and is rolled back to ``plan-done`` in its work steps;
    attempt 3 runs to the end. Sent live to ``endpoint`` (``None``: not sent)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_SUPERVISOR_", "OTEL_"))}
    argv = [PY, "-m", "supervisor", "supervise", "--run-dir", str(run), "-q", "--backoff-initial", "0.1",
            *(["--otlp-endpoint", endpoint] if endpoint else []), "--", PY, str(AGENT), "--crash-in", "search:q2",
            "--steps", "8", "--step-delay", "0.25"]
    sup = subprocess.Popen(argv, env={**base, **env}, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    wait(lambda: steps_done(run, "work:2"), 120, "attempt 2 at work:2")
    rolled = cli("rollback", str(run), "--to", "plan-done", "--reason", "interop check")
    if rolled.returncode:
        raise RuntimeError(rolled.stderr)
    out, err = sup.communicate(timeout=180)
    return subprocess.CompletedProcess(argv, sup.returncode, out, err)


def big_run(run: Path, n: int) -> None:
    """A hand-written journal of ``n`` steps (the files are the interface): a span each and the run's."""
    from supervisor.core import rundir

    rundir.ensure_dir(run)
    rundir.update_run_json(run, status="succeeded")
    with open(run / "journal.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps({"seq": i, "step": f"work:{i}", "output": i, "ts": "2026-01-01T00:00:00Z"}) + "\n")


def file_spans(run: Path, work: Path, *extra: str) -> list[dict[str, Any]]:
    out = work / f"{run.name}-{os.urandom(3).hex()}.json"
    got = cli("export", str(run), "--otlp", str(out), *extra)
    if got.returncode:
        raise RuntimeError(got.stderr)
    doc = json.loads(out.read_text())
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


# ------------------------------------------------------------------------------------------------ the checks


def attr(span: dict[str, Any], key: str) -> Any:
    return span["attrs"].get(key)


def check_receiver(rx: Phoenix | MLflow, work: Path, n_big: int) -> None:
    name, url = rx.name, rx.url
    run = work / name / "crash-rollback"
    t0 = time.monotonic()
    live = crashed_rolled_back_resumed(run, url, rx.project("live"))
    check(name, "live run: supervise exits 0", live.returncode == 0, (live.stderr or "").strip()[-200:])
    want = file_spans(run, work)
    spans = wait(lambda: (got := rx.spans("live")) and len(got) >= len(want) and got, 60, "live spans")
    check(name, "live: every span arrived", len(spans) == len(want), f"{len(spans)} of {len(want)}")
    roots = [s for s in spans if s["name"].startswith("run ")]
    root_ok = len(roots) == 1 and roots[0]["status"] == "OK" and attr(roots[0], "agent_supervisor.run.status") == "succeeded"
    check(name, "live: root span says how the run ended", root_ok,
          f"status {roots[0]['status']}, run.status {attr(roots[0], 'agent_supervisor.run.status')}" if roots else "no root")
    crashed = [s for s in spans if s["name"] == "attempt 1"]
    check(name, "live: the crashed attempt is ERROR", bool(crashed) and crashed[0]["status"] == "ERROR",
          crashed[0]["status"] if crashed else "no attempt 1")
    marked = sorted(s["name"] for s in spans if attr(s, "agent_supervisor.abandoned"))
    want_marked = sorted(s["name"] for s in want if any(a["key"] == "agent_supervisor.abandoned" for a in s["attributes"]))
    check(name, "live: abandoned branch marked", bool(want_marked) and marked == want_marked,
          f"{len(marked)} marked, {len(want_marked)} in the file export")
    agents = [s for s in spans if attr(s, "gen_ai.operation.name") == "invoke_agent"]
    check(name, "live: agent spans (invoke_agent)", len(agents) >= 3,
          f"{len(agents)}, kind {agents[0]['kind'] if agents else '-'}")
    print(f"      live run and read-back: {time.monotonic() - t0:.1f} s", flush=True)

    # a run of its own: the receivers keep the first copy of a span (Phoenix) or replace the trace (MLflow), so
    # the live run exported again would show nothing new
    run = work / name / "exported"
    made = crashed_rolled_back_resumed(run, None, {})
    if made.returncode:
        raise RuntimeError(made.stderr)
    want = file_spans(run, work)
    got = cli("export", str(run), "--otlp-endpoint", url, "--content", env=rx.project("export"))
    check(name, "export: exits 0", got.returncode == 0, (got.stderr or got.stdout).strip()[-200:])
    spans = wait(lambda: (g := rx.spans("export")) and len(g) >= len(want) and g, 60, "exported spans")
    chats = [s for s in spans if attr(s, "gen_ai.operation.name") == "chat"]
    content = [s for s in chats if attr(s, "gen_ai.input.messages") and attr(s, "gen_ai.output.messages")]
    check(name, "export --content: GenAI messages on chat spans", bool(chats) and len(content) == len(chats),
          f"{len(content)} of {len(chats)} chat spans, kind {chats[0]['kind'] if chats else '-'}")

    for parent in ("a", "b"):
        demo = work / name / parent / "demo"
        made = subprocess.run([PY, str(AGENT), "--run-dir", str(demo)], capture_output=True, text=True, timeout=120,
                              cwd=ROOT)
        if made.returncode:
            raise RuntimeError(made.stderr)
        sent = cli("export", str(demo), "--otlp-endpoint", url, env=rx.project("same-name"))
        if sent.returncode:
            raise RuntimeError(sent.stderr)
    per_run = len(file_spans(work / name / "a" / "demo", work))
    spans = wait(lambda: (g := rx.spans("same-name")) and len(g) >= 2 * per_run and g, 60, "two runs named demo")
    traces = {s["trace"] for s in spans}
    check(name, "two runs named 'demo': two traces, all spans", len(traces) == 2 and len(spans) == 2 * per_run,
          f"{len(traces)} traces, {len(spans)} of {2 * per_run} spans")

    big = work / name / "big"
    big_run(big, n_big)
    n_spans = len(file_spans(big, work))
    t0 = time.monotonic()
    got = cli("export", str(big), "--otlp-endpoint", url, env=rx.project("big"), timeout=1800)
    took = time.monotonic() - t0
    check(name, f"export of {n_spans} spans: exits 0", got.returncode == 0,
          f"{took:.1f} s; {(got.stderr or got.stdout).strip().splitlines()[-1][:120] if (got.stderr or got.stdout).strip() else ''}")
    spans = wait(lambda: (g := rx.spans("big")) and len(g) >= n_spans and g, 600, "the big export",
                 every=10)  # reading 20,000 spans back is work for the receiver too: not too often
    check(name, f"export of {n_spans} spans: all arrived", len(spans) == n_spans, f"{len(spans)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("phoenix", "mlflow"))
    ap.add_argument("--spans", type=int, default=20000, help="spans of the large export (default 20000)")
    args = ap.parse_args(argv)
    kinds = [k for k in (Phoenix, MLflow) if args.only in (None, k.name)]
    with tempfile.TemporaryDirectory(prefix="interop-") as tmp:
        for kind in kinds:
            work = Path(tmp) / kind.name
            work.mkdir()
            rx = kind(work)
            try:
                check_receiver(rx, work, args.spans - 1)
            except (RuntimeError, TimeoutError, OSError) as e:
                check(kind.name, "ran to the end", False, str(e)[:300])
            finally:
                rx.server.stop()
    failed = sum(not ok for *_, ok, _ in RESULTS)
    print(f"\n{len(RESULTS) - failed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    sys.exit(main())
