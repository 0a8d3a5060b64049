"""Reading a record's time: the one reader of the ISO-8601 ``ts`` every record and event carries."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["parse_ts", "ts_ns"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_ts(ts: Any) -> datetime | None:
    """An ISO-8601 time (``2026-11-29T18:30:12.345Z``; UTC when it names no zone); ``None`` if it is not one."""
    if not isinstance(ts, str) or not ts:
        return None
    try:
        t = datetime.fromisoformat(ts)
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def ts_ns(ts: Any) -> int | None:
    """Unix nanoseconds of a time: ISO 8601 (as :func:`parse_ts`), or a number of seconds or milliseconds
    (written by hand or by another language's writer); ``None`` if it is neither."""
    if isinstance(ts, str):
        t = parse_ts(ts)
        if t is None:
            return None
        d = t - _EPOCH
        return (d.days * 86_400 + d.seconds) * 1_000_000_000 + d.microseconds * 1000
    if isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts > 0:
        return int(ts * 1e9) if ts < 1e11 else int(ts * 1e6)
    return None
