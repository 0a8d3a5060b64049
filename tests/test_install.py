"""A normal (non-editable) install into a fresh virtual environment runs the demo headless, far from the source tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from .conftest import ROOT, clean_env


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_non_editable_install_runs_the_demo_headless(tmp_path: Path) -> None:
    # a copy of what a source distribution holds: building must not litter the work tree (build/, egg-info)
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "supervisor", src / "supervisor", ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(src)],
                         capture_output=True, text=True, timeout=500)
    assert pip.returncode == 0, pip.stderr[-3000:]
    shutil.rmtree(src)  # nothing may come from the source tree any more

    env = {k: v for k, v in clean_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import supervisor; print(supervisor.__file__)"],
                           capture_output=True, text=True, cwd=work, env=env, timeout=60)
    assert where.returncode == 0 and "site-packages" in where.stdout, where

    exe = str(venv / "bin" / "agent-supervisor")
    demo = subprocess.run([exe, "demo", "--no-tui", "--step-delay", "0"], capture_output=True, text=True,
                          cwd=work, env=env, timeout=120)
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "attempt 1 exited with code 1 in step search:q2" in demo.stderr  # it crashed hard once
    assert "run succeeded after 2 attempt(s)" in demo.stderr  # and was resumed
    (run,) = (work / "runs").iterdir()
    recs = [orjson.loads(line) for line in (run / "journal.jsonl").read_bytes().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "step" and "error" not in r][-3:] == ["search:q2", "summarize", "write_report"]
    # and the installed command's other entry points
    runs = subprocess.run([exe, "runs", "--json"], capture_output=True, text=True, cwd=work, env=env, timeout=60)
    assert runs.returncode == 0 and orjson.loads(runs.stdout)["status"] == "succeeded", runs
