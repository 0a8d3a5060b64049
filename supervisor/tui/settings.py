"""The dashboard's settings (theme, layout, time format, wrapping of long values), kept in the user's config directory.

``$XDG_CONFIG_HOME/agent-supervisor/settings.json``, else
``~/.config/agent-supervisor/settings.json``: one JSON object, written
atomically when a setting changes. A missing file means the defaults; an
unreadable file, an unknown key or a value out of range is ignored (that
setting keeps its default) and never stops the dashboard. No Textual here.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

DARK = "supervisor-dark"
LIGHT = "supervisor-light"
LAYOUTS = ("auto", "side", "stacked")
"""``auto``: timeline and detail side by side from ``WIDE_COLUMNS`` columns, stacked below."""
TIMES = ("absolute", "relative")
"""``relative``: time since the run's first record."""
WIDE_COLUMNS = 160


class Settings:
    """The dashboard's settings (a plain class, not a dataclass: one costs ~0.3 ms of the start)."""

    __slots__ = ("layout", "theme", "time", "wrap")

    def __init__(self, theme: str = DARK, layout: str = "auto", time: str = "absolute", wrap: bool = True) -> None:
        self.theme = theme
        self.layout = layout
        self.time = time
        self.wrap = wrap
        """Long values wrap in the detail panes (else they scroll sideways); ``w`` toggles it."""

    def as_dict(self) -> dict[str, str | bool]:
        return {"theme": self.theme, "layout": self.layout, "time": self.time, "wrap": self.wrap}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    def __repr__(self) -> str:
        return f"Settings(theme={self.theme!r}, layout={self.layout!r}, time={self.time!r}, wrap={self.wrap!r})"


def config_path() -> Path:
    """Where the settings live (the XDG base directory rule)."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "agent-supervisor" / "settings.json"


def load(path: Path | None = None) -> Settings:
    """The saved settings; the default for any that is missing or not valid."""
    path = path or config_path()
    try:
        data: Any = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return Settings()  # no file yet, or not JSON: the defaults (the next change writes a good one)
    s = Settings()
    if not isinstance(data, dict):
        return s
    if isinstance(data.get("theme"), str) and data["theme"]:
        s.theme = data["theme"]  # any registered theme name; the app falls back to DARK if it is unknown
    if data.get("layout") in LAYOUTS:
        s.layout = data["layout"]
    if data.get("time") in TIMES:
        s.time = data["time"]
    if isinstance(data.get("wrap"), bool):
        s.wrap = data["wrap"]
    return s


def save(settings: Settings, path: Path | None = None) -> str:
    """Write the settings atomically; ``""`` on success, else why not (the dashboard shows it, once)."""
    path = path or config_path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(settings.as_dict(), f, indent=2)
                f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        return f"settings not saved to {path}: {e.strerror or e}"
    return ""


def next_in(choices: tuple[str, ...], current: str) -> str:
    """The choice after ``current`` (the first if it is not one of them)."""
    try:
        return choices[(choices.index(current) + 1) % len(choices)]
    except ValueError:
        return choices[0]
