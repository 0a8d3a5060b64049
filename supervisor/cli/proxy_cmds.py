"""``agent-supervisor llm-proxy RUN_DIR``: the recording model-call proxy, without a supervisor.

It prints the ``export`` lines that point an agent's clients at it (as ``ssh-agent`` does) and runs until it is
stopped (Ctrl-C, SIGTERM). Each start of the proxy is one attempt: the calls recorded so far are served, the
others go live and are recorded. An agent re-run by hand while the proxy keeps running is a new attempt once
the proxy gets SIGHUP (``kill -HUP PID``; the pid is printed with the exports).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ..core import llm_calls, rundir
from ..core.redact import Redactor
from .supervise_cmds import add_llm_proxy_options, check_run_dir, llm_upstreams, require_llm_proxy


def register(sub: argparse._SubParsersAction[Any]) -> None:
    p = sub.add_parser(
        "llm-proxy", help="record and serve an agent's model calls, without a supervisor",
        description="Start the recording model-call proxy for RUN_DIR (created if missing) and print the export "
                    "lines that point OpenAI, Anthropic and compatible clients at it. Runs until Ctrl-C or "
                    "SIGTERM; SIGHUP starts a new attempt (an agent re-run by hand is served its recorded calls again).",
        epilog="example:\n  eval \"$(agent-supervisor llm-proxy runs/demo &)\"   # or run it in another terminal\n"
               "  python agent.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--port", type=int, default=0, help="the loopback port (default: a random free one)")
    add_llm_proxy_options(p, flag=False)
    p.set_defaults(func=cmd_llm_proxy)


def cmd_llm_proxy(args: argparse.Namespace) -> int:
    require_llm_proxy()
    from ..supervise.llm_proxy import LlmProxy

    run_dir: Path = args.run_dir
    if not check_run_dir(run_dir) or not (run_dir / rundir.RUN_JSON).exists():
        rundir.ensure_dir(run_dir)
        rundir.update_run_json(run_dir)
    attempt = 1 + max((r.get("attempt", 0) for r in llm_calls.step_calls(run_dir) if type(r.get("attempt")) is int),
                      default=0)
    proxy = LlmProxy(run_dir.resolve(), match=args.llm_match, redact=Redactor(), port=args.port, attempt=attempt,
                     upstreams=llm_upstreams(args.llm_upstream))
    proxy.start()
    stop = threading.Event()
    hup = threading.Event()

    def on_stop(*_: Any) -> None:
        stop.set()

    def on_hup(*_: Any) -> None:
        hup.set()
        stop.set()  # wakes the wait below; cleared again for a HUP

    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGHUP, on_hup)
    try:
        for name, value in proxy.env().items():
            print(f"export {name}={shlex.quote(value)}")
        routes = ", ".join(f"{k} -> {v}" for k, v in proxy.upstreams.items())
        print(f"# agent-supervisor llm-proxy: pid {os.getpid()}, recording to {run_dir / llm_calls.CALLS} "
              f"(attempt {attempt}); {routes}")
        sys.stdout.flush()
        while True:
            stop.wait()
            if hup.is_set():
                hup.clear()
                stop.clear()
                attempt += 1
                proxy.new_attempt(attempt)
                print(f"agent-supervisor llm-proxy: attempt {attempt}: the recorded calls are served again",
                      file=sys.stderr, flush=True)
                continue
            break
    finally:
        proxy.close()
    print("agent-supervisor llm-proxy: stopped", file=sys.stderr)
    return 0
