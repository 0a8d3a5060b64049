"""Shipped files hold no path of the machine that built them, and the sample runs replay from anywhere.

The sample runs in ``sample_runs/runs/`` once recorded the build machine's venv
python, so ``replay sample_runs/runs/clean --verify`` failed on every other
machine. ``sample_runs/make_samples.py`` now records portable commands; these
tests scan what is shipped, and replay a copy of ``sample_runs/`` with another
interpreter from another directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from ..conftest import ROOT, clean_env

SHIPPED = [ROOT / "sample_runs", ROOT / "supervisor"]
"""The sample runs and agents, and the package with its data (``py.typed``, ``*.tcss``)."""

# an absolute path under a directory that exists only on some machine, not preceded by a path or word character
_ABSOLUTE = re.compile(rb"(?<![\w.~-])/(?:work|home|tmp|root|usr|opt|var|srv|mnt|Users)(?:/|\b)")


def _machine_paths() -> re.Pattern[bytes]:
    """This machine's own paths: the repository, the cwd, the venv, the interpreter, home and the temp dir."""
    paths = {ROOT, Path.cwd(), Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent,
             Path(sysconfig.get_paths()["purelib"]), Path.home(), Path(tempfile.gettempdir())}
    alts = b"|".join(re.escape(str(p).encode()) for p in sorted(paths, key=lambda p: -len(str(p))) if len(p.parts) > 1)
    return re.compile(rb"(?<![\w.~-])(?:" + alts + rb")(?![\w.-])")


def absolute_paths(root: Path) -> list[str]:
    """``file: match`` for every absolute path found in the files under ``root`` (bytecode caches left out)."""
    found: list[str] = []
    mine = _machine_paths()
    for p in sorted(root.rglob("*")):
        if not p.is_file() or "__pycache__" in p.parts:
            continue
        data = p.read_bytes()
        hits = [m.group().decode(errors="replace") for r in (_ABSOLUTE, mine) for m in r.finditer(data)]
        found += [f"{p.relative_to(root.parent)}: {h}" for h in hits]
    return found


@pytest.mark.parametrize("root", SHIPPED, ids=lambda p: p.name)
def test_no_shipped_file_holds_an_absolute_path(root: Path) -> None:
    assert (root / "runs" / "clean" / "run.json").exists() if root.name == "sample_runs" else (root / "py.typed").exists()
    assert absolute_paths(root) == [], "regenerate with .venv/bin/python sample_runs/make_samples.py, or make the path relative"


@pytest.mark.parametrize(
    "text",
    [b'{"cwd": "/work/main"}', b"File \"/usr/lib/python3.11/x.py\"", b"/tmp", b"cmd: /home/me/.venv/bin/python",
     str(ROOT).encode() + b"/x", os.getcwd().encode(), sys.executable.encode()],
)
def test_the_scan_finds_absolute_paths(tmp_path: Path, text: bytes) -> None:
    """The scan above can fail: each shape it looks for is found."""
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "f.json").write_bytes(b"x " + text + b" y")
    assert absolute_paths(tmp_path / "shipped")


def test_the_scan_leaves_relative_paths_and_urls_alone(tmp_path: Path) -> None:
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "f.txt").write_bytes(b'.venv/bin/python sample_runs/x.py https://example.invalid/usr/x "../.." a/tmp/b')
    assert absolute_paths(tmp_path / "shipped") == []


def _other_python(tmp_path: Path) -> Path:
    """A Python at another path: a new venv (no pip) that sees this venv's packages through a ``.pth`` file."""
    venv = tmp_path / "other-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60, env=clean_env())
    purelib = Path(subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout.strip())
    # addsitedir, not a bare path: the editable install of this package is itself a .pth file there
    (purelib / "outer.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    return venv / "bin" / "python"


@pytest.mark.timeout(60)
def test_sample_runs_replay_from_a_copy_with_another_python_and_cwd(tmp_path: Path) -> None:
    """The README's ``agent-supervisor replay sample_runs/runs/clean --verify``, from a copy elsewhere, without ``-- CMD``."""
    copy = tmp_path / "elsewhere"
    shutil.copytree(ROOT / "sample_runs", copy / "sample_runs", ignore=shutil.ignore_patterns("__pycache__"))
    python = _other_python(tmp_path)
    env = clean_env()
    # nothing of the build's venv on PATH: a recorded 'python' must not depend on it
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix))
    for name in ("clean", "crashed-resumed", "rolled-back"):
        run_dir = copy / "sample_runs" / "runs" / name
        before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
        r = subprocess.run(
            [str(python), "-m", "supervisor", "replay", f"sample_runs/runs/{name}", "--verify"],
            cwd=copy, env=env, capture_output=True, text=True, timeout=30,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.splitlines()[-1].startswith("replay verified: 5 of 5 steps replayed"), r.stdout
        assert f"replaying with the recorded command: {python} research_agent.py" in r.stderr
        assert f"(in {copy / 'sample_runs'})" in r.stderr  # the copy's agent, not the repository's
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    # a partial replay too: the live model call goes to the scratch copy's ledger, and replay says so
    r = subprocess.run(
        [str(python), "-m", "supervisor", "replay", str(copy / "sample_runs/runs/rolled-back"), "--live", "summarize"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "live step 'summarize' at position 3" in r.stdout
    assert "warning: the agent changed ledger.jsonl in its run directory" in r.stdout
