"""The status bar of the run dashboard: supervisor state and process figures, run counts, modes."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from .status import RunStatus, fmt_bytes, fmt_duration

_STATE_STYLE = {
    "running": "bold green",
    "starting": "green",
    "backoff": "bold yellow",
    "paused": "yellow",
    "stopping": "yellow",
    "stopped": "yellow",
    "crashed": "bold red",
    "failed": "bold red",
    "rolled back": "bold magenta",
    "succeeded": "bold cyan",
}


class StatusBar(Static):
    """One or two lines: state, pid, attempt, uptime, restarts, CPU, RSS; steps, checkpoints; modes."""

    DEFAULT_CSS = """
    StatusBar { height: auto; max-height: 3; background: $panel; padding: 0 1; }
    """

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
    ) -> None:
        """Redraw from the given figures (cheap: one Text)."""
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{run_id}  ", style="bold")
        t.append(f"● {status.state}", style=_STATE_STYLE.get(status.state, "bold"))
        f: dict[str, Any] = status.fields
        if status.live:
            for label, value in (
                ("pid", f.get("pid") or "-"),
                ("attempt", f.get("attempt", "-")),
                ("up", fmt_duration(f.get("uptime_s"))),
                ("restarts", f.get("restarts", 0)),
                ("cpu", f"{f['cpu_percent']:.0f}%" if isinstance(f.get("cpu_percent"), (int, float)) else "-"),
                ("rss", fmt_bytes(f.get("rss_bytes"))),
            ):
                t.append(f"  {label} ", style="dim")
                t.append(str(value))
            if status.state == "backoff" and f.get("backoff_s") is not None:
                t.append(f"  retry in {f['backoff_s']}s", style="yellow")
        else:
            if f.get("attempt") is not None:
                t.append("  attempt ", style="dim")
                t.append(str(f.get("attempt")))
            t.append("  no supervisor", style="dim")
        t.append("  │ ", style="dim")
        counts = (("steps", steps), ("checkpoints", checkpoints)) if not indexing else (("steps", "…"), ("checkpoints", "…"))
        for label, value in (*counts, ("records", records)):
            t.append(f"{label} ", style="dim")
            t.append(f"{value}  ")
        if problems:
            t.append(f"bad lines {problems}  ", style="bold red")
        if indexing:
            t.append("indexing…  ", style="italic yellow")
        if deleted:
            t.append("RUN DIRECTORY DELETED  ", style="bold white on red")
        if replay_now is not None:
            t.append(f"REPLAY now #{replay_now}", style="bold reverse")
        elif follow:
            t.append("FOLLOW", style="bold green")
        else:
            t.append("follow off (f)", style="dim")
        self.update(t)
