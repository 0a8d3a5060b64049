"""The timeline: a virtual list of records, supervisor events and proxied model calls (Line API, visible rows only).

A DataTable with a million rows is too slow to build; this widget asks the
model only for the rows on screen. One row per step: a begin whose step record
exists is folded into the step's row; a step in flight shows its begin row,
running with its elapsed time (live) or interrupted; ``a`` shows every begin row. Follow mode works as in ``tail -f`` and lnav:
on at the end, off when the cursor leaves the last row, on again with ``f`` or ``G``. A nested step's row is
indented under its parent's with a tree mark; ``z`` folds a parent's nested rows into its row (a run with nested
steps only: the key is not shown otherwise).
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any, ClassVar

import orjson
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip

from ..core.events import is_error_event
from ..core.records import BadLine, Kind, Record, step_name
from ..core.times import parse_ts
from ..core.wire import CHANGED_INPUTS
from ..views.fmt import fmt_cost, fmt_ms, fmt_tokens
from ..views.row_text import answer_text, args_preview, call_error, call_name, elapsed, plain, pv, telling_arg
from ..views.timeline import TimelineModel
from .textual_hooks import SizeHookedScrollView

_KIND_LABEL: dict[str, str] = {
    Kind.STEP: "step",
    Kind.BEGIN: "begin",
    Kind.CHECKPOINT: "◆ checkpt",
    Kind.ROLLBACK: "↺ rollback",
    Kind.START: "▶ start",
    Kind.FORK: "⑂ fork",
    Kind.NOTE: "note",
}


def _time(ts: Any) -> str:
    """``HH:MM:SS.mmm`` of an ISO-8601 time (``HH:MM:SS`` when it has no fraction); other text cut to 12."""
    s = str(ts or "")
    if len(s) >= 19 and s[10] == "T":
        clock = s[11:19]
        if len(s) > 20 and s[19] == ".":
            frac = s[20:23]
            if frac.isdigit():
                return f"{clock}.{frac}"
        return clock
    return s[:12]


def _relative(ts: Any, origin: datetime | None) -> str:
    """``+MM:SS.mmm`` (``+H:MM:SS`` past an hour) since ``origin``; the absolute time if either is unreadable."""
    t = parse_ts(ts) if origin is not None else None
    if t is None or origin is None:
        return _time(ts)
    sec = (t - origin).total_seconds()
    sign = "-" if sec < 0 else "+"
    sec = abs(sec)
    if sec < 3600:
        return f"{sign}{int(sec // 60):02d}:{sec % 60:06.3f}"
    return f"{sign}{int(sec // 3600)}:{int(sec % 3600 // 60):02d}:{int(sec % 60):02d}"


PREVIEW_CHARS = 320
"""A row's preview of an output or arguments: long enough for a 320-column terminal."""


def describe_event(ev: dict[str, Any]) -> str:
    """One line for a supervisor event, as the timeline shows it."""
    name = str(ev.get("event", "?"))
    att = ev.get("attempt")
    parts = [f"attempt {att}" if att is not None else ""]
    if name == "spawn":
        parts.append(f"pid {ev.get('pid')}")
    elif name == "exit":
        code, sig = ev.get("code"), ev.get("signal")
        parts.append(f"signal {sig}" if sig else f"exit code {code}")
        if ev.get("step"):
            parts.append(f"in step {ev.get('step')}")
        if ev.get("uptime_s") is not None:
            parts.append(f"after {float(ev['uptime_s']):.1f}s")
    elif name == "backoff":
        parts.append(f"waiting {ev.get('delay_s')}s")
    elif name == "rollback":
        parts.append(f"to {ev.get('checkpoint') or 'start'}: {ev.get('reason', '')}")
    elif ev.get("reason"):
        parts.append(str(ev.get("reason")))
    return f"── supervisor: {name} " + ", ".join(p for p in parts if p)


class TimelineView(SizeHookedScrollView, can_focus=True):
    """Rows of the run; the cursor row is the selected record (in replay mode: "now")."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j,down", "cursor(1)", "Down", show=False, tooltip="Select the next row"),
        Binding("k,up", "cursor(-1)", "Up", show=False, tooltip="Select the previous row"),
        Binding("pagedown,space", "page(1)", "Page down", show=False, tooltip="Move a screen down the timeline"),
        Binding("pageup,b", "page(-1)", "Page up", show=False, tooltip="Move a screen up the timeline"),
        Binding("home", "top", "Top", show=False, tooltip="Go to the first record"),
        Binding("G,end", "bottom", "Bottom", show=False, tooltip="Go to the last record (live: and follow new ones)"),
        Binding("a", "toggle_begins", "Begins", tooltip="Show begin rows (each folded into its step's row by default)"),
        Binding("z", "toggle_fold", "Fold", tooltip="Fold a parent step's nested rows into its row, or unfold them"),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "timeline--cursor",
        "timeline--abandoned",
        "timeline--future",
        "timeline--error",
        "timeline--checkpoint",
        "timeline--event",
        "timeline--crash",
        "timeline--match",
        "timeline--muted",
        "timeline--mark",
        "timeline--model",
        "timeline--tool",
    }

    DEFAULT_CSS = """
    TimelineView { height: 1fr; overflow-x: hidden; background: $background; color: $text; }
    TimelineView > .timeline--cursor {
        background: $block-cursor-blurred-background; color: $block-cursor-blurred-foreground; text-style: $block-cursor-blurred-text-style;
    }
    TimelineView:focus > .timeline--cursor {
        background: $block-cursor-background; color: $block-cursor-foreground; text-style: $block-cursor-text-style;
    }
    TimelineView > .timeline--abandoned { color: $text-disabled; text-style: strike; }
    TimelineView > .timeline--future { color: $text-disabled; }
    TimelineView > .timeline--error { color: $error; }
    TimelineView > .timeline--checkpoint { color: $success; text-style: bold; }
    TimelineView > .timeline--event { color: $secondary; }
    TimelineView > .timeline--crash { color: $error; text-style: bold; }
    TimelineView > .timeline--match { background: $warning 15%; }
    TimelineView > .timeline--muted { color: $text-muted; }
    TimelineView > .timeline--mark { color: $warning; }
    TimelineView > .timeline--model { color: $primary; }
    TimelineView > .timeline--tool { color: $accent; }
    """

    cursor: reactive[int] = reactive(0, always_update=True, init=False)
    follow: reactive[bool] = reactive(True)

    # plain classes, not dataclasses: each costs ~0.3 ms of the start
    class Selected(Message):
        """The cursor moved to another row."""

        def __init__(self, view: TimelineView, row: int) -> None:
            self.view = view
            self.row = row
            super().__init__()

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, TimelineView.Selected)

    class FollowChanged(Message):
        """Follow mode went on or off."""

        def __init__(self, follow: bool) -> None:
            self.follow = follow
            super().__init__()

    def __init__(self, model: TimelineModel, *, replay: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model = model
        self.replay = replay
        self.matches: set[int] = set()
        self.mark: int | None = None
        self._previews: dict[tuple[int, str], str] = {}
        self._running_shown = False  # a running step's row was painted: repaint each second (its elapsed time)
        self._read_error_told = False  # the model's read_error was notified
        self.agent_running = True
        """Whether the run's agent may be running (the dashboard's status says so): a step in flight counts its time."""
        self._origin_ts: datetime | bool | None = None  # relative times: the first record's time (False: none)
        self._width = 120
        self.usage_seen = False
        """A row with tokens was shown: every row gets the tokens (and cost) column."""
        self._usage_text: dict[int, tuple[str, str]] = {}
        self._styles: dict[str, Style] = {}
        """``_fg`` and ``_base_style``'s, by component name (``""``: the base), until the styles change."""
        if replay:
            self.set_reactive(TimelineView.follow, False)

    # ------------------------------------------------------------------ data changes
    def rows_changed(self) -> None:
        """The model has more rows (or events moved): resize, and follow if on."""
        self.virtual_size = Size(self.size.width, self.model.rows)
        if self.follow and self.model.rows:
            self.cursor = self.model.rows - 1
        else:
            self.refresh()

    def on_mount(self) -> None:
        self.virtual_size = Size(self.size.width, self.model.rows)
        if self.model.rows:
            self.cursor = self.model.rows - 1 if (self.follow or not self.replay) else 0
        if not self.replay:
            self.tick_timer = self.set_interval(1.0, self._tick)  # paused while no agent runs (dashboard_watch)

    def _tick(self) -> None:
        if self._running_shown:
            self.refresh()

    def action_toggle_begins(self) -> None:
        """Show every begin row, or fold each into its step's row again; the cursor stays on its record."""
        seq = self.selected_seq()
        kind, _ = self.selected()
        self.model.toggle_begins()
        self.virtual_size = Size(self.size.width, self.model.rows)
        if seq is not None and kind == "rec":
            self.move_to(self.model.row_of_seq(seq), keep_follow=True)
        else:
            self.cursor = self.cursor  # clamp, repaint
        self.refresh()
        self.notify("begin rows shown" if self.model.show_begins else "begin rows folded into their steps' rows", timeout=2)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``z`` works (and the footer shows it) in a run with nested steps only."""
        if action == "toggle_fold":
            return self.model.tree is not None
        return True

    def action_toggle_fold(self) -> None:
        """Fold the nested rows of the selected parent step into its row, or unfold them; on a nested step's row,
        its parent's. The cursor goes to the parent's row."""
        kind, seq = self.selected()
        got = self.model.toggle_fold(seq) if kind == "rec" else None
        if got is None:
            self.notify("no nested steps here: z folds a parent step's rows (or a nested step's parent's)",
                        severity="warning", timeout=3)
            return
        row_seq, folded = got
        self.virtual_size = Size(self.size.width, self.model.rows)
        self.move_to(self.model.row_of_seq(row_seq), keep_follow=True)
        self.refresh()
        tree = self.model.tree
        n = tree.hidden_rows(row_seq, self.model.hidden, self.model.show_begins) if tree is not None else None
        self.notify(f"folded {n} nested row{'s' if n != 1 else ''} into #{row_seq}" if folded
                    else f"unfolded the nested rows of #{row_seq}", timeout=2)

    def size_updated(self) -> None:
        self._scroll_to_cursor()  # the first frame shows the end of the run (following), not the top

    def on_resize(self, event: events.Resize) -> None:
        self.virtual_size = Size(event.size.width, self.model.rows)
        # at once: the first frame shows the cursor's rows (the end), not the top then the end a frame later
        self._scroll_to_cursor()
        self.call_after_refresh(self._scroll_to_cursor)

    # ------------------------------------------------------------------ cursor
    def validate_cursor(self, value: int) -> int:
        return max(0, min(value, self.model.rows - 1)) if self.model.rows else 0

    def watch_cursor(self, old: int, new: int) -> None:
        self._scroll_to_cursor()
        self.refresh()
        self.post_message(self.Selected(self, new))

    def watch_follow(self, value: bool) -> None:
        self.post_message(self.FollowChanged(value))

    def _scroll_to_cursor(self) -> None:
        h = self.scrollable_content_region.height
        if h <= 0:
            return
        top = int(self.scroll_y)
        # force: the rows that first overflow the view come before the layout shows the scrollbar, and without it
        # Textual drops the scroll (the new row stayed under the bottom edge until the next record)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True, force=True)
        elif self.cursor >= top + h:
            self.scroll_to(y=self.cursor - h + 1, animate=False, immediate=True, force=True)

    def move_to(self, row: int, *, keep_follow: bool = False) -> None:
        """Select ``row``; leaving the last row turns follow off (as scrolling up in lnav)."""
        self.cursor = row
        if not keep_follow:
            self.follow = self.cursor >= self.model.rows - 1 and not self.replay

    def move_to_seq(self, seq: int) -> None:
        """Select record ``seq``; a begin folded into its step's row is asked for by its seq: show the begin rows
        (a folded parent's descendant: unfold it first)."""
        if self.model.unfold_to(seq):
            self.virtual_size = Size(self.size.width, self.model.rows)
        if self.model.is_hidden(seq):
            self.model.toggle_begins()
            self.virtual_size = Size(self.size.width, self.model.rows)
        self.move_to(self.model.row_of_seq(seq))

    def action_cursor(self, delta: int) -> None:
        self.move_to(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        h = max(1, self.scrollable_content_region.height - 1)
        self.move_to(self.cursor + direction * h)

    def action_top(self) -> None:
        self.move_to(0)

    def action_bottom(self) -> None:
        self.move_to(self.model.rows - 1)
        if not self.replay:
            self.follow = True

    def selected(self) -> tuple[str, int]:
        """``("rec", seq)``, ``("event", i)``, or ``("none", -1)`` for an empty run."""
        if not self.model.rows:
            return "none", -1
        return self.model.row_item(self.cursor)

    def selected_seq(self) -> int | None:
        """The seq of the cursor row, or of the record right after an event row."""
        kind, i = self.selected()
        if kind == "rec":
            return i
        if kind in ("event", "call"):
            before = self._seq_of((kind, i))
            return min(before, self.model.count - 1) if self.model.count else None
        return None

    def on_click(self, event: events.Click) -> None:
        row = int(self.scroll_y) + event.y
        if 0 <= row < self.model.rows:
            self.move_to(row)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.follow = False

    # ------------------------------------------------------------------ rendering
    def _fg(self, name: str) -> Style:
        """A component's colour and text style without its background: the row's background shows through
        (the cursor's and a match's background then cover the whole row, every cell alike)."""
        style = self._styles.get(name)
        if style is None:
            st = self.get_component_rich_style(name)
            style = self._styles[name] = Style(color=st.color, bold=st.bold, italic=st.italic, strike=st.strike)
        return style

    def _base_style(self) -> Style:
        """The widget's own style (``rich_style``: its colours over its ancestors' backgrounds), kept until the
        styles change: Textual computes it afresh at each call (~30 us, once per row drawn)."""
        style = self._styles.get("")
        if style is None:
            style = self._styles[""] = self.rich_style
        return style

    def notify_style_update(self) -> None:
        self._styles.clear()  # a theme, focus or CSS change: the styles are taken again
        super().notify_style_update()

    def _time_cell(self, ts: Any) -> str:
        settings = getattr(self.app, "settings", None)  # an app without settings (a test's) shows clock times
        if settings is not None and settings.time == "relative":
            return _relative(ts, self._origin())
        return _time(ts)

    def _origin(self) -> datetime | None:
        """The time of the run's first record (relative times count from it): read once, one line."""
        if self._origin_ts is None:
            first = self.model.cache.get(0)
            ts = first.get("ts") if isinstance(first, dict) else None
            if ts is None:
                ts = _first_ts(self.model.source)
            self._origin_ts = (parse_ts(ts) if ts else None) or False
        return self._origin_ts if isinstance(self._origin_ts, datetime) else None

    def tell_read_error(self) -> None:
        """Say once that the journal could not be read as indexed (cut or rewritten under the dashboard)."""
        if self.model.read_error and not self._read_error_told:
            self._read_error_told = True
            self.call_later(self.app.notify, f"{self.model.read_error}: rows past that are shown blank; quit and open "
                            "the run again", severity="error", timeout=20)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        row = int(self.scroll_y) + y
        base = self._base_style()
        if row >= self.model.rows:
            return Strip.blank(width, base)
        if y == 0:
            self._running_shown = False
        if y == 0 or not self.model.has(self.model.row_item(row)[1]):
            self._fetch_window(int(self.scroll_y))
        kind, i = self.model.row_item(row)
        self._width = width
        if kind == "event":
            ev = self.model.events[i].data
            style = self._fg("timeline--crash" if is_error_event(ev) else "timeline--event")
            segs = [Segment(f"{'':>{self._seq_w + 1}} {self._time_cell(ev.get('ts')):12} " + describe_event(ev), style)]
        elif kind == "call":
            segs = self._call_segments(i)
        else:
            segs = self._record_segments(i)
        post = self._row_style(row, kind == "rec", i)
        segs = list(Segment.apply_style(segs, base, post))
        return Strip(segs).crop_extend(0, width, base if post is None or post.bgcolor is None else base + post)

    def _fetch_window(self, top: int) -> None:
        """Fetch the visible window's records in one read (a few kB): cheaper than a worker round trip. With
        nested steps a finished parent's row shows its step record at its begin's place (maybe far after): the
        rows' records are fetched in runs."""
        h = self.scrollable_content_region.height
        m = self.model
        if m.tree is not None and m.tree.moved:
            seqs = sorted({self._seq_of(m.row_item(r)) for r in range(top, min(top + h + 1, m.rows))})
            lo = 0
            for i in range(1, len(seqs) + 1):
                if i == len(seqs) or seqs[i] - seqs[i - 1] > h:
                    m.fetch(seqs[lo], seqs[i - 1] + 1)
                    lo = i
            self.tell_read_error()
            return
        a = self._seq_of(m.row_item(top))
        b = self._seq_of(m.row_item(min(top + h, m.rows - 1)))
        m.fetch(a, max(b, a + h) + 1)
        self.tell_read_error()

    def _seq_of(self, item: tuple[str, int]) -> int:
        """A row's record seq, or for a row between records the seq it precedes."""
        kind, i = item
        if kind == "event":
            return self.model.events[i].before
        if kind == "call":
            return self.model.calls[i].before
        return i

    def _row_style(self, row: int, rec: bool, i: int) -> Style | None:
        """The style over a whole row: the cursor's, the future's (replay), an abandoned branch's (struck through),
        a search match's background; ``None`` for none. ``rec``: the row is record ``i`` (else a supervisor row)."""
        post: Style | None = None
        abandoned = rec and self.model.is_abandoned(i)
        if row == self.cursor:
            post = self.get_component_rich_style("timeline--cursor")  # colour and background over the whole row
        elif self.replay and rec and self._is_future(row):
            post = self._fg("timeline--future")
        elif abandoned:
            post = self._fg("timeline--abandoned")
        if rec and i in self.matches and row != self.cursor:
            m = self.get_component_rich_style("timeline--match")
            post = (post or Style()) + Style(bgcolor=m.bgcolor)
        if abandoned:
            post = (post or Style()) + Style(strike=True)
        return post

    @property
    def _seq_w(self) -> int:
        """The seq column's width: the run's largest seq (at least 3 digits), twice over when rows show ranges."""
        digits = len(str(max(0, self.model.count - 1)))
        return max(3, 2 * digits + 1 if self.model.ranges else digits)

    def _is_future(self, row: int) -> bool:
        return row > self.cursor

    def _cached_preview(self, rec: Record, key: str, row_key: int | None = None) -> str:
        """Previews are cached per record: dumping a big output on every repaint would be slow."""
        k = (int(rec.get("seq", -1)) if row_key is None else row_key, key)
        text = self._previews.get(k)
        if text is None:
            if len(self._previews) > 4096:
                self._previews.clear()
            value = rec.get(key)
            # as wide as the widest timeline (320 columns): the strip is cut to the widget's width anyway
            if key == "answer":
                from ..views.call_text import answer_turns

                turns = answer_turns(rec)
                value = " ".join(t.text for t in turns).replace("\n", " ⏎ ") if turns else ""
                text = self._previews[k] = value[:PREVIEW_CHARS]
            elif key == "inputs":
                text = self._previews[k] = args_preview(value, PREVIEW_CHARS)
            elif key == "output" and _is_model_call(rec):  # the answer's text, not {"content":"…
                text = self._previews[k] = answer_text(value, PREVIEW_CHARS)
            else:  # a value without JSON's quotes and braces (the Record tab has the JSON)
                text = self._previews[k] = plain(value, PREVIEW_CHARS)
        return text

    # ------------------------------------------------------------------ model calls (llm.jsonl)
    def _call_segments(self, j: int) -> list[Segment]:
        """A proxied call's row: ``c<seq>``, time, ``◇ llm``, provider and model, latency, tokens (and cost), then
        ✗ and the error (a failed call), or ✓, ⇶ when streamed, served or live, and the answer's text."""
        call = self.model.calls[j]
        rec = call.data
        head = f" {'c' + str(rec.get('seq')):>{self._seq_w}} "
        muted = self._fg("timeline--muted")
        segs = [Segment(head, muted), Segment(f"{self._time_cell(rec.get('ts')):12} ", muted)]
        if rec.get("kind") == Kind.NOTE:  # an ``llm call diverged`` note
            mark = self._fg("timeline--mark")
            note = (f"{step_name(rec)} #{rec.get('served')} was served for a request with another body "
                    "(--llm-match order)")
            return [*segs, Segment(f"{'≠ llm':10} ", mark), Segment(note, mark)]
        info = rec.get("call") if isinstance(rec.get("call"), dict) else {}
        assert isinstance(info, dict)
        style = self._fg("timeline--model")
        nw = self._name_width()
        segs.append(Segment(f"{'◇ llm':10} ", style))
        segs.append(Segment(f"{call_name(info, nw):{nw}} ", style))
        segs.append(Segment(f"{fmt_ms(rec.get('dur_ms')):>7} "))
        key = -2 - call.order
        usage = self._usage_cells(rec, key)
        if self.usage_seen and self._usage_column:
            segs.append(Segment(usage or " " * 23))
        err = rec.get("error")
        if err is not None:
            st = self._fg("timeline--error")
            return [*segs, Segment("✗ ", st), Segment(pv(call_error(err)), st)]
        return segs + self._call_answer(rec, info, key)

    def _call_answer(self, rec: Record, info: dict[str, Any], key: int) -> list[Segment]:
        """A call that answered: ✓, ⇶ when streamed, the attempts it served (or live), its tokens when there is no
        usage column, and the answer's text."""
        segs = [Segment("✓ ", self._fg("timeline--checkpoint"))]
        if info.get("stream"):
            segs.append(Segment("⇶ ", self._fg("timeline--model")))
        cseq = rec.get("seq")
        served = self.model.served.get(cseq) if isinstance(cseq, int) else None
        if served:
            attempts = ",".join(str(a) for a in sorted(set(served)))
            segs.append(Segment(f"served→a{attempts} ", self._fg("timeline--mark")))
        else:
            segs.append(Segment("live ", self._fg("timeline--muted")))
        segs += self._inline_usage(rec, key)
        segs.append(Segment(self._cached_preview(rec, "answer", key)))
        return segs

    def _inline_usage(self, rec: Record, key: int | None = None) -> list[Segment]:
        """Tokens (and cost) after the ✓ of a step or call with usage when there is no usage column (``key``: the
        row's cache key, as for ``_usage_cells``); ``[]`` otherwise."""
        if self._usage_column or rec.get("usage") is None:
            return []
        tok, cost_s = self._usage_text.get(int(rec.get("seq", -1)) if key is None else key, ("", ""))
        return [Segment(f"{tok}{' ' + cost_s if cost_s else ''} ", self._fg("timeline--model"))] if tok else []

    def _record_segments(self, seq: int) -> list[Segment]:
        ent = self.model.entry(seq)
        mark = "▸" if self.mark == seq else " "
        # the seqs the row stands for (its folded begin, then its step): numbers that skip would look like missing
        # rows, and row numbers would not be the seqs that :, log and rollback --to take
        first = self.model.first_seq_of_row(seq)
        head = f"{mark}{seq if first == seq else f'{first}-{seq}':>{self._seq_w}} "
        muted = self._fg("timeline--muted")
        if ent is None:
            text = "…" if not self.model.has(seq) else "(blank line)"
            return [Segment(head, muted), Segment(text, muted)]
        if isinstance(ent, BadLine):
            err = self._fg("timeline--error")
            return [
                Segment(head),
                Segment(f"✗ line {ent.line} of {ent.path.rsplit('/', 1)[-1]}: {ent.reason}: ", err),
                Segment(ent.text[:200], muted),
            ]
        return self._rec_segments(head, ent)

    def _name_width(self) -> int:
        return 22 if self._width >= 110 else 16

    def _usage_cells(self, rec: Record, key: int | None = None) -> str:
        """``in→out`` tokens (and the cost once prices are loaded) of a step with usage; blanks of the same width
        on other rows once any row has shown usage; ``""`` while none has. ``key``: the row's cache key (a
        record's seq; a call row's is negative)."""
        seq = int(rec.get("seq", -1)) if key is None else key
        cached = self._usage_text.get(seq)
        if cached is None:
            tokens = None
            if rec.get("usage") is not None:
                from ..core.usage import step_tokens  # imported by the first row with usage, not at the start

                tokens = step_tokens(rec)
            cost: float | None = None
            if tokens is not None and "genai_prices" in sys.modules:  # priced once the status bar's worker loaded it
                from ..export.pricing import step_cost

                cost = step_cost(rec)
            if tokens is None:
                cached = ("", "")
            else:
                if not self.usage_seen:
                    self.usage_seen = True
                    self.call_after_refresh(self.refresh)  # rows painted before this one get the column too
                cached = (f"{fmt_tokens(tokens.input)}→{fmt_tokens(tokens.output)}", fmt_cost(cost))
            if len(self._usage_text) > 4096:
                self._usage_text.clear()
            if tokens is None or cost is not None or "genai_prices" in sys.modules:
                self._usage_text[seq] = cached
        if not self.usage_seen or not self._usage_column:
            return ""
        tok, cost_s = cached
        return f"{tok:>13} {cost_s:>8} "

    @property
    def _usage_column(self) -> bool:
        """Tokens and cost in a column of their own (from 110 columns); narrower, after the ✓ of the rows that have them."""
        return self._width >= 110

    def prices_loaded(self) -> None:
        """genai-prices is imported now: rows priced from here on (repaint)."""
        self._usage_text.clear()
        self.refresh()

    def _rec_segments(self, head: str, rec: Record) -> list[Segment]:
        """A record's row: seq, time, kind (or model / tool), name, duration, usage, then what its kind shows."""
        kind = str(rec.get("kind", Kind.STEP))
        label, name, style = self._label(kind, rec)
        nw = self._name_width()
        dur_s = fmt_ms(rec.get("dur_ms"))
        segs = [Segment(head), Segment(f"{self._time_cell(rec.get('ts')):12} ", self._fg("timeline--muted"))]
        segs.append(Segment(f"{label:10} ", style))
        tree = self.model.tree
        # a nested step's row: indented, its tree mark; a parent's: its fold mark
        lead = tree.label(rec, "") if tree is not None else ""
        if kind == Kind.CHECKPOINT and not dur_s:  # its name in full: the duration's cells too, more if it needs
            segs.append(Segment(f"{lead + name:{nw + 8}} ", style))
        else:
            arg = self._telling(kind, rec)
            in_cell = len(lead) + len(name) + 1 + len(arg) <= nw  # else it leads the tail: never cut short there
            segs += self._name_cell(lead, name, arg if in_cell else "", nw, style)
            segs.append(Segment(f"{dur_s:>7} "))
            if in_cell:
                arg = ""
        folded = tree.hidden_rows(int(rec.get("seq", -1)), self.model.hidden, self.model.show_begins) if tree else None
        if folded is not None:
            segs.append(Segment(f"+{folded} row{'s' if folded != 1 else ''} folded ", self._fg("timeline--mark")))
        usage = self._usage_cells(rec) if kind in (Kind.STEP, Kind.BEGIN) else ""
        if self.usage_seen and self._usage_column:
            segs.append(Segment(usage or " " * 23))
        files = self.model.files_count(int(rec.get("seq", -1)), rec)
        if files:  # the workspace's files its step changed (the Files tab lists them)
            segs.append(Segment(f"✎{files} ", self._fg("timeline--mark")))
        if kind == Kind.STEP:
            segs += self._step_tail(rec, arg)
        elif kind == Kind.BEGIN:
            segs += self._begin_tail(rec)
        else:
            segs.append(self._other_tail(kind, rec))
        return segs

    def _name_cell(self, lead: str, name: str, arg: str, width: int, style: Style) -> list[Segment]:
        """The name column: ``lead`` (a nested row's tree marks), the name, then a tool call's telling argument
        (muted) in what is left; a long name keeps its action type and its end, where two names differ
        (``fetch:…/q7/page``)."""
        room = width - len(lead)
        if len(name) > room:
            head = name[: name.index(":") + 1] if 0 < name.find(":") < room // 2 else ""
            name = head + "…" + name[len(name) - (room - len(head) - 1):] if head else name[: room - 1] + "…"
        segs = [Segment(lead + name, style)]
        used = len(lead) + len(name)
        left = width - used - 1
        if arg and left >= 4:
            arg = " " + (arg if len(arg) <= left else arg[: left - 1] + "…")
            segs.append(Segment(arg, self._fg("timeline--muted")))
            used += len(arg)
        segs.append(Segment(" " * (width + 1 - used)))
        return segs

    @staticmethod
    def _telling(kind: str, rec: Record) -> str:
        """A tool call's telling argument (its first short string input), shown after its name."""
        call = rec.get("call")
        if kind not in (Kind.STEP, Kind.BEGIN) or not isinstance(call, dict) or call.get("kind") != "tool":
            return ""
        return telling_arg(rec.get("inputs"))

    def _label(self, kind: str, rec: Record) -> tuple[str, str, Style]:
        """The kind column, the name column and their style; a model call shows its model, a tool call its tool
        (the record conventions)."""
        style = Style()
        if kind == Kind.CHECKPOINT:
            style = self._fg("timeline--checkpoint")
        elif kind in (Kind.START, Kind.ROLLBACK, Kind.FORK):
            style = self._fg("timeline--event")
        label = _KIND_LABEL.get(kind, kind)[:10]
        if kind not in (Kind.STEP, Kind.BEGIN):
            return label, str(rec.get("name") or rec.get("checkpoint") or ""), style
        name = step_name(rec)
        if "call" not in rec:
            return label, name, style
        from ..core.usage import call_of, step_model  # imported by the first row with a call, not at the start

        call = call_of(rec)
        if call is None:
            return label, name, style
        where = _call_place(call)
        if call.get("kind") == "model":
            return "◇ model", (step_model(rec) or name) + where, self._fg("timeline--model")
        tool = call.get("tool")
        return "⚙ tool", (tool if isinstance(tool, str) and tool else name) + where, self._fg("timeline--tool")

    def _step_tail(self, rec: Record, arg: str) -> list[Segment]:
        """A step's error, or ✓ (≠ if served with changed inputs), its usage when narrow, and its output; ``arg``
        (a tool call's telling argument the name column had no room for) before the error or the output."""
        failed = rec.get("error") is not None
        out = "" if failed else self._cached_preview(rec, "output")
        said = [Segment(f"{arg} → " if arg and (out or failed) else f"{arg} " if arg else "", self._fg("timeline--muted"))]
        if failed:
            err = rec["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            if isinstance(err, dict) and err.get("type") and isinstance(msg, str):
                msg = f"{err['type']}: {msg}"
            st = self._fg("timeline--error")
            return [Segment("✗ ", st), *said, Segment(pv(msg), st)]
        segs = []
        pos = rec.get("pos")
        if isinstance(pos, int) and self.model.changed_inputs.get(pos) == step_name(rec):
            segs.append(Segment("≠ ", self._fg("timeline--mark")))  # served with changed inputs
        segs.append(Segment("✓ ", self._fg("timeline--checkpoint")))
        segs += self._inline_usage(rec)
        return [*segs, *said, Segment(out)]

    def _begin_tail(self, rec: Record) -> list[Segment]:
        """A begin's status (running, interrupted, or folded into its step's row: shown with every row) and inputs."""
        status = self.model.begin_status(int(rec.get("seq", -1)), rec.get("attempt"))
        if status == "running" and not self.replay and self.agent_running:
            self._running_shown = True
            first = Segment(f"⟳ running {elapsed(rec.get('ts'))} ", self._fg("timeline--mark"))
        elif status == "running" and not self.replay:
            first = Segment("⟳ no step record (the agent is not running) ", self._fg("timeline--mark"))
        elif status == "running":
            first = Segment("⟳ no step record (in flight when the journal ends) ", self._fg("timeline--mark"))
        elif status == "interrupted":
            first = Segment("✗ interrupted (no step record in its attempt) ", self._fg("timeline--error"))
        else:
            first = Segment("… ")
        return [first, Segment(self._cached_preview(rec, "inputs"), self._fg("timeline--muted"))]

    def _other_tail(self, kind: str, rec: Record) -> Segment:
        """What a note, rollback, start, checkpoint or other record shows after its name."""
        if kind == Kind.NOTE and rec.get("message") == CHANGED_INPUTS:
            return Segment(f"≠ changed inputs: step {step_name(rec)!r} #{rec.get('pos')} was served with the output recorded "
                           "for other inputs", self._fg("timeline--mark"))
        if kind == Kind.ROLLBACK:
            return Segment(f"  {rec.get('reason', '')}")
        if kind == Kind.START:
            return Segment(f"  attempt {rec.get('attempt')} pid {rec.get('pid')}" + (" (resume)" if rec.get("resume") else ""))
        if kind == Kind.CHECKPOINT:
            return Segment(f"  {rec.get('file', '')}", self._fg("timeline--muted"))
        rest = {k: v for k, v in rec.items() if k not in ("kind", "seq", "ts", "id", "pos")}
        return Segment("  " + pv(rest))


def _first_ts(source: Any) -> Any:
    """The ``ts`` of the journal's first line (one short read), or ``None``."""
    from ..core.segments import segment_paths

    try:
        paths = segment_paths(source)
        if not paths:
            return None
        with open(paths[0], "rb") as f:
            line = f.readline(1 << 20)
        rec = orjson.loads(line)
    except (OSError, ValueError):
        return None
    return rec.get("ts") if isinstance(rec, dict) else None


def _is_model_call(rec: Record) -> bool:
    call = rec.get("call")
    return isinstance(call, dict) and call.get("kind") == "model"


def _call_place(call: dict[str, Any]) -> str:
    """Which agent, graph node and fan-out branch made a call, when its record says (the adapters write
    ``agent``, ``node`` and ``branch``): six ``Send`` rows of one node are told apart."""
    out = ""
    agent, node, branch = call.get("agent"), call.get("node"), call.get("branch")
    if isinstance(agent, str) and agent:
        out += f" ({agent})"
    if isinstance(node, str) and node:
        out += f" @{node}"
    if isinstance(branch, (int, str)) and not isinstance(branch, bool) and str(branch) != "":
        out += f"[{branch}]"
    return out
