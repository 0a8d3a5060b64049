"""The workspace's changes as coloured text: the Files tab of a record, and the diff screen's Files tab.

Built in workers (they read the run's store); the widgets only show the ``Text``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from ..views.files import NO_WORKSPACE, FileChange, FilesEvent, RecordFiles, change_lines, has_workspace, merge
from ..views.fmt import fmt_bytes

if TYPE_CHECKING:
    from ..core.workspace import Change, SnapshotRef, Store
    from ..views.files import WorkspaceDiff

_OP_STYLE = {"created": "bold green", "changed": "bold yellow", "deleted": "bold red"}
MAX_LISTED = 300
"""Files of a snapshot listed before the rest is counted."""


def diff_line_style(line: str) -> str:
    """A unified diff line's colour, as the state diff's."""
    if line.startswith(("+++", "---")):
        return "bold"
    if line.startswith("@@"):
        return "cyan"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    return ""


def append_change(t: Text, change: FileChange | Change, lines: list[str]) -> None:
    """One file: its mark, path and operation, then its diff lines indented."""
    mark = {"created": "+", "changed": "~", "deleted": "-"}.get(change.op, "?")
    t.append(f"{mark} {change.path}", style=_OP_STYLE.get(change.op, "bold"))
    t.append(f"  {change.op}\n", style="dim")
    for line in lines:
        t.append(f"    {line}\n", style=diff_line_style(line))


def no_workspace_text(run_dir: Path) -> Text:
    return Text(f"this run {NO_WORKSPACE}", style="dim")


def record_files_text(store: Store, label: str, found: RecordFiles) -> Text:
    """The Files tab of a record: what its step changed (each file's diff), then what changed after it
    between steps; a concurrent attribution said, never hidden."""
    t = Text()
    step = merge(c for ev in found.step for c in ev.changes)
    between = merge(c for ev in found.between for c in ev.changes)
    if not step and not between:
        t.append(f"{label}: no file changed", style="dim")
        return t
    if not step:
        t.append(f"{label}: no file changed by its step\n\n", style="dim")
    else:
        t.append(f"{label}: {_files(len(step))} changed\n", style="bold")
        for ev in found.concurrent():
            t.append(concurrent_line(ev) + "\n", style="yellow")
        for c in step:
            append_change(t, c, change_lines(store, c))
    if between:
        if step:
            t.append("\n")
        t.append(f"after {label}, between steps (no step in flight): {_files(len(between))} changed\n", style="bold")
        for c in between:
            append_change(t, c, change_lines(store, c))
    return t


def concurrent_line(ev: FilesEvent) -> str:
    """A concurrent attribution said in a line: which files, which steps (never guessed apart)."""
    paths = ", ".join(c.path for c in ev.changes[:3]) + (f" and {len(ev.changes) - 3} more" if len(ev.changes) > 3 else "")
    steps = " and ".join(f"{n} #{p}" for n, p in ev.steps)
    return f"⚠ {paths}: changed while {steps} were in flight together (attributed to each)"


def snapshot_text(store: Store, ref: SnapshotRef, what: str) -> Text:
    """A snapshot's facts and its files (paths, sizes), as the Files tab of a checkpoint or rollback shows it."""
    t = Text()
    t.append(f"{what}: {_files(ref.files)}, {fmt_bytes(ref.bytes)} ({ref.stored} new object"
             f"{'s' if ref.stored != 1 else ''} stored, by {ref.by})\n", style="bold")
    try:
        files = store.manifest(ref.snapshot).files
    except (OSError, ValueError) as e:
        t.append(f"its manifest cannot be read: {e}\n", style="yellow")
        return t
    for i, (path, entry) in enumerate(sorted(files.items())):
        if i >= MAX_LISTED:
            t.append(f"  … and {len(files) - MAX_LISTED} more\n", style="dim")
            break
        t.append(f"  {path}", style="")
        t.append(f"  {_entry(entry)}\n", style="dim")
    return t


def _entry(e: Any) -> str:
    if e.t == "l":
        return f"→ {e.target}"
    if e.t == "d":
        return "empty directory"
    return fmt_bytes(e.size) + (" executable" if e.mode & 0o111 else "")


def workspace_diff_text(diff: WorkspaceDiff, label_a: str, label_b: str) -> Text:
    """The diff screen's Files tab: the summary, then each file's diff."""
    t = Text()
    t.append(f"workspace  {label_a}  →  {label_b}: {diff.summary}\n", style="bold")
    for change, lines in zip(diff.changes, diff.lines, strict=True):
        append_change(t, change, lines)
    return t


def _files(n: int) -> str:
    return f"{n} file{'s' if n != 1 else ''}"


LIMIT_TEXT = ("Side effects outside the workspace are not undone: network calls, databases, other directories, "
              "processes. Steps run again are at-least-once (idempotency keys).")
"""The honest limit, said wherever a rollback or a fork is offered."""


def no_workspace_rollback_text() -> Text:
    """The rollback dialog's paragraph on files for a run without a workspace (no worker needed)."""
    t = Text("\n")
    t.append("Files are not restored: this run has no workspace", style="bold")
    t.append(" (start it with supervise --workspace PATH to keep its files with its state). ")
    t.append("Nothing outside the journal is undone: files, network calls, databases.\n", style="dim")
    return t


def rollback_files_text(run_dir: Path, checkpoint_seq: int | None) -> Text:
    """The rollback dialog's paragraph on files: what the restore will change in the workspace (from
    ``workspace.pending_restore``: it reads the workspace), or why files are not restored; then the limit."""
    from ..core import workspace

    if not has_workspace(run_dir):
        return no_workspace_rollback_text()
    t = Text("\n")
    pending = workspace.pending_restore(run_dir, checkpoint_seq)
    if pending is None:
        t.append("Files are not restored: this checkpoint has no snapshot of the workspace", style="bold yellow")
        t.append(" (it was taken before the workspace was declared).\n")
    elif not pending:
        t.append("The workspace is as it was at the checkpoint: no file to restore.\n", style="bold")
    else:
        t.append(f"The workspace goes back to the checkpoint: {since_checkpoint(pending)} since it. ", style="bold")
        t.append("The files as they are now are kept first, as the abandoned branch's snapshot "
                 "('agent-supervisor files RUN --restore SEQ --to DIR' brings them back).\n")
    t.append(LIMIT_TEXT + "\n", style="dim")
    return t


def since_checkpoint(restore: list[Change]) -> str:
    """What changed since the checkpoint, in words, from what its restore does (the operations the other way
    round: a file the restore deletes was created since)."""
    from ..core import workspace

    back = {"created": "deleted", "deleted": "created"}
    return workspace.summary([workspace.Change(c.path, back.get(c.op, c.op), c.after, c.before) for c in restore])
