"""Spans as one OTLP protobuf ``ExportTraceServiceRequest``, encoded here (no dependency).

The live exporter sends every finished step: going through the SDK (a ``ReadableSpan`` per span, then
OpenTelemetry's encoder building a message object per attribute) cost about 70 us a span of the
supervisor's CPU; writing the wire format straight from :class:`~supervisor.export.otlp.Span` costs a
fraction of it. The messages and field numbers are those of ``opentelemetry/proto/trace/v1/trace.proto``
and ``common/v1/common.proto``; ``tests/integration/test_export_otlp.py`` decodes the bytes with the
official classes and compares them with the SDK's encoding of the same spans.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from .spans import Span

__all__ = ["encode_request"]

_FLAGS = b"\x85\x01\x00\x01\x00\x00"  # field 16 (fixed32): SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, not remote
_pack_d = struct.Struct("<d").pack
_pack_q = struct.Struct("<Q").pack
_kv: dict[tuple[str, type, Any], bytes] = {}
"""Encoded ``KeyValue`` messages (length first, no tag) of short scalar attributes: most repeat on every span
(the operation, the model, the provider, the attempt)."""
_KV_MAX = 8192
_SMALL = [bytes((n,)) if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(0x4000)]


def _varint(n: int) -> bytes:
    if n < 0x4000:
        return _SMALL[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _ld(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (tag already shifted: ``field << 3 | 2``)."""
    return _SMALL[tag] + _varint(len(payload)) + payload


def _str(tag: int, s: str) -> bytes:
    return _ld(tag, s.encode("utf-8", "surrogatepass"))


def _any(v: Any) -> bytes:
    """An ``AnyValue``."""
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"
    if isinstance(v, int):
        return b"\x18" + _varint(v & 0xFFFFFFFFFFFFFFFF)  # int64: two's complement in 10 bytes when negative
    if isinstance(v, float):
        return b"\x21" + _pack_d(v)
    if isinstance(v, list):
        return _ld(0x2A, b"".join(_ld(0x0A, _any(x)) for x in v))
    return _str(0x0A, v if isinstance(v, str) else str(v))


def _keyvalue(k: str, v: Any) -> bytes:
    """A ``KeyValue`` message, its length first (the field's tag is the caller's)."""
    msg = _str(0x0A, k) + _ld(0x12, _any(v))
    return _varint(len(msg)) + msg


def _attrs(tag: int, attrs: Mapping[str, Any]) -> bytes:
    """Repeated ``KeyValue`` fields."""
    t = _SMALL[tag]
    parts: list[bytes] = []
    for k, v in attrs.items():
        vt = type(v)
        if (vt is str and len(v) <= 64) or vt is bool or (vt is int and -1 < v < 0x10000):
            ck = (k, vt, v)
            kv = _kv.get(ck)
            if kv is None:
                kv = _keyvalue(k, v)
                if len(_kv) < _KV_MAX:
                    _kv[ck] = kv
        else:
            kv = _keyvalue(k, v)
        parts += (t, kv)
    return b"".join(parts)


def _span(s: Span) -> bytes:
    parts = [b"\x0a\x10", bytes.fromhex(s.trace_id), b"\x12\x08", bytes.fromhex(s.span_id)]
    if s.parent_id:
        parts += [b"\x22\x08", bytes.fromhex(s.parent_id)]
    parts += [_str(0x2A, s.name), b"\x30", _varint(s.kind), b"\x39", _pack_q(s.start_ns), b"\x41", _pack_q(s.end_ns),
              _attrs(0x4A, s.attributes)]
    for e in s.events:
        parts.append(_ld(0x5A, b"\x09" + _pack_q(e.time_ns) + _str(0x12, e.name) + _attrs(0x1A, e.attributes)))
    status = (_str(0x12, s.status_message) if s.status_message else b"") + (b"\x18" + _varint(s.status_code)
                                                                             if s.status_code else b"")
    parts += [_ld(0x7A, status), _FLAGS]
    return b"".join(parts)


def encode_request(resource: Mapping[str, Any], scope: tuple[str, str], spans: Iterable[Span]) -> bytes:
    """One ``ExportTraceServiceRequest``: one resource, one scope (name, version), the spans."""
    scope_msg = _str(0x0A, scope[0]) + _str(0x12, scope[1])
    scope_spans = _ld(0x0A, scope_msg) + b"".join(_ld(0x12, _span(s)) for s in spans)
    resource_spans = _ld(0x0A, _attrs(0x0A, resource)) + _ld(0x12, scope_spans)
    return _ld(0x0A, resource_spans)
