"""The cost of recorded model calls, priced with the genai-prices table (the only module importing it).

genai-prices is a dependency (an install without it, or with an older one, has
tokens and no costs) and its import takes about 0.25 s, so it is imported only to
price a model this machine has not priced before, never at module import. What it
answers for a model is kept in a small price cache (``$XDG_CACHE_HOME/agent-supervisor/
prices.json``, keyed by the installed table's file): ``status``, ``log`` and ``cost``
of a run whose models were priced once read that (under a millisecond) and import
nothing. The figures are the same either way: both compute from the cached rates.
Its bundled table works offline; nothing here fetches prices.

Never a wrong figure: a step whose model or provider the table does not know, a
step without usage, or a machine without genai-prices has no cost (``None``),
only tokens. A step priced as of its record's ``ts`` (prices change; the table
knows when). Cached tokens are priced as cache reads where the table has a
cache-read price, else as input (genai-prices' own rule); ``input_tokens``
includes them (see :mod:`supervisor.core.usage`).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

from ..core.times import parse_ts
from ..core.usage import Tokens, usage_entries

__all__ = ["available", "cache_path", "entry_costs", "step_cost", "usage_cost"]

_UNSET: Any = object()
_calc: Any = _UNSET  # genai_prices.calc_price, or None when it is not installed
_usage_cls: Any = None
_table: Any = _UNSET  # the _PriceTable, or None when genai-prices is not installed
_lock = threading.Lock()  # the TUI prices from its usage worker and its UI thread
CACHE_FORMAT = 1
"""The price cache's layout and the way its rates are computed: a new one makes every entry again."""
_MAX_ENTRIES = 4096  # a journal of made-up model names does not grow the cache without end
_LIVE = "live"
"""An entry the cache cannot hold (a price rule this code does not know): genai-prices prices each call."""
_M = 1_000_000


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
    """Whether genai-prices is installed (imports it: about 0.25 s the first time)."""
    return _load() is not None


def cache_path() -> Path:
    """Where the price cache lives (the XDG base directory rule, as the TUI's settings)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "agent-supervisor" / "prices.json"


def usage_cost(
    model: str | None, provider: str | None, tokens: Tokens, *, when: datetime | None = None
) -> float | None:
    """The price in USD of one model call's ``tokens`` (``None``: unknown model or provider, no genai-prices).

    ``provider`` is matched as genai-prices matches it (``openai``, ``anthropic``, ``google-gla``...);
    a provider it does not know gives ``None`` rather than another provider's price for the same
    model name. Without a provider the model name picks it. ``when``: the call's time (default now).
    """
    if not model:
        return None
    table = _prices()
    if table is None:
        return None
    if when is None:
        when = datetime.now(UTC)
    entry = table.get(model, provider)
    if entry == _LIVE:
        return _live_cost(model, provider, tokens, when)
    if entry is None:
        return None
    starts, base, rates = _pick(entry, when)
    cached = min(tokens.cached, tokens.input)
    a, b, c = rates[sum(1 for st in starts if tokens.input > st)]
    return float(base + a * (tokens.input - cached) + b * cached + c * tokens.output)


# ---------------------------------------------------------------- the price cache
# An entry is what genai-prices answers for one (model, provider): ``None`` (it knows neither), or its prices as
# a list of [constraint, tier starts, price per request, [per-token rates of each tier]], one per price the table
# has for the model (a new price from a date, an off-peak price by time of day). A price is linear in the token
# counts within a tier, so three rates per tier (uncached input, cached input, output) give every figure.


def _key(origin: str) -> str:
    """The installed table's identity: its data file's path, size and time (a new genai-prices is a new key)."""
    data = Path(origin).with_name("data.py")
    st = data.stat()
    return f"{CACHE_FORMAT}:{data}:{st.st_size}:{st.st_mtime_ns}"


def _prices() -> _PriceTable | None:
    """The price cache (read once), or ``None`` when genai-prices is not installed (nothing is imported)."""
    global _table
    if _table is _UNSET:
        with _lock:
            if _table is _UNSET:
                _table = _open_table()
    return _table  # type: ignore[no-any-return]


def _open_table() -> _PriceTable | None:
    try:
        spec = importlib.util.find_spec("genai_prices")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin or _calc is None:
        return None
    try:
        key = _key(spec.origin)
    except OSError:
        return None
    return _PriceTable(cache_path(), key)


class _PriceTable:
    """The cached entries by (model, provider); a missing one is asked of genai-prices and the file written again."""

    def __init__(self, path: Path, key: str) -> None:
        self.path = path
        self.key = key
        self.entries: dict[str, Any] = {}
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return  # none yet, or unreadable: made again as models are priced
        if isinstance(data, dict) and data.get("key") == key and isinstance(data.get("entries"), dict):
            self.entries = data["entries"]

    def get(self, model: str, provider: str | None) -> Any:
        name = f"{provider or ''}\n{model}"
        entry = self.entries.get(name, _UNSET)
        if entry is not _UNSET:
            return entry
        with _lock:
            entry = self.entries.get(name, _UNSET)
            if entry is _UNSET:
                entry = _compile(model, provider)
                if len(self.entries) < _MAX_ENTRIES:
                    self.entries[name] = entry
                    self._save()
        return entry

    def _save(self) -> None:
        """Write the cache whole (a temporary file renamed over it). No fsync: a cache lost or torn by a crash is
        made again, and a write that fails (a read-only home) only means genai-prices is asked next time too."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(orjson.dumps({"key": self.key, "entries": self.entries}))
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)


def _pick(entry: list[Any], when: datetime) -> tuple[list[int], float, list[list[float]]]:
    """The price in force at ``when``: the last whose constraint holds, else the first (genai-prices' rule)."""
    for constraint, starts, base, rates in reversed(entry):
        if constraint is None or _active(constraint, when):
            return starts, base, rates
    _, starts, base, rates = entry[0]
    return starts, base, rates


def _active(constraint: list[Any], when: datetime) -> bool:
    """``["date", "YYYY-MM-DD"]``: from that UTC day on; ``["time", start, end]``: microseconds of the UTC day,
    the interval wrapping past midnight when it ends before it starts."""
    t = when.astimezone(UTC)
    if constraint[0] == "date":
        return t.date().isoformat() >= str(constraint[1])
    us = ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond
    start, end = int(constraint[1]), int(constraint[2])
    if end < start:
        return us >= start or us < end
    return start <= us < end


def _compile(model: str, provider: str | None) -> Any:
    """The entry for (model, provider), from genai-prices (imported here): ``None``, its prices, or ``_LIVE``."""
    if _load() is None:
        return None
    try:
        found = _calc(_usage_cls(input_tokens=0, output_tokens=0), model, **({"provider_id": provider} if provider else {}))
    except LookupError:
        return None
    except ValueError:
        return _LIVE
    prices = found.model.prices
    conditional = prices if isinstance(prices, list) else [None]
    entry = []
    try:
        for cp in conditional:
            constraint = None if cp is None else _constraint(cp.constraint)
            entry.append([constraint, *_rates_of(prices if cp is None else cp.prices)])
    except (ValueError, TypeError):  # a price rule this code does not know
        return _LIVE
    return entry


def _constraint(c: Any) -> list[Any] | None:
    from datetime import date, time

    if c is None:
        return None
    if type(c).__name__ == "StartDateConstraint" and isinstance(c.start_date, date):
        return ["date", c.start_date.isoformat()]
    if type(c).__name__ == "TimeOfDateConstraint" and isinstance(c.start_time, time) and isinstance(c.end_time, time):
        return ["time", _utc_us(c.start_time), _utc_us(c.end_time)]
    raise TypeError(f"unknown price constraint {c!r}")


def _utc_us(t: Any) -> int:
    """A time of day as microseconds of the UTC day (a naive time is UTC, as genai-prices reads it)."""
    from datetime import date

    if t.tzinfo is not None:
        t = datetime.combine(date(1970, 1, 1), t).astimezone(UTC).time()
    return int(((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond)


def _rates_of(mp: Any) -> tuple[list[int], float, list[list[float]]]:
    """One price's tier starts, price per request and per-token rates of each tier, asked of the price itself at
    an input size inside each tier (a tier applies above its start)."""
    from genai_prices.types import TieredPrices

    def price(i: int, c: int, o: int) -> float:
        usage = _usage_cls(input_tokens=i, output_tokens=o, cache_read_tokens=c)
        return float(mp.calc_price(usage)["total_price"])

    starts = sorted({int(t.start) for v in vars(mp).values() if isinstance(v, TieredPrices) for t in v.tiers})
    base = price(0, 0, 0)
    rates: list[list[float]] = []
    for k in range(len(starts) + 1):
        probe = starts[k] if k < len(starts) else (starts[-1] if starts else 0) + _M
        if probe <= 0:  # a tier that only an empty input is in: no input rate to tell
            rates.append([0.0, 0.0, (price(0, 0, _M) - base) / _M])
            continue
        full = price(probe, 0, 0)
        rates.append([(full - base) / probe, (price(probe, probe, 0) - base) / probe, (price(probe, 0, _M) - full) / _M])
    return starts, base, rates


# ---------------------------------------------------------------- prices the cache cannot hold: genai-prices each time
# genai-prices takes about 100 us a call: each price region (the same minute, as time-of-day prices go; the same
# tier) is asked a few times and every call in it is computed from its rates.


def _live_cost(model: str, provider: str | None, tokens: Tokens, when: datetime) -> float | None:
    minute = when.replace(second=0, microsecond=0)
    region = _region(model, provider, minute)
    if region is None:
        return None
    starts, base = region
    cached = min(tokens.cached, tokens.input)
    tier = sum(1 for st in starts if tokens.input > st)
    a, b, c = _rates(model, provider, minute, tier, max(tokens.input, 1) if starts else _M)
    return base + a * (tokens.input - cached) + b * cached + c * tokens.output


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
    out = _calc_or_none(model, provider, probe, 0, _M, minute)
    if base is None or full is None or cached is None or out is None:
        raise ValueError(f"no price for {model!r} at {minute}")  # _region found one: the table changed meanwhile
    f = float(full.total_price)
    return (
        (f - float(base.total_price)) / probe,
        (float(cached.total_price) - float(base.total_price)) / probe,
        (float(out.total_price) - f) / _M,
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
    when = parse_ts(rec.get("ts"))
    return [(m, p, t, usage_cost(m, p, t, when=when)) for m, p, t in entries]
