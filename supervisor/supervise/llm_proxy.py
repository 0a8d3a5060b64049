"""The recording model-call proxy: every model call an agent makes over HTTP, durable before the agent sees it.

``supervise --llm-proxy`` runs one :class:`LlmProxy` for the whole run (it outlives every attempt); ``llm-proxy
RUN_DIR`` runs one alone. The agent is pointed at it by the base-URL variables its client reads
(:meth:`LlmProxy.env`): ``OPENAI_BASE_URL``/``OPENAI_API_BASE`` and ``ANTHROPIC_BASE_URL``, each
``http://127.0.0.1:PORT/SECRET/<route>``; the route's upstream is what the agent's environment had before.

- **Recorded before it is seen.** A live answer is written to ``llm.jsonl`` (:mod:`supervisor.core.llm_calls`)
  and synced before the proxy returns it. A streamed answer is forwarded event by event as it arrives; its
  final event (and the end of the response) waits for the sync. If the agent goes away mid-stream, the proxy
  reads the upstream answer to its end and records it: the next attempt is served it.
- **Served, not paid again.** Each attempt serves the successful calls of the effective history (a rollback's
  abandoned branch excluded) by identity: provider, method, path and canonical body, plus the occurrence of
  that identity in the attempt (``--llm-match order``: the endpoint and model instead of the body, a differing
  body noted as a divergence). A call that matches nothing goes live and is recorded; a failed answer (status
  >= 400) is recorded and never served.
- **Safe.** It listens on 127.0.0.1 only and refuses (403) a request whose path lacks the per-proxy secret;
  it forwards the agent's own credentials and adds none; credentials are never written (only an allowlist
  of headers is); bodies pass the run's redactor. Upstream TLS is verified with the system's trust store.

The one module that imports aiohttp (the ``llm-proxy`` extra): the supervisor imports it only with the flag.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import orjson

try:
    import aiohttp
    from aiohttp import web
except ImportError as e:  # pragma: no cover - the extra is missing
    from ..errors import SupervisorError

    raise SupervisorError(
        "the model-call proxy needs aiohttp: pip install 'agent-supervisor-tui[llm-proxy]'"
    ) from e

from ..core import llm_calls, pauses, rundir, wire
from ..core.journal_writer import JournalWriter
from ..core.llm_calls import CALLS, DIVERGED_NOTE, SERVED_NOTE
from ..core.records import Record
from ..core.redact import Redactor
from ..core.segments import count_lines
from ..errors import JournalError

__all__ = ["DEFAULT_UPSTREAMS", "LlmProxy", "upstreams_from_env"]

DEFAULT_UPSTREAMS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
ROOT_ENV = "AGENT_SUPERVISOR_LLM_PROXY"
_REQUEST_HEADERS = ("content-type", "anthropic-version", "anthropic-beta", "openai-beta")
_RESPONSE_HEADERS = ("content-type", "request-id", "x-request-id", "openai-processing-ms")
_HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding",
                  "proxy-authorization", "proxy-connection", "te", "trailer", "upgrade"})
_NOT_FORWARDED_BACK = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive",
                                 "content-encoding"})


_QUERY_CREDENTIALS = frozenset({"key", "api_key", "api-key", "apikey", "access_token", "token"})


def _public_query(query: str) -> str:
    """``?query`` without the parameters that carry credentials (Gemini's ``?key=``): never written."""
    if not query:
        return ""
    kept = [p for p in query.split("&") if p.split("=", 1)[0].lower() not in _QUERY_CREDENTIALS]
    return f"?{'&'.join(kept)}" if kept else ""


def upstreams_from_env(env: Mapping[str, str]) -> dict[str, str]:
    """Each route's upstream: the base URL the agent's environment had before the proxy (or the default)."""
    return {
        "openai": env.get("OPENAI_BASE_URL") or env.get("OPENAI_API_BASE") or DEFAULT_UPSTREAMS["openai"],
        "anthropic": env.get("ANTHROPIC_BASE_URL") or DEFAULT_UPSTREAMS["anthropic"],
    }


def _request_headers(headers: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A request's headers as sent upstream (hop-by-hop ones dropped, the answer asked for unencoded) and as
    recorded (an allowlist: never a credential)."""
    sent = {k: v for k, v in headers.items() if k.lower() not in _HOP}
    sent["Accept-Encoding"] = "identity"
    return sent, {k.lower(): v for k, v in headers.items() if k.lower() in _REQUEST_HEADERS}


def _response_headers(headers: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """An answer's headers as passed back to the agent (framing and encoding are our server's) and as recorded."""
    back = {k: v for k, v in headers.items() if k.lower() not in _NOT_FORWARDED_BACK}
    return back, {k.lower(): v for k, v in headers.items() if k.lower() in _RESPONSE_HEADERS}


class _Attempt:
    """What one attempt serves and how many calls of each identity it has made."""

    def __init__(self, n: int, table: dict[tuple[str, str, int], Record]) -> None:
        self.n = n
        self.table = table
        self.counts: dict[tuple[str, str], int] = {}

    def take(self, kind: str, ident: str) -> int:
        c = self.counts.get((kind, ident), 0)
        self.counts[(kind, ident)] = c + 1
        return c

    def give_back(self, kind: str, ident: str) -> None:
        """A failed call does not count: the agent's retry of it is the same occurrence."""
        c = self.counts.get((kind, ident), 0)
        if c:
            self.counts[(kind, ident)] = c - 1


class LlmProxy:
    """One proxy for a run directory: ``start()``, then ``env()`` for the agent, ``new_attempt()`` per attempt,
    ``close()``. Its loop runs in a thread of its own; the methods are called from any other thread."""

    def __init__(
        self, run_dir: Path, *, match: str = "identity", redact: Callable[[bytes], bytes] | None = None,
        upstreams: Mapping[str, str] | None = None, port: int = 0, attempt: int = 1, live: bool = True,
        stderr: TextIO | None = None,
    ) -> None:
        if match not in ("identity", "order"):
            raise ValueError(f"--llm-match is identity or order, not {match!r}")
        self.run_dir = run_dir
        self.match = match
        self.redact = redact if redact is not None else Redactor()  # secret values of the environment, token shapes
        self.upstreams = dict(upstreams or upstreams_from_env(os.environ))
        self.port = port
        self.live = live
        """``False`` (``replay --verify``): a call that matches nothing is refused (409), not made."""
        self.stderr = stderr or sys.stderr
        self.secret = secrets.token_hex(16)
        self.mismatch: dict[str, Any] | None = None
        """The first call that matched no record while not live (what ``replay --verify`` reports)."""
        self._attempt_n = attempt
        self._writer: JournalWriter | None = None
        self._compactor = llm_calls.Compactor()
        self._attempt: _Attempt | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._unrecorded = 0
        """Calls answered that could not be recorded (a full disk): said once on stderr."""
        self.breakpoints = pauses.Breakpoints(run_dir)
        self.pauses: dict[Any, Record] = {}
        """The calls held at a breakpoint now, or held when their attempt ended, by the seq of their ``pause``."""
        self.paused_new: list[Record] = []
        """Holds since the supervisor last took them (its ``paused`` events); appended from the proxy's thread."""

    # ------------------------------------------------------------------ life
    @property
    def root(self) -> str:
        """The URL every route hangs under: ``http://127.0.0.1:PORT/SECRET``."""
        return f"http://127.0.0.1:{self.port}/{self.secret}"

    def env(self) -> dict[str, str]:
        """The variables that point the common clients at the proxy."""
        openai_url = f"{self.root}/openai"
        return {"OPENAI_BASE_URL": openai_url, "OPENAI_API_BASE": openai_url,
                "ANTHROPIC_BASE_URL": f"{self.root}/anthropic", ROOT_ENV: self.root}

    def start(self) -> None:
        """Open ``llm.jsonl`` (its lock, its torn tail), build the first attempt's table, listen."""
        self._writer = JournalWriter(self.run_dir, file=CALLS, redact=self.redact, count=count_lines)
        self._compactor = llm_calls.Compactor.load(self.run_dir)
        self.pauses = {p.get("seq"): p for p in pauses.open_pauses(llm_calls.read_calls(self.run_dir))}
        self._attempt = _Attempt(self._attempt_n, self._table())
        self._thread = threading.Thread(target=self._serve_forever, name="llm-proxy", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._writer.close()
            raise self._error

    def new_attempt(self, n: int) -> None:
        """A new attempt begins: it is served the effective history as the files now hold it."""
        table = self._table()
        loop = self._loop
        if loop is None:
            self._attempt = _Attempt(n, table)
            return
        done = threading.Event()

        def swap() -> None:
            self._attempt = _Attempt(n, table)
            done.set()

        loop.call_soon_threadsafe(swap)
        done.wait(10)

    def close(self) -> None:
        """Finish the calls in flight (their records written), stop listening, close the file."""
        loop = self._loop
        if loop is not None and self._thread is not None and self._thread.is_alive():
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            try:
                fut.result(30)
            except Exception as e:  # the records written are on disk; what was still in flight is said
                print(f"agent-supervisor: the model-call proxy did not stop cleanly ({type(e).__name__}: {e}); "
                      "calls still in flight were not recorded", file=self.stderr, flush=True)
            loop.call_soon_threadsafe(loop.stop)
            self._thread.join(10)
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.breakpoints.close()

    def _serve_forever(self) -> None:
        try:  # uvloop (in the extra) where it installs: about a third less added latency a call
            import uvloop

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._listen())
        except BaseException as e:
            self._error = e
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _listen(self) -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation off (the default, said): an agent that goes away never cancels a call being recorded
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._session = aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            connector=aiohttp.TCPConnector(limit=0),
        )

    async def _shutdown(self) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=25)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------------ the table
    def _table(self) -> dict[tuple[str, str, int], Record]:
        """The successful calls of the effective history by ``("key", key, k)`` and ``("match", match, km)``;
        a later record of the same identity replaces an earlier one."""
        spans = llm_calls.abandoned_spans(self.run_dir)
        table: dict[tuple[str, str, int], Record] = {}
        for rec in llm_calls.step_calls(self.run_dir):
            out = rec.get("output")
            if not isinstance(out, dict) or llm_calls.in_spans(rec.get("ts"), spans):
                continue
            key, k, m, km = rec.get("key"), rec.get("k"), rec.get("match"), rec.get("km")
            if isinstance(key, str) and type(k) is int:
                table[("key", key, k)] = rec
            if isinstance(m, str) and type(km) is int:
                table[("match", m, km)] = rec
        return table

    # ------------------------------------------------------------------ one call
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        parts = request.path.split("/", 3)  # "", secret, route, rest
        if len(parts) < 3 or not hmac.compare_digest(parts[1].encode(), self.secret.encode()):
            return web.Response(status=403, text="agent-supervisor llm-proxy: this URL lacks the run's secret\n")
        route = parts[2]
        upstream = self.upstreams.get(route)
        if upstream is None:
            return web.Response(status=404, text=f"agent-supervisor llm-proxy: no route {route!r} "
                                f"(routes: {', '.join(sorted(self.upstreams))})\n")
        rest = "/" + (parts[3] if len(parts) > 3 else "")
        query = request.query_string
        path = rest + (f"?{query}" if query else "")  # forwarded as is
        shown_path = rest + _public_query(query)  # recorded and matched: without a key passed in the query
        raw = await request.read()
        shown = self.redact(raw) if raw else raw
        body = llm_calls.body_value(shown, request.headers.get("content-type", ""))
        model = body.get("model") if isinstance(body, dict) else None
        stream = isinstance(body, dict) and body.get("stream") is True
        key = llm_calls.identity(route, request.method, shown_path, body)
        match = llm_calls.order_identity(route, request.method, shown_path, model)
        att = self._attempt
        assert att is not None
        k, km = att.take("key", key), att.take("match", match)
        call = {"route": route, "method": request.method, "path": shown_path, "body": body, "model": model,
                "key": key, "k": k, "match": match, "km": km, "stream": stream, "attempt": att.n}
        rec = att.table.get(("key", key, k)) if self.match == "identity" else att.table.get(("match", match, km))
        if rec is not None:
            if rec.get("key") != key:
                self._diverged(call, rec)
            return await self._serve(request, call, rec)
        if not self.live:
            return self._refuse(call)
        ok = False
        try:
            held = await self._hold(call)
            if held is not None:
                if held["choice"] == "abort":
                    return web.json_response({"error": {"type": "agent_supervisor_aborted", "message": (
                        "a person aborted this model call at a breakpoint; it was not made")}}, status=409)
                if held["choice"] == "output":
                    ok = True
                    return await self._given(call, held.get("output"))
                if held["choice"] == "inputs":
                    call["extra"] = {"given_inputs": held.get("inputs")}
                    raw = orjson.dumps(held.get("inputs"))
            resp, ok = await self._forward(request, call, upstream.rstrip("/") + path, raw)
            return resp
        finally:
            if not ok:
                att.give_back("key", key)
                att.give_back("match", match)

    # ------------------------------------------------------------------ breakpoints (core.pauses)
    async def _hold(self, call: dict[str, Any]) -> dict[str, Any] | None:
        """A live call whose name matches a breakpoint (or held when its attempt ended) is held before it goes
        upstream: a ``pause`` record in ``llm.jsonl``, then the answer (``answers/llm-SEQ.json``), journaled as a
        ``choice``. ``None``: it goes on at once."""
        name = _call_name(call)
        held = next((p for p in self.pauses.values() if p.get("key") == call["key"] and p.get("k") == call["k"]), None)
        if held is None:
            doc = self.breakpoints.read()
            if not doc["patterns"] and not doc["next"]:
                return None
            pattern = pauses.matches(doc, name)
            if pattern is None and not doc["next"]:
                return None
            if pattern is None:
                pauses.change_breakpoints(self.run_dir, next_step=False)
            held = {"kind": pauses.PAUSE, "step": name, "attempt": call["attempt"], "key": call["key"], "k": call["k"],
                    "inputs": call["body"], "reason": "breakpoint" if pattern else "next", "source": "llm"}
            if pattern:
                held["pattern"] = pattern
            if not await self._write_synced({k: v for k, v in held.items() if k != "source"}, held):
                return None  # it could not be recorded: a hold nothing shows would hang the agent
            self.pauses[held["seq"]] = held
            self.paused_new.append(held)
        seq = int(held["seq"])
        while (answer := pauses.read_answer(self.run_dir, seq, "llm")) is None:
            await asyncio.sleep(0.05)
        self.breakpoints.stale()  # the answer may come with new breakpoints
        choice: dict[str, Any] = {"kind": pauses.CHOICE, "pause": seq, "step": name, "choice": answer["choice"]}
        choice.update({f: answer[f] for f in ("inputs", "output", "by", "answered") if f in answer})
        await self._write_synced(choice, choice)
        self.pauses.pop(seq, None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pauses.answer_path(self.run_dir, seq, "llm"))
        if answer["choice"] == "all":
            pauses.change_breakpoints(self.run_dir, remove=None, next_step=False)
        elif answer["choice"] == "step":
            pauses.change_breakpoints(self.run_dir, next_step=True)
        return answer

    async def _write_synced(self, rec: dict[str, Any], into: dict[str, Any]) -> bool:
        """Write ``rec`` to ``llm.jsonl`` and wait for its sync; its ``seq`` goes to ``into``. ``False``: not written."""
        w = self._writer
        assert w is not None
        try:
            end = w.write(rec)
            into["seq"] = rec["seq"]
            fut = w.synced_future(end)
            if fut is not None:
                await fut
        except JournalError as e:
            print(f"agent-supervisor: a breakpoint could not be recorded ({e}): the model call goes on", file=self.stderr,
                  flush=True)
            return False
        return True

    async def _given(self, call: dict[str, Any], output: Any) -> web.Response:
        """Skip: the call is recorded as answered with the output a person gave (``given``), never made upstream."""
        call["extra"] = {"given": True}
        answer = {"status": 200, "headers": {"content-type": "application/json"}, "body": output}
        await self._record(call, {}, rundir.utc_now(), time.perf_counter(), answer, None)
        return web.json_response(output, status=200)

    def _refuse(self, call: dict[str, Any]) -> web.Response:
        """Not live (``replay --verify``): the first call without a record is the mismatch."""
        if self.mismatch is None:
            self.mismatch = {k: call[k] for k in ("route", "method", "path", "model", "key", "k", "match", "km", "body")}
        return web.json_response(
            {"error": {"type": "agent_supervisor_replay", "message": "this call has no recorded answer "
                       f"(call {call['k'] + 1} of its kind to {call['path']}); replay makes no live calls"}},
            status=409)

    def _diverged(self, call: dict[str, Any], rec: Record) -> None:
        """Order matching served a call whose body differs from the recorded one: say so, and note it."""
        name = f"llm:{call['route']}:{call['model']}"
        self._note({"message": DIVERGED_NOTE, "step": name, "served": rec.get("seq"), "key": call["key"],
                    "recorded_key": rec.get("key"), "attempt": call["attempt"]})
        print(f"agent-supervisor: model call {call['km'] + 1} to {call['path']} ({call['model']}) differs from "
              f"the recorded one (record {rec.get('seq')} of {CALLS}): served the recorded answer "
              "(--llm-match order)", file=self.stderr, flush=True)

    def _note(self, fields: dict[str, Any]) -> None:
        """An informational note, written through to the kernel and not synced."""
        w = self._writer
        if w is not None:
            try:
                w.write({"kind": wire.NOTE, **fields})
            except Exception:  # a note only informs (served, diverged): no answer depends on it
                pass

    async def _serve(self, request: web.Request, call: dict[str, Any], rec: Record) -> web.StreamResponse:
        out = rec["output"]
        headers = {k: v for k, v in (out.get("headers") or {}).items() if k.lower() != "content-length"}
        self._note({"message": SERVED_NOTE, "step": rec.get("step"), "served": rec.get("seq"),
                    "attempt": call["attempt"]})
        status = int(out.get("status", 200))
        if "events" in out:
            resp = web.StreamResponse(status=status, headers=headers)
            await resp.prepare(request)
            await resp.write(b"".join(e.encode() + b"\n\n" for e in out["events"]))
            await resp.write_eof()
            return resp
        return web.Response(status=status, headers=headers, body=llm_calls.body_bytes(out.get("body")))

    async def _forward(self, request: web.Request, call: dict[str, Any], url: str, raw: bytes) -> tuple[web.StreamResponse, bool]:
        """Make the call upstream, record it, and answer: ``(response, succeeded)``."""
        assert self._session is not None
        headers, kept = _request_headers(request.headers)
        started, t0 = rundir.utc_now(), time.perf_counter()
        try:
            upstream = await self._session.request(request.method, url, data=raw, headers=headers,
                                                   allow_redirects=False)
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            err: dict[str, Any] = {"type": "UpstreamError", "message": f"cannot reach {url.split('?')[0]}: {e or type(e).__name__}"}
            return await self._upstream_failed(call, kept, started, t0, err), False
        back, recorded_headers = _response_headers(upstream.headers)
        ok = upstream.status < 400
        if "text/event-stream" in upstream.headers.get("content-type", ""):
            return await self._stream(request, call, kept, started, t0, upstream, back, recorded_headers), ok
        try:
            data = await upstream.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            err = {"type": "UpstreamError", "status": upstream.status, "message": f"the answer broke off: {e}"}
            return await self._upstream_failed(call, kept, started, t0, err), False
        finally:
            upstream.release()
        answer = {"status": upstream.status, "headers": recorded_headers,
                  "body": llm_calls.body_value(self._redacted(data), upstream.headers.get("content-type", ""))}
        await self._record(call, kept, started, t0, answer if ok else None, None if ok else self._http_error(answer))
        return web.Response(status=upstream.status, headers=back, body=data), ok

    async def _upstream_failed(self, call: dict[str, Any], kept: dict[str, str], started: str, t0: float,
                               err: dict[str, Any]) -> web.Response:
        """No whole answer came from upstream: the call's error recorded, a 502 for the agent."""
        await self._record(call, kept, started, t0, None, err)
        return web.json_response({"error": {"type": "agent_supervisor_upstream", "message": err["message"]}},
                                 status=502)

    async def _stream(
        self, request: web.Request, call: dict[str, Any], kept: dict[str, str], started: str, t0: float,
        upstream: aiohttp.ClientResponse, back: dict[str, str], recorded_headers: dict[str, str],
    ) -> web.StreamResponse:
        """Forward a streamed answer event by event; its final event once it is recorded. The upstream is read
        to its end by a task of its own, whether the agent stays to the end or not."""
        q: asyncio.Queue[bytes | None] = asyncio.Queue()
        task = asyncio.get_running_loop().create_task(self._pump(call, kept, started, t0, upstream, recorded_headers, q))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        resp = web.StreamResponse(status=upstream.status, headers=back)
        try:
            await resp.prepare(request)
            while True:
                chunk = await q.get()
                if chunk is None:
                    break
                await resp.write(chunk)
            await resp.write_eof()
        except (ConnectionError, aiohttp.ClientError, asyncio.CancelledError, RuntimeError):
            pass  # the agent went away: the pump goes on and records the whole answer
        return resp

    async def _pump(
        self, call: dict[str, Any], kept: dict[str, str], started: str, t0: float, upstream: aiohttp.ClientResponse,
        recorded_headers: dict[str, str], q: asyncio.Queue[bytes | None],
    ) -> None:
        events: list[str] = []
        held: list[bytes] = []
        rest = b""
        broke = ""
        try:
            async for chunk in upstream.content.iter_any():
                done, rest = llm_calls.sse_events(rest + chunk)
                out: list[bytes] = []
                for block in done:
                    events.append(block)
                    data = block.encode() + b"\n\n"
                    (held if held or llm_calls.is_final_event(block) else out).append(data)
                if out:
                    q.put_nowait(b"".join(out))
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            broke = f"the stream broke off: {e or type(e).__name__}"
        finally:
            upstream.release()
        if rest.strip():
            events.append(rest.decode(errors="replace"))
            held.append(rest)
        answer = {"status": upstream.status, "headers": recorded_headers,
                  "events": [self._redacted(e.encode()).decode(errors="replace") for e in events]}
        ok = upstream.status < 400 and not broke
        err = None if ok else {**self._http_error(answer), **({"message": broke, "type": "UpstreamError"} if broke else {})}
        try:
            await self._record(call, kept, started, t0, answer if ok else None, err)
        finally:
            if held:
                q.put_nowait(b"".join(held))
            q.put_nowait(None)

    def _redacted(self, data: bytes) -> bytes:
        return self.redact(data) if data else data

    @staticmethod
    def _http_error(answer: dict[str, Any]) -> dict[str, Any]:
        status = answer["status"]
        body = answer.get("body")
        msg = ""
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            msg = str(body["error"].get("message", ""))
        return {"type": "HTTPError", "status": status, "message": msg or f"HTTP {status}",
                **{k: v for k, v in answer.items() if k != "status"}}

    async def _record(
        self, call: dict[str, Any], headers: dict[str, str], started: str, t0: float,
        answer: dict[str, Any] | None, error: dict[str, Any] | None,
    ) -> None:
        """Write the call's record and wait for its sync."""
        w = self._writer
        assert w is not None
        blobs: dict[str, Any] = {}
        heads: dict[str, str] = {}
        body = self._compactor.compact(call["body"], blobs, heads)
        route, model = call["route"], call["model"]
        api = llm_calls.api_of(call["path"])
        rec: dict[str, Any] = {
            "kind": wire.STEP, "step": _call_name(call),
            "attempt": call["attempt"], "started": started,
            "dur_ms": round((time.perf_counter() - t0) * 1000, 3),
            "call": {"kind": "model", "via": "proxy", "provider": route, "model": model, "api": api,
                     "stream": call["stream"]},
            "key": call["key"], "k": call["k"], "match": call["match"], "km": call["km"],
            "inputs": {"method": call["method"], "path": call["path"], "headers": headers, "body": body},
        }
        if blobs:
            rec["blobs"] = blobs
        if call.get("extra"):
            rec.update(call["extra"])  # a person's answer at a breakpoint: other inputs, or the output given
        if answer is not None:
            rec["output"] = answer
            usage = llm_calls.usage_of(route, answer.get("body"), answer.get("events", ()), model)
            if usage:
                rec["usage"] = usage
        else:
            rec["error"] = error
        try:
            end = w.write(rec)
            self._compactor.written(rec["seq"], heads, blobs)
            fut = w.synced_future(end)
            if fut is not None:
                await fut
        except JournalError as e:  # a full or failing disk: the agent still gets what it paid for
            if not self._unrecorded:
                print(f"agent-supervisor: model calls can no longer be recorded ({e}); they are passed through, "
                      "and a restart pays for them again", file=self.stderr, flush=True)
            self._unrecorded += 1


def _call_name(call: dict[str, Any]) -> str:
    """A proxied call's step name: ``llm:<provider>:<model>`` (the API when the body names no model)."""
    model = call["model"]
    return f"llm:{call['route']}:{model if isinstance(model, str) else llm_calls.api_of(call['path'])}"
