"""The price table is loaded only when a figure is shown, and once per machine: ``status``, ``log`` and ``cost``
read the price cache after that, with the same figures as genai-prices' first answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from ..conftest import ROOT, clean_env

AGENT = ROOT / "tests" / "integration" / "usage_agent.py"

# runs the CLI in-process, then says whether genai-prices was imported (on the last line)
CLI = (
    "import sys\n"
    "from supervisor.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print('genai_prices imported:', 'genai_prices' in sys.modules)\n"
    "sys.exit(code)\n"
)


@pytest.fixture(scope="module")
def usage_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of the usage agent: four model calls (one of a model no table prices) and a tool call."""
    run = tmp_path_factory.mktemp("usage") / "run"
    r = subprocess.run([sys.executable, str(AGENT), str(run)], capture_output=True, text=True, env=clean_env(), timeout=30)
    assert r.returncode == 0, r.stderr
    return run


def _cli(cache: Path, *argv: str) -> tuple[list[str], bool]:
    """The command's output lines, and whether it imported genai-prices."""
    env = {**clean_env(), "XDG_CACHE_HOME": str(cache)}
    r = subprocess.run([sys.executable, "-c", CLI, *argv], capture_output=True, text=True, env=env, timeout=30, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    *lines, last = r.stdout.splitlines()
    return lines, last.endswith("True")


def test_status_imports_genai_prices_once_per_machine_with_the_same_figures(usage_run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold, imported = _cli(cache, "status", str(usage_run), "--json")
    assert imported  # the first status on this machine asks genai-prices ...
    assert (cache / "agent-supervisor" / "prices.json").is_file()  # ... and keeps its answers
    warm, imported = _cli(cache, "status", str(usage_run), "--json")
    assert not imported  # the next ones read them
    a, b = orjson.loads(cold[0]), orjson.loads(warm[0])
    assert a["cost_usd"] is not None and a["cost_usd"] == b["cost_usd"] and a["saved_cost_usd"] == b["saved_cost_usd"]
    assert a["unpriced_steps"] == b["unpriced_steps"] == 1  # local-llama: still no price, from the cache too
    # cost prints the same figures (it imports genai-prices to say whether it is installed)
    costs, _ = _cli(cache, "cost", str(usage_run), "--json")
    assert orjson.loads("\n".join(costs))["total"]["cost_usd"] == a["cost_usd"]


def test_a_cache_of_another_table_is_not_read(usage_run: Path, tmp_path: Path) -> None:
    """A cache written for another genai-prices (its key differs) is made again, never used for a figure."""
    cache = tmp_path / "cache"
    path = cache / "agent-supervisor" / "prices.json"
    path.parent.mkdir(parents=True)
    wrong = [[None, [], 0.0, [[1.0, 1.0, 1.0]]]]  # a dollar a token
    path.write_bytes(orjson.dumps({"key": "another table", "entries": {"openai\ngpt-4o": wrong}}))
    lines, imported = _cli(cache, "status", str(usage_run), "--json")
    assert imported and orjson.loads(lines[0])["cost_usd"] < 1.0
    assert orjson.loads(path.read_bytes())["key"] != "another table"


def test_status_and_log_load_no_prices_when_no_cost_is_shown(usage_run: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # empty: a price would have to import genai-prices
    no_usage = ROOT / "sample_runs" / "runs" / "clean"  # recorded without usage (read only here)
    lines, imported = _cli(cache, "status", str(no_usage))
    assert not imported and not any(ln.startswith("tokens") for ln in lines)
    lines, imported = _cli(cache, "log", str(usage_run), "--kind", "checkpoint")  # no step with usage printed
    assert not imported and lines and all("$" not in ln for ln in lines)
    lines, imported = _cli(cache, "log", str(usage_run), "--step", "model:gpt-4o")  # one is: its cost
    assert imported and any("$0.005750" in ln for ln in lines)
