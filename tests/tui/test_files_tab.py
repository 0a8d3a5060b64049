"""The workspace in the dashboard: the Files tab of a step, the ``✎N`` mark on its row, the workspace's diff on the
diff screen, and what the rollback and fork dialogs say about files (a run made by the SDK with a workspace)."""

from __future__ import annotations

from pathlib import Path

import orjson
from textual.pilot import Pilot

from supervisor.core import workspace
from supervisor.core.fork_workspace import default_workspace
from supervisor.tui.app import make_app
from supervisor.tui.confirm import ConfirmScreen
from supervisor.tui.dashboard import DashboardScreen
from supervisor.tui.detail import JsonPane
from supervisor.tui.diff_screen import DiffScreen
from supervisor.tui.pane_tabs import Panes

from .conftest import caught_up, until
from .files_run import APP_V1, make_files_run

SIZE = (120, 36)


def dash(pilot: Pilot) -> DashboardScreen:  # type: ignore[type-arg]
    d = pilot.app.screen
    assert isinstance(d, DashboardScreen), d
    return d


async def goto(pilot: Pilot, seq: int) -> None:  # type: ignore[type-arg]
    await pilot.press("colon", *str(seq), "enter")
    await until(pilot, lambda: dash(pilot).timeline.selected_seq() == seq, what=f"the cursor on #{seq}")


def row_text(d: DashboardScreen, seq: int) -> str:
    tl = d.timeline
    row = d.model.row_of_seq(seq)
    return tl.render_line(row - int(tl.scroll_y)).text


def files_text(d: DashboardScreen) -> str:
    return d.query_one("#files-pane", JsonPane).text


async def test_the_files_tab_shows_what_each_step_changed_with_diffs(tmp_path: Path) -> None:
    fr = make_files_run(tmp_path)
    app = make_app(fr.run_dir, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        d = dash(pilot)
        await goto(pilot, fr.seqs["edit:app"])
        assert "✎3 ✓" in row_text(d, fr.seqs["edit:app"])  # three files: app.py, notes.md, scratch.txt
        assert "✎" not in row_text(d, fr.seqs["plan"]) and "✎1" in row_text(d, fr.seqs["test"])
        await pilot.press("c")
        assert d.query_one(Panes).active == "files"
        await until(pilot, lambda: "3 files changed" in files_text(d), what="the Files tab")
        text = files_text(d)
        assert f"#{fr.seqs['edit:app']} step edit:app: 3 files changed" in text
        assert "~ app.py  changed" in text and "+ notes.md  created" in text and "- scratch.txt  deleted" in text
        assert "-    return 41" in text and "+    return 42" in text  # the unified diff of the text file
        assert "+the answer is 42" in text  # a created file: all of it added

        await goto(pilot, fr.seqs["test"])  # the Files tab follows the cursor
        await until(pilot, lambda: "between steps" in files_text(d), what="the change after the last step")
        assert files_text(d).startswith(f"#{fr.seqs['test']} step test: no file changed by its step")
        assert "+ build.log  created" in files_text(d)

        await goto(pilot, fr.seqs["plan"])
        await until(pilot, lambda: files_text(d).startswith(f"#{fr.seqs['plan']} step plan: no file changed"),
                    what="a step that changed nothing")

        await goto(pilot, fr.seqs["planned"])  # a checkpoint: its snapshot's files
        await until(pilot, lambda: "the checkpoint's snapshot of the workspace: 2 files" in files_text(d),
                    what="the checkpoint's snapshot")
        assert "  app.py  " in files_text(d) and "  scratch.txt  " in files_text(d)


async def test_the_files_tab_of_a_run_without_a_workspace_says_so(rolled_back_run: Path, tmp_path: Path) -> None:
    app = make_app(rolled_back_run, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        d = dash(pilot)
        await pilot.press("c")
        await until(pilot, lambda: "has no workspace" in files_text(d), what="the Files tab")
        assert "supervise --workspace PATH" in files_text(d)
        assert not any("✎" in row_text(d, s) for s in range(3))


async def test_d_diffs_the_workspace_between_the_two_points(tmp_path: Path) -> None:
    fr = make_files_run(tmp_path)
    app = make_app(fr.run_dir, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        await goto(pilot, fr.seqs["planned"])
        await pilot.press("m")
        await goto(pilot, fr.seqs["test"])
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.files_plain, what="the files diff")
        diff = app.screen
        assert isinstance(diff, DiffScreen) and diff.workspace
        text = diff.files_plain
        # the checkpoint's snapshot against the workspace at the test step: the edit's changes and build.log
        want = workspace.summary(workspace.diff(workspace.in_effect(fr.run_dir, fr.seqs["planned"]),  # type: ignore[arg-type]
                                                workspace.in_effect(fr.run_dir, fr.seqs["test"])))  # type: ignore[arg-type]
        assert f"workspace  #{fr.seqs['planned']} checkpoint planned  →  #{fr.seqs['test']} test: {want}" in text
        for line in ("~ app.py  changed", "+ notes.md  created", "- scratch.txt  deleted", "+ build.log  created",
                     "-    return 41", "+    return 42"):
            assert line in text, (line, text)
        await pilot.press("f")
        assert diff.query_one("TabbedContent").active == "files"  # type: ignore[attr-defined]


async def test_a_run_without_a_workspace_has_no_files_tab_in_the_diff(rolled_back_run: Path, tmp_path: Path) -> None:
    app = make_app(rolled_back_run, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.changes_plain, what="the diff")
        diff = app.screen
        assert isinstance(diff, DiffScreen) and not diff.workspace and not diff.query("#files-body")


async def test_the_rollback_dialog_says_which_files_go_back(tmp_path: Path) -> None:
    fr = make_files_run(tmp_path)
    app = make_app(fr.run_dir, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        await goto(pilot, fr.seqs["planned"])
        await pilot.press("c", "r")  # the Files tab shown: its worker and the dialog's run together
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and "goes back" in app.screen.body_text,
                    what="the rollback dialog's files line")
        await until(pilot, lambda: "goes back" in str(app.screen.query_one("#confirm-body").render()),  # type: ignore[attr-defined]
                    what="the dialog showing it, not only holding it")
        body = app.screen.body_text  # type: ignore[attr-defined]
        # since the checkpoint: app.py changed, notes.md and build.log created, scratch.txt deleted
        since = workspace.summary(workspace.diff(workspace.in_effect(fr.run_dir, fr.seqs["planned"]),  # type: ignore[arg-type]
                                                 workspace.scan(workspace.settings_of(fr.run_dir))))  # type: ignore[arg-type]
        assert f"The workspace goes back to the checkpoint: {since} since it." in body, body
        assert "abandoned branch's snapshot" in body and "Side effects outside the workspace are not undone" in body
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen), what="the dialog closed")
        assert (fr.ws / "notes.md").exists()  # cancelled: nothing restored

        await pilot.press("r", "y")  # now for real (offline): the workspace goes back, the branch's files are kept
        await until(pilot, lambda: not (fr.ws / "notes.md").exists(), what="the restore")
        assert (fr.ws / "app.py").read_text() == APP_V1 and (fr.ws / "scratch.txt").exists()
        d = dash(pilot)
        await until(pilot, lambda: bool(d.model.rollback_seqs), what="the rollback record")
        rb = d.model.rollback_seqs[-1]
        await goto(pilot, rb)
        await until(pilot, lambda: "the abandoned branch's files" in files_text(d), what="the rollback's Files tab")
        text = files_text(d)
        assert text.startswith(f"#{rb} rollback to planned: the workspace goes back to its snapshot (done)")
        assert "  notes.md  " in text and "  build.log  " in text and f"--restore {rb} --to DIR" in text


async def test_the_rollback_and_fork_dialogs_of_a_run_without_a_workspace(rolled_back_run: Path, tmp_path: Path) -> None:
    app = make_app(rolled_back_run, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        await goto(pilot, 3)  # the checkpoint plan-done
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and "Files are not" in app.screen.body_text,
                    what="the rollback dialog's files line")
        assert "Files are not restored: this run has no workspace" in app.screen.body_text  # type: ignore[attr-defined]
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen), what="the dialog closed")
        await pilot.press("F")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the fork dialog")
        assert "this run has no workspace" in app.screen.body_text  # type: ignore[attr-defined]


async def test_the_fork_dialog_says_where_the_forks_workspace_goes(tmp_path: Path) -> None:
    fr = make_files_run(tmp_path)
    app = make_app(fr.run_dir, settings_path=tmp_path / "settings.json")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        await goto(pilot, fr.seqs["edited"])
        await pilot.press("F")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the fork dialog")
        body = app.screen.body_text  # type: ignore[attr-defined]
        target = fr.run_dir.parent / f"run-fork-{fr.seqs['edited']}"
        where = default_workspace(target, fr.ws.resolve())
        assert f"the fork gets a workspace of its own, {where}," in body and f"never in {fr.ws.resolve()}" in body
        await pilot.press("y")
        await until(pilot, lambda: (where / "notes.md").exists(), what="the fork's workspace")
        assert (where / "app.py").read_text() == (fr.ws / "app.py").read_text()
        assert orjson.loads((target / "run.json").read_bytes())["workspace"]["root"] == str(where)


def _steady(run_dir: Path) -> None:
    """The run's times, durations, pids and id made fixed (what the SDK wrote is otherwise the same each time), so
    that its picture does not change from one run of the test to the next."""
    lines = []
    for i, line in enumerate((run_dir / "journal.jsonl").read_bytes().splitlines()):
        rec = orjson.loads(line)
        rec["ts"] = f"2026-12-05T11:40:{i:02d}.000Z"
        for key, value in (("dur_ms", 12.0), ("pid", 4242), ("started", rec["ts"])):
            if key in rec:
                rec[key] = value
        lines.append(orjson.dumps(rec) + b"\n")
    (run_dir / "journal.jsonl").write_bytes(b"".join(lines))
    meta = orjson.loads((run_dir / "run.json").read_bytes())
    meta.update(id="files-run", created="2026-12-05T11:39:59.000Z")
    meta.pop("ended", None)
    (run_dir / "run.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))


def test_snapshot_of_the_files_tab(snap_compare, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The edit step's row marked ✎3, its Files tab: the three files with the unified diff of each."""
    fr = make_files_run(tmp_path)
    _steady(fr.run_dir)
    app = make_app(fr.run_dir, settings_path=tmp_path / "settings.json")

    async def before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        await until(pilot, lambda: caught_up(pilot.app), what="scan")
        await goto(pilot, fr.seqs["edit:app"])
        await pilot.press("c")
        await until(pilot, lambda: "3 files changed" in files_text(dash(pilot)), what="the Files tab")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 34), run_before=before)
