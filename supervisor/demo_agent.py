"""The sample research agent of ``agent-supervisor demo``: the SDK, a deterministic fake model and fake search.

Steps: plan, search:q1, search:q2, summarize, write_report (plus work:N with --steps).
Every side effect (a model call, a search, a unit of work) is appended to
``ledger.jsonl`` in the run directory, so tests can count what really ran.

    python -m supervisor.demo_agent --run-dir runs/demo --crash-in search:q2
    python -m supervisor.demo_agent --run-dir runs/demo     # resumes

(``sample_runs/research_agent.py`` runs the same, as the sample runs recorded it.)

Options to misbehave: --crash-in STEP (``os._exit(1)`` inside STEP on the first
attempt), --fail STEP:N (STEP raises N times in all), --steps N (N extra steps),
--step-delay S (sleep in every step), --hang-in STEP (sleep forever in STEP once).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import orjson

from supervisor import Run


class FakeModelError(RuntimeError):
    """The fake model's simulated outage."""


class Ledger:
    """Side effects, appended and flushed one JSON line each (the agent's own file, not the journal)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, kind: str, step: str, **fields: object) -> None:
        line = orjson.dumps({"kind": kind, "step": step, "pid": os.getpid(), **fields}) + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def count(self, kind: str, step: str | None = None) -> int:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        n = 0
        for raw in data.splitlines():
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # a torn line from a kill mid-write
            if rec.get("kind") == kind and (step is None or rec.get("step") == step):
                n += 1
        return n


FAKE_MODEL, FAKE_PROVIDER = "gpt-4o-mini", "openai"
"""The name the fake model's usage is recorded under (it is priced as that model; nothing is called)."""


def fake_model(prompt: str) -> str:
    """A deterministic 'model': the same prompt always gives the same answer."""
    digest = hashlib.sha256(prompt.encode()).hexdigest()
    return f"answer-{digest[:12]}"


def fake_search(query: str) -> list[dict[str, str]]:
    digest = hashlib.sha256(query.encode()).hexdigest()
    return [{"title": f"{query} result {i}", "url": f"https://example.invalid/{digest[i * 4:i * 4 + 8]}"} for i in range(3)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", type=Path, default=None, help="default: the supervisor's, else runs/research_agent")
    ap.add_argument("--task", default="durable agents")
    ap.add_argument("--crash-in", metavar="STEP", help="os._exit(1) inside STEP on the first attempt")
    ap.add_argument("--fail", metavar="STEP:N", help="STEP raises FakeModelError N times in all")
    ap.add_argument("--hang-in", metavar="STEP", help="STEP sleeps forever on the first attempt")
    ap.add_argument("--steps", type=int, default=0, help="extra work steps after the searches")
    ap.add_argument("--step-delay", type=float, default=0.0, help="seconds each step sleeps")
    ap.add_argument("--ledger", type=Path, default=None, help="side-effect ledger (default: RUN_DIR/ledger.jsonl)")
    ap.add_argument("--resume", action="store_true", help="accepted: resuming is automatic")
    args = ap.parse_args(argv)

    fail_step, fail_times = (args.fail.rsplit(":", 1) + ["0"])[:2] if args.fail else ("", "0")
    with Run.open(args.run_dir, max_failures=3) as run:
        ledger = Ledger(args.ledger or run.run_dir / "ledger.jsonl")

        def misbehave(step: str) -> None:
            if args.step_delay:
                time.sleep(args.step_delay)
            if step == args.crash_in and run.attempt == 1:
                print(f"research_agent: crashing hard in {step}", file=sys.stderr, flush=True)
                os._exit(1)
            if step == args.hang_in and ledger.count("hang", step) == 0:
                ledger.add("hang", step)
                print(f"research_agent: hanging in {step}", file=sys.stderr, flush=True)
                while True:
                    time.sleep(3600)
            strategy = "fallback" if run.rollbacks else "default"
            if step == fail_step and strategy == "default" and ledger.count("fail", step) < int(fail_times):
                ledger.add("fail", step)
                raise FakeModelError(f"fake model unavailable in {step}")

        def model(step: str, prompt: str) -> str:
            misbehave(step)
            ledger.add("model", step, key=run.key)
            answer = fake_model(prompt)
            # the fake model reports its usage as a small hosted model would, so the dashboard shows tokens and cost
            run.usage(model=FAKE_MODEL, provider=FAKE_PROVIDER, input_tokens=40 * len(prompt.split()), output_tokens=350)
            return answer

        def search(step: str, query: str) -> list[dict[str, str]]:
            misbehave(step)
            ledger.add("search", step, key=run.key)
            return fake_search(query)

        def work(step: str, i: int) -> int:
            misbehave(step)
            ledger.add("work", step, key=run.key)
            return i * i

        as_model = run.with_options(call={"kind": "model", "model": FAKE_MODEL, "provider": FAKE_PROVIDER})
        plan_text = as_model.step("plan", model, "plan", f"plan research on {args.task}")
        run.state["plan"] = plan_text
        run.state["queries"] = ["q1", "q2"]
        run.checkpoint("plan-done")
        run.state["findings"] = []
        for q in run.state["queries"]:
            as_tool = run.with_options(call={"kind": "tool", "tool": "search"})
            hits = as_tool.step(f"search:{q}", search, f"search:{q}", f"{args.task} {q}")
            run.state["findings"].append(hits[0]["title"])
        for i in range(args.steps):
            run.state["work_total"] = run.state.get("work_total", 0) + run.step(f"work:{i}", work, f"work:{i}", i)
        run.checkpoint("research-done")
        strategy = "fallback" if run.rollbacks else "default"
        summary = as_model.step("summarize", model, "summarize", f"[{strategy}] summarize {run.state['findings']}")
        run.state["summary"] = summary
        report = run.step("write_report", lambda s: f"# Report on {args.task}\n\n{s}\n", summary)
        if not run.replay_mode:  # a replay (agent-supervisor replay --verify/--live) writes nothing in the run dir
            (run.run_dir / "report.md").write_text(report)
        print(f"replayed {run.replayed}")
        print(f"executed {run.executed}")
        print(f"model calls in total: {ledger.count('model')}")
        if run.rollbacks:
            print(f"rollbacks: {len(run.rollbacks)} (last: {run.rollbacks[-1]['reason']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
