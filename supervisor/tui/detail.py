"""The detail of the selected row: a step as its call view, another record as coloured JSON, the state at that step."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..core.journal_reader import Entry
from ..core.records import BadLine
from ..views.fmt import dumps_pretty

if TYPE_CHECKING:
    from textual.app import ComposeResult

    from ..views.call_view import CallView

_JSON_LIMIT = 200_000
_HIGHLIGHT_LIMIT = 40_000
"""Past this many characters the JSON is shown plain: highlighting megabytes takes seconds."""


def json_renderable(value: Any, title: str = "") -> JSON | Text:
    """Pretty, coloured JSON; plain text past ``_JSON_LIMIT`` characters (huge outputs stay fast)."""
    text = dumps_pretty(value, _JSON_LIMIT)
    if len(text) >= _HIGHLIGHT_LIMIT:
        return Text(text)
    return JSON(text, indent=2)


def json_text(value: Any) -> Text:
    """``json_renderable`` as a text (wrapped or not, searched, by the pane)."""
    rend = json_renderable(value)
    return rend if isinstance(rend, Text) else rend.text


TRACEBACK_NOTE = "(the traceback is shown above, as code)"


def split_traceback(rec: Any) -> tuple[str, str, Any]:
    """A failed step's ``(error line, traceback, record without it)``; ``("", "", rec)`` for any other record.

    The traceback is a string in the record's ``error`` (the SDK's shape: ``type``, ``message``,
    ``traceback``): shown as code, it is replaced in the JSON by a note, not repeated as one escaped line.
    """
    err = rec.get("error") if isinstance(rec, dict) else None
    if not isinstance(err, dict):
        return "", "", rec
    tb = err.get("traceback")
    if not isinstance(tb, str) or not tb.strip():
        return "", "", rec
    line = f"{err.get('type') or 'error'}: {err.get('message', '')}".rstrip(": ")
    rest = dict(rec)
    rest["error"] = {**err, "traceback": TRACEBACK_NOTE}
    return line, tb.rstrip("\n"), rest


class JsonPane(VerticalScroll):
    """A scrollable pane that shows one JSON document, a step's call view, or a message.

    Long values wrap (``w`` on the dashboard toggles it for every pane) or, unwrapped, scroll sideways (Left and
    Right with the pane focused). ``/`` with the pane focused searches its text (``n``/``N`` move). A model call's
    earlier conversation is folded (``h`` shows it) and its raw record shown on demand (``v``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "find", "Find", key_display="/", tooltip="Search this pane's text (smart case); n / N move"),
        Binding("n", "find_next(1)", "Next match", show=False, tooltip="The pane's next match (wraps around)"),
        Binding("N", "find_next(-1)", "Prev match", show=False, tooltip="The pane's previous match (wraps around)"),
        Binding("h", "toggle_history", "History", show=False,
                tooltip="Show or fold a model call's earlier conversation (the new messages are always shown)"),
        Binding("v", "toggle_raw", "Raw record", show=False, tooltip="Show or hide the raw record under a call view"),
    ]

    DEFAULT_CSS = """
    JsonPane { height: 1fr; }
    JsonPane > Static { width: 1fr; }
    JsonPane.-nowrap { overflow-x: auto; }
    JsonPane > .jsonpane--error { color: $error; text-style: bold; }
    JsonPane > .jsonpane--frame { color: $secondary; }
    JsonPane > .jsonpane--muted { color: $text-muted; }
    JsonPane > .jsonpane--code { color: $text; }
    JsonPane > .jsonpane--match { background: $warning 40%; }
    JsonPane > .jsonpane--current { background: $accent; color: $text; }
    JsonPane > Input { dock: bottom; display: none; }
    JsonPane > Input.-visible { display: block; }
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "jsonpane--error", "jsonpane--frame", "jsonpane--muted", "jsonpane--code", "jsonpane--match", "jsonpane--current",
    }

    wrap: bool = True
    """Long lines wrap (else the pane scrolls sideways); the dashboard sets it from the settings."""

    text: str = ""
    """The plain text shown (for tests, copy and search)."""

    def __init__(self, *, id: str | None = None, wrap: bool | None = None) -> None:
        super().__init__(id=id)
        self._body: Static | None = None
        self._parts: list[tuple[Text, bool]] = []
        """What is shown: each part a text, and whether it is Markdown source (rendered as Markdown)."""
        self._redo: Callable[[], None] | None = None
        """Shows the current content again (after ``h`` or ``v``)."""
        self.show_history = False
        self.show_raw = False
        self.query_text = ""
        self.matches: list[int] = []
        self.match_index = -1
        if wrap is not None:
            self.set_wrap(wrap)

    def on_mount(self) -> None:
        wrap = getattr(getattr(self.app, "settings", None), "wrap", None)
        if isinstance(wrap, bool) and wrap != self.wrap:
            self.set_wrap(wrap)

    def _st(self, name: str) -> Style:
        st = self.get_component_rich_style(name)
        return Style(color=st.color, bold=st.bold)

    def compose(self) -> ComposeResult:
        yield self.body

    @property
    def body(self) -> Static:
        """The text widget, made at once: a worker's value may come before this pane's compose ran (it is
        mounted after the first frame) and is shown when it does."""
        if self._body is None:
            self._body = Static("", id=f"{self.id}-body" if self.id else None)
        return self._body

    # ------------------------------------------------------------------ what is shown
    def _show(self, parts: list[tuple[Text, bool]], redo: Callable[[], None] | None = None) -> None:
        self._parts = parts
        self._redo = redo
        self.text = "\n".join(t.plain for t, _ in parts)
        self._find(self.query_text, jump=False)
        self._paint()

    def _paint(self) -> None:
        """Draw the parts: wrapped or not, the search's matches highlighted, Markdown rendered (as its source while
        a search is on: its matches are highlighted there)."""
        rends: list[RenderableType] = []
        offset = 0
        marks = self._marks()
        for text, md in self._parts:
            end = offset + len(text.plain)
            if md and not self.query_text:
                from rich.markdown import Markdown  # its parser is imported for the first Markdown answer

                rends.append(Markdown(text.plain))
            else:
                t = text.copy()
                t.no_wrap = not self.wrap
                t.overflow = "fold" if self.wrap else "ignore"
                for start, stop, style in marks:
                    if start < end and stop > offset:
                        t.stylize(style, max(0, start - offset), min(len(t), stop - offset))
                rends.append(t)
            offset = end + 1
        # unwrapped, the body is as wide as its longest line (Textual measures a renderable within the pane's width)
        self.body.styles.width = None if self.wrap else max(map(cell_len, self.text.split("\n")), default=0)
        self.body.update(rends[0] if len(rends) == 1 else Group(*rends))

    def set_wrap(self, wrap: bool) -> None:
        """Wrap long lines, or let them run off to the right (the pane then scrolls sideways)."""
        self.wrap = wrap
        self.set_class(not wrap, "-nowrap")
        if self._parts:
            self._paint()

    def traceback_text(self, error_line: str, tb: str) -> Text:
        """A Python traceback laid out as the interpreter prints it: frames, code lines, the exception last."""
        t = Text(no_wrap=True)
        t.append(f"✗ {error_line}\n", style=self._st("jsonpane--error"))
        lines = tb.splitlines()
        last = max((i for i, ln in enumerate(lines) if ln and not ln.startswith(" ")), default=-1)
        for i, ln in enumerate(lines):
            if ln.startswith("Traceback") or ln.startswith("During handling") or ln.startswith("The above exception"):
                style = self._st("jsonpane--muted")
            elif ln.lstrip().startswith("File "):
                style = self._st("jsonpane--frame")
            elif set(ln.strip()) <= set("^~") and ln.strip():
                style = self._st("jsonpane--error")  # the caret line under the failing expression
            elif i >= last >= 0 and not ln.startswith(" "):
                style = self._st("jsonpane--error")
            else:
                style = self._st("jsonpane--code")
            t.append(ln + "\n", style=style)
        t.rstrip()
        return t

    def show_value(self, value: Any, heading: str = "") -> None:
        """Show ``value`` as coloured JSON under an optional heading; a failed step's traceback as code above it."""
        self._show(self.value_parts(value, heading))

    def value_parts(self, value: Any, heading: str = "", *, dim: bool = False) -> list[tuple[Text, bool]]:
        error_line, tb, value = split_traceback(value)
        parts: list[tuple[Text, bool]] = []
        if heading:
            parts.append((Text(heading, style="bold"), False))
        if tb:
            parts.append((self.traceback_text(error_line, tb), False))
        # dimmed (bookkeeping): one muted colour, not the JSON's colours and bold keys
        text = Text(dumps_pretty(value, _JSON_LIMIT), style=self._st("jsonpane--muted")) if dim else json_text(value)
        parts.append((text, False))
        return parts

    def show_call(self, rec: dict[str, Any], served: list[int], heading: str = "") -> None:
        """A model call the proxy recorded: its answer, usage and cost, its request's conversation, the raw record."""
        from ..views.call_view import proxied_view

        def redo() -> None:
            cost, priced = step_price(rec)
            self._show(self.view_parts(proxied_view(rec, served, cost=cost, priced=priced), heading,
                                       raw_title="raw record (llm.jsonl, blobs expanded)"), redo)

        redo()

    def show_step(self, rec: dict[str, Any], heading: str = "", retries: list[dict[str, Any]] | None = None) -> None:
        """A journal step as its call view: a model call, a tool call, or output, inputs and bookkeeping dimmed."""
        from ..views.call_view import step_view

        def redo() -> None:
            cost, priced = step_price(rec)
            self._show(self.view_parts(step_view(rec, cost=cost, priced=priced, retries=retries), heading), redo)

        redo()

    def view_parts(self, view: CallView, heading: str = "", raw_title: str = "raw record") -> list[tuple[Text, bool]]:
        from .call_pane import section_parts

        parts: list[tuple[Text, bool]] = [(Text(heading, style="bold"), False)] if heading else []
        for sec in view.sections:
            parts += section_parts(self, sec)
        if view.kind == "model":  # the others show their bookkeeping fields already
            if self.show_raw:
                parts.append((Text(f"── {raw_title} (v hides it)", style=self._st("jsonpane--muted")), False))
                parts += self.value_parts(view.raw, dim=False)
            else:
                parts.append((Text(f"▸ {raw_title}: v (with this pane focused: Tab)", style=self._st("jsonpane--muted")), False))
        return parts

    def show_rich(self, text: Text) -> None:
        """Show a text made elsewhere (a worker's: the Files tab's changes and diffs)."""
        self._show([(text, False)])

    def show_text(self, text: str, style: str = "") -> None:
        self._show([(Text(text, style=style), False)])

    def show_entry(self, ent: Entry | None, heading: str = "", retries: list[dict[str, Any]] | None = None) -> None:
        """Show a journal entry (a bad line as its position and text): a step as its call view, another record as
        JSON."""
        if ent is None:
            self.show_text("(blank line or not loaded yet)", "dim")
        elif isinstance(ent, BadLine):
            self.show_text(f"{ent.path}:{ent.line}: skipped, {ent.reason}\n\n{ent.text}", "red")
        elif ent.get("kind", "step") in ("step", "begin") and ("step" in ent or "output" in ent or "error" in ent):
            self.show_step(dict(ent), heading, retries)
        else:
            self.show_value(ent, heading)

    # ------------------------------------------------------------------ h, v
    def action_toggle_history(self) -> None:
        self.show_history = not self.show_history
        if self._redo is not None:
            self._redo()

    def action_toggle_raw(self) -> None:
        self.show_raw = not self.show_raw
        if self._redo is not None:
            self._redo()

    # ------------------------------------------------------------------ search
    def action_find(self) -> None:
        from textual.widgets import Input

        found = self.query(Input)
        if found:
            box = found.first()
        else:
            box = Input(placeholder="search this pane (smart case), Enter to find, Esc to cancel", id=None)
            self.mount(box)
        box.value = self.query_text
        box.add_class("-visible")
        box.focus()

    def on_input_submitted(self, event: Any) -> None:
        event.stop()
        self._close_find()
        self._find(event.value.strip(), jump=True)
        self._paint()

    def on_key(self, event: Any) -> None:
        if event.key == "escape" and self.query("Input.-visible"):
            event.stop()
            event.prevent_default()
            self._close_find()

    def _close_find(self) -> None:
        for box in self.query("Input.-visible"):
            box.remove_class("-visible")
        self.focus()

    def _find(self, query: str, *, jump: bool) -> None:
        """Find ``query`` in the text (smart case: a capital makes it case-sensitive) and, asked to, go to the
        first match at or after the top of the pane."""
        self.query_text = query
        self.matches = []
        self.match_index = -1
        if not query:
            return
        hay = self.text if query != query.lower() else self.text.lower()
        at = hay.find(query)
        while at >= 0 and len(self.matches) < 10_000:
            self.matches.append(at)
            at = hay.find(query, at + max(1, len(query)))
        if jump:
            if not self.matches:
                self.notify(f"not in this pane: {query!r}", severity="warning")
                return
            self.match_index = 0
            self._scroll_to_match()

    def action_find_next(self, direction: int) -> None:
        if not self.matches:
            self.notify("no search in this pane: / searches it" if not self.query_text
                        else f"not in this pane: {self.query_text!r}", severity="warning")
            return
        self.match_index = (self.match_index + direction) % len(self.matches)
        self._paint()
        self._scroll_to_match()

    def _marks(self) -> list[tuple[int, int, Style]]:
        n = len(self.query_text)
        if not n:
            return []
        match = self.get_component_rich_style("jsonpane--match")
        current = self.get_component_rich_style("jsonpane--current")
        return [(at, at + n, current if i == self.match_index else match) for i, at in enumerate(self.matches)]

    def _scroll_to_match(self) -> None:
        """Bring the current match into view: its line (laid out as drawn, wrapped or not) and, unwrapped, its column."""
        if not 0 <= self.match_index < len(self.matches):
            return
        at = self.matches[self.match_index]
        before = self.text[:at]
        col = len(before) - before.rfind("\n") - 1
        width = max(1, self.scrollable_content_region.width)
        console = self.app.console
        options = console.options.update_width(width)
        y = 0
        offset = 0
        for text, _md in self._parts:
            end = offset + len(text.plain)
            piece = text if at > end else text[: at - offset]
            piece = piece.copy()
            piece.no_wrap = not self.wrap
            piece.overflow = "fold" if self.wrap else "ignore"
            if at > end or piece.plain:
                y += len(console.render_lines(piece, options, pad=False))
            if at <= end:
                y -= 1 if piece.plain else 0
                break
            offset = end + 1
        self.scroll_to(x=0 if self.wrap else max(0, col - 8), y=max(0, y - 2), animate=False)


def step_price(rec: Mapping[str, Any]) -> tuple[float | None, bool]:
    """The record's cost and whether prices are loaded (the status bar's worker loads them: not on the UI thread)."""
    if rec.get("usage") is None or "genai_prices" not in sys.modules:
        return None, "genai_prices" in sys.modules
    from ..export.pricing import step_cost

    return step_cost(rec), True
