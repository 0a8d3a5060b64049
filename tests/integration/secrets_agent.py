"""An agent that puts secrets everywhere it can, for tests/integration/test_secrets_supervised.py (run under a real supervisor).

    secrets_agent.py TOKEN [ARGS...]

The values come from the environment under names that do not look secret
(``AGENT_VALUE_OPTION`` for ``secrets=``, ``AGENT_VALUE_ADDED`` for ``add_secret``):
the supervisor can learn them only through the secrets pipe. Attempt 1 journals a
step and a checkpoint holding them, prints the token and both values on stdout and
stderr (also inside a line longer than agent.log's 64 KiB split, the token across
the split at offset ``AGENT_SPLIT_AT``), a PEM private key in two writes, then crashes
with the values as its last stderr lines (the exit event's stderr tail). Attempt 2
resumes, prints them again and exits 0.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from supervisor import Run

PEM_HEAD = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
PEM_TAIL = "QyNTUxOQAAACDy4cVkOV0Ic3Bbhc1o1bJ1iz5zj8sDGWyI0WNRo4QNfgAAAJg1a\n-----END OPENSSH PRIVATE KEY-----\n"


def say(text: str) -> None:
    print(text, flush=True)
    print(text, file=sys.stderr, flush=True)


def main() -> int:
    token = sys.argv[1]
    option, added = os.environ["AGENT_VALUE_OPTION"], os.environ["AGENT_VALUE_ADDED"]
    split_at = int(os.environ.get("AGENT_SPLIT_AT", str(64 * 1024 - 7)))
    with Run.open(secrets=[option]) as run:
        run.add_secret(added)
        out = run.step("use", lambda: f"called with {token} {option} {added}")
        run.state["seen"] = [token, option, added]
        run.checkpoint("seen")
        say(f"attempt {run.attempt}: token {token} option {option} added {added} step {out}")
        if run.attempt == 1:
            sys.stdout.write("x" * split_at + token + " " + "y" * 100 + "\n")
            sys.stdout.flush()
            sys.stderr.write(PEM_HEAD)
            sys.stderr.flush()
            time.sleep(0.2)  # the key's head and tail reach the supervisor in two reads
            sys.stderr.write(PEM_TAIL)
            sys.stderr.flush()
            print(f"crashing with {token}", file=sys.stderr, flush=True)
            print(f"option={option}", file=sys.stderr, flush=True)
            print(f"added={added}", file=sys.stderr, flush=True)
            os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
