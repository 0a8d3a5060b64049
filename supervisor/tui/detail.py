"""The detail of the selected row: the record as coloured JSON, and the state at that step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Group, RenderableType
from rich.json import JSON
from rich.style import Style
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..core.journal_reader import Entry
from ..core.records import BadLine
from ..views.fmt import dumps_pretty

if TYPE_CHECKING:
    from textual.app import ComposeResult

_JSON_LIMIT = 200_000
_HIGHLIGHT_LIMIT = 40_000
"""Past this many characters the JSON is shown plain: highlighting megabytes takes seconds."""


def json_renderable(value: Any, title: str = "") -> JSON | Text:
    """Pretty, coloured JSON; plain text past ``_JSON_LIMIT`` characters (huge outputs stay fast)."""
    text = dumps_pretty(value, _JSON_LIMIT)
    if len(text) >= _HIGHLIGHT_LIMIT:
        return Text(text)
    return JSON(text, indent=2)


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
    """A scrollable pane that shows one JSON document or a message (a failed step: its traceback as code first)."""

    DEFAULT_CSS = """
    JsonPane { height: 1fr; }
    JsonPane > Static { width: auto; }
    JsonPane > .jsonpane--error { color: $error; text-style: bold; }
    JsonPane > .jsonpane--frame { color: $secondary; }
    JsonPane > .jsonpane--muted { color: $text-muted; }
    JsonPane > .jsonpane--code { color: $text; }
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"jsonpane--error", "jsonpane--frame", "jsonpane--muted", "jsonpane--code"}

    def _st(self, name: str) -> Style:
        st = self.get_component_rich_style(name)
        return Style(color=st.color, bold=st.bold)

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
        return t

    def compose(self) -> ComposeResult:
        yield self.body

    text: str = ""
    """The plain text shown (for tests and copy)."""

    _body: Static | None = None

    @property
    def body(self) -> Static:
        """The text widget, made at once: a worker's value may come before this pane's compose ran (it is
        mounted after the first frame) and is shown when it does."""
        if self._body is None:
            self._body = Static("", id=f"{self.id}-body" if self.id else None)
        return self._body

    def show_value(self, value: Any, heading: str = "") -> None:
        """Show ``value`` as coloured JSON under an optional heading; a failed step's traceback as code above it."""
        error_line, tb, value = split_traceback(value)
        rend = json_renderable(value)
        parts: list[RenderableType] = []
        texts: list[str] = []
        if heading:
            parts.append(Text(heading, style="bold"))
            texts.append(heading)
        if tb:
            tbt = self.traceback_text(error_line, tb)
            parts.append(tbt)
            texts.append(tbt.plain)
        parts.append(rend)
        texts.append(rend.plain if isinstance(rend, Text) else rend.text.plain)
        self.text = "\n".join(texts)
        self.body.update(Group(*parts) if len(parts) > 1 else rend)

    def show_call(self, rec: dict[str, Any], served: list[int], heading: str = "") -> None:
        """A proxied model call, readable: the request's messages one by one, the answer (a stream's text
        assembled), status, tokens, latency, model, streamed, served or live; then the raw record as JSON."""
        from ..views.call_text import answer_turns, call_facts, request_turns

        t = Text()
        bold = Style(bold=True)
        if heading:
            t.append(heading + "\n", style=bold)
        if rec.get("kind") == "note":
            t.append(f"{rec.get('message', 'note')}: {rec.get('step', '')} #{rec.get('served')}\n", style=self._st("jsonpane--error"))
        else:
            role_st = self._st("jsonpane--frame")
            t.append("── request\n", style=self._st("jsonpane--muted"))
            for turn in request_turns(rec):
                t.append(f"{turn.role}: ", style=role_st + bold)
                t.append(turn.text + "\n")
            answer = answer_turns(rec)
            failed = rec.get("error") is not None
            t.append("── error\n" if failed else "── answer\n", style=self._st("jsonpane--muted"))
            if not answer:
                t.append("(no answer body)\n", style=self._st("jsonpane--muted"))
            for turn in answer:
                t.append(f"{turn.role}: ", style=(self._st("jsonpane--error") if failed else role_st) + bold)
                t.append(turn.text + "\n", style=self._st("jsonpane--error") if failed else Style())
            t.append("──\n", style=self._st("jsonpane--muted"))
            for label, value in call_facts(rec, served):
                t.append(f"{label:>9}  ", style=self._st("jsonpane--muted"))
                t.append(value + "\n", style=self._st("jsonpane--error") if label == "status" and failed else Style())
        t.append("── raw record (llm.jsonl, blobs expanded)\n", style=self._st("jsonpane--muted"))
        rend = json_renderable(rec)
        self.text = t.plain + (rend.plain if isinstance(rend, Text) else rend.text.plain)
        self.body.update(Group(t, rend))

    def show_rich(self, text: Text) -> None:
        """Show a text made elsewhere (a worker's: the Files tab's changes and diffs)."""
        self.text = text.plain
        self.body.update(text)

    def show_text(self, text: str, style: str = "") -> None:
        self.text = text
        self.body.update(Text(text, style=style))

    def show_entry(self, ent: Entry | None, heading: str = "") -> None:
        """Show a journal entry (a bad line as its position and text)."""
        if ent is None:
            self.show_text("(blank line or not loaded yet)", "dim")
        elif isinstance(ent, BadLine):
            self.show_text(f"{ent.path}:{ent.line}: skipped, {ent.reason}\n\n{ent.text}", "red")
        else:
            self.show_value(ent, heading)
