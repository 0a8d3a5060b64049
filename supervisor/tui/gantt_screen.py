"""The Gantt screen (``g`` on the dashboard): the steps of one process attempt on a time axis.

One row a step (a nested step under its parent), its bar from its begin to its record, its tries on the bar:
failed tries ``▒`` red, the waits between them ``╌``, the try that succeeded ``█`` green, a step in flight ``▓``
yellow, one interrupted ``░`` (a crash or a restart ended it); an attempt that resumed has a first row for the
steps it was served from the journal. The axis is scaled to the width. ``j``/``k`` move, Enter selects the step
on the dashboard and closes, ``[``/``]`` show the previous or next attempt, ``q``/Esc/``g`` close.

The records are read in a worker (one attempt, at most ``gantt.WINDOW`` records: a longer attempt's window is
around the dashboard's cursor), through a twin of the dashboard's reader; only the rows on screen are drawn.
Live, the screen reads what the dashboard's model gained (a look at its count twice a second) and the bars of
the steps in flight grow with the clock.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from rich.segment import Segment
from rich.style import Style
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Static
from textual.worker import Worker, get_current_worker

from ..core.journal_reader import JournalReader
from ..views import gantt as gm
from ..views.fmt import fmt_ms
from .key_footer import KeyFooter
from .textual_hooks import SizeHookedScrollView

if TYPE_CHECKING:
    from textual.app import App

    from ..views.timeline import TimelineModel
    from .timeline import TimelineView


class Dashboard(Protocol):
    """What the screen takes from the dashboard (a protocol: the dashboard imports this module, not the reverse)."""

    model: TimelineModel

    @property
    def app(self) -> App[Any]: ...
    @property
    def timeline(self) -> TimelineView: ...
    def goto(self, text: str) -> None: ...

__all__ = ["GANTT_KEYS", "GanttScreen", "GanttView", "open_gantt"]

LIVE_POLL_S = 0.5
"""How often a live attempt looks for new records (the dashboard's model count: an int compared)."""

GANTT_KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Gantt",
        [
            ("j / k / ↓ / ↑", "next / previous step"),
            ("PgDn / PgUp / Home / End", "page down / up, first / last step"),
            ("Enter", "select the step on the dashboard (its row: the step record, else its begin) and close"),
            ("[ / ]", "previous / next process attempt"),
            ("?", "this help"),
            ("q / Esc / g", "back to the dashboard"),
        ],
    ),
    (
        "Reading it",
        [
            ("rows", "one step a row, in the order they began; a nested step under its parent; the axis is the "
                     "attempt's time from its first record, scaled to the width"),
            ("█ green", "a try that succeeded"),
            ("▒ red", "a try that failed; ╌ the wait before its retry. The step's tries share its row: "
                      "'3 tries, succeeded'"),
            ("▓ yellow", "in flight (live: grows with the clock)"),
            ("░ grey", "interrupted: the attempt ended (a crash, a restart, a rollback) before its record"),
            ("▪ blue", "a resumed attempt's first row: the steps it was served from the journal"),
        ],
    ),
]
"""The Gantt screen's keys and what its marks mean (the help screen shows them)."""

_SERVED_ROW = -1


def open_gantt(dashboard: Dashboard) -> None:
    """Push the Gantt screen for the attempt of the dashboard's selected record."""
    dashboard.app.push_screen(GanttScreen(dashboard))


def columns(width: int) -> tuple[int, int, int]:
    """The name, bar and label columns for a row ``width`` wide (a space between each)."""
    name_w = max(10, min(32, width // 4))
    label_w = 20 if width < 120 else 30
    return name_w, max(1, width - name_w - label_w - 2), label_w


class GanttView(SizeHookedScrollView, can_focus=True):
    """The axis (its first line, fixed) and one line a step, drawn only for the rows on screen."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "gantt--cursor", "gantt--ok", "gantt--failed", "gantt--running", "gantt--interrupted", "gantt--served",
        "gantt--gap", "gantt--axis",
    }
    DEFAULT_CSS = """
    GanttView { height: 1fr; overflow-x: hidden; background: $background; color: $text; }
    GanttView > .gantt--cursor { background: $block-cursor-blurred-background; text-style: bold; }
    GanttView:focus > .gantt--cursor { background: $block-cursor-background; text-style: bold; }
    GanttView > .gantt--ok { color: $success; }
    GanttView > .gantt--failed { color: $error; }
    GanttView > .gantt--running { color: $warning; }
    GanttView > .gantt--interrupted { color: $text-muted; }
    GanttView > .gantt--served { color: $primary; }
    GanttView > .gantt--gap { color: $error 60%; }
    GanttView > .gantt--axis { color: $text-muted; }
    """

    cursor = 0

    def __init__(self, *, id: str | None = None) -> None:  # `id`: Textual's name
        super().__init__(id=id)
        self.gantt = gm.Gantt()
        self.items: list[int] = []
        """Bar indexes in row order (:data:`_SERVED_ROW` first for a resumed attempt)."""
        self.now: float | None = None
        """The clock for the steps in flight (``None``: the attempt is not live; they end at its last record)."""

    def show(self, gantt: gm.Gantt) -> None:
        self.gantt = gantt
        self.rows_changed()

    def rows_changed(self) -> None:
        g = self.gantt
        self.items = ([_SERVED_ROW] if g.served else []) + g.rows()
        self.cursor = min(self.cursor, max(0, len(self.items) - 1))
        self.virtual_size = Size(self.size.width, len(self.items) + 1)
        self.refresh()

    def selected(self) -> int | None:
        """The bar index of the cursor row (:data:`_SERVED_ROW`: the served row; ``None``: no rows)."""
        return self.items[self.cursor] if self.items else None

    def on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(event.size.width, len(self.items) + 1)

    # ------------------------------------------------------------------ moving
    def move_to(self, row: int) -> None:
        if not self.items:
            return
        self.cursor = max(0, min(len(self.items) - 1, row))
        h = max(1, self.scrollable_content_region.height - 1)  # the axis line does not scroll
        top = int(self.scroll_y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True, force=True)
        elif self.cursor >= top + h:
            self.scroll_to(y=self.cursor - h + 1, animate=False, immediate=True, force=True)
        self.refresh()
        self.post_message(self.Moved())

    class Moved(Message):
        """The cursor moved to another step."""

    # ------------------------------------------------------------------ drawing
    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"gantt--{name}")

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.rich_style
        name_w, bar_w, label_w = columns(width)
        lo, hi = self.gantt.span(self.now)
        if y == 0:
            return Strip([Segment(" " * (name_w + 1) + gm.axis(lo, hi, bar_w), self._style("axis"))]).crop_extend(
                0, width, base)
        row = int(self.scroll_y) + y - 1
        if row >= len(self.items):
            return Strip.blank(width, base)
        cur = self._style("cursor") if row == self.cursor else None
        i = self.items[row]
        if i == _SERVED_ROW:
            segs = self._served_segments(name_w, bar_w, label_w)
        else:
            segs = self._bar_segments(self.gantt.bars[i], lo, hi, (name_w, bar_w, label_w))
        if cur is not None:
            segs = list(Segment.apply_style(segs, post_style=Style(bgcolor=cur.bgcolor, bold=True)))
        return Strip(segs).crop_extend(0, width, base)

    def _served_segments(self, name_w: int, bar_w: int, label_w: int) -> list[Segment]:
        served = self._style("served")
        label = f"{self.gantt.served} steps served"
        return [
            Segment(f"{'↺ served':{name_w}.{name_w}} ", served),
            Segment(gm.GLYPH[gm.SERVED], served),
            Segment(" " * (bar_w - 1) + " "),
            Segment(f"{label:{label_w}.{label_w}}", served),
        ]

    def _bar_segments(self, bar: gm.Bar, lo: float, hi: float, cols: tuple[int, int, int]) -> list[Segment]:
        name_w, bar_w, label_w = cols
        name = "  " * bar.depth + bar.name
        if len(name) > name_w:
            name = name[: name_w - 1] + "…"
        style = self._style(bar.outcome) if bar.outcome != gm.OK else Style()
        segs = [Segment(f"{name:{name_w}} ", style)]
        cells = gm.bar_cells(bar, lo, hi, bar_w, self.now)
        run_key, run_len = "", 0
        for key in [*cells, None]:  # runs of one key: one segment each
            if key == run_key:
                run_len += 1
                continue
            if run_len:
                segs.append(Segment(gm.GLYPH[run_key] * run_len, self._style(run_key)) if run_key else Segment(" " * run_len))
            run_key, run_len = key or "", 1
        segs.append(Segment(" "))
        segs.append(Segment(f"{_label(bar, self.now, label_w):{label_w}.{label_w}}", style))
        return segs


def _label(bar: gm.Bar, now: float | None, width: int) -> str:
    """``3 tries, succeeded 56ms`` as far as it fits: the tries first, the duration after."""
    tries = bar.tries_label()
    dur = fmt_ms(bar.duration_ms(now))
    both = f"{tries} {dur}".strip()
    return both if len(both) <= width else tries


class GanttScreen(Screen[None]):
    """The Gantt view of one attempt of the dashboard's run."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "cursor(1)", "Down", show=False, tooltip="The next step"),
        Binding("k,up", "cursor(-1)", "Up", show=False, tooltip="The previous step"),
        Binding("pagedown,space", "page(1)", "Page down", show=False),
        Binding("pageup,b", "page(-1)", "Page up", show=False),
        Binding("home", "edge(0)", "First", show=False),
        Binding("end", "edge(1)", "Last", show=False),
        Binding("enter", "jump", "Select", tooltip="Select this step on the dashboard and close"),
        Binding("left_square_bracket", "attempt(-1)", "Prev attempt", key_display="[", tooltip="The previous process attempt"),
        Binding("right_square_bracket", "attempt(1)", "Next attempt", key_display="]", tooltip="The next process attempt"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="This screen's keys and marks"),
        Binding("q,escape,g", "close", "Back", key_display="q", tooltip="Back to the dashboard"),
    ]

    DEFAULT_CSS = """
    GanttScreen #gantt-title { height: 1; background: $panel; padding: 0 1; text-style: bold; text-wrap: nowrap; text-overflow: ellipsis; }
    GanttScreen #gantt-detail { height: 2; background: $panel; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    class Loaded(Message):
        """An attempt's records read (or more of them, live) in a worker."""

        def __init__(self, gen: int, records: list[Any], hi: int, reader: JournalReader, *, fresh: bool) -> None:
            self.gen = gen
            self.records = records
            self.hi = hi
            self.reader = reader
            self.fresh = fresh
            super().__init__()

    def __init__(self, dashboard: Dashboard) -> None:
        super().__init__()
        self.dashboard = dashboard
        self.model = dashboard.model
        self.attempt: int | None = None
        self.attempts: list[int] = []
        self.lo = self.hi = self.span_hi = 0
        """The seqs read (``lo``..``hi``) of the attempt's records (``..span_hi``)."""
        self.windowed = False
        """The attempt is longer than ``gantt.WINDOW`` records: only those around the cursor are read."""
        self.loading = False
        self.ended = False
        """The attempt has ended (a later one began, or the supervisor saw it exit): no more records come."""
        self._gen = 0
        self._reader: JournalReader | None = None

    def compose(self) -> ComposeResult:
        yield Static("reading the attempt's records…", id="gantt-title")
        yield GanttView(id="gantt")
        yield Static("", id="gantt-detail")
        yield KeyFooter()

    @property
    def view(self) -> GanttView:
        return self.query_one(GanttView)

    def on_mount(self) -> None:
        self.view.focus()
        self.load(self.dashboard.timeline.selected_seq())
        self.set_interval(LIVE_POLL_S, self._poll)

    # ------------------------------------------------------------------ reading
    def load(self, around: int | None, attempt: int | None = None) -> None:
        """Read the attempt of record ``around`` (or ``attempt``), at most a window of it around ``around``."""
        m = self.model
        starts = dict(m.start_seqs)
        self.attempts = sorted(starts)
        if attempt is not None and attempt in starts:
            around = starts[attempt]
        self.attempt, lo, hi = gm.attempt_span(starts, m.count, around)
        self.lo, self.hi = gm.window(lo, hi, around)
        self.windowed = (self.lo, self.hi) != (lo, hi)
        self.span_hi = hi
        self.ended = hi < m.count or self.attempt in m.exited_attempts
        self._gen += 1
        self.loading = True
        self.view.show(gm.Gantt(self.attempt))
        self._read(self._gen, self.lo, self.hi, self._twin(), fresh=True)

    def _twin(self) -> JournalReader:
        m = self.model
        return m.reader.twin() if m.indexed else JournalReader(m.source)

    @work(thread=True, exclusive=True, group="gantt", exit_on_error=False)
    def _read(self, gen: int, lo: int, hi: int, reader: JournalReader, *, fresh: bool) -> None:
        """Parse records ``lo..hi`` (a thread: an attempt may be a long read)."""
        worker = get_current_worker()
        reader.index()
        records = reader.get_range(lo, hi) if hi > lo else []
        if not worker.is_cancelled:
            self.post_message(self.Loaded(gen, records, hi, reader, fresh=fresh))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        if message.gen != self._gen:
            return  # another attempt was asked for meanwhile
        self.loading = False
        self._reader = message.reader
        g = self.view.gantt
        for rec in message.records:
            if isinstance(rec, dict) and rec.get("kind") == "start" and g.records and not message.fresh:
                self.ended = True  # a new attempt began: this one's steps in flight were interrupted
                break
            if isinstance(rec, dict):
                g.add(rec)
        self.hi = message.hi
        if self.ended and self.span_hi <= self.hi:
            g.interrupt()
        self.view.now = self._now()
        self.view.rows_changed()
        if message.fresh:
            self.view.move_to(self._row_of(self.dashboard.timeline.selected_seq()))
        self._show_text()

    def _now(self) -> float | None:
        """The clock for steps in flight while the agent runs this attempt, else ``None`` (drawn to the last record)."""
        live = self.dashboard.timeline.agent_running and not self.ended
        return time.time() if live else None

    def _poll(self) -> None:
        """Live: read what the dashboard's model gained for the last attempt; let the bars in flight grow."""
        if self.loading or self.ended or self._reader is None:
            return
        count = self.model.count
        if count > self.hi and self.hi >= self.span_hi:
            self.span_hi = count
            self.loading = True
            self._read(self._gen, self.hi, count, self._reader, fresh=False)
        elif self.view.gantt.in_flight and self._now() is not None:
            self.view.now = self._now()
            self.view.refresh()
            self._show_text()

    def _row_of(self, seq: int | None) -> int:
        """The row of the step whose record (or begin) is ``seq``; the first row if none is."""
        bars = self.view.gantt.bars
        for row, i in enumerate(self.view.items):
            if i != _SERVED_ROW and seq is not None and (bars[i].seq == seq or any(t.seq == seq for t in bars[i].tries)):
                return row
        return 0

    # ------------------------------------------------------------------ text
    def _show_text(self) -> None:
        self.query_one("#gantt-title", Static).update(self._title())
        self.query_one("#gantt-detail", Static).update(self._detail())

    def _title(self) -> str:
        g = self.view.gantt
        s = g.summary()
        lo, hi = g.span(self.view.now)
        which = f"attempt {self.attempt} of {len(self.attempts)}" if self.attempt is not None else "the journal"
        parts = [f"Gantt · {which}", f"{s['steps']} steps", f"at most {g.most_in_flight()} at once"]
        for key, word in (("retried", "retried"), ("failed", "failed"), ("running", "in flight"),
                          ("interrupted", "interrupted")):
            if s[key]:
                parts.append(f"{s[key]} {word}")
        if g.bars and g.origin is None:
            parts.append("the records have no times (ts): no time axis")
        else:
            parts.append(fmt_ms((hi - lo) * 1000) if g.bars else "no steps")
        if self.windowed:
            parts.append(f"records #{self.lo} to #{self.hi - 1} only (a window around the cursor)")
        if g.dropped:
            parts.append(f"{g.dropped} later steps not drawn")
        return " · ".join(parts)

    def _detail(self) -> str:
        i = self.view.selected()
        g = self.view.gantt
        if i is None:
            return "no steps in this attempt" if not self.loading else ""
        if i == _SERVED_ROW:
            return (f"{g.served} steps were served from the journal when attempt {self.attempt} resumed: "
                    "their recorded outputs, not run again\nEnter: the attempt's start record")
        b = g.bars[i]
        head = f"{b.name}  pos {b.pos}  #{b.seq}  {_label(b, self.view.now, 60) or 'succeeded'}"
        tries = []
        for n, t in enumerate(b.tries, 1):
            mark = "✗" if t.failed else "✓"
            tries.append(f"try {n} {mark} {fmt_ms((t.end - t.start) * 1000)}" + (f" {t.error}" if t.error else ""))
        if b.open or b.outcome == gm.INTERRUPTED:
            tries.append(f"try {len(b.tries) + 1} {'in flight' if b.open else 'interrupted'}")
        return head + "\n" + " · ".join(tries)

    @on(GanttView.Moved)
    def _moved(self, message: GanttView.Moved) -> None:
        self.query_one("#gantt-detail", Static).update(self._detail())

    # ------------------------------------------------------------------ keys
    def action_cursor(self, delta: int) -> None:
        self.view.move_to(self.view.cursor + delta)

    def action_page(self, direction: int) -> None:
        self.view.move_to(self.view.cursor + direction * max(1, self.view.scrollable_content_region.height - 2))

    def action_edge(self, end: int) -> None:
        self.view.move_to(len(self.view.items) - 1 if end else 0)

    def action_jump(self) -> None:
        """Select the step on the dashboard (its record's row) and close."""
        i = self.view.selected()
        if i is None:
            self.notify("no step to select", severity="warning")
            return
        seq = self.lo if i == _SERVED_ROW else self.view.gantt.bars[i].seq
        if i == _SERVED_ROW and self.attempt is not None:
            seq = self.model.start_seqs.get(self.attempt, seq)
        self.app.pop_screen()
        self.dashboard.goto(str(seq))

    def action_attempt(self, delta: int) -> None:
        if not self.attempts or self.attempt is None:
            self.notify("this journal has one attempt (no start records)", severity="warning")
            return
        k = self.attempts.index(self.attempt) + delta
        if not 0 <= k < len(self.attempts):
            self.notify(f"no {'next' if delta > 0 else 'previous'} attempt", severity="warning")
            return
        self.load(None, self.attempts[k])

    def action_help(self) -> None:
        from .help_screen import HelpScreen

        self.app.push_screen(HelpScreen(keys=GANTT_KEYS, title="Gantt keys"))

    def action_close(self) -> None:
        self.app.pop_screen()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A read that died says so instead of leaving the screen empty."""
        from .worker_errors import report_worker_error

        text = report_worker_error(self, event, "the Gantt view could not read the attempt")
        if text:
            self.loading = False
            self.query_one("#gantt-title", Static).update(text)
