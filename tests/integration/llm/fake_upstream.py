"""A fake OpenAI- and Anthropic-compatible model server for the model-call proxy's tests.

Run as a process of its own (the tests kill agents, never this server)::

    python fake_upstream.py --port-file F --count-file C [--port N]

writes its port to F once it listens on 127.0.0.1 and rewrites C (atomically) with the counts at the arrival
and at the end of every request; or use :class:`FakeUpstream` in-process (``start()``, ``url``, ``counts()``,
``stop()``). Endpoints: ``POST /v1/chat/completions``, ``POST /v1/responses``, ``POST /v1/messages``,
``GET /_counts``.

Every answer derives from the sha256 of the request body's canonical JSON: the same request always gets the
same answer, different requests different ones. Behaviours are asked for by the content of the last message:

- ``FAIL429-ONCE:<tag>``: a 429 (``retry-after: 0``, ``retry-after-ms: 20``) the first time this process
  sees the tag, normal answers after;
- ``SLOW``: a streamed answer of ``SLOW_CHUNKS`` deltas ``SLOW_DELAY`` seconds apart (a non-streamed one
  waits as long before its answer), so a test can kill the client mid-stream.

Credentials: the OpenAI endpoints want ``Authorization: Bearer sk-test...``, ``/v1/messages`` a non-empty
``x-api-key`` or bearer token (else 401). Each request's entry in the counts holds ``key_sha`` (the first 12 hex of the
sha256 of the credential it carried) so a test can tell the agent's own key reached the server, without the
key itself being written anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

SLOW_CHUNKS = 20
SLOW_DELAY = 0.05
CHUNKS = 5
"""Content deltas of an ordinary streamed answer."""
CREATED = 1_700_000_000
"""The ``created`` time of every answer (a fixed value: answers are deterministic)."""

WORDS = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
    "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
    "whiskey", "xray", "yankee", "zulu",
)

OPENAI_PATHS = ("/v1/chat/completions", "/v1/responses")
ANTHROPIC_PATHS = ("/v1/messages",)


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def answer_text(h: str, n_words: int = 8) -> str:
    """The deterministic answer to a request whose body hashes to ``h``."""
    raw = bytes.fromhex(h)
    return f"[{h[:8]}] " + " ".join(WORDS[b % len(WORDS)] for b in raw[:n_words])


def pieces(text: str, n: int) -> list[str]:
    """``text`` cut into ``n`` non-empty consecutive parts (fewer if it is shorter)."""
    n = max(1, min(n, len(text)))
    step, extra = divmod(len(text), n)
    out, i = [], 0
    for j in range(n):
        k = i + step + (1 if j < extra else 0)
        out.append(text[i:k])
        i = k
    return out


def usage_of(h: str, text: str) -> dict[str, int]:
    """Token figures in the project's convention: input counts every prompt token, cached ones included."""
    raw = bytes.fromhex(h)
    cached = raw[20] % 8
    creation = raw[21] % 5
    fresh = 10 + raw[22] % 50
    return {
        "input_tokens": fresh + cached + creation,
        "output_tokens": len(text.split()) + 2,
        "cached_tokens": cached,
        "cache_creation_tokens": creation,
        "reasoning_tokens": raw[23] % 4,
    }


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts/blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif "content" in part:  # a tool_result block
                    out.append(text_of(part["content"]))
        return "\n".join(out)
    return ""


def last_message(body: dict[str, Any], path: str) -> tuple[str, str]:
    """(kind, text) of the request's last message: kind is ``user``, ``tool`` (a tool's result) or ``other``."""
    if path == "/v1/responses":
        inp = body.get("input")
        if isinstance(inp, str):
            return "user", inp
        if isinstance(inp, list) and inp:
            last = inp[-1]
            if isinstance(last, dict):
                if last.get("type") == "function_call_output":
                    return "tool", str(last.get("output", ""))
                if last.get("role") == "user":
                    return "user", text_of(last.get("content"))
        return "other", ""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], dict):
        return "other", ""
    last = msgs[-1]
    role = last.get("role")
    content = last.get("content")
    if role == "tool":
        return "tool", text_of(content)
    if role == "user":
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            return "tool", text_of(content)
        return "user", text_of(content)
    return "other", text_of(content)


def tool_name(body: dict[str, Any], path: str) -> str | None:
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    first = tools[0]
    if path == "/v1/chat/completions":
        fn = first.get("function")
        return fn.get("name") if isinstance(fn, dict) else None
    return first.get("name")  # Responses and Anthropic tools name themselves


def sse(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


class Counts:
    """Every request served, in arrival order; written to ``count_file`` (atomically) on each change."""

    def __init__(self, count_file: Path | None) -> None:
        self.count_file = count_file
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.write()

    def add(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Count a request at its arrival (its entry gains no keys later: a snapshot may copy it meanwhile)."""
        with self.lock:
            self.requests.append(entry)
        self.write()
        return entry

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return self.snapshot_unlocked()

    def write(self) -> None:
        if self.count_file is None:
            return
        with self.lock:
            data = json.dumps(self.snapshot_unlocked(), indent=1).encode()
            tmp = self.count_file.with_name(self.count_file.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, self.count_file)

    def snapshot_unlocked(self) -> dict[str, Any]:
        reqs = [dict(r) for r in self.requests]
        by_path: dict[str, int] = {}
        for r in reqs:
            by_path[r["path"]] = by_path.get(r["path"], 0) + 1
        return {"total": len(reqs), "by_path": by_path, "requests": reqs}


class App:
    def __init__(self, count_file: Path | None = None) -> None:
        self.counts = Counts(count_file)
        self.seen_tags: set[str] = set()

    def make(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/_counts", self.get_counts)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def get_counts(self, request: web.Request) -> web.Response:
        return web.json_response(self.counts.snapshot())

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        path = request.path
        entry = self.counts.add({"path": path, "method": request.method, "body_sha": sha(raw)[:16], "status": None,
                                 "state": "started", "slow": False, "stream": False, "key_sha": None,
                                 "usage": None})
        try:
            resp = await self.answer(request, raw, entry)
            if entry["status"] is None:
                entry["status"] = resp.status
            entry["state"] = "done"
            return resp
        except (ConnectionResetError, asyncio.CancelledError):
            entry["state"] = "aborted"  # the client went away mid-answer
            raise
        finally:
            self.counts.write()

    async def answer(self, request: web.Request, raw: bytes, entry: dict[str, Any]) -> web.StreamResponse:
        path = request.path
        if request.method != "POST" or path not in OPENAI_PATHS + ANTHROPIC_PATHS:
            return web.json_response({"error": {"message": f"no route {request.method} {path}"}}, status=404)
        auth = request.headers.get("Authorization", "")
        bearer = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        if path in OPENAI_PATHS:
            cred = bearer if bearer and bearer.startswith("sk-test") else None
        else:  # curl sends x-api-key; the anthropic package (2.x) sends its api_key as a bearer token
            cred = request.headers.get("x-api-key") or bearer or None
        if cred is None:
            return error(path, 401, "authentication_error", "missing or wrong credentials")
        entry["key_sha"] = sha(cred.encode())[:12]
        try:
            body = json.loads(raw)
        except ValueError:
            return error(path, 400, "invalid_request_error", "the body is not JSON")
        if not isinstance(body, dict):
            return error(path, 400, "invalid_request_error", "the body is not a JSON object")
        _, text = last_message(body, path)
        for word in text.split():
            if word.startswith("FAIL429-ONCE:") and word not in self.seen_tags:
                self.seen_tags.add(word)
                return error(path, 429, "rate_limit_error", "rate limited (fake, once)",
                             headers={"retry-after": "0", "retry-after-ms": "20"})
        slow = "SLOW" in text
        stream = bool(body.get("stream"))
        entry.update(slow=slow, stream=stream)
        result, use = render(path, body)
        entry["usage"] = {k: use[k] for k in ("input_tokens", "output_tokens", "cached_tokens")}
        self.counts.write()  # what the request is (slow, streamed), before its answer: a test waits on it
        h = sha(canonical(body))
        if not stream:
            if slow:
                await asyncio.sleep(SLOW_DELAY * SLOW_CHUNKS)
            assert isinstance(result, dict)
            return web.json_response(result, headers={"x-request-id": f"req_{h[:12]}"})
        assert isinstance(result, list)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache",
                                           "x-request-id": f"req_{h[:12]}"})
        entry["status"] = 200
        await resp.prepare(request)
        for i, event in enumerate(result):
            if slow and i:
                await asyncio.sleep(SLOW_DELAY)
            await resp.write(event)
        await resp.write_eof()
        return resp


def render(path: str, body: dict[str, Any]) -> tuple[dict[str, Any] | list[bytes], dict[str, int]]:
    """The successful answer to ``body`` on ``path``: a JSON body, or the SSE event blocks of a stream
    (each with its blank line); and its token figures (:func:`usage_of`)."""
    h = sha(canonical(body))
    kind, _ = last_message(body, path)
    tool = tool_name(body, path) if kind == "user" else None
    reply = answer_text(h)
    use = usage_of(h, reply)
    model = str(body.get("model", "fake-model"))
    stream = bool(body.get("stream"))
    if path == "/v1/chat/completions":
        make = chat_stream if stream else chat_json
    elif path == "/v1/responses":
        make = responses_stream if stream else responses_json
    else:
        make = messages_stream if stream else messages_json
    return make(h, model, reply, use, tool, body), use


def error(path: str, status: int, typ: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    if path in ANTHROPIC_PATHS:
        body: dict[str, Any] = {"type": "error", "error": {"type": typ, "message": message}}
    else:
        body = {"error": {"message": message, "type": typ, "param": None, "code": typ}}
    return web.json_response(body, status=status, headers=headers)


# ---------------------------------------------------------------- OpenAI Chat Completions


def chat_usage(use: dict[str, int]) -> dict[str, Any]:
    return {
        "prompt_tokens": use["input_tokens"],
        "completion_tokens": use["output_tokens"],
        "total_tokens": use["input_tokens"] + use["output_tokens"],
        "prompt_tokens_details": {"cached_tokens": use["cached_tokens"]},
        "completion_tokens_details": {"reasoning_tokens": use["reasoning_tokens"]},
    }


def tool_arguments(h: str) -> str:
    return json.dumps({"query": h[:6]}, separators=(",", ":"))


def chat_json(h: str, model: str, reply: str, use: dict[str, int], tool: str | None, body: dict[str, Any]) -> dict[str, Any]:
    if tool:
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{h[:12]}", "type": "function", "function": {"name": tool, "arguments": tool_arguments(h)}}]}
        finish = "tool_calls"
    else:
        message, finish = {"role": "assistant", "content": reply}, "stop"
    return {"id": f"chatcmpl-{h[:16]}", "object": "chat.completion", "created": CREATED, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": chat_usage(use), "system_fingerprint": "fp_fake"}


def chat_stream(h: str, model: str, reply: str, use: dict[str, int], tool: str | None, body: dict[str, Any]) -> list[bytes]:
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    n = SLOW_CHUNKS if "SLOW" in last_message(body, "/v1/chat/completions")[1] else CHUNKS

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        c: dict[str, Any] = {"id": f"chatcmpl-{h[:16]}", "object": "chat.completion.chunk", "created": CREATED,
                             "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if include_usage:
            c["usage"] = None
        return sse(c)

    out = [chunk({"role": "assistant", "content": ""})]
    if tool:
        args = tool_arguments(h)
        half = len(args) // 2
        out.append(chunk({"tool_calls": [{"index": 0, "id": f"call_{h[:12]}", "type": "function",
                                           "function": {"name": tool, "arguments": args[:half]}}]}))
        out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}))
        out.append(chunk({}, "tool_calls"))
    else:
        out += [chunk({"content": p}) for p in pieces(reply, n)]
        out.append(chunk({}, "stop"))
    if include_usage:
        out.append(sse({"id": f"chatcmpl-{h[:16]}", "object": "chat.completion.chunk", "created": CREATED,
                        "model": model, "choices": [], "usage": chat_usage(use)}))
    out.append(sse("[DONE]"))
    return out


# ---------------------------------------------------------------- OpenAI Responses


def responses_usage(use: dict[str, int]) -> dict[str, Any]:
    return {"input_tokens": use["input_tokens"], "input_tokens_details": {"cached_tokens": use["cached_tokens"]},
            "output_tokens": use["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": use["reasoning_tokens"]},
            "total_tokens": use["input_tokens"] + use["output_tokens"]}


def response_object(h: str, model: str, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": f"resp_{h[:16]}", "object": "response", "created_at": CREATED, "status": status, "model": model,
            "output": output, "usage": usage, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "metadata": {}, "error": None, "incomplete_details": None, "instructions": None,
            "temperature": 1.0, "top_p": 1.0}


def responses_items(h: str, reply: str, tool: str | None) -> list[dict[str, Any]]:
    if tool:
        return [{"type": "function_call", "id": f"fc_{h[:12]}", "call_id": f"call_{h[:12]}", "name": tool,
                 "arguments": tool_arguments(h), "status": "completed"}]
    return [{"type": "message", "id": f"msg_{h[:12]}", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": reply, "annotations": []}]}]


def responses_json(h: str, model: str, reply: str, use: dict[str, int], tool: str | None, body: dict[str, Any]) -> dict[str, Any]:
    return response_object(h, model, "completed", responses_items(h, reply, tool), responses_usage(use))


def responses_stream(h: str, model: str, reply: str, use: dict[str, int], tool: str | None, body: dict[str, Any]) -> list[bytes]:
    seq = iter(range(10_000))
    out: list[bytes] = []

    def ev(typ: str, **fields: Any) -> None:
        out.append(sse({"type": typ, "sequence_number": next(seq), **fields}, event=typ))

    ev("response.created", response=response_object(h, model, "in_progress", [], None))
    ev("response.in_progress", response=response_object(h, model, "in_progress", [], None))
    items = responses_items(h, reply, tool)
    item = items[0]
    if tool:
        ev("response.output_item.added", output_index=0, item={**item, "arguments": "", "status": "in_progress"})
        ev("response.function_call_arguments.delta", item_id=item["id"], output_index=0, delta=item["arguments"])
        ev("response.function_call_arguments.done", item_id=item["id"], output_index=0, arguments=item["arguments"])
    else:
        n = SLOW_CHUNKS if "SLOW" in last_message(body, "/v1/responses")[1] else CHUNKS
        ev("response.output_item.added", output_index=0,
           item={**item, "status": "in_progress", "content": []})
        part = {"type": "output_text", "text": "", "annotations": []}
        ev("response.content_part.added", item_id=item["id"], output_index=0, content_index=0, part=part)
        for p in pieces(reply, n):
            ev("response.output_text.delta", item_id=item["id"], output_index=0, content_index=0, delta=p, logprobs=[])
        ev("response.output_text.done", item_id=item["id"], output_index=0, content_index=0, text=reply, logprobs=[])
        ev("response.content_part.done", item_id=item["id"], output_index=0, content_index=0,
           part={**part, "text": reply})
    ev("response.output_item.done", output_index=0, item=item)
    ev("response.completed", response=response_object(h, model, "completed", items, responses_usage(use)))
    return out


# ---------------------------------------------------------------- Anthropic Messages


def messages_usage(use: dict[str, int]) -> dict[str, int]:
    return {"input_tokens": use["input_tokens"] - use["cached_tokens"] - use["cache_creation_tokens"],
            "output_tokens": use["output_tokens"], "cache_read_input_tokens": use["cached_tokens"],
            "cache_creation_input_tokens": use["cache_creation_tokens"]}


def tool_input(h: str) -> dict[str, Any]:
    return {"query": h[:6]}


def messages_json(h: str, model: str, reply: str, use: dict[str, int], tool: str | None, body: dict[str, Any]) -> dict[str, Any]:
    if tool:
        content: list[dict[str, Any]] = [{"type": "tool_use", "id": f"toolu_{h[:12]}", "name": tool, "input": tool_input(h)}]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": reply}], "end_turn"
    return {"id": f"msg_{h[:16]}", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": messages_usage(use)}


def messages_stream(h: str, model: str, reply: str, use: dict[str, int], tool: str | None, body: dict[str, Any]) -> list[bytes]:
    out: list[bytes] = []

    def ev(typ: str, **fields: Any) -> None:
        out.append(sse({"type": typ, **fields}, event=typ))

    start_usage = {**messages_usage(use), "output_tokens": 1}
    ev("message_start", message={"id": f"msg_{h[:16]}", "type": "message", "role": "assistant", "model": model,
                                 "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage})
    if tool:
        ev("content_block_start", index=0, content_block={"type": "tool_use", "id": f"toolu_{h[:12]}", "name": tool, "input": {}})
        ev("ping")
        args = json.dumps(tool_input(h), separators=(",", ":"))
        for p in pieces(args, 2):
            ev("content_block_delta", index=0, delta={"type": "input_json_delta", "partial_json": p})
        stop = "tool_use"
    else:
        n = SLOW_CHUNKS if "SLOW" in last_message(body, "/v1/messages")[1] else CHUNKS
        ev("content_block_start", index=0, content_block={"type": "text", "text": ""})
        ev("ping")
        for p in pieces(reply, n):
            ev("content_block_delta", index=0, delta={"type": "text_delta", "text": p})
        stop = "end_turn"
    ev("content_block_stop", index=0)
    ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None}, usage={"output_tokens": use["output_tokens"]})
    ev("message_stop")
    return out


# ---------------------------------------------------------------- running it


class FakeUpstream:
    """The server in a thread of this process: ``start()``, then ``url`` (no trailing slash), ``counts()``."""

    def __init__(self, count_file: Path | None = None, port: int = 0) -> None:
        self.app = App(count_file)
        self.want_port = port
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def counts(self) -> dict[str, Any]:
        return self.app.counts.snapshot()

    def start(self) -> FakeUpstream:
        ready = threading.Event()
        failed: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as e:  # the caller is told in start()
                failed.append(e)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._cleanup())
            loop.close()

        self.thread = threading.Thread(target=run, name="fake-upstream", daemon=True)
        self.thread.start()
        if not ready.wait(10):
            raise RuntimeError("the fake upstream did not start in 10 s")
        if failed:
            raise failed[0]
        return self

    async def _serve(self) -> None:
        self.runner = web.AppRunner(self.app.make(), access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.want_port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _cleanup(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    def stop(self) -> None:
        if self.loop is not None and self.thread is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", type=Path, help="written (atomically) with the port once listening")
    ap.add_argument("--count-file", type=Path, help="rewritten (atomically) with the counts after each request")
    args = ap.parse_args(argv)
    up = FakeUpstream(args.count_file, args.port).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.port_file is not None:
        tmp = args.port_file.with_name(args.port_file.name + ".tmp")
        tmp.write_text(f"{up.port}\n")
        os.replace(tmp, args.port_file)
    print(f"fake upstream listening on {up.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    up.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
