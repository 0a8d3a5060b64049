"""``export``: a run as OpenTelemetry traces, to an OTLP/JSON file or an OTLP/HTTP endpoint."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from ..core.rundir import check_readable_run_dir
from ..errors import SupervisorError

_EPILOG = """examples:
  agent-supervisor export runs/demo --otlp trace.json
  agent-supervisor export runs/demo --otlp-endpoint http://localhost:4318
  OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 agent-supervisor export runs/demo

One trace per run (its ids derived from run.json's uid, random per run: exporting again gives the same
ids, two runs of one directory name never share them); a span for the run, one per attempt, one per step
(model calls as GenAI 'chat MODEL' spans, tools as 'execute_tool NAME'). Inputs and outputs only with
--content, after redaction (model calls' messages also as gen_ai.input.messages/output.messages).
The resource: OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, for --otlp and --otlp-endpoint alike.
"""


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``export``."""
    p = sub.add_parser(
        "export",
        help="export a run as OpenTelemetry traces (OTLP/JSON file or OTLP/HTTP)",
        description=(
            "Export a run directory as one OpenTelemetry trace: to an OTLP/JSON file (--otlp, no extra needed) "
            "and/or over OTLP/HTTP (--otlp-endpoint, or OTEL_EXPORTER_OTLP_ENDPOINT; needs the [otlp] extra)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EPILOG,
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--otlp", type=Path, metavar="FILE.json", help="write one OTLP/JSON ExportTraceServiceRequest to FILE")
    p.add_argument("--otlp-endpoint", metavar="URL",
                   help="send over OTLP/HTTP to URL, a base URL such as http://localhost:4318 (/v1/traces is appended); "
                        "default: OTEL_EXPORTER_OTLP_ENDPOINT; headers from OTEL_EXPORTER_OTLP_HEADERS")
    p.add_argument("--content", action="store_true", help="include step inputs and outputs (redacted)")
    p.set_defaults(func=cmd_export)


def _price() -> Any:
    from ..export.pricing import step_cost

    return step_cost


def cmd_export(args: argparse.Namespace) -> int:
    from ..export import otlp

    run_dir: Path = args.run_dir
    check_readable_run_dir(run_dir)
    if run_dir.is_file():
        raise SupervisorError(f"{run_dir} is a journal file; pass its run directory")
    env_endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    send = bool(args.otlp_endpoint or (env_endpoint and not args.otlp))
    if not args.otlp and not send:
        raise SupervisorError(
            "say where to export: --otlp FILE.json (an OTLP/JSON file), --otlp-endpoint URL (OTLP/HTTP), "
            "or set OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    if args.otlp is not None:
        out: Path = args.otlp
        if out.is_dir():
            raise SupervisorError(f"--otlp {out} is a directory; give a file name such as {out / 'trace.json'}")
        if not out.parent.is_dir():
            raise SupervisorError(f"--otlp {out}: the directory {out.parent} does not exist; create it or pick another path")
    sender = None
    if send:
        from ..export.otlp_http import BATCH, OtlpSender

        run_id = _run_id(run_dir)
        sender = OtlpSender(run_id, args.otlp_endpoint)  # a missing extra: a user error naming the install
    run_id, spans = otlp.build_spans(run_dir, content=args.content, price=_price())
    trace = spans[-1].trace_id  # the root's: derived from run.json's uid (else the run id)
    if args.otlp is not None:
        n = otlp.write_otlp_json_spans(run_id, spans, args.otlp)
        print(f"wrote {n} spans of run {run_id} to {args.otlp} (trace id {trace})")
    if sender is not None:
        def progress(sent: int, total: int) -> None:
            if total > 2 * BATCH:  # a large run: say how far it got
                print(f"sent {sent} of {total} spans", file=sys.stderr, flush=True)

        try:
            ok = sender.send(spans, progress)
        finally:
            sender.close()
        if not ok:
            got = f" ({sender.sent} of {len(spans)} spans went before it)" if sender.sent else ""
            raise SupervisorError(
                f"could not send the spans to {sender.url}: {sender.last_error}{got}; check that an OTLP/HTTP "
                "collector listens there (port 4318 by default) and OTEL_EXPORTER_OTLP_HEADERS"
            )
        print(f"sent {len(spans)} spans of run {run_id} to {sender.url} (trace id {trace})")
    sys.stdout.flush()
    return 0


def _run_id(run_dir: Path) -> str:
    from ..core import rundir

    return str(rundir.read_run_json(run_dir).get("id") or run_dir.name)
