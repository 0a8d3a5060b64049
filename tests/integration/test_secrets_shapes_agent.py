"""An agent that writes credential shapes into every place a run records, for test_secrets_shapes.py (no tests here).

    test_secrets_shapes_agent.py ARGS...

Every name of ``NAMES`` in every form of ``FORMS`` (``name=V``, ``name: V``, ``name = V``, an HTTP header line,
``"name": "V"`` in a JSON text, ``{'name': 'V'}``, ``NAME=V``, ``name = x-api-key: V``), each with a value of its
own for each place (``value(place, i)``), goes into a step's inputs (also as dict keys), its output, a failed step's error,
``run.state`` (also as keys: a JSON patch's path), a checkpoint, a note (also as its fields), stdout and
stderr; the command line (``ARGS``, built by the test with ``cases("argv")``) holds them too. The environment
has a variable for each name (``ENV_NAMES``) whose value the agent writes bare into a step, a note, the state
and both streams: only the redactors' literal values (from the environment) can hide those.
"""

from __future__ import annotations

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from supervisor import Run

NAMES = [
    "password", "passwd", "pwd", "secret", "client_secret", "token", "access_token", "refresh_token", "id_token",
    "api_key", "apikey", "x-api-key", "x_api_key", "aws_secret_access_key", "aws_session_token", "authorization",
    "x-auth-token", "cookie", "set-cookie", "private_key",
]
ENV_NAMES = {n: re.sub(r"[-_]", "_", n).upper() for n in NAMES}
ENV_NAMES.update(pwd="DB_PWD", x_api_key="APP_X_API_KEY")  # PWD is the working directory; X_API_KEY is taken
PLACES = ("inputs", "output", "error", "state", "checkpoint", "note", "stdout", "stderr", "argv", "env")
MARK = "kQz9W"
"""The end of every secret value: found nowhere in the run directory, no piece of a value was left."""


def header(name: str) -> str:
    return "-".join(p.capitalize() for p in re.split(r"[-_]", name))


FORMS = {
    "eq": lambda n, v: f"{n}={v}",
    "colon": lambda n, v: f"{n}: {v}",
    "spaced": lambda n, v: f"{n} = {v}",
    "header": lambda n, v: f"{header(n)}: {v}",
    "env-line": lambda n, v: f"{n.upper().replace('-', '_')}={v}",
    "json-text": lambda n, v: json.dumps({n: v, "n": 5}),
    "python-repr": lambda n, v: repr({n: v}),
    "chained": lambda n, v: f"{n} = x-api-key: {v}",  # the whole value goes, not only its first word
}


def value(place: str, i: int) -> str:
    return f"Zq{PLACES.index(place):02d}{i:04d}{MARK}"


def cases(place: str) -> list[tuple[str, str, str, str]]:
    """(name, form, text, value) for one place: a value of its own for each name and form."""
    out = []
    for i, (n, f) in enumerate((n, f) for n in NAMES for f in FORMS):
        v = value(place, i)
        out.append((n, f, FORMS[f](n, v), v))
    return out


def keyed(place: str) -> dict[str, str]:
    """The names as dict keys (step data, the state, a note's fields), each with a value of its own."""
    return {n: value(place, 1000 + i) for i, n in enumerate(NAMES)}


def texts(place: str) -> list[str]:
    return [c[2] for c in cases(place)]


def main() -> int:
    env_values = [f"{ENV_NAMES[n]} is {os.environ[ENV_NAMES[n]]}" for n in NAMES]
    with Run.open() as run:
        run.step("login", lambda lines, creds: {"texts": texts("output"), **keyed("output"), "env": env_values},
                 texts("inputs"), creds=keyed("inputs"))

        def fail() -> None:
            raise RuntimeError("\n".join(texts("error")))

        try:
            run.step("refresh", fail)
        except RuntimeError:
            pass  # the step fails on purpose: its error record (the texts in its message) is what is checked
        run.state["texts"] = texts("state")
        run.state["creds"] = keyed("state")
        for n, v in keyed("state").items():
            run.state[n] = v + "x"  # a key of the state itself: its patch says "path":"/NAME","value":"V"
        run.state["env"] = env_values
        run.step("after-state", lambda: 1)
        run.state["cp"] = {"texts": texts("checkpoint"), **keyed("checkpoint")}
        run.checkpoint("creds")
        run.note("\n".join(texts("note")), **keyed("note"))
        print("argv as given" if sys.argv[1:] == texts("argv") else "argv differs", flush=True)
        for line in texts("stdout") + env_values:
            print(line, flush=True)
        for line in texts("stderr") + env_values:
            print(line, file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
