"""The snapshot entry: the app built by the one factory on the recorded sample run (copied, 0700)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from supervisor.tui.app import SupervisorApp, make_app

DATA = Path(__file__).parent / "data"


def sample_app(name: str = "rolled_back_run", *, replay: bool = False, theme: str = "") -> SupervisorApp:
    """``make_app`` on a private copy of a recorded run (snapshot tests must not change the data), with
    settings of its own (the defaults, or ``theme``), never the user's settings.json."""
    tmp = Path(tempfile.mkdtemp(prefix="snap-"))
    atexit.register(shutil.rmtree, tmp, True)
    src = DATA / name
    if src.is_dir():
        target = tmp / name
        shutil.copytree(src, target)
    else:
        target = tmp / src.name
        shutil.copy(src, target)
    app = make_app(target, replay=replay, settings_path=tmp / "settings.json")
    if theme:
        app.theme = theme
    return app
