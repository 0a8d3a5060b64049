"""Torture: a threaded agent's disk fails under it; is every step it was told is durable still in the journal?

Each round: an ext4 image on a loop device (image on /dev/shm), a threaded agent (``--threads`` threads,
``run.step`` in a loop, a small ``rotate_bytes`` so segments rotate) whose run directory is on it; each
thread appends the step's name to an ACK file on another filesystem (tmpfs, O_APPEND) right after
``run.step`` returns. After a random number of acknowledged steps the filesystem fails in one of the
``--modes``; the agent is then killed, the filesystem unmounted, read once as it is (the kernel replays its
journal at mount) and once after ``e2fsck -fy``; every acknowledged step must be a committed step record in
a segment of the journal. A round that loses one keeps its files (images before and after fsck, e2fsck's
output, the ACK file, the kernel log) under ``--keep``.

Exit status 1 only if a step acknowledged *before* the failure began is lost: that is the writer's doing.
A step acknowledged after it began, released by a sync that overlapped the failure, can be lost by any
writer (ext4 returns 0 from such an fdatasync; ``--writer raw`` shows it for a plain write+fdatasync).

Modes: ``fserror`` (ext4 ``trigger_fs_error`` with errors=remount-ro), ``remount`` (``mount -o remount,ro``:
refused with EBUSY while the journal is open for writing; then only the kill), ``shutdown`` (the
EXT4_IOC_SHUTDOWN ioctl, NOLOGFLUSH: the disk goes away, uncommitted transactions are dropped), ``ioerr``
(the image's own tmpfs fills: the loop device's writes fail with an I/O error, as a failing disk's do),
``setro`` (``blockdev --setro`` of the loop device: a loop device goes on writing, nothing fails).
Needs root and loop devices; everything is made under /tmp/torture-ro-h<pid> and /dev/shm, and undone.

    sudo .venv/bin/python tests/bench/torture_readonly.py --rounds 25 --modes fserror,shutdown,ioerr
"""

from __future__ import annotations

import argparse
import fcntl
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXT4_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
SHUTDOWN_NOLOGFLUSH = 2
MODES = ("fserror", "remount", "shutdown", "ioerr", "setro")


# --------------------------------------------------------------------------- the agent (a child process)


def _trace_syncs(ack: int) -> None:
    """Log each journal sync to the ACK file: ``S <name> <fd> <start ns> <end ns> <errno or 0>`` (monotonic
    clock, the harness logs the failure on the same clock), to tell which sync an acknowledged step trusted."""
    now = time.monotonic_ns

    def traced(real: Callable[[int], None], name: str) -> Callable[[int], None]:
        def sync(f: int) -> None:
            t0 = now()
            try:
                real(f)
            except OSError as e:
                os.write(ack, f"S {name} {f} {t0} {now()} {e.errno}\n".encode())
                raise
            os.write(ack, f"S {name} {f} {t0} {now()} 0\n".encode())

        return sync

    setattr(os, "fdatasync", traced(os.fdatasync, "fdatasync"))  # noqa: B010 (before the writer picks it)
    setattr(os, "fsync", traced(os.fsync, "fsync"))  # noqa: B010


class RawJournal:
    """The plainest durable writer there is, to compare with: each step's line written and fdatasynced under
    one lock (no group commit, no rotation), in the minimal journal's shape ``{"step": ..., "output": ...}``."""

    def __init__(self, run_dir: str) -> None:
        os.makedirs(run_dir, mode=0o700, exist_ok=True)
        self.fd = os.open(os.path.join(run_dir, "journal.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        dfd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dfd)
        os.close(dfd)
        self.lock = threading.Lock()

    def step(self, name: str, fn: Callable[..., str], *args: object) -> str:
        out = fn(*args)
        line = f'{{"step": "{name}", "output": "{out}"}}\n'.encode()
        with self.lock:
            os.write(self.fd, line)
            os.fdatasync(self.fd)
        return out


def agent(run_dir: str, ack: str, threads: int, rotate: int, writer: str, trace: bool = True) -> None:
    """Steps from ``threads`` threads until the journal fails; each acknowledged step is appended to ``ack``.
    ``writer``: ``sdk`` (``run.step``) or ``raw`` (:class:`RawJournal`)."""
    sys.path.insert(0, str(ROOT))
    from supervisor import Run

    fd = os.open(ack, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    ack_sync = os.fdatasync
    if trace:
        _trace_syncs(fd)
    run: Run | RawJournal = Run.open(run_dir, rotate_bytes=rotate) if writer == "sdk" else RawJournal(run_dir)
    pad = "x" * 120  # a few lines per KiB: rotations come often

    def work(t: int, k: int) -> str:
        return f"{t}-{k}-{pad}"

    def worker(t: int) -> None:
        k = 0
        while True:
            name = f"s{t}-{k}"
            try:
                run.step(name, work, t, k)
            except BaseException as e:  # the journal broke: this thread stops, the step is not acknowledged
                os.write(fd, f"E {name} {type(e).__name__}: {str(e)[:160]}\n".encode())
                return
            # one write, O_APPEND: whole lines even from 16 threads; the time tells it from the failure's
            os.write(fd, f"A {name} {time.monotonic_ns()}\n".encode())
            ack_sync(fd)
            k += 1

    ts = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    os._exit(3)  # every thread saw the failure; no close (it would try to write)


# --------------------------------------------------------------------------- the harness (root)


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=check)


@dataclass
class Disk:
    """An ext4 image on a loop device, mounted; the image lives in a small tmpfs of its own (for ``ioerr``)."""

    base: Path
    image: Path = field(init=False)
    mnt: Path = field(init=False)
    tmpfs: Path = field(init=False)
    dev: str = ""

    def __post_init__(self) -> None:
        self.tmpfs = self.base / "img"
        self.image = self.tmpfs / "disk.img"
        self.mnt = self.base / "mnt"

    def up(self, size_mb: int) -> None:
        self.tmpfs.mkdir(parents=True, exist_ok=True)
        self.mnt.mkdir(parents=True, exist_ok=True)
        sh("mount", "-t", "tmpfs", "-o", f"size={size_mb + 8}m", "torture-ro-img", str(self.tmpfs))
        sh("truncate", "-s", f"{size_mb}M", str(self.image))
        sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(self.image))
        self.dev = sh("losetup", "-f", "--show", str(self.image)).stdout.strip()
        sh("blockdev", "--setrw", self.dev)  # a loop device detached while read-only stays so
        sh("mount", "-o", "errors=remount-ro", self.dev, str(self.mnt))

    def umount(self) -> None:
        if os.path.ismount(self.mnt):
            sh("umount", str(self.mnt))

    def detach(self) -> None:
        sh("blockdev", "--setrw", self.dev, check=False)
        sh("losetup", "-d", self.dev)
        self.dev = ""

    def down(self) -> None:
        """Unmount and detach what ``up`` made (whatever state it is in)."""
        if os.path.ismount(self.mnt):
            sh("umount", str(self.mnt), check=False)
            if os.path.ismount(self.mnt):
                sh("umount", "-l", str(self.mnt), check=False)
        if self.dev:
            sh("blockdev", "--setrw", self.dev, check=False)  # the flag outlives the detach (setro)
            sh("losetup", "-d", self.dev, check=False)
            self.dev = ""
        if os.path.ismount(self.tmpfs):
            sh("umount", str(self.tmpfs), check=False)


def fail(disk: Disk, mode: str) -> str:
    """Make the mounted filesystem fail in ``mode``; what happened, in a few words."""
    if mode == "fserror":
        Path(f"/sys/fs/ext4/{Path(disk.dev).name}/trigger_fs_error").write_text("torture_readonly\n")
        return "trigger_fs_error"
    if mode == "remount":
        r = sh("mount", "-o", "remount,ro", str(disk.mnt), check=False)
        return "remounted ro" if r.returncode == 0 else f"remount refused: {r.stderr.strip()[-60:]}"
    if mode == "shutdown":
        fd = os.open(disk.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, SHUTDOWN_NOLOGFLUSH.to_bytes(4, sys.byteorder))
        finally:
            os.close(fd)
        return "shutdown nologflush"
    if mode == "ioerr":
        free = shutil.disk_usage(disk.tmpfs).free
        sh("fallocate", "-l", str(free), str(disk.tmpfs / "filler"), check=False)
        return f"backing store full ({free >> 10} KiB taken)"
    if mode == "setro":
        sh("blockdev", "--setro", disk.dev)
        return "blockdev --setro"
    raise ValueError(mode)


def committed_steps(run_dir: Path) -> tuple[set[str], list[str]]:
    """The names of the step records (with an output) in every segment, and the problems the reader reported."""
    from supervisor.core.journal_reader import JournalReader

    names: set[str] = set()
    problems: list[str] = []
    if not run_dir.exists():
        return names, ["no run directory"]
    try:
        for r in JournalReader(run_dir).load():
            if isinstance(r, dict):
                if r.get("kind", "step") == "step" and "output" in r:
                    names.add(str(r.get("step")))
            else:
                problems.append(str(r)[:200])
    except Exception as e:  # a journal the reader refuses is a finding, reported with the round
        problems.append(f"{type(e).__name__}: {e}")
    return names, problems


def acked(ack: Path) -> tuple[dict[str, int], list[str]]:
    """The acknowledged steps (name: monotonic ns of the acknowledgement) and the refusals, from the ACK file."""
    lines = ack.read_text().splitlines() if ack.exists() else []
    return {p[1]: int(p[2]) for ln in lines if (p := ln.split())[0] == "A"}, [ln for ln in lines if ln.startswith("E ")]


def released_by(ack_lines: list[str], at: int) -> str:
    """The last successful sync that returned before ``at`` (an acknowledgement), relative to the failure."""
    f0 = next(int(ln.split()[2]) for ln in ack_lines if ln.startswith("F "))
    syncs = [p for ln in ack_lines if (p := ln.split())[0] == "S" and p[5] == "0" and int(p[4]) <= at]
    if not syncs:
        return "no traced sync"
    s = max(syncs, key=lambda p: int(p[4]))
    return f"{s[1]} fd{s[2]} from {(int(s[3]) - f0) / 1e6:+.3f} to {(int(s[4]) - f0) / 1e6:+.3f} ms, returned 0"


@contextmanager
def mounted(dev_or_image: str, mnt: Path, *opts: str) -> Iterator[Path]:
    sh("mount", *opts, dev_or_image, str(mnt))
    try:
        yield mnt
    finally:
        sh("umount", str(mnt), check=False)


def wait_for(cond: Callable[[], object], timeout: float) -> bool:
    """Poll ``cond`` (a file's content, a process's end) until it holds; False after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return False


def read_back(img: Path, mnt: Path) -> tuple[set[str], list[str]]:
    dev = sh("losetup", "-f", "--show", str(img)).stdout.strip()
    try:
        with mounted(dev, mnt, "-o", "ro"):
            return committed_steps(mnt / "run")
    finally:
        sh("losetup", "-d", dev, check=False)


@dataclass
class Round:
    mode: str
    what: str = ""
    acked: int = 0
    errors: int = 0
    before_fsck: int = 0
    after_fsck: int = 0
    missing_before: list[str] = field(default_factory=list)
    missing_after: list[str] = field(default_factory=list)
    lost_early: list[str] = field(default_factory=list)
    """Lost steps acknowledged before the failure began: a sync that returned before it lied, or none was made."""
    fsck_rc: int = 0
    exit: str = ""


def run_agent_until_failure(
    disk: Disk, mode: str, ack: Path, work: Path, target: int, args: argparse.Namespace
) -> Round:
    rd = Round(mode)
    run_dir = disk.mnt / "run"
    cmd = [
        sys.executable,
        __file__,
        "--agent",
        str(run_dir),
        str(ack),
        str(args.threads),
        str(args.rotate),
        args.writer,
    ]
    with open(work / "agent.err", "wb") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)

    def count() -> int:
        try:
            return ack.read_bytes().count(b"\nA ") + 1
        except FileNotFoundError:
            return 0

    try:
        if not wait_for(lambda: count() >= target or proc.poll() is not None, 60):
            raise RuntimeError("the agent made no progress in 60 s")
        t0 = time.monotonic_ns()
        rd.what = fail(disk, mode)
        with open(ack, "a") as f:
            f.write(f"F {mode} {t0} {time.monotonic_ns()}\n")
        wait_for(lambda: proc.poll() is not None, args.grace)
    finally:
        if proc.poll() is None:
            proc.kill()
        rd.exit = str(proc.wait())
    if proc.returncode not in (3, -9):
        raise RuntimeError(f"the agent failed ({proc.returncode}): {(work / 'agent.err').read_text()[-400:]}")
    return rd


def one_round(base: Path, mode: str, rng: random.Random, args: argparse.Namespace, n: int) -> Round:
    disk = Disk(base)
    ack = Path(f"/dev/shm/torture-ro-ack-{os.getpid()}-{n}")
    ack.unlink(missing_ok=True)
    work = Path(f"/dev/shm/torture-ro-work-{os.getpid()}")  # images are copied here: memory, not the machine's disk
    work.mkdir(parents=True, exist_ok=True)
    scratch = base / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    dmesg_mark = sh("dmesg").stdout.count("\n")
    try:
        disk.up(args.size_mb)
        rd = run_agent_until_failure(disk, mode, ack, work, rng.randint(args.min_acks, args.max_acks), args)
        disk.umount()
        shutil.copyfile(disk.image, work / "failed.img")  # the image as the failure left it (journal not replayed)
        shutil.copyfile(disk.image, work / "mounted.img")  # replayed by the kernel's mount in read_back
        disk.detach()
        acks, errs = acked(ack)
        rd.acked, rd.errors = len(acks), len(errs)
        before, _ = read_back(work / "mounted.img", scratch)
        fsck = sh("e2fsck", "-fy", str(disk.image), check=False)
        rd.fsck_rc = fsck.returncode
        (work / "e2fsck.txt").write_text(fsck.stdout + fsck.stderr)
        after, problems = read_back(disk.image, scratch)
        rd.before_fsck, rd.after_fsck = len(before), len(after)
        rd.missing_before = sorted(set(acks) - before)
        rd.missing_after = sorted(set(acks) - after)
        if rd.missing_before or rd.missing_after:
            lines = ack.read_text().splitlines()
            f0 = next(int(ln.split()[2]) for ln in lines if ln.startswith("F "))
            lost = sorted(set(rd.missing_before) | set(rd.missing_after), key=acks.__getitem__)
            rd.lost_early = [m for m in lost if acks[m] < f0]
            keep = Path(args.keep) / f"round-{n:03d}-{mode}"
            keep.mkdir(parents=True, exist_ok=True)
            for name in ("failed.img", "mounted.img", "e2fsck.txt", "agent.err"):
                shutil.copyfile(work / name, keep / name)
            shutil.copyfile(disk.image, keep / "after-fsck.img")
            shutil.copyfile(ack, keep / "ack.txt")
            (keep / "dmesg.txt").write_text("\n".join(sh("dmesg").stdout.splitlines()[dmesg_mark:]))
            why = [
                f"{m} acknowledged at {(acks[m] - f0) / 1e6:+.3f} ms, after {released_by(lines, acks[m])}" for m in lost
            ]
            (keep / "round.txt").write_text(f"{rd}\nreader problems: {problems}\n" + "\n".join(why) + "\n")
        return rd
    finally:
        disk.down()
        shutil.rmtree(work, ignore_errors=True)
        ack.unlink(missing_ok=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--modes", default="fserror,shutdown,ioerr,remount,setro")
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--rotate", type=int, default=16 * 1024, help="rotate_bytes of the agent's journal")
    ap.add_argument("--min-acks", type=int, default=50)
    ap.add_argument("--max-acks", type=int, default=1500)
    ap.add_argument("--grace", type=float, default=3.0, help="seconds the agent gets to stop before kill -9")
    ap.add_argument("--size-mb", type=int, default=48)
    ap.add_argument("--keep", default="/tmp/torture-ro-kept")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--writer", choices=("sdk", "raw"), default="sdk", help="raw: a plain write+fdatasync per step")
    ap.add_argument("--agent", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.agent:
        agent(args.agent[0], args.agent[1], int(args.agent[2]), int(args.agent[3]), args.agent[4])
        return 0
    if os.geteuid() != 0:
        print("torture_readonly: needs root (loop devices, mount)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    modes = args.modes.split(",")
    base = Path(f"/tmp/torture-ro-h{os.getpid()}")
    tally: Counter[tuple[str, str]] = Counter()
    print(
        f"seed {seed}; {args.rounds} rounds of {modes}, {args.threads} threads, rotate_bytes {args.rotate}, "
        f"writer {args.writer}"
    )
    try:
        for n in range(args.rounds):
            mode = modes[n % len(modes)]
            rd = one_round(base, mode, rng, args, n)
            report(n, rd, tally)
    finally:
        if not any(os.path.ismount(p) for p in base.glob("*")):
            shutil.rmtree(base, ignore_errors=True)
    print("mode      rounds  losing  steps lost  of them acknowledged before the failure began")
    for mode in modes:
        t = {k: tally[(mode, k)] for k in ("rounds", "losing", "lost", "early")}
        print(f"{mode:8s}  {t['rounds']:6d}  {t['losing']:6d}  {t['lost']:10d}  {t['early']:d}")
    return 1 if any(tally[(m, "early")] for m in modes) else 0


def report(n: int, rd: Round, tally: Counter[tuple[str, str]]) -> None:
    """One line per round, and the counts per mode."""
    lost = set(rd.missing_after) | set(rd.missing_before)
    verdict = f"LOST {len(lost)} ({len(rd.lost_early)} acknowledged before the failure)" if lost else "ok"
    print(
        f"{n:3d} {rd.mode:8s} {rd.what[:40]:40s} acked {rd.acked:5d} refused {rd.errors:2d} "
        f"journal {rd.before_fsck:5d}/{rd.after_fsck:5d} (mounted/after fsck) fsck rc {rd.fsck_rc} "
        f"exit {rd.exit:>3s} {verdict}",
        flush=True,
    )
    tally[(rd.mode, "rounds")] += 1
    tally[(rd.mode, "losing")] += bool(lost)
    tally[(rd.mode, "lost")] += len(lost)
    tally[(rd.mode, "early")] += len(rd.lost_early)


if __name__ == "__main__":
    sys.exit(main())
