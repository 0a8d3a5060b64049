"""``supervise``, ``status`` and ``rollback``: run an agent under the supervisor and talk to it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..core import pauses, rundir
from ..core.command import portable_program, recorded_cwd
from ..core.redact import redact_argv
from ..core.status import RunStatus
from ..errors import RunDirError, SupervisorError, WorkspaceError
from ..supervise import notify
from ..supervise.control import run_status
from ..supervise.metrics import format_size, parse_size
from ..supervise.persister import is_resource_error
from ..supervise.process import TRACEPARENT_MODES
from ..supervise.rollback import rollback
from ..supervise.supervisor import EXIT_RESOURCES, Options, Supervisor
from ..views.fmt import fmt_cost

if TYPE_CHECKING:
    from ..core.workspace import Settings


def _positive(kind: type) -> Any:
    def conv(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
        return v

    return conv


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class _Defaults(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` only where there is a meaningful default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False) or "default" in text:
            return text
        return super()._get_help_string(action)


_EPILOG = """examples:
  agent-supervisor supervise -- python agent.py --task "durable agents"
  agent-supervisor supervise --run-dir runs/demo --hang-timeout 300 --max-rss 4G -- python agent.py
  agent-supervisor supervise --run-dir runs/demo          (resume, reusing the recorded command)

the agent's environment: AGENT_SUPERVISOR_RUN_DIR, AGENT_SUPERVISOR_RUN_ID, AGENT_SUPERVISOR_ATTEMPT (1-based),
AGENT_SUPERVISOR_RESUME (0/1), AGENT_SUPERVISOR_PID, and with --workspace AGENT_SUPERVISOR_WORKSPACE.
exit codes: 0 succeeded or stopped by 'stop' request; 1 failed (gave up, or the agent exited 78), or the
workspace could not be snapshotted or restored before a start (the run stays resumable);
2 bad input; 75 resources ran out (disk full, no file descriptors) at the start or recording the end;
128+N stopped by signal N (the run stays resumable).
"""


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add ``supervise``, ``status`` and ``rollback``."""
    d = Options()
    p = sub.add_parser(
        "supervise",
        help="run an agent, restarting it with --resume when it crashes",
        description=(
            "Run CMD as a supervised agent in a run directory (new under ./runs/, or the one given,\n"
            "which resumes). Agent exit 0: succeeded. Exit 78: failed for good. Exit 75: restart now.\n"
            "Any other exit or a signal: restart with the resume flag, after a backoff if the attempt\n"
            "made no progress (no successful step or checkpoint committed to the journal)."
        ),
        formatter_class=_Defaults,
        epilog=_EPILOG,
    )
    p.add_argument("--run-dir", type=Path, metavar="DIR", help="run directory to use or resume (default: a new one under ./runs/)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines (the agent's own output still shows)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume-flag", default=d.resume_flag, metavar="FLAG",
                   help="argument appended to CMD on restarts (a value starting with - needs =, e.g. --resume-flag=--continue)")
    g.add_argument("--no-resume-flag", action="store_true", help="append nothing on restarts (the agent reads AGENT_SUPERVISOR_RESUME)")
    p.add_argument("--backoff-initial", type=_positive(float), default=d.backoff_initial, metavar="S",
                   help="first delay after an attempt without progress")
    p.add_argument("--backoff-max", type=_positive(float), default=d.backoff_max, metavar="S", help="longest delay")
    p.add_argument("--backoff-factor", type=_positive(float), default=d.backoff_factor, metavar="F",
                   help="delay multiplier per attempt without progress")
    p.add_argument("--backoff-jitter", type=_positive(float), default=d.backoff_jitter, metavar="J", help="random +-fraction of each delay")
    p.add_argument("--rollback-after", type=_positive(int), default=d.rollback_after, metavar="K",
                   help="attempts without progress before one automatic rollback to the latest checkpoint (0: never)")
    p.add_argument("--give-up-after", type=_positive(int), default=d.give_up_after, metavar="M",
                   help="attempts without progress before giving up (status failed)")
    p.add_argument("--hang-timeout", type=_positive(float), default=None, metavar="S",
                   help="restart when no journal record and no output came for S seconds (default: off)")
    p.add_argument("--break", dest="breaks", action="append", default=[], metavar="PATTERN",
                   help="pause before a live step whose name matches (fnmatch; 'interrupted': a step a crash cut off); "
                   "repeatable, kept in the run directory (agent-supervisor break)")
    p.add_argument("--max-rss", type=_size, default=None, metavar="SIZE",
                   help="restart when the agent's process tree uses more memory, e.g. 2G (default: off)")
    p.add_argument("--stop-grace", type=_positive(float), default=d.stop_grace, metavar="S",
                   help="seconds between SIGTERM and SIGKILL when stopping")
    p.add_argument("--log-max-bytes", type=_size, default=d.log_max_bytes, metavar="SIZE",
                   help="rotate agent.log and supervisor.jsonl at this size, e.g. 16M")
    p.add_argument("--log-keep", type=int, default=d.log_keep, metavar="N",
                   help=f"keep the newest N rotated agent.log and supervisor.jsonl files "
                        f"(default {d.log_keep}; 0 keeps all; the journal is never pruned)")
    p.add_argument("--otlp-endpoint", metavar="URL",
                   help="export the run's spans live over OTLP/HTTP to URL, e.g. http://localhost:4318 (headers from "
                        "OTEL_EXPORTER_OTLP_HEADERS; needs the [otlp] extra)")
    p.add_argument("--traceparent", choices=TRACEPARENT_MODES, default="auto",
                   help="give the agent its attempt's W3C TRACEPARENT so its own OpenTelemetry spans join the run's "
                        "trace: auto (default) with --otlp-endpoint, on without it too, replace an inherited one "
                        "as well, off")
    add_notify_options(p)
    add_llm_proxy_options(p, flag=True)
    add_workspace_options(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]", help="the agent's command, after --")
    p.set_defaults(func=cmd_supervise)

    p = sub.add_parser("status", help="show a run's supervisor state and figures",
                       description="Status of a run: live from its supervisor, else from its files.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("rollback", help="roll a run back to a checkpoint", description=(
        "Append a rollback record to CHECKPOINT (a name, a file or a seq; 'start' for the start of the run). "
        "With a live supervisor, the agent is stopped and restarted with the resume flag. With a workspace, its "
        "files are put back as the checkpoint's snapshot holds them, before the agent starts again; what they "
        "held is kept as a snapshot of the abandoned branch ('agent-supervisor files RUN')."))
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("--to", required=True, metavar="CHECKPOINT", help="checkpoint name, file or seq")
    p.add_argument("--reason", default="manual rollback", help="why (the agent can read it)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_rollback)


# --------------------------------------------------------------------------- supervise


def _check_command(cmd: list[str]) -> None:
    exe = cmd[0]
    if "/" in exe:
        path = Path(exe)
        if not path.exists():
            raise SupervisorError(f"command not found: {exe} does not exist; check the path")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise SupervisorError(
                f"{exe} is not executable; 'chmod +x {exe}', or run it through its interpreter (e.g. python {exe})"
            )
        return
    if shutil.which(exe) is None:
        raise SupervisorError(f"command not found: {exe!r} is not on PATH; give its full path or fix PATH")


def _writable_ancestor(path: Path) -> Path:
    """The nearest existing ancestor: where the run directory would be created."""
    p = path.absolute()
    while not p.exists():
        p = p.parent
    return p


def check_run_dir(run_dir: Path) -> bool:
    """Validate a run directory before anything is created (``supervise``, ``llm-proxy``); return whether it
    exists already."""
    if run_dir.exists():
        if not run_dir.is_dir():
            raise RunDirError(f"{run_dir} is a file, not a run directory; pass a directory path")
        if not os.access(run_dir, os.W_OK | os.X_OK):
            raise RunDirError(f"{run_dir} is not writable; run as its owner or choose another run directory")
        rundir.read_run_json(run_dir)  # refuses a newer format, or a broken run.json
        rundir.check_run_files(run_dir, os.listdir(run_dir))  # a link, a FIFO: refused before anything is written
        return True
    anc = _writable_ancestor(run_dir)
    if not anc.is_dir():
        raise RunDirError(f"cannot create {run_dir}: {anc} is a file, not a directory; choose another run directory")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise RunDirError(f"cannot create {run_dir}: {anc} is not writable; choose another run directory")
    return False


def cmd_supervise(args: argparse.Namespace) -> int:
    """Supervise the agent in a new or resumed run directory until the run ends; return the exit code."""
    cmd = list(args.command)
    cwd: Path | None = None
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    run_dir: Path = args.run_dir or Path("runs") / rundir.new_run_id()
    exists = check_run_dir(run_dir)
    if not cmd:
        cmd, cwd = _recorded_command(run_dir, exists)
        _resume_behind_recorded_proxy(args, run_dir)
    _check_command(cmd)
    _require_extras(args)
    opts = _options(args)
    ws = workspace_settings(args, run_dir, exists)
    notify_settings = notify.settings_for(run_dir, exists, args.notify, args.notify_timeout, off=args.no_notify)
    if not exists:
        rundir.ensure_dir(run_dir)
    sup = Supervisor(run_dir, cmd, opts, cwd=str(cwd) if cwd is not None else None)
    if args.llm_proxy:
        from ..supervise.llm_proxy import LlmProxy

        sup.llm_proxy = LlmProxy(sup.run_dir, match=args.llm_match, redact=sup.redactor,  # started by prepare()
                                 upstreams=llm_upstreams(args.llm_upstream))
    failed = _prepare(sup, run_dir, exists)
    if failed is not None:
        return failed
    sup.say(f"run directory {run_dir}")
    if args.breaks:
        doc = pauses.change_breakpoints(run_dir, add=args.breaks)
        sup.say(f"breakpoints: {', '.join(doc['patterns'])} (agent-supervisor continue {run_dir} answers a pause)")
    if ws is not None:
        _attach_workspace(sup, ws)
    if args.otlp_endpoint:
        from ..supervise.otlp_live import OtlpLive

        sup.otlp = OtlpLive(sup.run_dir, sup.run_id, args.otlp_endpoint, known_records=sup.journal.records).start()
    sup.traceparent = ("on" if args.otlp_endpoint else "off") if args.traceparent == "auto" else args.traceparent
    _announce_llm_proxy(sup)
    _attach_notifier(sup, notify_settings)
    return sup.run()


def workspace_settings(args: argparse.Namespace, run_dir: Path, exists: bool) -> Settings | None:
    """The run's workspace: ``--workspace`` (replacing the one ``run.json`` declares, the flags' rules and caps
    with it), else the declared one with the flags given applied; ``None``: none. Checked before anything starts."""
    tweaks: dict[str, Any] = {}
    if args.workspace_ignore is not None:
        tweaks["ignore"] = tuple(args.workspace_ignore)
    if args.workspace_max_file is not None:
        tweaks["max_file"] = args.workspace_max_file
    if args.workspace_max_bytes is not None:
        tweaks["max_bytes"] = args.workspace_max_bytes
    recorded = exists and "workspace" in rundir.read_run_json(run_dir)
    if args.workspace is None and not recorded:
        if tweaks:
            raise WorkspaceError(
                "--workspace-ignore, --workspace-max-file and --workspace-max-bytes need --workspace PATH "
                f"({run_dir} declares no workspace)")
        return None
    from ..core import workspace  # only for a run with a workspace

    declared = workspace.settings_of(run_dir) if recorded else None
    if args.workspace is not None or declared is None:
        root = check_workspace(args.workspace, "--workspace")
        return workspace.Settings(root=root, **tweaks)
    root = check_workspace(declared.root, f"the workspace {rundir.RUN_JSON} declares")
    return dataclasses.replace(declared, root=root, **tweaks)


def check_workspace(path: Path, what: str) -> Path:
    """A workspace directory that exists, absolute and resolved; a clear error otherwise."""
    p = Path(path).expanduser()
    if not p.exists():
        raise WorkspaceError(f"{what} {path} does not exist; create the directory first, or give another one")
    if not p.is_dir():
        raise WorkspaceError(f"{what} {path} is not a directory; give the directory the agent works in")
    if not os.access(p, os.R_OK | os.X_OK):
        raise WorkspaceError(f"{what} {path} cannot be read; run as its owner or give another directory")
    return p.resolve()


def _attach_workspace(sup: Supervisor, ws: Settings) -> None:
    """Declare the workspace in ``run.json`` (the lock is held) and give the supervisor its hooks."""
    from ..core import workspace
    from ..supervise.workspace_hooks import WorkspaceHooks

    if workspace.settings_of(sup.run_dir) != ws:
        workspace.declare(sup.run_dir, ws)
    sup.workspace = WorkspaceHooks(sup.run_dir, ws, emit=sup.emit, say=sup.say)
    sup.say(f"workspace {ws.root}")


def _resume_behind_recorded_proxy(args: argparse.Namespace, run_dir: Path) -> None:
    """The recorded command ran behind the proxy: resume it the same way, or it would pay for its calls again."""
    recorded_proxy = rundir.read_run_json(run_dir).get("llm_proxy")
    if isinstance(recorded_proxy, dict) and not args.llm_proxy:
        args.llm_proxy = True
        if recorded_proxy.get("match") in ("identity", "order") and args.llm_match == "identity":
            args.llm_match = recorded_proxy["match"]


def _require_extras(args: argparse.Namespace) -> None:
    """A missing extra ([otlp], [llm-proxy]) is one line saying what to install, before anything starts."""
    if args.otlp_endpoint:
        from ..export.otlp_http import require

        require()
    if args.llm_proxy:
        require_llm_proxy()


def _prepare(sup: Supervisor, run_dir: Path, existed: bool) -> int | None:
    """``sup.prepare()``; ``EXIT_RESOURCES`` if it failed for want of resources (said on stderr), else ``None``.

    A refusal removes the run directory if this command created it and nothing was written to it."""
    try:
        sup.prepare()
    except SupervisorError:
        if not existed:
            _remove_if_empty(run_dir)
        raise
    except OSError as e:
        if not is_resource_error(e):
            raise
        # not the user's input: a full disk or no descriptors; nothing started, the run resumes later
        where = f"{e.filename}: " if e.filename else ""
        print(f"agent-supervisor: cannot start supervising {run_dir}: {where}{e.strerror or e}; "
              "free disk space or file descriptors, then run the same command again", file=sys.stderr)
        return EXIT_RESOURCES
    return None


def add_notify_options(p: argparse.ArgumentParser) -> None:
    """``--notify CMD`` (repeatable), ``--notify-timeout S`` and ``--no-notify``."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--notify", action="append", default=None, metavar="CMD",
                   help="run the shell command line CMD (sh -c) with one JSON event on its stdin when the run pauses, "
                        "asks, loops on crashes, hangs, hits --max-rss, or ends; repeatable; kept in run.json (a resume "
                        "without flags keeps notifying; --notify given again replaces the commands)")
    g.add_argument("--no-notify", action="store_true", help="drop the notification commands run.json keeps")
    p.add_argument("--notify-timeout", type=_positive(float), default=None, metavar="S",
                   help=f"kill a notification command (its process group) still running after S seconds "
                        f"(default {notify.DEFAULT_TIMEOUT_S:g}, or the one run.json keeps)")


def _attach_notifier(sup: Supervisor, settings: notify.Settings) -> None:
    """Keep the notification settings in ``run.json`` (the lock is held; written as the supervisor writes it,
    retried on a full disk) and start the notifier."""
    if settings.to_json() != notify.recorded(sup.run_dir).to_json():
        sup.report.run_json(**{notify.RUN_JSON_KEY: settings.to_json()})
    if not settings.commands:
        return
    n = notify.Notifier(settings, run_dir=sup.run_dir, display_dir=sup.display_dir, run_id=sup.run_id, sel=sup.sel,
                        helpers=sup.tree.helpers, emit=sup.emit, say=sup.say,
                        redact=lambda text: redact_argv([text], sup.redactor)[0])
    if n.start():
        sup.report.notifier = n
        sup.say(f"notifications: {len(settings.commands)} command(s), timeout {settings.timeout_s:g} s")


def _announce_llm_proxy(sup: Supervisor) -> None:
    """With the proxy: ``run.json`` records it (a resume without a command keeps it), and stderr says its routes."""
    p = sup.llm_proxy
    if p is None:
        return
    rundir.update_run_json(sup.run_dir, llm_proxy={"match": p.match})
    routes = ", ".join(f"{k} -> {v}" for k, v in p.upstreams.items())
    sup.say(f"model-call proxy on 127.0.0.1:{p.port} (OPENAI_BASE_URL, ANTHROPIC_BASE_URL for the agent; {routes})")


def add_workspace_options(p: argparse.ArgumentParser) -> None:
    """``--workspace`` and its ignore rules and caps (``docs/workspace.md``)."""
    p.add_argument("--workspace", type=Path, metavar="PATH",
                   help="the directory the agent works in: snapshotted at each checkpoint, restored by a rollback, "
                        "its changes recorded per step; given to the agent as AGENT_SUPERVISOR_WORKSPACE "
                        "(default: the one run.json declares, else none)")
    p.add_argument("--workspace-ignore", action="append", default=None, metavar="GLOB",
                   help="leave these paths out of the workspace, gitignore-style (repeatable; besides .git/, "
                        "node_modules/, virtual environments, the run directory and the .gitignore files)")
    p.add_argument("--workspace-max-file", type=_size, default=None, metavar="SIZE",
                   help="largest file a snapshot takes, e.g. 50MB (default 50 MB)")
    p.add_argument("--workspace-max-bytes", type=_size, default=None, metavar="SIZE",
                   help="largest snapshot, e.g. 1GB (default 1 GB)")


def add_llm_proxy_options(p: argparse.ArgumentParser, *, flag: bool) -> None:
    """``--llm-proxy`` (``supervise`` only) and ``--llm-match``."""
    if flag:
        p.add_argument("--llm-proxy", action="store_true",
                       help="record every model call the agent makes (OpenAI, Anthropic and compatible clients, "
                            "pointed by OPENAI_BASE_URL / ANTHROPIC_BASE_URL) and serve the recorded answers on "
                            "restart; needs the [llm-proxy] extra")
    p.add_argument("--llm-upstream", action="append", default=[], metavar="NAME=URL", type=_upstream,
                   help="one more route for clients that read no variable: <proxy root>/NAME/... goes to URL/..., "
                        "e.g. gemini=https://generativelanguage.googleapis.com (the root is $AGENT_SUPERVISOR_LLM_PROXY; "
                        "repeatable; openai= and anthropic= replace the upstreams taken from the environment)")
    p.add_argument("--llm-match", choices=("identity", "order"), default="identity",
                   help="how a proxied call finds its recorded answer: identity (endpoint and body, the default) "
                        "or order (the N-th call to the same endpoint and model, for prompts that carry times or "
                        "random ids; a differing body is noted as a divergence)")


def _upstream(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name or "/" in name or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=URL, e.g. gemini=https://generativelanguage.googleapis.com")
    return name, url


def llm_upstreams(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The proxy's routes: the environment's, then those given with --llm-upstream."""
    from ..supervise.llm_proxy import upstreams_from_env

    return {**upstreams_from_env(os.environ), **dict(pairs)}


def require_llm_proxy() -> None:
    """One line saying what to install when the proxy's extra is missing, before anything starts."""
    import importlib.util

    if importlib.util.find_spec("aiohttp") is None:
        raise SupervisorError("--llm-proxy needs aiohttp: pip install 'agent-supervisor-tui[llm-proxy]'")


def _recorded_command(run_dir: Path, exists: bool) -> tuple[list[str], Path | None]:
    """No command given: the one ``run.json`` recorded, and where it ran (as replay does it)."""
    meta = rundir.read_run_json(run_dir) if exists else {}
    recorded = meta.get("command")
    if not (isinstance(recorded, list) and recorded and all(isinstance(a, str) for a in recorded)):
        raise SupervisorError(
            "missing command: put the agent's command after '--', "
            "e.g. agent-supervisor supervise -- python agent.py"
        )
    # a relative cwd is taken from the run directory; a recorded python that no longer exists here
    # is replaced by the interpreter that runs us
    cwd = recorded_cwd(run_dir, meta) if "cwd" in meta else None
    if cwd is not None and not cwd.is_dir():
        raise SupervisorError(
            f"the recorded working directory {cwd} no longer exists; give the command after '--': "
            f"agent-supervisor supervise --run-dir {run_dir} -- CMD"
        )
    return [portable_program(recorded[0]), *recorded[1:]], cwd


def _options(args: argparse.Namespace) -> Options:
    """The supervisor's options from the command line (bounds applied)."""
    if args.give_up_after < 1:
        raise SupervisorError("--give-up-after must be at least 1")
    return Options(
        resume_flag=None if args.no_resume_flag else (args.resume_flag or None),
        backoff_initial=args.backoff_initial,
        backoff_max=args.backoff_max,
        backoff_factor=args.backoff_factor,
        backoff_jitter=min(args.backoff_jitter, 1.0),
        rollback_after=args.rollback_after or 10**9,
        give_up_after=args.give_up_after,
        hang_timeout=args.hang_timeout or None,
        max_rss=args.max_rss,
        stop_grace=args.stop_grace,
        quiet=args.quiet,
        log_max_bytes=max(args.log_max_bytes, 4096),
        log_keep=max(args.log_keep, 0),
    )


def _remove_if_empty(run_dir: Path) -> None:
    """Undo a directory we created a moment ago and nothing was written to (no half-made run)."""
    try:
        for leftover in (rundir.SUPERVISOR_LOCK,):
            (run_dir / leftover).unlink(missing_ok=True)
        run_dir.rmdir()
    except OSError:
        pass  # not empty: someone else's files, keep them


# --------------------------------------------------------------------------- status


def get_status(run_dir: Path) -> RunStatus:
    """Live status through the control socket, else from the files (the TUI shows the same)."""
    rundir.check_readable_run_dir(run_dir)
    if run_dir.is_file():
        raise RunDirError(f"{run_dir} is a journal file; pass its run directory")
    return run_status(run_dir, details=True)


def usage_fields(run_dir: Path) -> dict[str, Any]:
    """``tokens``, ``cost_usd``, ``saved_tokens``, ``saved_cost_usd`` (and ``unpriced_steps``) of a run, from its
    journal and the model calls its proxy recorded (``llm.jsonl``: each served call counts as saved)."""
    from ..core.journal_reader import JournalReader
    from ..core.llm_calls import read_calls
    from ..core.segments import FOLD_CHUNK
    from ..core.usage import run_usage
    from ..export.pricing import step_cost

    marks: list[Any] = []  # the pause and choice records, seen in the same pass

    def entries() -> Any:
        for e in JournalReader(run_dir, chunk=FOLD_CHUNK).iter_entries(lazy=True):
            if type(e) is dict and pauses.is_pause_kind(e.get("kind")):
                marks.append(e)
            yield e

    calls = read_calls(run_dir)
    u = run_usage(entries(), price=step_cost, calls=calls)
    marks.extend(c for c in calls if pauses.is_pause_kind(c.get("kind")))  # model calls the proxy held

    def tok(t: Any) -> dict[str, int]:
        return {"input": t.input, "output": t.output, "cached": t.cached, "total": t.total}

    return {"tokens": tok(u.tokens), "cost_usd": u.cost_usd, "unpriced_steps": u.unpriced,
            "saved_tokens": tok(u.saved_tokens), "saved_cost_usd": u.saved_cost_usd,
            "paused": pauses.paused_field(dict(enumerate(pauses.open_pauses(marks))))}


def _usd(v: float) -> str:
    """A cost with four decimals, as ``status`` shows it; one too small for them keeps its first digits."""
    return fmt_cost(v) if 0 < v < 0.0001 else f"${v:.4f}"


def _usage_line(st: dict[str, Any]) -> str | None:
    t, s = st["tokens"], st["saved_tokens"]
    if not t["total"]:
        return None
    line = f"tokens     {t['input']:,} in" + (f" ({t['cached']:,} cached)" if t["cached"] else "") + f", {t['output']:,} out"
    if st["cost_usd"] is not None:
        line += f", {_usd(st['cost_usd'])}"
    if st["unpriced_steps"]:
        line += f" (+{st['unpriced_steps']} step(s) unpriced)"
    if s["total"]:
        line += f"; saved by resume {s['input']:,} in, {s['output']:,} out"
        if st["saved_cost_usd"] is not None:
            line += f", {_usd(st['saved_cost_usd'])}"
    return line


def cmd_status(args: argparse.Namespace) -> int:
    st = get_status(args.run_dir).fields
    live_paused = st.get("paused")
    st.update(usage_fields(args.run_dir))
    if st.get("live"):
        st["paused"] = live_paused  # the supervisor's own reading (the same files)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(st, option=orjson.OPT_NON_STR_KEYS) + b"\n")
        sys.stdout.flush()
        return 0
    out = [f"run dir    {st['run_dir']}"]
    out.extend(_live_lines(st) if st.get("live") else _offline_lines(st))
    if st.get("paused"):
        p = st["paused"]
        how = "answer RUN VALUE" if p.get("reason") == "ask" else "continue RUN [--step|--all|--inputs|--output|--abort]"
        out.insert(2, f"paused     {pauses.pause_text(p)}" + (f" (+{p['others']} more)" if p.get("others") else "")
                   + f"; agent-supervisor {how}")
    usage = _usage_line(st)
    if usage:
        out.insert(len(out) - 1 if st.get("live") else len(out), usage)
    print("\n".join(out))
    return 0


def _live_lines(st: dict[str, Any]) -> list[str]:
    """``status`` of a supervised run: the state, the agent's tree, the journal, the supervisor."""
    line = f"state      {st['state']}"
    if st.get("pid"):
        line += f" (pid {st['pid']}, attempt {st['attempt']}, up {st.get('uptime_s') or 0:.1f} s)"
    else:
        line += f" (attempt {st['attempt']})"
    if st.get("backoff_s") is not None:
        line += f", restarting in {st.get('backoff_left_s', st['backoff_s']):.1f} s"
    if st.get("restarts_paused"):
        line += ", restarts paused"
    out = [line, f"restarts   {st['restarts']}"]
    if st.get("pid"):
        out.append(
            f"agent tree cpu {st['cpu_percent']:.1f} %, rss {format_size(int(st['rss_bytes']))}, "
            f"{st['threads']} threads, {st['open_files']} open files, {st.get('processes', 1)} processes"
        )
    out.append(f"journal    {st['records']} records" + (f"; in step {st['step']}" if st.get("step") else ""))
    for what, n in (st.get("resource_errors") or {}).items():
        out.append(f"resources  {what} failed {n} time(s); still supervising")
    out.append(f"supervisor pid {st['supervisor_pid']}")
    return out


def _offline_lines(st: dict[str, Any]) -> list[str]:
    """``status`` of a run no supervisor runs: from its files (the end, the last exit, a note)."""
    out = [f"state      {st['state']} (no supervisor running)",
           f"attempts   {st['attempt']}, restarts {st['restarts']}",
           f"journal    {st['records']} records"]
    if st.get("ended"):
        out.append(f"ended      {st['ended']}")
    ex = st.get("last_exit")
    if ex:
        how = f"signal {ex.get('signal')}" if ex.get("signal") else f"code {ex.get('code')}"
        out.append(f"last exit  attempt {ex.get('attempt')}: {how}" + (f" in step {ex['step']}" if ex.get("step") else ""))
    if st.get("note"):
        out.append(f"note       {st['note']}")
    return out


# --------------------------------------------------------------------------- rollback


def cmd_rollback(args: argparse.Namespace) -> int:
    if args.run_dir.is_file():
        raise RunDirError(f"{args.run_dir} is a journal file; pass its run directory")
    res = rollback(args.run_dir, args.to, reason=args.reason, by="user")
    if args.json:
        print(orjson.dumps(res).decode())
    else:
        how = "the supervisor restarted the agent with its resume flag" if res.get("live") else (
            "the next start resumes from it")
        print(f"rolled back to {res.get('checkpoint') or 'the start of the run'} (record seq {res.get('seq')}); {how}")
        if res.get("workspace"):
            print(res["workspace"])
    return 0
