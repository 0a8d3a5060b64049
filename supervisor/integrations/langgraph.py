"""LangGraph adapter: a checkpointer kept in the run directory, and model and tool calls journaled as steps.

``pip install 'agent-supervisor-tui[langgraph]'``::

    with Run.open() as run, JournalSaver(run) as saver:
        model, tools = saver.journaled(chat_model, [search, lookup])  # the one line: every call a journaled step
        agent = create_react_agent(model, tools, checkpointer=saver)  # or a StateGraph of your own, compiled the same

- :class:`JournalSaver` is a ``BaseCheckpointSaver`` (sync and async) kept in ``<run dir>/langgraph/checkpoints.jsonl``:
  an append-only JSON-lines file, one line per ``put``/``put_writes``/deletion, each synced (``fdatasync``) before the
  call returns. A ``put`` line holds only the channels in ``new_versions`` (each channel value version is written once;
  unchanged channels are found by their version in earlier lines), so a long thread does not rewrite its whole state
  per step as a full snapshot per checkpoint would. Deletions (``delete_thread``, ``delete_for_runs``, ``prune``) and
  ``copy_thread`` are lines too: the file stays append-only, like every file of the run directory.
- :func:`journaled` (:meth:`JournalSaver.journaled`) wraps a graph's chat model and its tools at once, as the two
  below:
- :class:`JournaledChatModel` wraps a ``BaseChatModel``: each ``_generate``/``_agenerate`` is a step
  ``model:<model>@<node>:<superstep>:<hash>`` whose output (the ``ChatResult``) is journaled as JSON and comes back as
  a ``ChatResult`` of the same messages on resume, with the call's token usage (``run.usage``).
- :func:`journaled_tools` / :class:`JournaledTool` wrap LangChain tools: each call is a step
  ``tool:<name>@<node>:<superstep>:<hash>#<tool call id>``; ``ToolNode`` runs them.

Step identity. LangGraph resumes a thread from its last checkpoint: the nodes that finished are not run again, the
interrupted one is. A resumed attempt's calls are therefore a subset of the first attempt's, not a replay of its
sequence, so a call's step name carries where and with what it was made: ``@<node>[<branch>]:<superstep>:<hash>``
(``[<branch>]``: the index of the ``Send`` that started the task; the hash covers the thread, node path, superstep,
task path and the call's inputs, see :func:`_place`) and, for a tool, ``#<tool call id>``; ``k`` then counts identical
calls. The adapter switches its run to matching by ``(name, k)`` (the rule overlapping steps use), since the calls of
the nodes that finished are not made again. The record's ``call`` names the node, superstep and branch too.

A node run again in the same process (``interrupt()`` then ``Command(resume=...)``, or after an error) is answered
as a new process resuming after a crash is: the calls its earlier run finished come from :class:`_Memo` (the journal
cannot serve a step twice in one process), so a clean run and a resumed one make the same calls.
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import hashlib
import math
import os
import random
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, MutableSequence, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, cast

import orjson

from ..core import rundir
from ..core.journal_writer import move_torn
from ..errors import JournalError, JournalLockedError, StepPassThrough

try:
    from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import RunnableBinding, RunnableConfig, ensure_config
    from langchain_core.tools import BaseTool
    from langchain_core.tools import tool as create_tool
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.errors import GraphBubbleUp

    from .langgraph_served import give_back, hide_usage, hiding
except ImportError as e:  # pragma: no cover - the extra is installed wherever the tests run
    raise ImportError(
        f"supervisor.integrations.langgraph needs LangGraph and LangChain core ({e}): "
        "pip install 'agent-supervisor-tui[langgraph]'"
    ) from e

__all__ = ["JournalSaver", "JournaledChatModel", "JournaledTool", "journaled", "journaled_model", "journaled_tools"]

FILE_NAME = "checkpoints.jsonl"
DIR_NAME = "langgraph"

# ---------------------------------------------------------------------------------------------- values on disk
_PLAIN_SCALARS = (str, bool, type(None))


def _plain(v: Any, depth: int = 0) -> bool:
    """Whether ``v`` is JSON exactly as it is (``dict`` with ``str`` keys, ``list``, strings, 64-bit integers, finite
    floats, booleans, ``None``, of those exact types): written as readable JSON and read back equal, of the same types."""
    t = type(v)
    if t in _PLAIN_SCALARS:
        return True
    if t is int:
        return bool(-(1 << 63) <= v < (1 << 64))
    if t is float:
        return math.isfinite(v)
    if depth > 64:
        return False
    if t is list:
        return all(_plain(x, depth + 1) for x in v)
    if t is dict:
        return all(type(k) is str and _plain(x, depth + 1) for k, x in v.items())
    return False


class JournalSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer kept in a run directory (``<run dir>/langgraph/checkpoints.jsonl``).

    ``JournalSaver(run)`` (a :class:`supervisor.Run`) or ``JournalSaver(run_dir)`` (a path). Sync and async methods;
    one writing process per file (an ``flock``: a second one gets :class:`~supervisor.errors.JournalLockedError`).
    ``serde``: LangGraph's serializer (default ``JsonPlusSerializer``); with the default, values that are plain JSON
    are written as JSON, others as the serializer's typed bytes (base64). ``close()`` (or ``with``) releases the file.
    Given a :class:`~supervisor.Run` that ``agent-supervisor replay`` opened, it reads the file and writes nothing
    (its puts stay in memory), as a replay writes nothing to the run directory.
    """

    def __init__(self, run_dir: Any, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self._json_ok = serde is None  # a serializer given (encryption, say) sees every value
        self.run: Any = run_dir if callable(getattr(run_dir, "step", None)) else None
        """The :class:`~supervisor.Run` given (``None``: a path), whose steps :meth:`journaled` wraps calls in."""
        base = Path(getattr(run_dir, "run_dir", run_dir))
        # a Run opened by `agent-supervisor replay` writes nothing: the saver reads the file and keeps its writes in memory
        self.read_only = bool(getattr(run_dir, "replay_mode", ""))
        directory = base / DIR_NAME if self.read_only else rundir.ensure_dir(rundir.ensure_dir(base) / DIR_NAME)
        self.path = directory / FILE_NAME
        self._lock = threading.RLock()
        self._sync = rundir.datasync_function()
        # (thread, ns) -> checkpoint id -> (checkpoint without values, metadata, parent id); values packed
        self._cps: dict[tuple[str, str], dict[str, tuple[Any, Any, str | None]]] = {}
        # (thread, ns, channel, version) -> packed value, None for a channel written empty
        self._blobs: dict[tuple[str, str, str, Any], Any] = {}
        # (thread, ns, checkpoint id) -> (task id, idx) -> (task id, channel, packed value, task path)
        self._writes: dict[tuple[str, str, str], dict[tuple[str, int], tuple[str, str, Any, str]]] = {}
        self._fd = -1
        self._open()

    # ------------------------------------------------------------------ file
    def _open(self) -> None:
        if self.read_only:
            try:
                self._load(rundir.read_run_file(self.path))  # a torn last line is ignored, not moved aside
            except FileNotFoundError:
                pass  # a replay of a run that never checkpointed: nothing to read, and a replay writes nothing
            return
        new = not self.path.exists()
        fd = rundir.open_run_file(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        if new:
            rundir.fsync_dir(self.path.parent)  # the new file's name is durable before its first line counts
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise JournalLockedError(
                    f"{self.path} is in use by another JournalSaver (another process, or an open one in this "
                    "process): one writer per run directory; close the other (saver.close()) or use another run directory"
                ) from None
            data = self._read_all(fd)
            good = self._load(data)
            if good < len(data):
                move_torn(fd, self.path, data[good:], good)  # a torn last line: kept in checkpoints.jsonl.torn
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    @staticmethod
    def _read_all(fd: int) -> bytes:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks: list[bytes] = []
        while b := os.read(fd, 1 << 20):
            chunks.append(b)
        return b"".join(chunks)

    def _load(self, data: bytes) -> int:
        """Apply every line; returns the length of the whole lines (a torn last line is left for the caller)."""
        start = 0
        n = len(data)
        lineno = 0
        while start < n:
            end = data.find(b"\n", start)
            if end < 0:
                return start  # no newline: a write the crash interrupted
            lineno += 1
            line = data[start:end]
            start = end + 1
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
                self._apply(rec)
            except (ValueError, KeyError, TypeError, IndexError) as e:
                if start >= n:
                    return start - len(line) - 1  # the last line, cut short: torn
                raise JournalError(
                    f"{self.path}:{lineno}: damaged checkpoint line ({e}); the saver cannot know what it held: "
                    "put it back from a backup, or move the file aside to start the graph's threads anew"
                ) from None
        return start

    def _append(self, rec: dict[str, Any]) -> None:
        """One line, synced before it counts; the in-memory index follows only once it is on disk."""
        line = orjson.dumps(rec) + b"\n"
        with self._lock:
            if self.read_only:
                self._apply(rec)
                return
            if self._fd < 0:
                raise JournalError(f"{self.path}: this JournalSaver is closed")
            size = os.fstat(self._fd).st_size
            try:
                rundir.write_all(self._fd, line)
                self._sync(self._fd)
            except OSError as e:
                try:
                    os.ftruncate(self._fd, size)
                except OSError:
                    pass  # the next open moves the partial line aside as torn: nothing is lost either way
                raise JournalError(f"{self.path}: the checkpoint line was not written ({e})") from None
            self._apply(rec)

    def journaled(self, model: Any, tools: Sequence[BaseTool | Callable[..., Any]] = ()) -> tuple[Any, list[JournaledTool]]:
        """``model, tools = saver.journaled(model, tools)``: :func:`journaled` with this saver's run, so that the
        checkpointer's one line gives a graph durable calls too::

            agent = create_react_agent(*saver.journaled(model, tools), checkpointer=saver)
        """
        if self.run is None:
            raise TypeError(
                f"this JournalSaver was given a path ({self.path.parent.parent}), not a Run: open it as "
                "JournalSaver(run) (run = Run.open(...)), or call journaled(model, tools, run)"
            )
        return journaled(model, tools, self.run)

    def close(self) -> None:
        """Release the file (and its lock). The saver cannot be used after."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> JournalSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ encoding
    def _pack(self, v: Any) -> Any:
        if self._json_ok and _plain(v):
            return {"json": v}
        t, b = self.serde.dumps_typed(v)
        return {"type": t, "b64": base64.b64encode(b).decode("ascii")}

    @staticmethod
    def _held(p: dict[str, Any]) -> tuple[str | None, bytes]:
        """A value as a line holds it, as the index keeps it: bytes (``None``: JSON), never an object LangGraph may
        change in place later (the value it put, or one it got back and mutated, as a resume list)."""
        if "json" in p:
            return None, orjson.dumps(p["json"])
        return p["type"], base64.b64decode(p["b64"])

    def _unpack(self, h: tuple[str | None, bytes]) -> Any:
        """A new object for each read."""
        if h[0] is None:
            return orjson.loads(h[1])
        return self.serde.loads_typed((h[0], h[1]))

    # ------------------------------------------------------------------ the lines, applied in order
    def _apply(self, rec: dict[str, Any]) -> None:
        """Replay one recorded operation onto the in-memory store."""
        apply = self._APPLY.get(rec["op"])
        if apply is None:
            raise ValueError(f"unknown op {rec['op']!r}")
        apply(self, rec)

    def _apply_put(self, rec: dict[str, Any]) -> None:
        t, ns = rec["thread"], rec["ns"]
        for ch, (ver, packed) in rec["blobs"].items():
            self._blobs[(t, ns, ch, ver)] = None if packed is None else self._held(packed)
        entry = (self._held(rec["checkpoint"]), self._held(rec["metadata"]), rec["parent"])
        self._cps.setdefault((t, ns), {})[rec["id"]] = entry

    def _apply_writes(self, rec: dict[str, Any]) -> None:
        key = (rec["thread"], rec["ns"], rec["id"])
        stored = self._writes.setdefault(key, {})
        task, path = rec["task"], rec["path"]
        for idx, ch, packed in rec["writes"]:
            if idx >= 0 and (task, idx) in stored:
                continue  # a write is kept once (a retried task's writes are the same)
            stored[(task, idx)] = (task, ch, self._held(packed), path)

    def _apply_delete_runs(self, rec: dict[str, Any]) -> None:
        runs = set(rec["runs"])
        self._drop(lambda t, ns, cid: self._run_id(t, ns, cid) in runs)

    def _apply_prune(self, rec: dict[str, Any]) -> None:
        threads = set(rec["threads"])
        if rec["strategy"] == "delete":
            for t in threads:
                self._drop(lambda t2, ns, cid, t=t: t2 == t, blobs_of=t)
        else:
            latest = {key: max(cps) for key, cps in self._cps.items() if key[0] in threads and cps}
            self._drop(lambda t, ns, cid: t in threads and cid != latest.get((t, ns)))

    _APPLY: ClassVar[dict[str, Callable[[JournalSaver, dict[str, Any]], None]]] = {
        "put": _apply_put,
        "writes": _apply_writes,
        "delete_thread": lambda self, rec: self._drop(lambda t, ns, cid: t == rec["thread"], blobs_of=rec["thread"]),
        "delete_runs": _apply_delete_runs,
        "prune": _apply_prune,
        "copy_thread": lambda self, rec: self._copy(rec["from"], rec["to"]),
    }
    """The recorded operations by name (``op``)."""

    def _run_id(self, t: str, ns: str, cid: str) -> Any:
        md = self._cps[(t, ns)][cid][1]
        return self._unpack(md).get("run_id")

    def _drop(self, gone: Any, blobs_of: str | None = None) -> None:
        for (t, ns), cps in list(self._cps.items()):
            for cid in [c for c in cps if gone(t, ns, c)]:
                del cps[cid]
                self._writes.pop((t, ns, cid), None)
            if not cps:
                del self._cps[(t, ns)]
        if blobs_of is not None:
            for bkey in [k for k in self._blobs if k[0] == blobs_of]:
                del self._blobs[bkey]
            for wkey in [k for k in self._writes if k[0] == blobs_of]:
                del self._writes[wkey]

    def _copy(self, src: str, dst: str) -> None:
        for (t, ns), cps in list(self._cps.items()):
            if t == src:
                self._cps.setdefault((dst, ns), {}).update(cps)
        for (t, ns, ch, ver), packed in list(self._blobs.items()):
            if t == src:
                self._blobs[(dst, ns, ch, ver)] = packed
        for (t, ns, cid), w in list(self._writes.items()):
            if t == src:
                self._writes[(dst, ns, cid)] = dict(w)

    # ------------------------------------------------------------------ reading
    def _tuple(self, t: str, ns: str, cid: str, entry: tuple[Any, Any, str | None], md: Any = None) -> CheckpointTuple:
        skel, md_packed, parent = entry
        cp: dict[str, Any] = dict(self._unpack(skel))
        values: dict[str, Any] = {}
        for ch, ver in cp["channel_versions"].items():
            packed = self._blobs.get((t, ns, ch, ver))
            if packed is not None:
                values[ch] = self._unpack(packed)
        cp["channel_values"] = values
        stored = self._writes.get((t, ns, cid), {})
        writes = [
            (w[0], w[1], self._unpack(w[2]))
            for _key, w in sorted(stored.items(), key=lambda kv: writes_sort_key(kv[1][3], *kv[0]))
        ]
        return CheckpointTuple(
            config={"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": cid}},
            checkpoint=cast(Checkpoint, cp),  # built from the stored skeleton and its channel values
            metadata=md if md is not None else self._unpack(md_packed),
            parent_config=(
                {"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None
            ),
            pending_writes=writes,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), else the thread's latest in its namespace."""
        conf = config["configurable"]
        t, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        with self._lock:
            cps = self._cps.get((t, ns))
            if not cps:
                return None
            cid = get_checkpoint_id(config) or max(cps)
            entry = cps.get(cid)
            return None if entry is None else self._tuple(t, ns, cid, entry)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (per thread and namespace), filtered by metadata, ``before`` and ``limit``."""
        conf = config["configurable"] if config else {}
        want_t = conf.get("thread_id")
        want_ns = conf.get("checkpoint_ns")
        want_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        with self._lock:
            found: list[CheckpointTuple] = []
            for (t, ns), cps in self._cps.items():
                if (want_t is None or t == want_t) and (want_ns is None or ns == want_ns):
                    self._collect(found, t, ns, cps, (want_id, before_id, filter, limit))
        yield from found

    def _collect(self, found: MutableSequence[CheckpointTuple], t: str, ns: str, cps: dict[str, Any], want: tuple[Any, ...]) -> None:
        """Append one thread's checkpoints, newest first, that pass ``want`` (id, before, metadata filter, limit)."""
        want_id, before_id, filter, limit = want
        for cid in sorted(cps, reverse=True):
            if limit is not None and len(found) >= limit:
                return
            if (want_id and cid != want_id) or (before_id and cid >= before_id):
                continue
            entry = cps[cid]
            md = self._unpack(entry[1])
            if not filter or all(md.get(k) == v for k, v in filter.items()):
                found.append(self._tuple(t, ns, cid, entry, md))

    # ------------------------------------------------------------------ writing
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Write a checkpoint with the values of the channels in ``new_versions`` only (the others are unchanged)."""
        conf = config["configurable"]
        t, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        skel: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = skel.pop("channel_values")
        blobs = {ch: [ver, self._pack(values[ch]) if ch in values else None] for ch, ver in new_versions.items()}
        self._append({
            "op": "put", "thread": t, "ns": ns, "id": checkpoint["id"], "parent": conf.get("checkpoint_id"),
            "checkpoint": self._pack(skel), "metadata": self._pack(get_checkpoint_metadata(config, metadata)),
            "blobs": blobs,
        })
        return {"configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Write a task's writes for the checkpoint ``config`` names (a write already stored is kept as it was)."""
        conf = config["configurable"]
        t, ns, cid = conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
        with self._lock:
            stored = self._writes.get((t, ns, cid), {})
            rows = []
            for i, (ch, v) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(ch, i)
                if idx >= 0 and (task_id, idx) in stored:
                    continue
                rows.append([idx, ch, self._pack(v)])
            if rows:
                self._append({"op": "writes", "thread": t, "ns": ns, "id": cid, "task": task_id, "path": task_path,
                              "writes": rows})

    def delete_thread(self, thread_id: str) -> None:
        """Forget a thread: its checkpoints and writes are no longer returned (a line records it; the file is
        append-only, so the bytes stay until the run directory is deleted)."""
        self._append({"op": "delete_thread", "thread": thread_id})

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Forget the checkpoints (and their writes) whose metadata ``run_id`` is one of ``run_ids``."""
        if run_ids:
            self._append({"op": "delete_runs", "runs": list(run_ids)})

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and write of a thread to another (all namespaces, the whole history)."""
        self._append({"op": "copy_thread", "from": source_thread_id, "to": target_thread_id})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's latest checkpoint (its values and writes); ``delete``: forget all."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"strategy={strategy!r}: give 'keep_latest' or 'delete'")
        if thread_ids:
            self._append({"op": "prune", "threads": list(thread_ids), "strategy": strategy})

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Increasing versions with a random tail: two branches of a thread (a fork from an old checkpoint) never
        give one (channel, version) two values."""
        n = 0 if current is None else int(str(current).split(".")[0])
        return f"{n + 1:032d}.{random.getrandbits(53):016d}"

    # ------------------------------------------------------------------ async twins (the file I/O off the loop)
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


# ---------------------------------------------------------------------------------------------- journaled calls
_PUSH = "__pregel_push"
"""The first element of the task path of a task a ``Send`` started (LangGraph's ``PUSH``): ``(PUSH, <index>, ...)``."""
_RUNTIME = "__pregel_runtime"
"""The configurable key of a task's ``Runtime`` (LangGraph's ``CONFIG_KEY_RUNTIME``), whose ``execution_info`` tells
the task's id and when this execution of it started."""


@dataclass(frozen=True, slots=True)
class _Place:
    """Where in a LangGraph run a call is made (:func:`_place`)."""

    suffix: str
    """The step name's ``@<node>[<branch>]:<superstep>:<8 hex>`` (``[<branch>]`` for a task a ``Send`` started)."""
    fields: dict[str, Any]
    """For the record's ``call``: ``node`` (its path, ``outer|inner`` in a subgraph), ``superstep``, ``branch``."""
    execution: tuple[str, float] | None
    """This execution of the task: its id and the time its first try started (``None``: not told)."""


def _place(inputs: Any, config: RunnableConfig | None = None) -> _Place | None:
    """Where the call with ``inputs`` is made inside a LangGraph run (``None`` outside a graph).

    The name's hex digits hash the thread, the node path (subgraphs nested), the superstep, the task's path (a
    ``Send``'s index among it) and the call's inputs (messages without their random ids). A resumed thread runs the
    interrupted node again at the same superstep with the same messages: same name, served. A fresh run of a
    deterministic graph makes the same calls: served too. A fork of the thread (another history at that superstep)
    asks with other messages: another name, a new call. Task ids are left out of the name: LangGraph draws them from
    the checkpoint id, new in every fresh run; they only tell one task's executions apart (:class:`_Memo`).
    """
    conf = ensure_config(config)
    md = conf.get("metadata") or {}
    node = md.get("langgraph_node")
    if node is None:
        return None
    step = md.get("langgraph_step")
    path = md.get("langgraph_path")
    nodes = "|".join(part.split(":", 1)[0] for part in str(md.get("langgraph_checkpoint_ns") or "").split("|"))
    configurable = conf.get("configurable") or {}
    thread = configurable.get("thread_id")
    ident = orjson.dumps([str(thread) if thread is not None else None, nodes, step, repr(path)])
    digest = hashlib.sha256(ident + orjson.dumps(inputs, option=orjson.OPT_SORT_KEYS)).hexdigest()[:8]
    fields: dict[str, Any] = {"node": nodes or str(node), "superstep": step}
    where = str(node)
    if isinstance(path, (tuple, list)) and len(path) > 1 and path[0] == _PUSH and type(path[1]) is int:
        fields["branch"] = path[1]  # the Send's index: six branches of one fan-out are six different rows
        where += f"[{path[1]}]"
    info = getattr(configurable.get(_RUNTIME), "execution_info", None)
    task, started = getattr(info, "task_id", None), getattr(info, "node_first_attempt_time", None)
    execution = (task, started) if isinstance(task, str) and isinstance(started, float) else None
    return _Place(f"@{where}:{step}:{digest}", fields, execution)


_MEMO_TASKS = 256
"""The tasks whose calls a run's :class:`_Memo` keeps (the least recently run are forgotten first)."""


@dataclass(slots=True)
class _TaskCalls:
    """One task's calls in a :class:`_Memo`: its last execution's start, its calls of each name in that execution so
    far, and the outputs of those that finished in any execution, by ``(name, n)`` (JSON bytes: a new object each read)."""

    started: float
    counts: dict[str, int] = field(default_factory=dict)
    outputs: dict[tuple[str, int], bytes] = field(default_factory=dict)


class _Memo:
    """The outputs of the journaled calls of a run's recent LangGraph tasks, by task, name and occurrence in the
    task's execution, so that a task executed again in this process (LangGraph runs a node again from its start
    after ``interrupt()`` and ``Command(resume=...)``, or when the graph is invoked again after the node failed) gets
    its finished calls' answers as a new process resuming the thread gets them from the journal: a clean run and a
    resumed one make the same calls. Not written anywhere: the journal holds each call once.

    An execution is a task id and the time its first try started (LangGraph's ``ExecutionInfo``): the tries of a
    ``RetryPolicy`` are one execution, their calls count on (a retry asks again, as without the adapter; a process
    resuming after a crash gets the tries' answers back in order from the journal)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: OrderedDict[str, _TaskCalls] = OrderedDict()  # by task id, the most recently run last

    def slot(self, execution: tuple[str, float], name: str) -> tuple[str, str, int]:
        """The call's place among its task's calls: ``(task, name, n)``, the ``n``-th call of ``name`` in this execution
        (a task executed again counts from 0 again)."""
        task, started = execution
        with self._lock:
            calls = self._tasks.get(task)
            if calls is None:
                calls = self._tasks[task] = _TaskCalls(started)
                if len(self._tasks) > _MEMO_TASKS:
                    self._tasks.popitem(last=False)
            else:
                self._tasks.move_to_end(task)
                if calls.started != started:  # another execution of the task: its calls count anew
                    calls.started = started
                    calls.counts.clear()
            n = calls.counts.get(name, 0)
            calls.counts[name] = n + 1
        return task, name, n

    def get(self, slot: tuple[str, str, int]) -> tuple[bool, Any]:
        """``(True, output)`` (a new object) if the call at ``slot`` finished in an earlier execution, else ``(False, None)``."""
        with self._lock:
            calls = self._tasks.get(slot[0])
            raw = None if calls is None else calls.outputs.get(slot[1:])
        return (False, None) if raw is None else (True, orjson.loads(raw))

    def put(self, slot: tuple[str, str, int], output: Any) -> None:
        """Keep the output of the call at ``slot`` (one that is not JSON is not kept: the call runs again)."""
        try:
            raw = orjson.dumps(output)
        except TypeError:
            return
        with self._lock:
            calls = self._tasks.get(slot[0])
            if calls is not None:
                calls.outputs[slot[1:]] = raw


_MEMOS: weakref.WeakKeyDictionary[Any, _Memo] = weakref.WeakKeyDictionary()
_MEMOS_LOCK = threading.Lock()


def _memo(run: Any) -> _Memo | None:
    """The run's :class:`_Memo` (``None`` for a run object that cannot be weakly referenced)."""
    with _MEMOS_LOCK:
        try:
            memo = _MEMOS.get(run)
            if memo is None:
                memo = _MEMOS[run] = _Memo()
        except TypeError:
            return None
    return memo


def _keyed(run: Any) -> None:
    """Match this run's steps by ``(name, k)``: after a resume, LangGraph does not make the calls of the nodes
    that finished again, so the calls are not the journal's sequence (the SDK's rule for overlapping steps)."""
    run.match_by_name()


class _Call:
    """One journaled call: its step name, ``call`` fields and inputs, and where the task's memo keeps its output."""

    __slots__ = ("call", "inputs", "memo", "name", "slot")

    def __init__(self, run: Any, name: str, call: dict[str, Any], inputs: Any, place: _Place | None, tail: str = "") -> None:
        self.name = name + (place.suffix if place is not None else "") + tail
        self.call = call
        self.inputs = inputs
        self.memo: _Memo | None = None
        self.slot: tuple[str, str, int] | None = None
        if place is not None:
            call.update(place.fields)
            if place.execution is not None:
                self.memo = _memo(run)
                if self.memo is not None:
                    self.slot = self.memo.slot(place.execution, self.name)

    def earlier(self) -> tuple[bool, Any]:
        """The output this call had in an earlier execution of its task in this process, if it finished there."""
        return (False, None) if self.memo is None or self.slot is None else self.memo.get(self.slot)

    def keep(self, output: Any) -> Any:
        """Keep the step's output for a later execution of the task; returns it."""
        if self.memo is not None and self.slot is not None:
            self.memo.put(self.slot, output)
        return output


def _jsonable(v: Any) -> Any:
    """``v`` as the step's recorded inputs: JSON as is, messages as LangChain's dicts, anything else as its repr."""
    if isinstance(v, BaseMessage):
        d = message_to_dict(v)
        d["data"].pop("id", None)  # LangGraph gives a message without one a random id: not part of the call
        return d
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (str, int, float, bool, type(None))):
        return v
    try:
        return orjson.loads(orjson.dumps(v))
    except TypeError:
        return repr(v)


def result_to_json(result: ChatResult) -> dict[str, Any]:
    """A ``ChatResult`` as plain JSON (its messages as LangChain's message dicts): the model step's output."""
    out: dict[str, Any] = {
        "generations": [
            {"message": message_to_dict(g.message), "generation_info": g.generation_info} for g in result.generations
        ]
    }
    if result.llm_output is not None:
        out["llm_output"] = result.llm_output
    return out


def result_from_json(data: dict[str, Any]) -> ChatResult:
    """The ``ChatResult`` :func:`result_to_json` wrote, with messages of their own classes (``AIMessage``...)."""
    gens = data["generations"]
    messages = messages_from_dict([g["message"] for g in gens])
    return ChatResult(
        generations=[
            ChatGeneration(message=m, generation_info=g.get("generation_info")) for m, g in zip(messages, gens, strict=False)
        ],
        llm_output=data.get("llm_output"),
    )


def _record_usage(run: Any, result: ChatResult, model: str, provider: str | None) -> None:
    for g in result.generations:
        um = getattr(g.message, "usage_metadata", None)
        if not um:
            continue
        cached = (um.get("input_token_details") or {}).get("cache_read")
        run.usage(model=model, provider=provider, input_tokens=um.get("input_tokens"),
                  output_tokens=um.get("output_tokens"), cached_tokens=cached)


class JournaledChatModel(BaseChatModel):
    """``JournaledChatModel(chat_model, run)``: ``chat_model`` whose every request is a journaled step.

    The step is ``model:<model name>`` (``@<node>[<branch>]:<superstep>:<hash>`` inside a LangGraph node), with
    ``call`` ``{"kind": "model", "model", "provider"}`` (from the model's LangSmith parameters; ``node``,
    ``superstep`` and ``branch`` inside a graph, see :func:`_place`) and the response's token usage; its inputs are the
    request's digest, the number of messages and the last message (a LangChain message dict). On resume the
    recorded ``ChatResult`` is returned and ``chat_model`` is not called. ``bind_tools`` binds the wrapped model's
    tool format to this wrapper.
    """

    chat_model: BaseChatModel
    supervisor_run: Any

    def __init__(self, chat_model: BaseChatModel, run: Any, **kwargs: Any) -> None:
        if not isinstance(chat_model, BaseChatModel):
            raise TypeError(
                f"JournaledChatModel wraps a chat model (a BaseChatModel), not a {type(chat_model).__name__}: wrap the "
                "model, then bind: JournaledChatModel(model, run).bind_tools(tools)"
            )
        super().__init__(chat_model=chat_model, supervisor_run=run, **kwargs)  # type: ignore[call-arg]
        _keyed(run)

    @property
    def _llm_type(self) -> str:
        return f"journaled-{self.chat_model._llm_type}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return dict(self.chat_model._identifying_params)

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        return self.chat_model._get_ls_params(stop=stop, **kwargs)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        """The wrapped model's ``bind_tools`` (its tool format), bound to this wrapper so the calls stay journaled."""
        bound = self.chat_model.bind_tools(tools, **kwargs)
        if not isinstance(bound, RunnableBinding) or bound.bound is not self.chat_model:
            raise TypeError(
                f"{type(self.chat_model).__name__}.bind_tools returned a {type(bound).__name__}, not the model bound "
                "to keyword arguments: JournaledChatModel cannot bind its tools; journal the calls another way "
                "(wrap a model whose bind_tools returns model.bind(...))"
            )
        return self.bind(**bound.kwargs)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """``BaseChatModel.invoke``; a served call reaches the callbacks without its usage (``langgraph_served``)."""
        with hiding() as held:
            return give_back(super().invoke(input, config, **kwargs), held)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        with hiding() as held:
            return give_back(await super().ainvoke(input, config, **kwargs), held)

    def _identity(self, stop: list[str] | None, kwargs: dict[str, Any]) -> tuple[str, str | None]:
        ls = self.chat_model._get_ls_params(stop=stop, **kwargs)
        model = (
            ls.get("ls_model_name")
            or getattr(self.chat_model, "model_name", None)
            or getattr(self.chat_model, "model", None)
            or self.chat_model._llm_type
        )
        return str(model), ls.get("ls_provider")

    def _step_args(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> tuple[_Call, str, str | None]:
        """The journaled call (its step name and recorded inputs: the request's digest (every message, ``stop``, the
        bound keyword arguments), the number of messages and the last one), the model and its provider. Not the whole
        conversation: it grows with every turn, and each message is in the journal already (the output of the step
        that made it)."""
        model, provider = self._identity(stop, kwargs)
        full = [_jsonable(messages), stop, _jsonable(kwargs)]
        digest = hashlib.sha256(orjson.dumps(full, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
        inputs: dict[str, Any] = {"digest": digest, "messages": len(messages)}
        if messages:
            inputs["last"] = full[0][-1]
        call = {"kind": "model", "model": model, "provider": provider}
        return _Call(self.supervisor_run, f"model:{model}", call, inputs, _place(digest)), model, provider

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        c, model, provider = self._step_args(messages, stop, kwargs)
        done, out = c.earlier()
        if done:
            return hide_usage(result_from_json(out))
        live: list[ChatResult] = []  # the model's own result when it runs; rebuilt from the journal when served

        def call(_inputs: Any) -> dict[str, Any]:
            result = self.chat_model._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
            _record_usage(self.supervisor_run, result, model, provider)
            live[:] = [result]
            return result_to_json(result)

        out = c.keep(self.supervisor_run.with_options(call=c.call).step(c.name, call, c.inputs))
        return live[0] if live else hide_usage(result_from_json(out))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        c, model, provider = self._step_args(messages, stop, kwargs)
        done, out = c.earlier()
        if done:
            return hide_usage(result_from_json(out))
        live: list[ChatResult] = []

        async def call(_inputs: Any) -> dict[str, Any]:
            result = await self.chat_model._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs)
            _record_usage(self.supervisor_run, result, model, provider)
            live[:] = [result]
            return result_to_json(result)

        out = c.keep(await self.supervisor_run.with_options(call=c.call).astep(c.name, call, c.inputs))
        return live[0] if live else hide_usage(result_from_json(out))


def _tool_output_to_json(out: Any) -> Any:
    if isinstance(out, BaseMessage):
        return {"message": message_to_dict(out)}
    return {"value": out}


def _tool_output_from_json(data: Any) -> Any:
    if "message" in data:
        return messages_from_dict([data["message"]])[0]
    return data["value"]


class JournaledTool(BaseTool):
    """A LangChain tool whose every call is a journaled step ``tool:<name>`` (``@<node>[<branch>]:<superstep>:<hash>``
    inside a graph, ``#<tool call id>`` when ``ToolNode`` calls it), with ``call`` ``{"kind": "tool", "tool",
    "call_id"}`` (and ``node``, ``superstep``, ``branch``) and the arguments as its inputs. Its result (a
    ``ToolMessage``, or a JSON value) comes back from the journal on resume."""

    tool: BaseTool
    supervisor_run: Any

    def __init__(self, tool: BaseTool, run: Any, **kwargs: Any) -> None:
        super().__init__(
            tool=tool, supervisor_run=run, name=tool.name, description=tool.description, args_schema=tool.args_schema,
            return_direct=tool.return_direct, response_format=tool.response_format, **kwargs,
        )
        _keyed(run)

    def _step(self, input: Any, config: RunnableConfig | None) -> _Call:
        call_id = input.get("id") if isinstance(input, dict) and input.get("type") == "tool_call" else None
        args = _jsonable(input.get("args", {}) if call_id is not None else input)
        call: dict[str, Any] = {"kind": "tool", "tool": self.name}
        if call_id is not None:
            call["call_id"] = call_id
        tail = f"#{call_id}" if call_id is not None else ""
        return _Call(self.supervisor_run, f"tool:{self.name}", call, args, _place([call_id, args], config), tail)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        c = self._step(input, config)
        done, out = c.earlier()
        if done:
            return _tool_output_from_json(out)
        live: list[Any] = []  # the tool's own result when it runs; rebuilt from the journal when served

        def run_tool(_args: Any) -> Any:
            try:
                live[:] = [self.tool.invoke(input, config, **kwargs)]
            except GraphBubbleUp as e:
                raise StepPassThrough(e) from None
            return _tool_output_to_json(live[0])

        try:
            out = c.keep(self.supervisor_run.with_options(call=c.call).step(c.name, run_tool, c.inputs))
        except StepPassThrough as e:
            raise e.inner from None
        return live[0] if live else _tool_output_from_json(out)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        c = self._step(input, config)
        done, out = c.earlier()
        if done:
            return _tool_output_from_json(out)
        live: list[Any] = []

        async def run_tool(_args: Any) -> Any:
            try:
                live[:] = [await self.tool.ainvoke(input, config, **kwargs)]
            except GraphBubbleUp as e:
                raise StepPassThrough(e) from None
            return _tool_output_to_json(live[0])

        try:
            out = c.keep(await self.supervisor_run.with_options(call=c.call).astep(c.name, run_tool, c.inputs))
        except StepPassThrough as e:
            raise e.inner from None
        return live[0] if live else _tool_output_from_json(out)

    def _run(self, *args: Any, **kwargs: Any) -> Any:  # BaseTool's abstract method; invoke is overridden
        return self.tool.invoke(kwargs if kwargs else (args[0] if args else {}))


def journaled_tools(tools: Sequence[BaseTool | Callable[..., Any]], run: Any) -> list[JournaledTool]:
    """Each tool wrapped as a :class:`JournaledTool` (give the list to ``ToolNode``); a plain function is made a tool
    first, as ``ToolNode`` does; a tool already journaled in ``run`` is kept as it is."""
    return [
        t if isinstance(t, JournaledTool) and t.supervisor_run is run
        else JournaledTool(t if isinstance(t, BaseTool) else create_tool(t), run)
        for t in tools
    ]


def journaled_model(model: Any, run: Any) -> Any:
    """``model`` with every call journaled: a chat model becomes a :class:`JournaledChatModel`; a chat model bound to
    arguments (``model.bind_tools(tools)``, ``model.bind(...)``) stays bound to them, around the journaled model; one
    journaled in ``run`` already is kept."""
    if isinstance(model, JournaledChatModel) and model.supervisor_run is run:
        return model
    if isinstance(model, BaseChatModel):
        return JournaledChatModel(model, run)
    if isinstance(model, RunnableBinding) and isinstance(model.bound, BaseChatModel):
        return model.model_copy(update={"bound": journaled_model(model.bound, run)})
    raise TypeError(
        f"journaled() wraps a chat model (a BaseChatModel, or one bound with bind_tools/bind), not a "
        f"{type(model).__name__}: give the model object (e.g. ChatOpenAI(...) or init_chat_model(...)), and add "
        "structured output or other steps after wrapping it"
    )


def journaled(model: Any, tools: Sequence[BaseTool | Callable[..., Any]], run: Any) -> tuple[Any, list[JournaledTool]]:
    """``model, tools = journaled(model, tools, run)``: a graph's chat model and tools with every call journaled
    (:func:`journaled_model`, :func:`journaled_tools`), the one line that makes a node run again after a crash or an
    ``interrupt()`` get its finished calls' answers instead of paying for them again::

        agent = create_react_agent(*journaled(model, tools, run), checkpointer=saver)

    :meth:`JournalSaver.journaled` is the same with the saver's run. ``model`` may be ``None`` (tools only)."""
    return (None if model is None else journaled_model(model, run)), journaled_tools(tools, run)
