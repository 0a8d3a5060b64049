"""A tiny SDK agent whose behaviour the replay tests change by flags.

Steps: ``fetch:1``, ``fetch:2``, ``analyze``, ``work:0`` ... ``work:N-1``, ``summarize``.
Every call of a step function is appended to the ledger (``--ledger``, outside
the run directory), so tests count what really ran.

    --swap            fetch:2 before fetch:1 (a changed step order)
    --salt S          other inputs for analyze (a changed input)
    --extra           one more step at the end (a step the journal lacks)
    --stop-early      leave out summarize (the run ends before the journal does)
    --style S         summarize writes in another style (a changed output, same inputs)
    --fail-in STEP    STEP raises
    --steps N         N work steps (default 2)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import orjson

from supervisor import Run


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--ledger", type=Path, required=True)
    ap.add_argument("--swap", action="store_true")
    ap.add_argument("--salt", default="")
    ap.add_argument("--extra", action="store_true")
    ap.add_argument("--stop-early", action="store_true")
    ap.add_argument("--style", default="plain")
    ap.add_argument("--fail-in", default="")
    ap.add_argument("--steps", type=int, default=2)
    args = ap.parse_args()
    ledger = os.open(args.ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def call(step: str) -> None:
        os.write(ledger, orjson.dumps({"step": step}) + b"\n")
        if step == args.fail_in:
            raise RuntimeError(f"{step} failed on purpose")

    def fetch(step: str, url: str) -> dict[str, str]:
        call(step)
        return {"url": url, "body": f"page {url}"}

    def analyze(pages: list[dict[str, str]], salt: str) -> int:
        call("analyze")
        return sum(len(p["body"]) for p in pages) + len(salt)

    def work(step: str, i: int) -> int:
        call(step)
        return i * i

    def summarize(total: int) -> str:
        # the "prompt" lives in the code, not in the inputs: --style changes the output only
        call("summarize")
        text = f"total {total}"
        return text.upper() + "\nend\n" if args.style == "shout" else text + "\nend\n"

    with Run.open(args.run_dir) as run:
        order = ["2", "1"] if args.swap else ["1", "2"]
        pages = [run.step(f"fetch:{n}", fetch, f"fetch:{n}", f"https://example.invalid/{n}") for n in order]
        run.state["pages"] = len(pages)
        total = run.step("analyze", analyze, pages, salt=args.salt)
        run.checkpoint("analyzed")
        for i in range(args.steps):
            total += run.step(f"work:{i}", work, f"work:{i}", i)
            run.state["total"] = total  # a state patch in every step record, as real agents have
        if not args.stop_early:
            run.state["summary"] = run.step("summarize", summarize, total)
        if args.extra:
            run.step("extra", work, "extra", 0)
    os.close(ledger)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
