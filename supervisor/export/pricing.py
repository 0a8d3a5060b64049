"""The cost of recorded model calls, priced with the genai-prices table (the only module importing it).

genai-prices is a dependency (an install without it, or with an older one, has
tokens and no costs) and its import takes about 0.2-0.4 s, so it is imported on the
first record that has usage to price, never at module import. Its bundled table works offline; nothing
here fetches prices.

Never a wrong figure: a step whose model or provider the table does not know, a
step without usage, or a machine without genai-prices has no cost (``None``),
only tokens. A step priced as of its record's ``ts`` (prices change; the table
knows when). Cached tokens are priced as cache reads where the table has a
cache-read price, else as input (genai-prices' own rule); ``input_tokens``
includes them (see :mod:`supervisor.core.usage`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from ..core.usage import Tokens, usage_entries

__all__ = ["available", "entry_costs", "step_cost", "usage_cost"]

_UNSET: Any = object()
_calc: Any = _UNSET  # genai_prices.calc_price, or None when it is not installed
_usage_cls: Any = None
_warned = False


def _load() -> Any:
    """``genai_prices.calc_price`` (imported once, on first use), or ``None`` if genai-prices is not installed."""
    global _calc, _usage_cls
    if _calc is _UNSET:
        try:
            from genai_prices import Usage, calc_price
        except ImportError:
            _calc = None
        else:
            _calc, _usage_cls = calc_price, Usage
    return _calc


def available() -> bool:
    """Whether genai-prices is installed (imports it: about 0.4 s the first time)."""
    return _load() is not None


def _when(ts: Any) -> datetime | None:
    if isinstance(ts, str) and ts:
        try:
            t = datetime.fromisoformat(ts)
        except ValueError:
            return None
        return t if t.tzinfo is not None else t.replace(tzinfo=UTC)
    return None


def usage_cost(
    model: str | None, provider: str | None, tokens: Tokens, *, when: datetime | None = None
) -> float | None:
    """The price in USD of one model call's ``tokens`` (``None``: unknown model or provider, no genai-prices).

    ``provider`` is matched as genai-prices matches it (``openai``, ``anthropic``, ``google-gla``...);
    a provider it does not know gives ``None`` rather than another provider's price for the same
    model name. Without a provider the model name picks it. ``when``: the call's time (default now).
    """
    if not model or _load() is None:
        return None
    if when is None:
        when = datetime.now(UTC)
    minute = when.replace(second=0, microsecond=0)
    region = _region(model, provider, minute)
    if region is None:
        return None
    starts, base = region
    cached = min(tokens.cached, tokens.input)
    tier = sum(1 for st in starts if tokens.input > st)
    rates = _rates(model, provider, minute, tier, max(tokens.input, 1) if starts else 1_000_000)
    a, b, c = rates
    return base + a * (tokens.input - cached) + b * cached + c * tokens.output


# genai-prices takes about 100 us a call. A price is linear in the token counts within a price region
# (the same minute, as time-of-day prices go; the same tier, for prices that change above an input
# size), so each region is asked a few times and every call in it is computed from its rates.


@lru_cache(maxsize=1024)
def _region(model: str, provider: str | None, minute: datetime) -> tuple[tuple[int, ...], float] | None:
    """The input sizes where the model's prices change (its tiers) and its price per request, or ``None``."""
    r = _calc_or_none(model, provider, 0, 0, 0, minute)
    if r is None:
        return None
    from genai_prices.types import TieredPrices

    starts = sorted({int(t.start) for v in vars(r.model_price).values() if isinstance(v, TieredPrices) for t in v.tiers})
    return tuple(starts), float(r.total_price)


@lru_cache(maxsize=4096)
def _rates(model: str, provider: str | None, minute: datetime, tier: int, probe: int) -> tuple[float, float, float]:
    """USD per uncached input, cached input and output token in a price region (``probe``: an input size in it)."""
    base = _calc_or_none(model, provider, 0, 0, 0, minute)
    full = _calc_or_none(model, provider, probe, 0, 0, minute)
    cached = _calc_or_none(model, provider, probe, probe, 0, minute)
    out = _calc_or_none(model, provider, probe, 0, 1_000_000, minute)
    assert base is not None and full is not None and cached is not None and out is not None  # _region found it
    f = float(full.total_price)
    return (
        (f - float(base.total_price)) / probe,
        (float(cached.total_price) - float(base.total_price)) / probe,
        (float(out.total_price) - f) / 1_000_000,
    )


def _calc_or_none(model: str, provider: str | None, i: int, c: int, o: int, when: datetime) -> Any:
    usage = _usage_cls(input_tokens=i, output_tokens=o, cache_read_tokens=c)
    try:
        if provider:
            return _calc(usage, model, provider_id=provider, genai_request_timestamp=when)
        return _calc(usage, model, genai_request_timestamp=when)
    except (LookupError, ValueError):
        return None


def step_cost(rec: Mapping[str, Any]) -> float | None:
    """A step record's cost in USD: the sum over its ``usage`` entries, each priced with its own model
    and provider (the step's ``call`` fills in what an entry lacks) as of the record's ``ts``.

    ``None`` when the record has no usage (genai-prices is then not even imported), when an entry
    is malformed, or when any entry cannot be priced: part of a figure would be a wrong figure.
    """
    priced = entry_costs(rec)
    if priced is None:
        return None
    total = 0.0
    for _, _, _, c in priced:
        if c is None:
            return None
        total += c
    return total


def entry_costs(rec: Mapping[str, Any]) -> list[tuple[str | None, str | None, Tokens, float | None]] | None:
    """Each ``usage`` entry of a record with its cost (``None``: that entry cannot be priced), as of the
    record's ``ts``; ``None`` when the record has no readable usage (``cost --by model`` splits on them)."""
    entries = usage_entries(rec)
    if entries is None:
        return None
    when = _when(rec.get("ts"))
    return [(m, p, t, usage_cost(m, p, t, when=when)) for m, p, t in entries]
