"""Regenerate docs/img/dashboard.svg, the README's screenshot: the dashboard on a fresh run of the demo agent.

    .venv/bin/python tests/bench/make_screenshot.py [--out docs/img/dashboard.svg] [--size 132x34]

The run is made as ``agent-supervisor demo`` makes it (the sample agent under the supervisor, crashing in
``search:q2`` on its first attempt and resumed), in a temporary directory; the app is the one factory's
(``make_app``) with default settings, driven by Textual's Pilot until the timeline, the state pane and the
status bar's tokens and cost are shown, with a model call selected. Not a test: it asserts nothing it need not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from supervisor.cli.tui_cmds import demo_command
from supervisor.tui.app import make_app
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.status_bar import StatusBar

ROOT = Path(__file__).resolve().parents[2]


def make_run(workdir: Path) -> Path:
    """A finished demo run at ``workdir/runs/demo`` (relative paths: the screenshot shows no temporary path)."""
    run_dir = Path("runs/demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_SUPERVISOR_")}
    subprocess.run(demo_command(run_dir, step_delay=0.05), cwd=workdir, env=env, check=True, timeout=120,
                   stdout=subprocess.DEVNULL)
    return run_dir


async def shoot(run_dir: Path, out: Path, size: tuple[int, int], settings: Path) -> None:
    app = make_app(run_dir, settings_path=settings)
    async with app.run_test(size=size) as pilot:
        deadline = time.monotonic() + 60

        def ready() -> bool:
            d = app.screen
            return (isinstance(d, DashboardScreen) and d.model.scanned and d.model.applied_reads > 0
                    and d.query_one(StatusBar).usage is not None)

        while not ready():
            if time.monotonic() > deadline:
                raise SystemExit("make_screenshot: the dashboard did not settle in 60 s")
            await pilot.pause(0.05)
        await pilot.press(":", "1", "2", "enter")  # summarize: a model call, its tokens and cost
        d = app.screen
        while not (isinstance(d, DashboardScreen) and d.timeline.selected_seq() == 12):
            if time.monotonic() > deadline:
                raise SystemExit("make_screenshot: could not select seq 12")
            await pilot.pause(0.05)
        await pilot.pause(0.3)  # the panes follow the cursor
        app.save_screenshot(filename=out.name, path=str(out.parent))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "dashboard.svg")
    ap.add_argument("--size", default="132x34", help="columns x lines")
    args = ap.parse_args()
    cols, lines = (int(x) for x in args.size.split("x"))
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="screenshot-") as tmp:
        workdir = Path(tmp)
        run_dir = make_run(workdir)
        os.chdir(workdir)
        asyncio.run(shoot(run_dir, out, (cols, lines), workdir / "settings.json"))
    print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
