"""A normal (non-editable) install into a fresh virtual environment: the demo runs headless far from the
source tree, and the clash with supervisord's ``supervisor`` package is said in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from ..conftest import ROOT, clean_env, niced


@dataclass
class Installed:
    venv: Path
    wheel: Path
    env: dict[str, str]
    work: Path

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, cwd=self.work, env=self.env, timeout=timeout)

    def pip(self, *args: str, nice: bool = False) -> None:
        argv = [self.python, "-m", "pip", "install", "-q", *args]
        r = subprocess.run(niced(argv) if nice else argv, capture_output=True, text=True, cwd=self.work, env=self.env, timeout=500)
        assert r.returncode == 0, r.stderr[-3000:]

    @property
    def exe(self) -> str:
        return str(self.venv / "bin" / "agent-supervisor")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def build(tmp: Path) -> Installed:
    """A fresh venv with the wheel built from a copy of the sources installed (about 25 s, mostly pip)."""
    # a copy of what a source distribution holds: building must not litter the work tree (build/, egg-info)
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "supervisor", src / "supervisor", ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheels = tmp / "wheels"
    r = subprocess.run(niced([str(venv / "bin" / "python"), "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)]),
                       capture_output=True, text=True, timeout=500)
    assert r.returncode == 0, r.stderr[-3000:]
    shutil.rmtree(src)  # nothing may come from the source tree any more
    (wheel,) = wheels.glob("*.whl")
    env = {k: v for k, v in clean_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    work = tmp / "elsewhere"
    work.mkdir()
    inst = Installed(venv, wheel, env, work)
    inst.pip(str(wheel), nice=True)
    return inst


class _Background:
    """``build`` in a thread, started at collection (``start_at_collection``): the install's ~25 s of pip
    overlaps the suite's other tests instead of adding to them."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="agent-supervisor-install-"))
        self.result: Installed | BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="install-build", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = build(self.tmp)
        except BaseException as e:  # handed to the fixture, which fails the tests with it
            self.result = e


_BUILD: list[_Background] = []


def start_at_collection() -> None:
    if not _BUILD:
        _BUILD.append(_Background())


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    start_at_collection()
    bg = _BUILD[0]
    bg.thread.join(timeout=560)
    try:
        if bg.thread.is_alive():
            pytest.fail("building and installing the wheel took over 560 s")
        if isinstance(bg.result, BaseException):
            raise bg.result
        assert bg.result is not None
        yield bg.result
    finally:
        if not bg.thread.is_alive():
            shutil.rmtree(bg.tmp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_non_editable_install_runs_the_demo_headless(installed: Installed) -> None:
    where = installed.run(installed.python, "-c", "import supervisor; print(supervisor.__file__)")
    assert where.returncode == 0 and "site-packages" in where.stdout, where
    demo = installed.run(installed.exe, "demo", "--no-tui", "--step-delay", "0")
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "attempt 1 exited with code 1 in step search:q2" in demo.stderr  # it crashed hard once
    assert "run succeeded after 2 attempt(s)" in demo.stderr  # and was resumed
    (run,) = (installed.work / "runs").iterdir()
    recs = [orjson.loads(line) for line in (run / "journal.jsonl").read_bytes().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "step" and "error" not in r][-3:] == ["search:q2", "summarize", "write_report"]
    runs = installed.run(installed.exe, "runs", "--json")
    assert runs.returncode == 0 and orjson.loads(runs.stdout)["status"] == "succeeded", runs


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_supervisord_installed_beside_it_is_said_in_one_line(installed: Installed) -> None:
    # supervisord after us: its supervisor/__init__.py replaces ours
    installed.pip("supervisor")
    r = installed.run(installed.exe, "--version")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "is supervisord's, not agent-supervisor's" in r.stderr and "virtual environment of its own" in r.stderr
    r = installed.run(installed.python, "-c", "from supervisor import Run")
    assert r.returncode != 0
    assert r.stderr.strip().splitlines()[-1].startswith("ImportError: the Python package 'supervisor' in ")  # not "cannot import name"
    r = installed.run(installed.python, "-m", "supervisor", "status", ".")
    assert r.returncode == 2 and "is supervisord's" in r.stderr and "Traceback" not in r.stderr
    # we after supervisord: ours wins, both work for now, and the command line warns (uninstalling either breaks the other)
    installed.pip("--force-reinstall", "--no-deps", str(installed.wheel))
    r = installed.run(installed.exe, "--version")
    assert r.returncode == 0 and r.stdout.startswith("agent-supervisor "), r.stderr
    assert "warning: supervisord's package shares" in r.stderr
    r = installed.run(installed.python, "-c", "from supervisor import Run; print(Run.__name__)")
    assert r.returncode == 0 and r.stdout.strip() == "Run", r.stderr
