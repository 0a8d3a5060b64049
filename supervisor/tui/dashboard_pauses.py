"""The dashboard's side of breakpoints and pauses (``core.pauses``): which pauses are open, the banner that says so,
and the keys ``p`` (answer the pause), ``x`` (a breakpoint on the row's step) and ``P`` (the breakpoints).

Which pauses are open is kept from what the dashboard reads anyway: the reading worker picks the ``pause`` and
``choice`` records out of each read's parsed records and the proxy's new calls (:func:`pause_marks`: a read parses
at most a screen of records, so a journal without pauses costs a ``dict.get`` per parsed record, in the worker),
and the UI thread applies the few it finds. The live supervisor's status (polled every second) is the safety net
for what no read parsed: a pause older than the tail the dashboard opened on, a record in a burst of more than a
screen of records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual import work

from ..core import pauses
from ..core.records import Record
from ..core.status import RunStatus
from ..errors import SupervisorError
from ..views.timeline_read import Changes
from .dashboard_state import DashboardState

PauseKey = tuple[str | None, int]
"""An open pause: its ``source`` (``None``: the journal; ``llm``: a model call the proxy holds) and its seq."""

_KINDS = (pauses.PAUSE, pauses.CHOICE)


def pause_marks(changes: Changes) -> list[Record]:
    """The ``pause`` and ``choice`` records among what one read parsed (the reading worker's half)."""
    marks = [e for e in changes.new if type(e) is dict and e.get("kind") in _KINDS]
    if changes.calls is not None:
        marks.extend(c.data for c in changes.calls.rows if c.data.get("kind") in _KINDS)
    return marks


def _key(p: Record) -> PauseKey:
    return p.get("source"), int(p.get("seq") or 0)


def _why(p: Record) -> str:
    reason = p.get("reason")
    if reason == "breakpoint":
        return f"breakpoint {p.get('pattern')!r}"
    return {pauses.INTERRUPTED: "its last attempt was cut off by a crash", "next": "stepping"}.get(str(reason), str(reason))


def pause_line(p: Record) -> str:
    """What is paused, in a few words: a question, a step, or a model call the proxy holds."""
    if p.get("reason") == "ask":
        return f"the agent asks: {p.get('prompt')}"
    what = "model call" if p.get("source") else "step"
    return f"paused before {what} {p.get('step')!r} ({_why(p)})"


def banner_text(p: Record, others: int, given: str | None, replay: bool = False) -> str:
    """The banner's line for the first open pause (``given``: the answer written, not yet taken by the agent)."""
    head = ("? " if p.get("reason") == "ask" else "⏸ ") + pause_line(p)
    if others:
        head += f" (+{others} more)"
    if replay:
        return f"{head} — replay mode is read-only"
    if given is not None:
        return f"{head} — answered ({given}), waiting for the agent to take it · p: change the answer"
    return head + (" — p: answer" if p.get("reason") == "ask" else " — p: answer · P: breakpoints")


class PauseKeys(DashboardState):
    """The open pauses (``paused``), their banner and notifications, and the keys ``p`` ``x`` ``P`` (read-only in
    replay mode: the banner shows a pause the replayed run stopped in, the keys say why they do nothing)."""

    # ------------------------------------------------------------------ which pauses are open
    def seed_pauses(self) -> None:
        """The pauses open in what the first screen read: the journal's tail and the proxy's calls (after the first
        frame: a screen of records, a few calls)."""
        m = self.model
        start = m.count
        while start > 0 and m.cache.get(start - 1) is not None:  # the tail: records up to the last, no gap
            start -= 1
        tail = [m.cache[s] for s in range(start, m.count)]
        self.take_pause_marks([*tail, *(c.data for c in m.calls)])

    def take_pause_marks(self, marks: Iterable[Any], *, llm_reset: bool = False) -> None:
        """Apply ``pause`` and ``choice`` records, in their files' order (``llm_reset``: the proxy's calls are read
        again from the start, so its pauses are taken anew)."""
        before = set(self.paused)
        if llm_reset:
            for key in [k for k in self.paused if k[0] is not None]:
                del self.paused[key]
            self._pauses_closed = {k for k in self._pauses_closed if k[0] is None}
        for r in marks:
            if type(r) is not dict:
                continue
            kind, source = r.get("kind"), r.get("source")
            if kind == pauses.PAUSE and type(r.get("seq")) is int:
                if (source, r["seq"]) not in self._pauses_closed:
                    self.paused[source, r["seq"]] = r
            elif kind == pauses.CHOICE and type(r.get("pause")) is int:
                self._pauses_closed.add((source, r["pause"]))
                self.paused.pop((source, r["pause"]), None)
        self._pauses_changed(before)

    def take_status_pause(self, status: RunStatus) -> None:
        """The live supervisor's word on its first open pause: one the reads missed is added; none open at all closes
        the journal's pauses older than the records it had read (newer ones it could not know yet)."""
        if not status.live:
            return
        p = status.fields.get("paused")
        before = set(self.paused)
        if isinstance(p, dict) and type(p.get("seq")) is int:
            llm = "pos" not in p  # a held model call has no position among the steps (``paused_field`` keeps it out)
            key: PauseKey = ("llm" if llm else None, p["seq"])
            if key not in self.paused and key not in self._pauses_closed:
                self.paused[key] = {"kind": pauses.PAUSE, **p, **({"source": "llm"} if llm else {})}
        elif p is None:
            records = status.fields.get("records")
            if type(records) is int:
                for key in [k for k in self.paused if k[0] is None and k[1] < records]:
                    del self.paused[key]
        self._pauses_changed(before)

    def _pauses_changed(self, before: set[PauseKey]) -> None:
        now = set(self.paused)
        if now == before:
            return
        new = [self.paused[k] for k in self.paused if k not in before and k not in self._pauses_told]
        self._pauses_told.update(now - before)
        if new and not self.replay:  # in replay mode the banner says it (the keys answer nothing there)
            first = pause_line(new[0])
            self.notify(f"{first} — p answers" if len(new) == 1 else f"{len(new)} pauses, the first {first} — p answers",
                        title="paused", severity="warning", timeout=8)
        for key in [k for k in self._pauses_given if k not in self.paused]:
            del self._pauses_given[key]
        if bool(now) != bool(before):
            self.refresh_bindings()  # p shows in the footer while a pause is open
        self.show_pause_bar()
        self._close_answered_dialog()

    def first_pause(self) -> Record | None:
        """The pause ``p`` answers: the first one not answered from here yet, else the first."""
        for key, p in self.paused.items():
            if key not in self._pauses_given:
                return p
        return next(iter(self.paused.values()), None)

    def show_pause_bar(self) -> None:
        """The banner above the timeline: the first open pause, or nothing."""
        if not self.is_attached:
            return
        bar = self._pane("#pause-bar")
        p = self.first_pause()
        bar.set_class(p is not None, "-active")
        if p is not None:
            given = self._pauses_given.get(_key(p))
            bar.update(banner_text(p, len(self.paused) - 1, given, self.replay))

    def _close_answered_dialog(self) -> None:
        """A pause dialog open on a pause answered elsewhere (the command line, another dashboard) closes: an answer
        given now would wait for nobody."""
        from .pause_screens import AskScreen, PauseScreen

        screen = self.app.screen
        if not isinstance(screen, (PauseScreen, AskScreen)) or screen.run_dir != self.run_dir:
            return
        if _key(screen.pause) not in self.paused:
            screen.dismiss(None)
            self.notify("that pause was answered elsewhere", severity="warning")

    # ------------------------------------------------------------------ keys
    def _read_only(self) -> bool:
        """Replay mode and a bare journal answer no pause and set no breakpoint: said, and ``True``."""
        if self.replay:
            self.notify("replay mode is read-only: open the run with 'agent-supervisor tui' to answer a pause or set "
                        "breakpoints", severity="warning")
        elif self._bare():
            self.notify("a bare journal file has no run directory to keep breakpoints and answers in", severity="warning")
        return self.replay or self._bare()

    def action_answer_pause(self) -> None:
        p = self.first_pause()
        if p is None:
            self.notify("no paused step", severity="warning")
            return
        if self._read_only():
            return
        from .pause_screens import AskScreen, PauseScreen

        key = _key(p)
        ask = p.get("reason") == "ask"

        def done(result: Any) -> None:
            if result is not None and key in self.paused:
                self._pauses_given[key] = f"answer {result!r}" if ask else str(result)
                self.show_pause_bar()

        self.app.push_screen(AskScreen(self.run_dir, p) if ask else PauseScreen(self.run_dir, p), done)

    def action_breakpoint(self) -> None:
        """A breakpoint on the selected row's step name (again: removed)."""
        if self._read_only():
            return
        kind, i = self.timeline.selected()
        data: Any = self.model.calls[i].data if kind == "call" else self.model.record(i) if kind == "rec" else None
        name = data.get("step") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name:
            self.notify("select a step's row: x sets a breakpoint on its name", severity="warning")
            return
        self.toggle_breakpoint(name)

    @work(thread=True, group="breakpoints", exit_on_error=False)
    def toggle_breakpoint(self, name: str) -> None:
        """Add ``name`` to ``breakpoints.json``, or remove it if it is there (a thread: a locked, synced write)."""
        try:
            on = name not in pauses.read_breakpoints(self.run_dir)["patterns"]
            doc = pauses.change_breakpoints(self.run_dir, add=[name] if on else [], remove=[] if on else [name])
        except (SupervisorError, OSError) as e:
            self.app.call_from_thread(self.notify, f"breakpoint not changed: {e}", severity="error", timeout=8)
            return
        n = len(doc["patterns"])
        text = (f"breakpoint: {name}" if on else f"breakpoint removed: {name}") + f" ({n} set; P lists them)"
        self.app.call_from_thread(self.notify, text, timeout=4)

    def action_breakpoints(self) -> None:
        if self._read_only():
            return
        from .pause_screens import BreakpointsScreen

        self.app.push_screen(BreakpointsScreen(self.run_dir))
