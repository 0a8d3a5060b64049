"""Named checkpoints: full state snapshots written atomically as ``checkpoints/NNNN-<slug>.json``."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import orjson

from ..errors import CheckpointError
from . import rundir

_FILE_RE = re.compile(r"^(\d{4,})-(.+)\.json$")


def slugify(name: str) -> str:
    """A file-name-safe slug: ``../../etc/passwd`` becomes ``etc-passwd``; never leaves the directory."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower())
    slug = re.sub(r"-{2,}", "-", slug).strip(".-_")[:60]
    return slug or "checkpoint"


def checkpoint_dir(run_dir: Path) -> Path:
    return run_dir / rundir.CHECKPOINTS


def checkpoint_files(run_dir: Path) -> list[Path]:
    """Checkpoint files in number order."""
    d = checkpoint_dir(run_dir)
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), d / n) for n in names if (m := _FILE_RE.match(n))]
    return [p for _, p in sorted(found)]


def write_checkpoint(run_dir: Path, name: str, *, seq: int, pos: int, ts: str, state: Any) -> str:
    """Write a new checkpoint file; return its file name (relative to ``checkpoints/``).

    The number is one more than the highest present, so no file is ever overwritten.
    """
    d = rundir.ensure_dir(checkpoint_dir(run_dir))
    last = checkpoint_files(run_dir)
    number = int(_FILE_RE.match(last[-1].name).group(1)) + 1 if last else 1  # type: ignore[union-attr]
    fname = f"{number:04d}-{slugify(name)}.json"
    doc = {"name": name, "seq": seq, "pos": pos, "ts": ts, "format": rundir.FORMAT, "state": state}
    rundir.atomic_write(d / fname, orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS))
    return fname


def load_checkpoint(run_dir: Path, fname: str) -> dict[str, Any]:
    """A checkpoint file's document (name, seq, pos, ts, format, state)."""
    p = checkpoint_dir(run_dir) / Path(fname).name  # never follow a path out of checkpoints/
    try:
        doc = orjson.loads(p.read_bytes())
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {p} is missing; the state is rebuilt from the journal instead") from None
    except orjson.JSONDecodeError as e:
        raise CheckpointError(f"checkpoint file {p} is not valid JSON ({e})") from None
    if not isinstance(doc, dict) or "state" not in doc:
        raise CheckpointError(f"checkpoint file {p} has no 'state'")
    if doc.get("format", 1) > rundir.FORMAT:
        raise CheckpointError(f"checkpoint file {p} has a newer format; upgrade agent-supervisor")
    return doc
