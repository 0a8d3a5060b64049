"""The dashboard's control of the run: rollback, fork, restart, stop (through the supervisor) and start again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work

from ..core import rundir
from ..core.records import Kind
from ..errors import SupervisorError
from .control import control_request
from .dashboard_state import DashboardState
from .files_text import LIMIT_TEXT, no_workspace_rollback_text


class RunControl(DashboardState):
    """``R`` ``X`` ``F`` ``S`` and the rollback: each asks first, then runs in a worker."""

    # ------------------------------------------------------------------ rollback, fork, control
    def action_rollback(self) -> None:
        seq = self.timeline.selected_seq()
        ent = self.model.record(seq) if seq is not None else None
        if seq is None or not isinstance(ent, dict) or ent.get("kind") != Kind.CHECKPOINT:
            self.notify("select a checkpoint first (] and [ jump between checkpoints)", severity="warning")
            return
        if self.model.is_abandoned(seq):
            self.notify("this checkpoint is on an abandoned branch; pick an effective one", severity="warning")
            return
        name = str(ent.get("name"))
        n, first = self.model.abandoned_by_rollback_to(int(seq))
        body = Text()
        body.append(f"Roll back to checkpoint {name!r} (#{seq}).\n\n")
        body.append(f"{n} record{'s' if n != 1 else ''} after it become an abandoned branch")
        body.append(" (they stay in the journal, dimmed):\n" if n else ".\n")
        for s in first:
            e = self.model.record(s)
            if isinstance(e, dict):
                body.append(f"  #{s} {e.get('kind')} {e.get('step') or e.get('name') or ''}\n", style="dim")
        if n > len(first):
            body.append(f"  … and {n - len(first)} more\n", style="dim")
        tail = Text("\nA rollback record is appended; nothing is rewritten. ")
        if self.status.live:
            tail.append("The supervisor restarts the agent, which replays up to the checkpoint.")
        else:
            tail.append("No supervisor is running: the record is written to the files (offline); "
                        "the next start resumes from the checkpoint.")

        def done(ok: bool | None) -> None:
            if ok:
                self.do_rollback(str(seq), name)

        from .confirm import ConfirmScreen

        # a stat, not a read: a run without a workspace is told at once; with one, a worker compares its files
        workspace = "workspace" in self.meta or (self.run_dir / rundir.WORKSPACE).is_dir()
        files = Text("\nFiles: checking what the rollback restores in the workspace…\n", style="dim")
        screen = ConfirmScreen(f"Roll back to {name}?", Text.assemble(body, files if workspace else
                                                                      no_workspace_rollback_text(), tail), "Roll back")
        self.app.push_screen(screen, done)
        if workspace:
            self.rollback_files(int(seq), screen, body, tail)

    @work(thread=True, exclusive=True, group="rollback-files", exit_on_error=False)
    def rollback_files(self, seq: int, screen: Any, head: Text, tail: Text) -> None:
        """What the rollback does to the workspace's files, said in the open dialog (a thread: it reads the
        workspace to compare it with the checkpoint's snapshot)."""
        from .files_text import rollback_files_text

        try:
            files = rollback_files_text(self.run_dir, seq)
        except (SupervisorError, OSError, ValueError) as e:
            files = Text(f"\nFiles: cannot tell what the rollback restores: {e}\n", style="yellow")
        self.app.call_from_thread(screen.update_body, Text.assemble(head, files, tail))

    @work(thread=True, exclusive=True, group="control", exit_on_error=False)
    def do_rollback(self, ref: str, name: str) -> None:
        from ..supervise.rollback import rollback

        try:
            result = rollback(self.run_dir, ref, reason="rollback from the TUI", by="user")
        except SupervisorError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error", timeout=8)
            return
        how = "through the supervisor" if result.get("live") else "offline, on the files"
        self.app.call_from_thread(self.notify, f"rolled back to {name} ({how})")
        self.files_changed()
        # show the rollback record and the restarted attempt as they come: follow on
        self.app.call_from_thread(self.timeline.action_bottom)
        self.app.call_from_thread(self.poll_status)

    def action_fork(self) -> None:
        seq = self.timeline.selected_seq()
        if seq is None:
            self.notify("nothing to fork: the run has no records", severity="warning")
            return
        from ..core.fork import default_target

        target = default_target(self.run_dir, seq)
        body = Text()
        body.append(f"A new run directory, {target.name}, is made beside this one, holding this run's journal up to #{seq} ")
        body.append("(the effective history there) and its checkpoints; this run is not changed.\n\n")
        body.append_text(self._fork_files(target, seq))
        body.append("Start the fork with 'agent-supervisor supervise --run-dir NEW' (or open it here and press S).")

        def done(ok: bool | None) -> None:
            if ok:
                self.do_fork(seq)

        from .confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen(f"Fork the run at #{seq}?", body, "Fork"), done)

    def _fork_files(self, target: Path, seq: int) -> Text:
        """The fork dialog's paragraph on files: where the fork's workspace will be, or that there is none."""
        from ..core import workspace
        from ..core.fork_workspace import default_workspace

        t = Text()
        try:
            settings = workspace.settings_of(self.run_dir) if self.run_dir.is_dir() else None
        except SupervisorError as e:
            return t.append(f"Files: this run's workspace cannot be read: {e}\n\n", style="yellow")
        if settings is None:
            return t.append("Files: this run has no workspace; the fork's agent works in the same directories as this "
                            "run's (no file is copied).\n\n", style="bold")
        t.append(f"Files: the fork gets a workspace of its own, {default_workspace(target, settings.root)}, holding "
                 f"this run's files as they were at #{seq}; the fork's agent works there, never in {settings.root}.\n",
                 style="bold")
        return t.append(LIMIT_TEXT + "\n\n", style="dim")

    @work(thread=True, exclusive=True, group="control", exit_on_error=False)
    def do_fork(self, seq: int) -> None:
        try:
            from ..core.fork import fork

            new = fork(self.run_dir, seq)
        except SupervisorError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error", timeout=8)
            return
        self.app.call_from_thread(self.notify, f"forked at #{seq} into {new}", timeout=8)

    def _control(self, cmd: str, title: str, body: str) -> None:
        if self.replay:
            self.notify("replay mode is read-only: open the run with 'agent-supervisor tui' to control it", severity="warning")
            return
        if not self.status.live:
            self.notify("no supervisor is running this run" + ("; S starts it again" if self._startable() else ""), severity="warning")
            return

        def done(ok: bool | None) -> None:
            if ok:
                self.send_control(cmd)

        from .confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen(title, body, cmd.capitalize()), done)

    def action_restart(self) -> None:
        self._control(
            "restart", "Restart the agent?", "The agent is stopped (SIGTERM, then SIGKILL) and started again with the resume flag."
        )

    def action_stop(self) -> None:
        self._control(
            "stop", "Stop the agent?",
            "The agent is stopped (SIGTERM, then SIGKILL) and the supervisor exits. The run can be resumed later.",
        )

    @work(thread=True, exclusive=True, group="control", exit_on_error=False)
    def send_control(self, cmd: str) -> None:
        try:
            control_request(self.run_dir, {"cmd": cmd})
        except SupervisorError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error", timeout=8)
            return
        self.app.call_from_thread(self.notify, f"{cmd}: done")
        self.app.call_from_thread(self.poll_status)


    # ------------------------------------------------------------------ start again
    def _bare(self) -> bool:
        """A bare journal file: no run directory, no recorded command."""
        return not self.run_dir.is_dir() or (self.path.is_file() and self.path.name != rundir.JOURNAL)

    def _startable(self) -> bool:
        """Whether the footer offers ``S``: a run directory whose status is known, that no supervisor or agent runs
        and that did not succeed."""
        if self.replay or self._bare():
            return False
        return not self.status.live and self.status.state not in ("running", "succeeded", "unknown")

    def _recorded_command(self) -> list[str] | str:
        """The command ``run.json`` records, or a one-line reason it cannot be run again."""
        from ..core.redact import argv_is_redacted

        try:
            meta = rundir.read_run_json(self.run_dir)
        except SupervisorError as e:
            return str(e)
        cmd = meta.get("command")
        if not (isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd)):
            return (f"{rundir.RUN_JSON} records no command to start again; "
                    f"run: agent-supervisor supervise --run-dir {self.run_dir} -- CMD")
        if argv_is_redacted(cmd):
            return (f"the command recorded in {rundir.RUN_JSON} had secrets redacted, so it cannot be run again; "
                    f"give it after '--': agent-supervisor supervise --run-dir {self.run_dir} -- CMD")
        return cmd

    def action_start_again(self) -> None:
        if self.replay:
            self.notify("replay mode is read-only: open the run with 'agent-supervisor tui' to start it again", severity="warning")
            return
        if self.status.live or self.status.state == "running":
            self.notify("the run is running already (R restarts its agent)", severity="warning")
            return
        if self.status.state == "succeeded":
            self.notify("the run succeeded: nothing to start again (F forks it from a record)", severity="warning")
            return
        if self._bare():
            self.notify("only a run directory can be started again (this is a bare journal)", severity="warning")
            return
        cmd = self._recorded_command()
        if isinstance(cmd, str):
            self.notify(cmd, severity="error", timeout=10)
            return
        body = Text()
        body.append(f"The run is {self.status.state}. ")
        body.append("'agent-supervisor supervise --run-dir' starts it again with the recorded command:\n\n")
        body.append("  " + " ".join(cmd) + "\n\n", style="bold")
        body.append("The agent resumes: the steps in the journal are served from it. The supervisor keeps running when "
                    "you quit the dashboard; X stops it.")

        def done(ok: bool | None) -> None:
            if ok:
                self.start_again()

        from .confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen("Start the run again?", body, "Start"), done)

    @work(thread=True, exclusive=True, group="control", exit_on_error=False)
    def start_again(self) -> None:
        """Start ``supervise --run-dir`` detached (its own session, output to a file beside the run); wait until it
        answers on its socket or exits."""
        import subprocess
        import sys
        import time

        from .control import run_status as ask

        out_path = self.run_dir.parent / f".{self.run_dir.name}.supervise-output.log"
        cmd = [sys.executable, "-m", "supervisor", "supervise", "--run-dir", str(self.run_dir), "-q"]
        try:
            fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True)
            finally:
                os.close(fd)
        except OSError as e:
            self.app.call_from_thread(self.notify, f"cannot start supervise: {e}", severity="error", timeout=10)
            return
        self._start_proc = proc
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if ask(self.run_dir, timeout=0.5).live:
                break
            time.sleep(0.05)
        code = proc.poll()
        if code is not None and code != 0:
            why = _last_line(out_path) or f"exit code {code}"
            self.app.call_from_thread(self.notify, f"supervise did not start: {why}", severity="error", timeout=12)
        else:
            self.app.call_from_thread(self.notify, f"started again: supervisor pid {proc.pid} (output in {out_path})", timeout=8)
        self.files_changed()
        self.app.call_from_thread(self.timeline.action_bottom)
        self.app.call_from_thread(self.poll_status)


def _last_line(path: Path, limit: int = 4096) -> str:
    """The last non-empty line of a small output file (why a process exited), ``""`` if none."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            tail = f.read()
    except OSError:
        return ""
    lines = [ln for ln in tail.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""
