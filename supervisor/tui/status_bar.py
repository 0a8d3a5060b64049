"""The status bar of the run dashboard: one line, whatever the width.

State, process figures, run counts, the run's tokens and cost (and what resuming
saved), the mode. Each part has a priority: on a narrow terminal the least
important parts go first (at 80 columns: state, attempt, steps, records,
tokens and cost, the mode), never a second line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual import events, work
from textual.widgets import Static
from textual.worker import get_current_worker

from ..core.status import RunStatus
from ..core.wire import USAGE_WORD
from ..views.fmt import fmt_bytes, fmt_cost, fmt_duration, fmt_tokens

if TYPE_CHECKING:
    from ..core.journal_reader import JournalReader
    from ..core.segments import StreamPos
    from ..core.usage import RunUsage, UsageFold
    from ..views.scan import ScanResult
    from ..views.timeline_calls import CallsFollower, CallsRead

_STATE_CLASS = {
    "running": "status--ok",
    "starting": "status--ok",
    "succeeded": "status--ok",
    "backoff": "status--warn",
    "paused": "status--warn",
    "stopping": "status--warn",
    "stopped": "status--warn",
    "crashed": "status--error",
    "failed": "status--error",
    "rolled back": "status--accent",
}
STATE_CLASSES = ("status--ok", "status--warn", "status--error", "status--accent", "status--id")
"""The component classes a state is coloured with, here and in the runs list."""


_ENDED = ("succeeded", "failed", "stopped")


def may_grow(status: RunStatus) -> bool:
    """Whether an agent may still write the run: a supervisor watches it (and has not ended), an agent runs it on
    its own (``running`` from the files: it holds the journal's lock), or nothing says (``unknown``: a bare journal,
    which any program may be appending to)."""
    return status.state in ("running", "unknown") or (status.live and status.state not in _ENDED)


def _unwatched(state: str) -> str:
    """What the bar says of a run no supervisor watches: an agent running on its own is ``not supervised`` (no
    restart on a crash, no R or X); an ended run whose state does not say it stopped is ``agent not running``;
    ``succeeded`` and ``failed`` say it themselves, and of a bare journal (``unknown``) nothing is known."""
    if state == "running":
        return "not supervised"
    return "" if state in ("succeeded", "failed", "unknown") else "agent not running"


def state_class(state: str) -> str:
    """The component class that colours ``state`` (the runs list's status column too)."""
    return _STATE_CLASS.get(state, "status--id")


class UsageTotals:
    """The run's model usage for the status bar (``None`` cost: unknown prices, or not computed yet).

    A plain class, not a dataclass: one costs ~0.3 ms of the dashboard's start (code generated at import)."""

    __slots__ = ("cost", "saved_cost", "saved_tokens", "tokens")

    def __init__(self, tokens: int = 0, cost: float | None = None, saved_tokens: int = 0, saved_cost: float | None = None) -> None:
        self.tokens = tokens
        self.cost = cost
        self.saved_tokens = saved_tokens
        self.saved_cost = saved_cost

    def _key(self) -> tuple[int, float | None, int, float | None]:
        return self.tokens, self.cost, self.saved_tokens, self.saved_cost

    def __eq__(self, other: object) -> bool:  # the usage worker redraws the bar only when the totals change
        return isinstance(other, UsageTotals) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def __repr__(self) -> str:
        return f"UsageTotals{self._key()!r}"


def _no_time(seq: int) -> str | None:
    return None


def _no_times() -> tuple[Any, int]:
    return _no_time, 0  # the totals need no place among the records


class CallUsage:
    """The proxy's calls (``llm.jsonl``) in the status bar's totals, by the core's one rule
    (``UsageFold.add_call``: what they consumed, and what each served call saved), in a fold of their own: they
    are not steps of the journal's history, so the journal's fold must not see them."""

    __slots__ = ("_fold", "price")

    def __init__(self) -> None:
        self.price: Any = None
        self._fold: Any = None

    def read(self, follower: CallsFollower, load_prices: Callable[[], Any]) -> CallsRead | None:
        """What ``follower`` finds appended to ``llm.jsonl`` (``None``: nothing), the prices loaded with the first
        calls (they are added later, with ``add``)."""
        got = follower.read(0, _no_times)
        if got is not None and self.price is None and (got.rows or got.served):
            self.price = load_prices()
        return got

    def add(self, got: Any) -> None:
        """Take a ``timeline_calls.CallsRead``: its call records and its served notes."""
        from ..core.llm_calls import SERVED_NOTE
        from ..core.usage import UsageFold

        if self._fold is None:
            self._fold = UsageFold(self.price)
        for call in got.rows:
            self._fold.add_call(call.data)
        for seq, attempts in got.served.items():
            for _ in attempts:
                self._fold.add_call({"kind": "note", "message": SERVED_NOTE, "served": seq})

    @property
    def steps(self) -> int:
        """The calls that said what they consumed."""
        return int(self._fold.result.steps) if self._fold is not None else 0

    def totals(self, journal: RunUsage | None) -> UsageTotals:
        """The journal's ``RunUsage`` (``None``: none yet) plus the calls'."""
        runs = [u for u in (journal, self._fold.result if self._fold is not None else None) if u is not None]
        return UsageTotals(
            sum(u.tokens.total for u in runs), _sum_known(u.cost_usd for u in runs),
            sum(u.saved_tokens.total for u in runs), _sum_known(u.saved_cost_usd for u in runs),
        )


def _sum_known(costs: Iterable[float | None]) -> float | None:
    """The sum of the costs that are known; ``None`` if none is (no prices, or unknown models)."""
    known = [c for c in costs if c is not None]
    return sum(known) if known else None


class JournalUsage:
    """The journal's side of the run's totals: nothing is parsed until a line with ``"usage"`` is found (by the
    scan, or in the bytes appended since: one C-speed look per chunk); then the whole run is folded once, and
    after that only new records."""

    __slots__ = ("cursor", "fold", "found", "reader", "source")

    def __init__(self, source: Path, found: bool, cursor: StreamPos) -> None:
        self.source = source
        self.found = found
        self.cursor = cursor
        self.reader: JournalReader | None = None
        self.fold: UsageFold | None = None

    def look(self) -> None:
        """Until usage is found: look for ``"usage"`` in what was appended since the last look (nothing parsed)."""
        if self.reader is not None or self.found:
            return
        from ..core.segments import read_stream

        for c in read_stream(self.source, self.cursor, chunk=1 << 20):
            if USAGE_WORD in c.data:
                self.found = True
                break

    def entries(self, load_prices: Callable[[], Any]) -> Iterable[Any]:
        """The records to fold this round: none before usage is found, then the whole run once, then the new ones."""
        if self.reader is None and self.found:
            from ..core.journal_reader import JournalReader
            from ..core.usage import UsageFold

            self.reader, self.fold = JournalReader(self.source), UsageFold(load_prices())
            return self.reader.iter_entries(lazy=True)  # the whole run, from the start
        return self.reader.read_new() if self.reader is not None else ()


class _Parts:
    """The status line's parts, each with a priority (higher stays longer), in display order; ``fit`` leaves out
    the least important until the line fits."""

    def __init__(self, wide: bool, label: Style | None) -> None:
        self.wide = wide
        self.label = label
        self.items: list[tuple[int, list[tuple[str, Style | None]]]] = []

    def add(self, prio: int, *parts: tuple[str, Style | None]) -> None:
        self.items.append((prio, list(parts)))

    def fig(self, prio: int, name: str, value: Any, short: str = "") -> None:
        """A figure: ``name value`` with long labels (or no short one), else ``value short``."""
        if self.wide or not short:
            self.add(prio, (f"{name} ", self.label), (str(value), None))
        else:
            self.add(prio, (str(value), None), (short, self.label))

    def fit(self, room: int, drop_below: int) -> Text | None:
        """The line in ``room`` columns, parts of priority under ``drop_below`` left out (the rightmost of the
        least important first); ``None`` if it does not fit."""
        sep = "  " if self.wide else " "

        def length(keep: list[tuple[int, list[tuple[str, Style | None]]]]) -> int:
            return sum(len(t) for _, ps in keep for t, _ in ps) + len(sep) * (len(keep) - 1)

        keep = list(self.items)
        while length(keep) > room and len(keep) > 1:
            lowest = min(p for p, _ in keep)
            if lowest >= drop_below:
                return None
            idx = max(i for i, (p, _) in enumerate(keep) if p == lowest)
            del keep[idx]
        t = Text(no_wrap=True, overflow="ellipsis")
        for n, (_, ps) in enumerate(keep):
            if n:
                t.append(sep)
            for text, style in ps:
                t.append(text, style=style or "")
        return t


class StatusBar(Static):
    """One line: state, pid, attempt, uptime, restarts, CPU, RSS; steps, checkpoints, records; tokens, cost; mode."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "status--label", "status--ok", "status--warn", "status--error", "status--accent", "status--alarm", "status--id",
    }

    DEFAULT_CSS = """
    StatusBar { height: 1; background: $panel; color: $text; padding: 0 1; }
    StatusBar > .status--label { color: $text-muted; }
    StatusBar > .status--id { text-style: bold; }
    StatusBar > .status--ok { color: $success; text-style: bold; }
    StatusBar > .status--warn { color: $warning; text-style: bold; }
    StatusBar > .status--error { color: $error; text-style: bold; }
    StatusBar > .status--accent { color: $secondary; text-style: bold; }
    StatusBar > .status--alarm { color: $background; background: $error; text-style: bold; }
    """

    _last: dict[str, Any] | None = None
    USAGE_POLL_S = 2.0
    """The run's totals are brought up to date at most this often (new records only)."""

    def __init__(self, source: Path | None = None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.source = source
        self.usage: UsageTotals | None = None
        """The run's totals from the usage worker (``None`` until it found usage in the journal)."""
        self._usage_started = False
        self._usage_wake = threading.Event()
        self._usage_poll: float | None = self.USAGE_POLL_S
        """How often the usage worker looks for new records; ``None``: only when woken (a finished run)."""
        self._closing = False
        self._prices_told = False

    def on_unmount(self) -> None:
        self._closing = True
        self._usage_wake.set()

    def set_polling(self, on: bool) -> None:
        """Look for new usage every ``USAGE_POLL_S`` (a run that may be running), or not at all (a finished run:
        the dashboard turns it on again when the run is started again)."""
        self._usage_poll = self.USAGE_POLL_S if on else None
        if on:
            self.wake_usage()

    def wake_usage(self) -> None:
        """Bring the totals up to date now (the dashboard's watcher saw a change while nothing polls)."""
        self._usage_wake.set()

    def scanned(self, result: ScanResult) -> None:
        """The journal's scan is done: sum the run's totals in a worker (never before the first frame).

        The scan looked for ``"usage"`` in every chunk it read: a run without it is not parsed
        for totals at all; the worker then only watches what is appended after the scan's end.
        """
        if not self._usage_started and self.source is not None:
            self._usage_started = True
            self.count_usage(self.source, result.usage, result.end)

    @work(thread=True, exclusive=True, group="usage", exit_on_error=False)
    def count_usage(self, source: Path, found: bool, cursor: StreamPos) -> None:
        """Tokens, cost and saved by resume of the whole run (``core.usage.UsageFold``), then of what is appended.

        Until a line with ``"usage"`` is found (by the scan, or in the appended bytes: one C-speed look
        per chunk), nothing is parsed; then one pass folds the whole journal and later rounds fold
        only new records. The prices (genai-prices, 0.4 s to import) are loaded here, in this thread.
        """
        from ..views.timeline_calls import CallsFollower

        worker = get_current_worker()
        shown: UsageTotals | None = None
        journal = JournalUsage(source, found, cursor)
        run_dir = source if source.is_dir() else source.parent if source.name == "journal.jsonl" else None
        calls_in = CallsFollower(run_dir)  # the proxy's llm.jsonl: one failed open a round without it
        calls = CallUsage()
        while not worker.is_cancelled:
            try:
                journal.look()
                got = calls.read(calls_in, self._load_prices)
                if got is not None:  # kept before the journal's read, which may fail this round
                    calls.add(got)
                entries = journal.entries(self._load_prices)
                fold = journal.fold
                if fold is not None:
                    for e in entries:
                        fold.add(e)
                        if worker.is_cancelled:
                            return
                if fold is not None or calls.steps:
                    totals = calls.totals(fold.result if fold is not None else None)
                    if totals != shown:
                        shown = totals
                        self.app.call_from_thread(self._show_usage, totals)
            except OSError:
                pass  # the files moved under us (a rotation, a deleted run): the next round reads again
            if self._usage_wake.wait(self._usage_poll):
                self._usage_wake.clear()  # woken: by the polling turned on again, or by the unmount
            if self._closing:
                return

    def _load_prices(self) -> Any:
        """The price function (genai-prices imported here, in the worker: 0.4 s); the rows are priced from now on."""
        from ..export import pricing

        if not self._prices_told:
            self._prices_told = True
            pricing.available()
            self.app.call_from_thread(self._prices_loaded)
        return pricing.step_cost

    def _prices_loaded(self) -> None:
        from .timeline import TimelineView

        for view in self.screen.query(TimelineView):
            view.prices_loaded()

    def _show_usage(self, totals: UsageTotals) -> None:
        self.usage = totals
        if self._last is not None:
            self.show(**self._last)

    def _st(self, name: str) -> Style:
        st = self.get_component_rich_style(name)
        alarm = name == "status--alarm"
        return Style(color=st.color, bgcolor=st.bgcolor if alarm else None, bold=st.bold)

    def on_resize(self, event: events.Resize) -> None:
        if self._last is not None:
            self.show(**self._last)

    def show(
        self,
        status: RunStatus,
        *,
        run_id: str,
        records: int,
        steps: int | str,
        checkpoints: int | str,
        follow: bool,
        replay_now: int | None,
        indexing: bool,
        deleted: bool,
        problems: int,
        usage: UsageTotals | None = None,
    ) -> None:
        """Redraw from the given figures (cheap: one Text); ``usage`` defaults to this bar's own totals."""
        self._last = dict(
            status=status, run_id=run_id, records=records, steps=steps, checkpoints=checkpoints, follow=follow,
            replay_now=replay_now, indexing=indexing, deleted=deleted, problems=problems, usage=usage,
        )
        room = self.size.width or 10_000  # the content width (the padding is outside it)
        # long labels, leaving out the least important figures first; short labels only if that is not enough
        t = self._line(room, wide=True, drop_below=5) or self._line(room, wide=False, drop_below=99)
        self.update(t or "")

    def _line(self, room: int, *, wide: bool, drop_below: int) -> Text | None:
        """The line with long labels (``wide``) or short ones, the least important parts (priority under
        ``drop_below``) left out until it fits; ``None`` if it still does not."""
        assert self._last is not None
        a = self._last
        status: RunStatus = a["status"]
        steps, checkpoints = ("…", "…") if a["indexing"] else (a["steps"], a["checkpoints"])
        parts = _Parts(wide, self._st("status--label"))
        run_id = str(a["run_id"])
        parts.add(9, (run_id if wide or len(run_id) <= 16 else run_id[:15] + "…", self._st("status--id")))
        parts.add(10, (f"● {status.state}", self._st(_STATE_CLASS.get(status.state, "status--id"))))
        self._process_parts(parts, status)
        parts.fig(6, "steps", steps)
        parts.fig(4, "checkpoints", checkpoints, " cp")
        parts.fig(10, "records", a["records"], " rec")
        self._usage_parts(parts, a["usage"] or self.usage)
        self._mode_parts(parts, a)
        return parts.fit(room, drop_below)

    def _process_parts(self, parts: _Parts, status: RunStatus) -> None:
        """The agent process's figures (pid, attempt, uptime, restarts, CPU, RSS) while a supervisor runs it."""
        f: dict[str, Any] = status.fields
        if not status.live:
            if f.get("attempt") is not None:
                parts.fig(7, "attempt", f.get("attempt"))
            words = _unwatched(status.state)
            if words:
                parts.add(2, (words, parts.label))
            return
        parts.fig(3, "pid", f.get("pid") or "-")
        parts.fig(7, "attempt", f.get("attempt", "-"))
        parts.fig(2, "up", fmt_duration(f.get("uptime_s")))
        parts.fig(5, "restarts", f.get("restarts", 0), "↻")
        parts.fig(1, "cpu", f"{f['cpu_percent']:.0f}%" if isinstance(f.get("cpu_percent"), (int, float)) else "-")
        parts.fig(1, "rss", fmt_bytes(f.get("rss_bytes")))
        if status.state == "backoff" and f.get("backoff_s") is not None:
            parts.add(9, (f"retry in {f['backoff_s']}s", self._st("status--warn")))

    def _usage_parts(self, parts: _Parts, usage: UsageTotals | None) -> None:
        """Tokens and cost of the run, and what resuming saved."""
        if usage is None or not (usage.tokens or usage.saved_tokens):
            return
        label, wide = parts.label, parts.wide
        spent: list[tuple[str, Style | None]] = (
            [("tokens ", label), (fmt_tokens(usage.tokens), None)] if wide else [(fmt_tokens(usage.tokens), None), (" tok", label)]
        )
        if usage.cost is not None:
            spent.append((f" {fmt_cost(usage.cost)}", None))
        parts.add(8, *spent)
        if usage.saved_tokens:
            ok = self._st("status--ok")
            saved: list[tuple[str, Style | None]] = [
                ("saved by resume " if wide else "saved ", label), (fmt_tokens(usage.saved_tokens), ok)
            ]
            if usage.saved_cost:
                saved.append((f" {fmt_cost(usage.saved_cost)}", ok))
            parts.add(8, *saved)

    def _mode_parts(self, parts: _Parts, a: dict[str, Any]) -> None:
        """Bad lines, indexing, a deleted run directory, and the mode: replay's now, follow or not."""
        if a["problems"]:
            parts.add(9, (f"bad lines {a['problems']}", self._st("status--error")))
        if a["indexing"]:
            parts.add(6, ("indexing…", self._st("status--warn")))
        if a["deleted"]:
            parts.add(11, ("RUN DIRECTORY DELETED", self._st("status--alarm")))
        if a["replay_now"] is not None:
            parts.add(11, (f"REPLAY now #{a['replay_now']}", Style(reverse=True, bold=True)))
        elif not may_grow(a["status"]):
            return  # a finished run gets no new records: following it means nothing
        elif a["follow"]:
            parts.add(11, ("FOLLOW", self._st("status--ok")))
        else:
            parts.add(11, ("follow off (f)", parts.label))
