"""The supervisor with an agent whose steps run concurrently: the steps in flight at a crash are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from .supervisor_util import PY, Supervised

AGENT = """
import asyncio, os
from supervisor import Run

FIRST = os.environ.get("AGENT_SUPERVISOR_ATTEMPT") == "1"

async def work(i: int) -> int:
    if i == 3:
        await asyncio.sleep(0.2)
        if FIRST:
            os._exit(1)  # the others are still in flight
    elif FIRST:
        await asyncio.sleep(60)
    return i

async def main() -> None:
    with Run.open() as run:
        print(await asyncio.gather(*(run.astep(f"w:{i}", work, i) for i in range(4))))

asyncio.run(main())
"""


@pytest.mark.timeout(60)
def test_a_crash_names_every_step_in_flight(tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    run = tmp_path / "run"
    with Supervised(run, [PY, str(agent)], "--no-resume-flag", "--backoff-initial", "0.05") as sup:
        assert sup.wait(40) == 0, sup.stderr()
    first = sup.events("exit")[0]
    assert first["code"] == 1
    assert first["step"] == "w:0 (+3 more in flight)", first  # four begun, none finished
    assert "[0, 1, 2, 3]" in sup.stdout() or "[0, 1, 2, 3]" in (run / "agent.log").read_text()
