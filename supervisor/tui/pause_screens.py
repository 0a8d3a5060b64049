"""The dashboard's side of breakpoints and ``run.ask`` (``core.pauses``): the paused step with its choices, a
question with its answers, and the run's breakpoints. Each answer is the file ``continue`` and ``answer`` write
(``by: dashboard``); the agent journals it as a ``choice``, as from the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import orjson
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, ListItem, ListView, Static, TextArea

from ..core import pauses
from ..core.records import Record
from ..errors import SupervisorError
from ..views.fmt import dumps_pretty

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{
    width: 96; max-width: 95%; height: auto; max-height: 90%;
    border: thick $warning; background: $surface; padding: 1 2;
}}
{name} .title {{ text-style: bold; margin-bottom: 1; }}
{name} VerticalScroll {{ height: auto; max-height: 14; }}
{name} TextArea {{ height: 12; }}
{name} Horizontal {{ height: auto; margin-top: 1; }}
{name} Button {{ margin-right: 1; min-width: 0; }}  /* the six choices fit the dialog's width (Abort was cut) */
{name} .error {{ color: $error; height: auto; }}
"""


class PauseScreen(ModalScreen[str | None]):
    """A paused step: what it is, why it paused, its inputs, and the choices (dismissed with the choice given)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "choose('continue')", "Continue", tooltip="Run the step"),
        Binding("s", "choose('step')", "Step", tooltip="Run it, then pause before the next live step"),
        Binding("a", "choose('all')", "Continue all", tooltip="Clear every breakpoint and run on"),
        Binding("e", "edit('inputs')", "Edit inputs", tooltip="Run it with other inputs (JSON)"),
        Binding("o", "edit('output')", "Give output", tooltip="Skip it: record it as done with an output you give"),
        Binding("x", "choose('abort')", "Abort", tooltip="Stop the run here (nothing is lost: it resumes when started)"),
        Binding("escape", "close", "Close", tooltip="Leave it paused"),
        Binding("ctrl+s", "submit", "Submit", show=False, tooltip="Send the edited JSON"),
    ]
    DEFAULT_CSS = _CSS.format(name="PauseScreen")

    def __init__(self, run_dir: Path, pause: Record) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.pause = pause
        self.editing: str | None = None
        """``inputs`` or ``output`` while the JSON editor is open."""

    def compose(self) -> ComposeResult:
        p = self.pause
        with Vertical():
            yield Static(Text(pauses.pause_text(p), style="bold"), classes="title")
            with VerticalScroll():
                yield Static(Text("inputs\n", style="bold") + Text(dumps_pretty(p.get("inputs"))), id="pause-inputs")
            yield TextArea("", language="json", id="pause-editor", classes="-hidden")
            yield Static("", classes="error", id="pause-error")
            with Horizontal():
                for label, choice in (("Continue (c)", "continue"), ("Step (s)", "step"), ("All (a)", "all"),
                                      ("Inputs… (e)", "inputs"), ("Output… (o)", "output"), ("Abort (x)", "abort")):
                    yield Button(label, id=f"pause-{choice}", variant="error" if choice == "abort" else "default")

    def on_mount(self) -> None:
        self.query_one("#pause-editor", TextArea).display = False
        self.query_one("#pause-continue", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        choice = (event.button.id or "").removeprefix("pause-")
        if choice in ("inputs", "output"):
            self.action_edit(choice)
        else:
            self.action_choose(choice)

    def action_choose(self, choice: str) -> None:
        if self.editing is not None:
            return  # the keys are the editor's while it is open
        self._give({"choice": choice})

    def action_edit(self, what: str) -> None:
        """Open the JSON editor on the inputs (or an empty output); ``ctrl+s`` sends it."""
        if self.editing is not None:
            return
        self.editing = what
        editor = self.query_one("#pause-editor", TextArea)
        editor.text = dumps_pretty(self.pause.get("inputs")) if what == "inputs" else "null"
        editor.display = True
        editor.focus()
        self.query_one("#pause-error", Static).update(f"edit the {what} as JSON, then ctrl+s (Esc: back)")

    def action_submit(self) -> None:
        what = self.editing
        if what is None:
            return
        try:
            value = orjson.loads(self.query_one("#pause-editor", TextArea).text)
            if what == "inputs":
                pauses.check_inputs(value, self.pause)
        except (orjson.JSONDecodeError, SupervisorError) as e:
            self.query_one("#pause-error", Static).update(Text(f"not sent: {e}", style="bold red"))
            return
        self._give({"choice": what, what: value})

    def action_close(self) -> None:
        if self.editing is not None:  # Esc closes the editor first
            self.editing = None
            self.query_one("#pause-editor", TextArea).display = False
            self.query_one("#pause-error", Static).update("")
            self.query_one("#pause-continue", Button).focus()
            return
        self.dismiss(None)

    def _give(self, answer: dict[str, Any]) -> None:
        pauses.write_answer(self.run_dir, int(self.pause["seq"]), {**answer, "by": "dashboard"}, self.pause.get("source"))
        self.dismiss(str(answer["choice"]))


class AskScreen(ModalScreen[Any]):
    """A question the agent asked (``run.ask``): its choices as buttons (keys 1-9), or a line of free text."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close", tooltip="Leave it unanswered")]
    DEFAULT_CSS = _CSS.format(name="AskScreen")

    def __init__(self, run_dir: Path, pause: Record) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.pause = pause
        self.choices: list[Any] | None = pause.get("choices") if isinstance(pause.get("choices"), list) else None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(f"the agent asks: {self.pause.get('prompt')}", style="bold"), classes="title")
            if self.choices:
                with Horizontal():
                    for i, c in enumerate(self.choices[:9]):
                        yield Button(f"{c} ({i + 1})", id=f"ask-{i}")
            else:
                yield Input(placeholder="your answer, then Enter", id="ask-input")

    def on_mount(self) -> None:
        if self.choices:
            self.query_one("#ask-0", Button).focus()
        else:
            self.query_one("#ask-input", Input).focus()

    def on_key(self, event: Any) -> None:
        if self.choices and event.character and event.character.isdigit():
            i = int(event.character) - 1
            if 0 <= i < min(9, len(self.choices)):
                event.stop()
                self._answer(self.choices[i])

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        assert self.choices is not None
        self._answer(self.choices[int((event.button.id or "ask-0").removeprefix("ask-"))])

    @on(Input.Submitted)
    def _typed(self, event: Input.Submitted) -> None:
        self._answer(event.value)

    def _answer(self, value: Any) -> None:
        pauses.write_answer(self.run_dir, int(self.pause["seq"]), {"choice": "answer", "answer": value, "by": "dashboard"})
        self.dismiss(value)

    def action_close(self) -> None:
        self.dismiss(None)


class BreakpointsScreen(ModalScreen[None]):
    """The run's breakpoints: ``d`` removes the selected one, ``a`` adds a pattern, ``C`` clears them all."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "add", "Add", tooltip="Add a breakpoint pattern (fnmatch on step names)"),
        Binding("d,delete", "remove", "Remove", tooltip="Remove the selected breakpoint"),
        Binding("C", "clear", "Clear all", tooltip="Remove every breakpoint"),
        Binding("escape,q", "close", "Close"),
    ]
    DEFAULT_CSS = _CSS.format(name="BreakpointsScreen")

    def __init__(self, run_dir: Path) -> None:
        super().__init__()
        self.run_dir = run_dir

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("breakpoints: a live step whose name matches pauses before it runs", classes="title")
            yield ListView(id="bp-list")
            yield Input(placeholder="pattern, e.g. tool:bash* or llm:* or interrupted; Enter adds it", id="bp-input")
            yield Static("", classes="error", id="bp-error")

    def on_mount(self) -> None:
        self.query_one("#bp-input", Input).display = False
        self._refresh()
        self.query_one("#bp-list", ListView).focus()

    def _refresh(self) -> None:
        try:
            doc = pauses.read_breakpoints(self.run_dir)
        except SupervisorError as e:
            self.query_one("#bp-error", Static).update(str(e))
            return
        lv = self.query_one("#bp-list", ListView)
        lv.clear()
        for p in doc["patterns"]:
            lv.append(ListItem(Static(p), name=p))
        if not doc["patterns"]:
            lv.append(ListItem(Static(Text("none: b on a step's row sets one on its name", style="dim")), name=""))
        self.call_after_refresh(setattr, lv, "index", 0)  # the first highlighted once the items are mounted

    def action_add(self) -> None:
        inp = self.query_one("#bp-input", Input)
        inp.display = True
        inp.focus()

    @on(Input.Submitted, "#bp-input")
    def _added(self, event: Input.Submitted) -> None:
        if event.value.strip():
            pauses.change_breakpoints(self.run_dir, add=[event.value.strip()])
        event.input.value = ""
        event.input.display = False
        self._refresh()
        self.query_one("#bp-list", ListView).focus()

    def action_remove(self) -> None:
        item = self.query_one("#bp-list", ListView).highlighted_child
        if item is not None and item.name:
            pauses.change_breakpoints(self.run_dir, remove=[item.name])
            self._refresh()

    def action_clear(self) -> None:
        pauses.change_breakpoints(self.run_dir, remove=None, next_step=False)
        self._refresh()

    def action_close(self) -> None:
        self.dismiss(None)
