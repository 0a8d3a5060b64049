"""Figures for issue 12: the agent's speed under ``supervise`` with and without live OTLP export, and the
cost of ``export`` and ``run_usage`` on the run it made.

    .venv/bin/python tests/bench/bench_export.py [--steps 5000]

The agent makes STEPS model-call steps (``run.usage`` in each) as fast as it can and prints how long they
took; the supervisor runs it once without export and once with ``--otlp-endpoint`` to a receiver in this
process (the one of tests/integration/test_export_otlp.py, decoding every request).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import clean_env  # noqa: E402
from tests.integration.test_export_otlp import Receiver  # noqa: E402

AGENT = """
import sys, time
from supervisor import Run
run = Run.open(sys.argv[1])
n = int(sys.argv[2])
def call(i):
    run.usage(model="gpt-4o", provider="openai", input_tokens=1000 + i, output_tokens=100, cached_tokens=200)
    return i
t = time.perf_counter()
opts = run.with_options(call={"kind": "model", "model": "gpt-4o", "provider": "openai"})
for i in range(n):
    opts.step("model:gpt-4o", call, i)
print(f"{time.perf_counter() - t:.3f}")
run.close()
"""


def supervise(run: Path, agent: Path, steps: int, endpoint: str | None) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(run), "-q"]
    if endpoint:
        cmd += ["--otlp-endpoint", endpoint]
    cmd += ["--", sys.executable, str(agent), str(run), str(steps)]
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=600, check=True)
    total = time.perf_counter() - t
    return float(r.stdout.strip().splitlines()[-1]), total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        agent = tmp / "agent.py"
        agent.write_text(AGENT)
        plain, plain_total = supervise(tmp / "plain", agent, a.steps, None)
        rec = Receiver()
        try:
            live, live_total = supervise(tmp / "live", agent, a.steps, rec.url)
            got = len(rec.spans())
        finally:
            rec.close()
        print(f"{a.steps} model steps under supervise: agent {plain:.3f} s ({plain / a.steps * 1e6:.0f} us/step), "
              f"supervise in all {plain_total:.2f} s")
        print(f"  with --otlp-endpoint: agent {live:.3f} s ({live / a.steps * 1e6:.0f} us/step), "
              f"supervise in all {live_total:.2f} s; {got} spans received in {len(rec.requests)} requests")
        from supervisor.core.journal_reader import JournalReader
        from supervisor.core.usage import run_usage
        from supervisor.export.otlp import write_otlp_json
        from supervisor.export.pricing import step_cost

        step_cost({"usage": [{"model": "gpt-4o", "input_tokens": 1}]})  # the table's import, not measured
        t = time.perf_counter()
        n = write_otlp_json(tmp / "live", tmp / "t.json", price=step_cost)
        print(f"export --otlp of that run: {n} spans in {time.perf_counter() - t:.2f} s "
              f"({(tmp / 't.json').stat().st_size / 1e6:.1f} MB)")
        # the supervisor's extra work per step with --otlp-endpoint (in its export thread): spans built
        # from the records and encoded as protobuf (sending not counted; tests/bench/bench_otlp_live.py
        # measures it all in the supervisor)
        from supervisor.export.otlp import SpanBuilder, resource_attributes
        from supervisor.export.otlp_proto import encode_request

        recs = [e for e in JournalReader(tmp / "live").load() if isinstance(e, dict)]
        t = time.perf_counter()
        b = SpanBuilder("live", price=step_cost)
        spans = [s for r in recs for s in b.record(r)] + b.finish()
        built = time.perf_counter() - t
        for i in range(0, len(spans), 500):
            encode_request(resource_attributes("live"), ("agent-supervisor", "0"), spans[i : i + 500])
        total = time.perf_counter() - t
        print(f"live export CPU in the supervisor: {total / a.steps * 1e6:.0f} us a step "
              f"({built / a.steps * 1e6:.0f} us building spans from {len(recs)} records, the rest encoding)")
        t = time.perf_counter()
        u = run_usage(JournalReader(tmp / "live").load(lazy=True), price=step_cost)
        print(f"run_usage with cost (status): {time.perf_counter() - t:.2f} s for {u.steps} priced steps")
        t = time.perf_counter()
        u = run_usage(JournalReader(tmp / "live").load(lazy=True))
        print(f"run_usage tokens only: {time.perf_counter() - t:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
