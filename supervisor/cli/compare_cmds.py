"""``agent-supervisor compare RUN_A RUN_B``: two runs' effective histories aligned by step identity
(``views.compare``), the first divergence first, then every step's verdict and the totals side by side.

Exit 0 when the histories match, 1 when they differ, 2 on bad input (as ``diff`` and ``cmp``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from ..core.rundir import check_readable_run_dir
from ..views.compare import SAME, Comparison, Row, Totals, compare_runs
from ..views.fmt import fmt_cost, fmt_duration, fmt_tokens
from ..views.value_diff import format_value_diff

EXIT_SAME, EXIT_DIFFER = 0, 1
SAME_RUN = 3
"""Runs of more ``same`` rows than this are printed as one line (``--all``: each)."""


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``compare``."""
    p = sub.add_parser("compare", help="compare two runs step by step (exit 1 if they differ)", description=(
        "Align two runs' effective histories by step identity (name and occurrence, nested steps under their "
        "parent) and print the first divergence, each step's verdict (same, inputs differ, output differs, failed "
        "in A/B, only in A/B) and the totals side by side. Exit 0 when the histories match, 1 when they differ, "
        "2 on bad input."))
    p.add_argument("run_a", type=Path, metavar="RUN_A", help="a run directory (or a bare journal .jsonl)")
    p.add_argument("run_b", type=Path, metavar="RUN_B", help="the run to compare it with")
    p.add_argument("--json", action="store_true", help="print one JSON object (same, first_divergence, steps, totals)")
    p.add_argument("--all", action="store_true", help=f"print every step (else runs of over {SAME_RUN} same steps are one line)")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    check_readable_run_dir(args.run_a)
    check_readable_run_dir(args.run_b)
    c = compare_runs(args.run_a, args.run_b, price=_price())
    if args.json:
        sys.stdout.write(orjson.dumps(c.to_json(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write("".join(line + "\n" for line in text_lines(c, every=args.all)))
    return EXIT_SAME if c.same else EXIT_DIFFER


def _price() -> Any:
    """The step pricer (costs unknown without genai-prices)."""
    try:
        from ..export.pricing import step_cost
    except ImportError:
        return None
    return step_cost


def text_lines(c: Comparison, *, every: bool = False) -> list[str]:
    """The human form: a verdict line, the first divergence with what differs, the rows, the totals."""
    counts = c.to_json()["counts"]
    out = [f"A: {c.a}", f"B: {c.b}"]
    first = c.first_divergence
    if first is None:
        out.append(f"same: {len(c.rows)} steps match (name, occurrence, inputs, output)")
    else:
        differ = ", ".join(f"{n} {v}" for v, n in counts.items() if n and v != SAME)
        out.append(f"differ: {counts[SAME]} of {len(c.rows)} steps the same; {differ}")
        out.append(f"first divergence: {_where(first)}: {first.verdict}")
        out.extend(_detail(first))
    out.append("")
    out.append(f"  {'':15} {'pos A':>6} {'pos B':>6}  step")
    same_run: list[Row] = []
    for r in c.rows:
        if r.verdict == SAME and not every:
            same_run.append(r)
            continue
        out.extend(_flush(same_run))
        out.append(_row(r))
    out.extend(_flush(same_run))
    out.append("")
    out.extend(_totals(c.totals_a, c.totals_b))
    return out


def _where(r: Row) -> str:
    a = "-" if r.a is None else str(r.a.pos)
    b = "-" if r.b is None else str(r.b.pos)
    return f"step {r.name!r} (position {a} in A, {b} in B)"


def _detail(r: Row) -> list[str]:
    """What differs in the first divergence: the inputs' or outputs' changes, or the error."""
    a, b = r.a, r.b
    if a is None or b is None:
        return []
    lines: list[str] = []
    if "inputs" in r.to_json()["differs"]:
        lines.append("  inputs, A -> B:")
        lines.extend(format_value_diff(a.rec.get("inputs"), b.rec.get("inputs"), labels=("A", "B")))
    if a.ok and b.ok and r.verdict == "output differs":
        lines.append("  output, A -> B:")
        lines.extend(format_value_diff(a.rec.get("output"), b.rec.get("output"), labels=("A", "B")))
    for side, call in (("A", a), ("B", b)):
        if not call.ok:
            lines.append(f"  {side} failed: {call.error}")
    return lines


def _row(r: Row) -> str:
    a = "-" if r.a is None else str(r.a.pos)
    b = "-" if r.b is None else str(r.b.pos)
    return f"  {r.verdict:15} {a:>6} {b:>6}  {r.name}"


def _flush(run: list[Row]) -> list[str]:
    if not run:
        return []
    rows = list(run)
    run.clear()
    if len(rows) <= SAME_RUN:
        return [_row(r) for r in rows]
    first, last = rows[0], rows[-1]
    span = f"{first.a.pos if first.a else '?'}..{last.a.pos if last.a else '?'}"
    return [f"  {'same':15} {span:>13}  ({len(rows)} steps)"]


def _totals(a: Totals, b: Totals) -> list[str]:
    def cost(t: Totals) -> str:
        s = fmt_cost(t.cost_usd) if t.cost_usd is not None else "unknown"
        return s + (f" + {t.unpriced} unpriced" if t.unpriced and t.cost_usd is not None else "")

    def time(t: Totals) -> str:
        return "-" if t.time_s is None else fmt_duration(t.time_s)

    rows = [
        ("steps", str(a.steps), str(b.steps)),
        ("failures", str(a.failures), str(b.failures)),
        ("time", time(a), time(b)),
        ("tokens in", fmt_tokens(a.tokens.input), fmt_tokens(b.tokens.input)),
        ("tokens out", fmt_tokens(a.tokens.output), fmt_tokens(b.tokens.output)),
        ("cost", cost(a), cost(b)),
        ("attempts", str(a.attempts), str(b.attempts)),
    ]
    return [f"  {'totals':12} {'A':>18} {'B':>18}"] + [f"  {n:12} {x:>18} {y:>18}" for n, x, y in rows]
