"""Named checkpoints: full state snapshots written atomically as ``checkpoints/NNNN-<slug>.json``."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import orjson

from ..errors import CheckpointError, RunDirError
from . import rundir
from .journal_reader import JournalReader
from .records import Kind

_FILE_RE = re.compile(r"^(\d{4,})-(.+)\.json$")
_TMP_RE = re.compile(r"^\.\d{4,}-.+\.json\.(\d+)\.[0-9a-f]+\.tmp$")
"""``rundir.atomic_write``'s temporary name for a checkpoint file: ``.0003-plan-done.json.<pid>.<hex>.tmp``."""
_ORPHAN_LOOKBACK = 1024
"""Records from the journal's end within which a killed write's seq is looked for."""


def slugify(name: str) -> str:
    """A file-name-safe slug: ``../../etc/passwd`` becomes ``etc-passwd``; never leaves the directory."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower())
    slug = re.sub(r"-{2,}", "-", slug).strip(".-_")[:60]
    return slug or "checkpoint"


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / rundir.CHECKPOINTS


def _file_number(p: Path) -> int:
    """The number a checkpoint file's name starts with (``0007-name.json`` -> 7)."""
    m = _FILE_RE.match(p.name)
    assert m is not None, p  # checkpoint_files lists only names that match
    return int(m.group(1))


def checkpoint_files(run_dir: Path) -> list[Path]:
    """Checkpoint files in number order."""
    d = checkpoint_dir(run_dir)
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), d / n) for n in names if (m := _FILE_RE.match(n))]
    return [p for _, p in sorted(found)]


def _tmp_pid(name: str) -> int | None:
    """The writer's pid of a temporary checkpoint file (``atomic_write``'s ``.NNNN-slug.json.PID.HEX.tmp``), else ``None``."""
    m = _TMP_RE.match(name)
    return int(m.group(1)) if m else None


def clean_stale_tmp(run_dir: Path) -> list[str]:
    """Delete the temporary files a killed checkpoint write left in ``checkpoints/``; return their names.

    Only files named as :func:`write_checkpoint` names its temporary files, and
    only those whose writer process is gone (a live one may be writing it).
    """
    d = checkpoint_dir(run_dir)
    try:
        names = os.listdir(d)
    except (FileNotFoundError, NotADirectoryError):
        return []
    gone: list[str] = []
    for n in names:
        pid = _tmp_pid(n)
        if pid is None or (pid != os.getpid() and _alive(pid)):
            continue
        try:
            (d / n).unlink()
        except FileNotFoundError:
            continue
        gone.append(n)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _orphan(run_dir: Path, last: Path, name: str, pos: int, seq: int) -> bool:
    """Whether ``last`` is the file of this same checkpoint (name and pos) whose record was never written.

    A write killed between the file and its journal record leaves such a file;
    the resumed agent writes the checkpoint again, and it takes that file's name
    instead of a second one. Its record would have had the seq in the file: the
    journal's record at that seq (a few lines from the end) is something else
    (the next attempt's ``start``). A file a record names is never reused.
    """
    try:
        doc = orjson.loads(rundir.read_run_file(last))
    except (OSError, RunDirError, orjson.JSONDecodeError):
        return False
    if not isinstance(doc, dict) or doc.get("name") != name or doc.get("pos") != pos:
        return False
    at = doc.get("seq")
    if type(at) is not int or not 0 <= at < seq or seq - at > _ORPHAN_LOOKBACK:
        return False
    for e in JournalReader(run_dir).tail(seq - at):
        if isinstance(e, dict) and e.get("seq") == at:
            return not (e.get("kind") == Kind.CHECKPOINT and e.get("file") == last.name)
    return False


def write_checkpoint(run_dir: Path, name: str, *, seq: int, pos: int, ts: str, state: Any) -> str:
    """Write the checkpoint file for the record at ``seq``; return its file name (relative to ``checkpoints/``).

    The number is one more than the highest present, so no file a record names is
    ever overwritten; a write killed before its record (the file written, the
    record not) is written again under the same name, so one checkpoint record has
    one file. Atomic: temporary file, fsync, rename, fsync of the directory; the
    temporary files of killed writes are deleted first.
    """
    d = rundir.ensure_dir(checkpoint_dir(run_dir))
    clean_stale_tmp(run_dir)
    last = checkpoint_files(run_dir)
    if last and _orphan(run_dir, last[-1], name, pos, seq):
        fname = last[-1].name
    else:
        number = _file_number(last[-1]) + 1 if last else 1
        fname = f"{number:04d}-{slugify(name)}.json"
    doc = {"name": name, "seq": seq, "pos": pos, "ts": ts, "format": rundir.FORMAT, "state": state}
    rundir.atomic_write(d / fname, orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS))
    return fname


def load_checkpoint(run_dir: Path, fname: str) -> dict[str, Any]:
    """A checkpoint file's document (name, seq, pos, ts, format, state)."""
    p = checkpoint_dir(run_dir) / Path(fname).name  # never follow a path out of checkpoints/
    try:
        doc = orjson.loads(rundir.read_run_file(p))  # no symlink, no other user's file
    except RunDirError as e:
        raise CheckpointError(str(e)) from None
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {p} is missing; the state is rebuilt from the journal instead") from None
    except orjson.JSONDecodeError as e:
        raise CheckpointError(f"checkpoint file {p} is not valid JSON ({e})") from None
    except OSError as e:
        raise CheckpointError(f"checkpoint file {p} cannot be read ({e.strerror})") from None
    if not isinstance(doc, dict) or "state" not in doc:
        raise CheckpointError(f"checkpoint file {p} has no 'state'")
    fmt = doc.get("format", 1)
    if type(fmt) is not int:
        raise CheckpointError(f"checkpoint file {p} is damaged: its 'format' is {fmt!r}, not a number")
    if fmt > rundir.FORMAT:
        raise CheckpointError(f"checkpoint file {p} has a newer format ({fmt}); upgrade agent-supervisor")
    return doc
