"""Benchmark (issue 29, item 13): the supervisor's CPU per step with ``--otlp-endpoint`` beside the plain run.

    .venv/bin/python tests/bench/bench_otlp_live.py [--steps 20000] [--rounds 3]

An SDK agent makes STEPS model-call steps (``run.usage`` in each) as fast as it can under ``supervise``, once
plain and once exporting live to a null receiver on loopback (an HTTP server in this process that reads each
request and answers 200, decoding nothing). The supervisor's CPU is its process's user + system time
(the rusage of the children: the agent in it) less the agent (the agent prints its ``process_time``); printed per step for both runs, their
difference (what exporting costs the supervisor a step: reading the records, building, encoding and sending
the spans), and the agent's steps/s ratio (exporting / plain). The exporter's fixed cost (importing
OpenTelemetry's HTTP client and the price table, about half a second once a run) is measured with a run of
one step and taken out of the per-step figure (it is also printed with it in). The median round of ROUNDS.
"""

from __future__ import annotations

import argparse
import http.server
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import clean_env  # noqa: E402

AGENT = """
import sys, time
from supervisor import Run
run = Run.open(sys.argv[1])
n = int(sys.argv[2])
def call(i):
    run.usage(model="gpt-4o", provider="openai", input_tokens=1000 + i, output_tokens=100, cached_tokens=200)
    return i
opts = run.with_options(call={"kind": "model", "model": "gpt-4o", "provider": "openai"})
c, t = time.process_time(), time.perf_counter()
for i in range(n):
    opts.step("model:gpt-4o", call, i)
wall = time.perf_counter() - t
run.close()
print(f"{wall:.4f} {time.process_time():.4f}")
"""


class NullReceiver:
    """An OTLP/HTTP endpoint that reads each request and answers 200 (nothing decoded)."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                outer.requests += 1
                outer.bytes += n
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def supervise(run: Path, agent: Path, steps: int, endpoint: str | None) -> tuple[float, float, float]:
    """``(agent wall s, agent CPU s, supervisor CPU s)`` of one supervised run."""
    cmd = [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run), "-q"]
    if endpoint:
        cmd += ["--otlp-endpoint", endpoint]
    cmd += ["--", sys.executable, str(agent), str(run), str(steps)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), cwd=ROOT)
    out, err = p.communicate(timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"supervise failed ({p.returncode}): {err.decode()[-2000:]}")
    wall, agent_cpu = (float(x) for x in out.decode().split()[-2:])
    return wall, agent_cpu, _children_cpu() - agent_cpu


_seen = 0.0


def _children_cpu() -> float:
    """The CPU of the children waited for since the last call (the supervisor, the agent it waited for)."""
    import resource

    global _seen
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = ru.ru_utime + ru.ru_stime
    got, _seen = total - _seen, total
    return got


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rec = NullReceiver()
    rows: list[tuple[float, float, float, float]] = []  # plain sup us/step, live sup us/step, diff, ratio
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            agent = tmp / "agent.py"
            agent.write_text(AGENT)
            _children_cpu()
            fixed = statistics.median(supervise(tmp / f"live1-{i}", agent, 1, rec.url)[2]
                                      - supervise(tmp / f"plain1-{i}", agent, 1, None)[2] for i in range(3))
            print(f"the exporter's fixed cost (a run of one step): {fixed:.2f} s of CPU", flush=True)
            for i in range(a.rounds):
                pw, _pa, ps = supervise(tmp / f"plain{i}", agent, a.steps, None)
                lw, _la, ls = supervise(tmp / f"live{i}", agent, a.steps, rec.url)
                row = (ps / a.steps * 1e6, ls / a.steps * 1e6, (ls - ps - fixed) / a.steps * 1e6, pw / lw)
                rows.append(row)
                print(f"round {i + 1}: supervisor CPU {row[0]:.0f} us/step plain, {row[1]:.0f} us/step with "
                      f"--otlp-endpoint (+{(ls - ps) / a.steps * 1e6:.0f} us in all, +{row[2]:.0f} us a step "
                      f"without the fixed cost); agent {a.steps / pw:.0f} -> {a.steps / lw:.0f} steps/s "
                      f"(ratio {row[3]:.2f})", flush=True)
                time.sleep(0.2)
    finally:
        rec.close()
    mid = sorted(rows, key=lambda r: r[2])[len(rows) // 2]
    print(f"median: the live export costs the supervisor {mid[2]:.0f} us of CPU a step besides its fixed cost "
          f"({mid[0]:.0f} -> {mid[1]:.0f} us/step in all at {a.steps} steps); the agent's steps/s ratio with/without {mid[3]:.2f}; "
          f"{rec.requests} requests, {rec.bytes / max(1, rec.requests) / 1e3:.0f} KB each "
          f"(medians over {len(rows)} rounds: +{statistics.median(r[2] for r in rows):.0f} us, "
          f"ratio {statistics.median(r[3] for r in rows):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
