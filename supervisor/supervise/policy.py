"""The restart policy: options, backoff with jitter, and what counts as progress.

Pure functions and dataclasses, so the policy is tested without processes.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from ..core.records import Record
from .agentlog import DEFAULT_MAX_BYTES
from .process import ExitStatus


@dataclass
class Options:
    """What ``supervise`` was asked to do (the CLI's options, with their defaults)."""

    resume_flag: str | None = "--resume"
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    backoff_factor: float = 2.0
    backoff_jitter: float = 0.25
    rollback_after: int = 3
    give_up_after: int = 5
    hang_timeout: float | None = None
    max_rss: int | None = None
    stop_grace: float = 10.0
    quiet: bool = False
    tee: bool = True
    log_max_bytes: int = DEFAULT_MAX_BYTES


@dataclass
class Attempt:
    """What the supervisor knows of one attempt, for the exit event and the give-up summary."""

    number: int
    pid: int
    records_at_start: int
    progress: int = 0
    in_flight: str | None = None
    last_activity: float = field(default_factory=time.monotonic)
    status: ExitStatus | None = None
    uptime_s: float = 0.0
    reason: str | None = None


def backoff_delay(opts: Options, failures: int, rng: random.Random | None = None) -> float:
    """Seconds to wait after ``failures`` attempts in a row without progress (>= 1)."""
    base = min(opts.backoff_max, opts.backoff_initial * opts.backoff_factor ** max(0, failures - 1))
    j = opts.backoff_jitter
    r = (rng or random).uniform(1 - j, 1 + j) if j > 0 else 1.0
    return round(min(opts.backoff_max, base * r), 3)


def is_progress(rec: Record) -> bool:
    """A record that moves the run forward: a successful step or a checkpoint (not ``start``/``begin``/``note``)."""
    kind = rec.get("kind", "step")
    return (kind == "step" and rec.get("error") is None) or kind in ("checkpoint", "fork")
