"""The status bar of the run dashboard: one line, whatever the width.

State, process figures, run counts, the run's tokens and cost (and what resuming
saved), the mode. Each part has a priority: on a narrow terminal the least
important parts go first (at 80 columns: state, attempt, steps, records,
tokens and cost, the mode), never a second line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.widgets import Static

from .status import RunStatus, fmt_bytes, fmt_duration

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


@dataclass(frozen=True)
class UsageTotals:
    """The run's model usage for the status bar (``None`` cost: unknown prices, or not computed yet)."""

    tokens: int = 0
    cost: float | None = None
    saved_tokens: int = 0
    saved_cost: float | None = None


def fmt_tokens(n: int) -> str:
    """``950``, ``12.3k``, ``4.1M``."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k" if n < 100_000 else f"{n // 1000}k"
    return f"{n / 1_000_000:.1f}M"


def fmt_cost(usd: float | None) -> str:
    if usd is None:
        return ""
    if usd == 0:
        return "$0"
    if usd < 0.01:
        return f"${usd:.4f}"
    if usd < 100:
        return f"${usd:.2f}"
    return f"${usd:,.0f}"


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
        """Redraw from the given figures (cheap: one Text)."""
        self._last = dict(
            status=status, run_id=run_id, records=records, steps=steps, checkpoints=checkpoints, follow=follow,
            replay_now=replay_now, indexing=indexing, deleted=deleted, problems=problems, usage=usage,
        )
        room = (self.size.width - 2) if self.size.width else 10_000
        t = self._line(room, wide=True) or self._line(room, wide=False, drop=True)
        self.update(t or "")

    def _line(self, room: int, *, wide: bool, drop: bool = False) -> Text | None:
        """The line with long labels (``wide``) or short ones; ``None`` if it does not fit and ``drop`` is off,
        else the least important parts left out until it fits."""
        assert self._last is not None
        a = self._last
        status: RunStatus = a["status"]
        steps, checkpoints, usage = a["steps"], a["checkpoints"], a["usage"]
        label = self._st("status--label")
        # (priority, parts): higher stays longer; the parts are (text, style) in display order
        items: list[tuple[int, list[tuple[str, Style | None]]]] = []

        def add(prio: int, *parts: tuple[str, Style | None]) -> None:
            items.append((prio, list(parts)))

        def fig(prio: int, name: str, value: Any, short: str = "") -> None:
            if wide or not short:
                add(prio, (f"{name} ", label), (str(value), None))
            else:
                add(prio, (str(value), None), (short, label))

        add(9, (a["run_id"], self._st("status--id")))
        add(10, (f"● {status.state}", self._st(_STATE_CLASS.get(status.state, "status--id"))))
        f: dict[str, Any] = status.fields
        if status.live:
            fig(3, "pid", f.get("pid") or "-")
            fig(8, "attempt", f.get("attempt", "-"), "")
            fig(2, "up", fmt_duration(f.get("uptime_s")))
            fig(5, "restarts", f.get("restarts", 0), "↻")
            fig(1, "cpu", f"{f['cpu_percent']:.0f}%" if isinstance(f.get("cpu_percent"), (int, float)) else "-")
            fig(1, "rss", fmt_bytes(f.get("rss_bytes")))
            if status.state == "backoff" and f.get("backoff_s") is not None:
                add(9, (f"retry in {f['backoff_s']}s", self._st("status--warn")))
        else:
            if f.get("attempt") is not None:
                fig(8, "attempt", f.get("attempt"))
            add(2, ("no supervisor", label))
        if a["indexing"]:
            steps = checkpoints = "…"
        fig(7, "steps", steps)
        fig(4, "checkpoints", checkpoints, " cp")
        fig(10, "records", a["records"])
        if usage is not None and (usage.tokens or usage.saved_tokens):
            parts: list[tuple[str, Style | None]] = [("tokens ", label), (fmt_tokens(usage.tokens), None)]
            if usage.cost is not None:
                parts.append((f" {fmt_cost(usage.cost)}", None))
            add(7, *parts)
            if usage.saved_tokens:
                saved: list[tuple[str, Style | None]] = [("saved by resume ", label) if wide else ("saved ", label),
                                                         (fmt_tokens(usage.saved_tokens), self._st("status--ok"))]
                if usage.saved_cost:
                    saved.append((f" {fmt_cost(usage.saved_cost)}", self._st("status--ok")))
                add(6, *saved)
        if a["problems"]:
            add(9, (f"bad lines {a['problems']}", self._st("status--error")))
        if a["indexing"]:
            add(6, ("indexing…", self._st("status--warn")))
        if a["deleted"]:
            add(11, ("RUN DIRECTORY DELETED", self._st("status--alarm")))
        if a["replay_now"] is not None:
            add(11, (f"REPLAY now #{a['replay_now']}", Style(reverse=True, bold=True)))
        elif a["follow"]:
            add(11, ("FOLLOW", self._st("status--ok")))
        else:
            add(11, ("follow off (f)", label))

        sep = "  "

        def length(keep: list[tuple[int, list[tuple[str, Style | None]]]]) -> int:
            return sum(len(t) for _, ps in keep for t, _ in ps) + len(sep) * (len(keep) - 1)

        keep = list(items)
        if length(keep) > room and not drop:
            return None
        while length(keep) > room and len(keep) > 1:
            lowest = min(p for p, _ in keep)
            idx = max(i for i, (p, _) in enumerate(keep) if p == lowest)  # the rightmost of the least important
            del keep[idx]
        t = Text(no_wrap=True, overflow="ellipsis")
        for n, (_, ps) in enumerate(keep):
            if n:
                t.append(sep)
            for text, style in ps:
                t.append(text, style=style or "")
        return t
