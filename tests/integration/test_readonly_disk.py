"""A disk that goes read-only under a threaded agent (real ext4 on a loop device, real processes).

ext4 is mounted ``errors=remount-ro``; a filesystem error (``trigger_fs_error``, as a failing disk
raises one) aborts its journal and makes it read-only while 8 threads commit steps and the journal
rotates. After ``e2fsck -fy`` and a new mount, every step acknowledged before the failure began is a
committed record. A step whose sync overlaps the failure is left out on purpose: ext4 can return 0
from an ``fdatasync`` whose transaction the abort dropped (the harness ``tests/bench/torture_readonly.py``
shows it for a plain write+fdatasync writer too), so no writer can promise that one.
Needs root and loop devices; skipped otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.core.journal_reader import JournalReader

from ..conftest import ROOT, clean_env, wait_for

THREADS = 8
ACKS_BEFORE_FAILURE = 150
ROTATE = 16384

# Each thread appends "A <step> <monotonic ns>" to the ACK file (another filesystem) once run.step returned,
# "E <step>" once the journal refused; the process ends when every thread has stopped.
AGENT = textwrap.dedent(
    """
    import os, sys, threading, time
    from supervisor import Run

    run_dir, ack, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fd = os.open(ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    run = Run.open(run_dir, rotate_bytes=int(sys.argv[4]))

    def worker(t):
        k = 0
        while True:
            name = f"s{t}-{k}"
            try:
                run.step(name, lambda t, k: f"{t}-{k}-" + "x" * 100, t, k)
            except BaseException as e:
                os.write(fd, f"E {name} {type(e).__name__}\\n".encode())
                return
            os.write(fd, f"A {name} {time.monotonic_ns()}\\n".encode())
            k += 1

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    os._exit(3)
    """
)


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=60)


def _can_loop() -> str:
    """Why this machine cannot run the test ('' if it can)."""
    if os.geteuid() != 0:
        return "needs root (loop devices, mount)"
    missing = [t for t in ("losetup", "mkfs.ext4", "e2fsck", "mount", "umount") if shutil.which(t) is None]
    if missing:
        return f"needs {', '.join(missing)}"
    if not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control)"
    return ""


class Ext4:
    """An ext4 image on a loop device, mounted ``errors=remount-ro``; :meth:`down` undoes whatever was done."""

    def __init__(self, base: Path) -> None:
        self.image, self.mnt, self.dev = base / "disk.img", base / "mnt", ""
        self.mnt.mkdir()

    def up(self) -> None:
        _sh("truncate", "-s", "32M", str(self.image))
        _sh("mkfs.ext4", "-q", "-F", str(self.image))
        self.attach()
        _sh("mount", "-o", "errors=remount-ro", self.dev, str(self.mnt))

    def attach(self) -> None:
        got = _sh("losetup", "-f", "--show", str(self.image), check=False)
        if got.returncode != 0:
            pytest.skip(f"cannot attach a loop device: {got.stderr.strip()}")
        self.dev = got.stdout.strip()

    def fail(self) -> None:
        """A filesystem error: ext4 aborts its journal and goes read-only (errors=remount-ro)."""
        Path(f"/sys/fs/ext4/{Path(self.dev).name}/trigger_fs_error").write_text("test_readonly_disk\n")

    def down(self) -> None:
        if os.path.ismount(self.mnt) and _sh("umount", str(self.mnt), check=False).returncode != 0:
            _sh("umount", "-l", str(self.mnt), check=False)  # busy: detached now, freed once the last user goes
        if self.dev:
            _sh("losetup", "-d", self.dev, check=False)
            self.dev = ""


@pytest.fixture
def ext4(tmp_path: Path) -> Iterator[Ext4]:
    why = _can_loop()
    if why:
        pytest.skip(why)
    disk = Ext4(tmp_path)
    try:
        disk.up()
        if not Path(f"/sys/fs/ext4/{Path(disk.dev).name}/trigger_fs_error").exists():
            pytest.skip("this kernel has no ext4 trigger_fs_error")
        yield disk
    finally:
        disk.down()


def _active_size(run_dir: Path) -> int:
    try:
        return (run_dir / "journal.jsonl").stat().st_size
    except FileNotFoundError:
        return 0


def _acks(ack: Path) -> list[list[str]]:
    return [line.split() for line in ack.read_text().splitlines()] if ack.exists() else []


def test_every_step_acknowledged_before_the_disk_went_read_only_is_in_the_journal_after_fsck(
    ext4: Ext4, tmp_path: Path
) -> None:
    ack = Path("/dev/shm" if os.path.isdir("/dev/shm") else tmp_path) / f"readonly-ack-{os.getpid()}-{time.time_ns()}"
    run_dir = ext4.mnt / "run"
    err = tmp_path / "agent.err"
    with err.open("wb") as stderr:
        agent = subprocess.Popen(
            [sys.executable, "-c", AGENT, str(run_dir), str(ack), str(THREADS), str(ROTATE)],
            env=clean_env(),
            cwd=ROOT,
            stderr=stderr,
        )
    try:
        # The failure comes with lines in the active file and a rotation not near: a writer that acknowledged
        # them before their sync loses them (no rotation's fsync covered them by chance).
        wait_for(
            lambda: (
                agent.poll() is not None
                or (
                    2048 <= _active_size(run_dir) <= ROTATE // 2
                    and sum(a[0] == "A" for a in _acks(ack)) >= ACKS_BEFORE_FAILURE
                )
            ),
            timeout=60,
            what=f"{ACKS_BEFORE_FAILURE} acknowledged steps",
        )
        assert agent.poll() is None, f"the agent stopped before the failure: {err.read_text()[-800:]}"
        t_fail = time.monotonic_ns()
        ext4.fail()
        # every thread's next step is refused: the agent ends by itself
        assert agent.wait(timeout=30) == 3, err.read_text()[-800:]
        lines = _acks(ack)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        ack.unlink(missing_ok=True)

    before = {a[1] for a in lines if a[0] == "A" and int(a[2]) < t_fail}
    refused = [a for a in lines if a[0] == "E"]
    assert len(before) >= ACKS_BEFORE_FAILURE
    assert len(refused) == THREADS and all(a[2] == "JournalError" for a in refused), refused

    ext4.down()
    fsck = _sh("e2fsck", "-fy", str(ext4.image), check=False)
    assert fsck.returncode in (0, 1), fsck.stdout + fsck.stderr  # 1: errors corrected
    ext4.attach()
    _sh("mount", "-o", "ro", ext4.dev, str(ext4.mnt))
    records = [r for r in JournalReader(run_dir).load() if isinstance(r, dict)]
    sealed = sorted(p.name for p in run_dir.glob("journal.0*.jsonl"))
    committed = {r["step"] for r in records if r.get("kind") == "step" and "output" in r}

    assert sealed, "the journal never rotated: the test would not cover the sealed segments"
    missing = sorted(before - committed)
    assert not missing, (
        f"{len(missing)} of {len(before)} steps acknowledged before the failure are not in the journal: {missing[:10]}"
    )
