"""The sample research agent, as the sample runs recorded it (``python research_agent.py``).

Its code lives in the package, ``supervisor/demo_agent.py``, so that
``agent-supervisor demo`` works from any install; this file keeps the recorded
command (and ``python sample_runs/research_agent.py ...``) working.
"""

from supervisor.demo_agent import main

if __name__ == "__main__":
    raise SystemExit(main())
