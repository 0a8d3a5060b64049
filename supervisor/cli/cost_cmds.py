"""``agent-supervisor cost RUN [--by model|step] [--json]``: what the run's model calls cost, and what resuming
saved, broken down by model (the default) or by step name.

Every step record with ``usage``, of every attempt and branch (what was paid), and the calls the proxy recorded
(``llm.jsonl``), each usage entry priced with its own model as of the record's time
(``supervisor.export.pricing``); a model the price table does not know has tokens and no cost, counted as
unpriced. Streamed in flat memory, as ``status`` reads the journal.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ..core.rundir import check_readable_run_dir
from ..core.usage import Tokens, run_usage
from ..views.fmt import fmt_cost, fmt_tokens


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``cost``."""
    p = sub.add_parser("cost", help="what the run's model calls cost, by model or by step", description=(
        "Tokens and cost of every model call the run paid for (every attempt and branch, the proxy's calls too), "
        "by model or by step name, and what resuming saved. A model the price table does not know shows its "
        "tokens and no cost."))
    p.add_argument("run_dir", type=Path, metavar="RUN")
    p.add_argument("--by", choices=("model", "step"), default="model", help="the breakdown (default: model)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_cost)


class _Row:
    __slots__ = ("calls", "cost", "tokens", "unpriced")

    def __init__(self) -> None:
        self.calls = 0
        self.tokens = Tokens()
        self.cost = 0.0
        self.unpriced = 0

    def add(self, tokens: Tokens, cost: float | None) -> None:
        self.calls += 1
        self.tokens = self.tokens.plus(tokens)
        if cost is None:
            self.unpriced += 1
        else:
            self.cost += cost

    def to_json(self, name: str) -> dict[str, Any]:
        t = self.tokens
        return {"name": name, "calls": self.calls, "input_tokens": t.input, "output_tokens": t.output,
                "cached_tokens": t.cached, "cost_usd": round(self.cost, 6) if self.calls > self.unpriced else None,
                "unpriced": self.unpriced}


def cmd_cost(args: argparse.Namespace) -> int:
    from ..core.journal_reader import JournalReader
    from ..core.llm_calls import read_calls
    from ..core.segments import FOLD_CHUNK
    from ..export.pricing import available, entry_costs

    run_dir = check_readable_run_dir(args.run_dir)
    rows: dict[str, _Row] = {}

    def price(rec: Mapping[str, Any]) -> float | None:
        """A record's cost (the sum over its usage entries), and each entry into its row of the breakdown."""
        priced = entry_costs(rec)
        if priced is None:
            return None
        total: float | None = 0.0
        for model, _provider, tokens, cost in priced:
            key = (model or "(no model)") if args.by == "model" else str(rec.get("step") or "(no name)")
            rows.setdefault(key, _Row()).add(tokens, cost)
            total = None if cost is None or total is None else total + cost
        return total

    calls = read_calls(run_dir) if run_dir.is_dir() else []
    u = run_usage(JournalReader(run_dir, chunk=FOLD_CHUNK).iter_entries(lazy=True), price=price, calls=calls)
    ordered = sorted(rows.items(), key=lambda kv: (-kv[1].cost, -kv[1].tokens.total, kv[0]))
    if args.json:
        doc = {
            "run_dir": str(run_dir), "by": args.by, "prices": available(),
            "total": {"input_tokens": u.tokens.input, "output_tokens": u.tokens.output, "cached_tokens": u.tokens.cached,
                      "cost_usd": u.cost_usd, "unpriced": u.unpriced, "calls": u.steps},
            "saved": {"input_tokens": u.saved_tokens.input, "output_tokens": u.saved_tokens.output,
                      "cost_usd": u.saved_cost_usd, "calls": u.saved_steps},
            "rows": [r.to_json(name) for name, r in ordered],
        }
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    if not u.steps:
        print(f"{run_dir}: no model call recorded its usage (run.usage(...), a framework adapter or the proxy "
              "records it)")
        return 0
    width = max([len("total"), *(len(n) for n, _ in ordered[:200])])
    print(f"  {args.by:{width}} {'calls':>6} {'in':>10} {'cached':>9} {'out':>9} {'cost':>12}")
    for name, r in ordered:
        print(_line(name, width, r.calls, r.tokens, r.cost if r.calls > r.unpriced else None, r.unpriced))
    print(_line("total", width, u.steps, u.tokens, u.cost_usd, u.unpriced))
    if u.saved_steps:
        print(_line("saved", width, u.saved_steps, u.saved_tokens, u.saved_cost_usd, u.saved_unpriced)
              + "   (served from the journal on resume instead of paid again)")
    if not available():
        print("(no price table: install genai-prices for costs)", file=sys.stderr)
    return 0


def _line(name: str, width: int, calls: int, t: Tokens, cost: float | None, unpriced: int) -> str:
    shown = "-" if cost is None else fmt_cost(cost)
    if unpriced and cost is not None:
        shown += f" +{unpriced}?"
    return (f"  {name:{width}} {calls:>6} {fmt_tokens(t.input):>10} {fmt_tokens(t.cached):>9} "
            f"{fmt_tokens(t.output):>9} {shown:>12}")
