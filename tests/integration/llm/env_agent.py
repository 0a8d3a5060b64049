"""A helper agent: writes the model endpoints the supervisor gave it to ``AGENT_OUT`` (JSON, atomically),
then stays until the file named by ``AGENT_RELEASE`` exists (the proxy lives as long as the supervisor, so
the test talks to it meanwhile) and exits 0. Writes no credential: only the three proxy variables."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

NAMES = ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_BASE_URL", "AGENT_SUPERVISOR_LLM_PROXY")


def main() -> int:
    out = Path(os.environ["AGENT_OUT"])
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({k: os.environ.get(k) for k in NAMES}))
    os.replace(tmp, out)
    print("endpoints written", flush=True)
    release = Path(os.environ["AGENT_RELEASE"])
    deadline = time.monotonic() + 60
    while not release.exists():  # a helper's own wait for the test, bounded
        if time.monotonic() > deadline:
            print("never released", flush=True)
            return 1
        time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
