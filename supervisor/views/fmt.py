"""The one formatting of tokens, cost, bytes, durations and JSON values the front ends show (the status bar, the timeline, the runs list).

The CLI's record lines print exact figures (``1,234 in``, ``$0.004250``) on purpose: those are
not short forms of these and stay where they are printed.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

__all__ = ["ago", "dumps_pretty", "fmt_bytes", "fmt_cost", "fmt_duration", "fmt_ms", "fmt_tokens"]


def fmt_bytes(n: Any) -> str:
    """``512B``, ``1.5KB``, ``3.2MB``, ``1.0GB``; ``-`` when unknown."""
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return "-"


def fmt_duration(s: Any) -> str:
    """Whole seconds as ``42s``, ``3m07s``, ``2h05m``; ``-`` when unknown."""
    if not isinstance(s, (int, float)):
        return "-"
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def fmt_ms(ms: Any) -> str:
    """A step's duration in milliseconds as ``<1ms``, ``850ms``, ``12.5s``; empty when unknown."""
    if not isinstance(ms, (int, float)):
        return ""
    if ms < 1:
        return "<1ms"
    if ms < 10_000:
        return f"{ms:.0f}ms"
    return f"{ms / 1000:.1f}s"


def fmt_tokens(n: int) -> str:
    """``950``, ``12.3k``, ``4.1M``."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k" if n < 100_000 else f"{n // 1000}k"
    return f"{n / 1_000_000:.1f}M"


def fmt_cost(usd: float | None) -> str:
    """``$0``, ``$0.000012``, ``$0.0064``, ``$0.04``, ``$1,234``; empty when the price is unknown. A cost too small
    for four decimals keeps its first digits (a run of $0.000012 is not ``$0.0000``)."""
    if usd is None:
        return ""
    if usd == 0:
        return "$0"
    if usd < 0.0001:  # two significant digits
        frac = f"{usd:.12f}".split(".")[1]
        zeros = len(frac) - len(frac.lstrip("0"))
        return f"${usd:.{zeros + 2}f}".rstrip("0")
    if usd < 0.01:
        return f"${usd:.4f}"
    if usd < 100:
        return f"${usd:.2f}"
    return f"${usd:,.0f}"


def ago(ts: float, now: float | None = None) -> str:
    """``12s ago``, ``5m ago``, ``3h ago``, or the date."""
    d = (now or time.time()) - ts
    if d < 60:
        return f"{int(d)}s ago"
    if d < 3600:
        return f"{int(d // 60)}m ago"
    if d < 86400:
        return f"{int(d // 3600)}h ago"
    return time.strftime("%Y-%m-%d", time.localtime(ts))


def dumps_pretty(value: Any, limit: int = 200_000) -> str:
    """Indented JSON for the detail panes, cut at ``limit`` characters (a 50 MB output stays usable)."""
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=repr).decode()
    if len(text) > limit:
        return text[:limit] + f"\n… ({len(text) - limit} more characters; see 'agent-supervisor log --json')"
    return text
