"""JSON-RPC 2.0 framing (pure): parse a frame into requests, build responses.

``parse_frame`` turns one WebSocket text (or binary, read as UTF-8) frame into a ``Frame``:
a single item or a batch, each item either a valid ``Request`` or an ``Invalid`` envelope
carrying the error to answer with. A frame that is not JSON raises ``ParseError``; an empty
batch raises ``InvalidRequestError`` (both answered with ``id: null``).

Responses are plain dicts (results may contain ``msgspec.Struct`` values);
``encode_message`` serialises one response, a batch or a notification with msgspec.
``format_validation_error`` turns a pydantic ``ValidationError`` into one message that names
each field by its path, e.g. ``params.events[0].content: Input should be a valid string``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import pydantic

from ..values.errors import (
    InvalidParamsError,
    InvalidRequestError,
    ParseError,
    SessionServerError,
)
from ..values.json_depth import MAX_JSON_DEPTH, deep_path, may_nest_deeper, text_depth

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "ENCODE_CHUNK",
    "INT64_MAX",
    "INT64_MIN",
    "Frame",
    "Invalid",
    "Request",
    "RequestId",
    "encode_message",
    "encode_pieces",
    "encode_small",
    "error_response",
    "find_out_of_range_int",
    "format_validation_error",
    "notification",
    "parse_frame",
    "result_response",
    "validation_error_field",
]

RequestId = str | int | None

# The largest WebSocket frame a server accepts and a client sends by default.
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024

_DECODER: Final = msgspec.json.Decoder()
_ENCODER: Final = msgspec.json.Encoder()
_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class Request:
    """A well-formed request or notification (``notification`` is true when ``id`` was absent).

    ``params`` is always a dict: absent params become ``{}`` (parameters are by name).
    """

    method: str
    params: dict[str, Any]
    id: RequestId = None
    notification: bool = False
    long_ints: bool = field(default=True, compare=False)
    """False when the frame holds no run of 19 digits: then no integer in ``params`` can
    be outside the signed 64-bit range, and the walk of ``find_out_of_range_int`` is
    skipped (the frames of the hot path)."""


@dataclass(frozen=True, slots=True)
class Invalid:
    """An item that is not a valid request; answer ``error`` with ``id`` (``None`` if unknown).

    ``notification`` is true when the item had no ``id`` but was otherwise a request whose
    params were unusable; such an item gets no answer.
    """

    id: RequestId
    error: SessionServerError
    notification: bool = False


@dataclass(frozen=True, slots=True)
class Frame:
    """The parsed content of one frame: ``batch`` tells whether to answer with an array."""

    items: list[Request | Invalid] = field(default_factory=list)
    batch: bool = False


def _decode(data: str | bytes) -> Any:
    # Bytes are decoded as they are: msgspec checks the UTF-8 of every string and rejects
    # any other non-ASCII byte as malformed JSON, so no decoded copy of the frame is made
    # (the UTF-8 check below runs on the error path only, to name the cause).
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        if isinstance(data, bytes):
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as bad:
                raise ParseError(
                    f"Parse error: frame is not valid UTF-8 (byte {bad.start})"
                ) from bad
        raise ParseError(f"Parse error: {exc}") from exc
    except UnicodeEncodeError as exc:  # a str holding lone surrogates
        raise ParseError("Parse error: frame is not valid UTF-8") from exc
    except RecursionError as exc:  # msgspec decodes nested values recursively
        raise ParseError("Parse error: JSON nested too deeply") from exc


def _valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (type(value) is int)


# An integer outside [-2**63, 2**63 - 1] has at least 19 digits (2**63 - 1 has 19): a frame
# without 19 digits in a row holds none. Digits inside strings only make the check run.
# Bytes (every frame the server reads) are scanned as a translation to 0/1 and a search,
# 0.5 us for a turn.persist frame against 5 us for the regular expression.
_DIGIT_MARKS: Final = bytes(0x31 if 0x30 <= b <= 0x39 else 0x30 for b in range(256))
_LONG_RUN: Final = b"1" * 19
_LONG_DIGITS: Final = re.compile(r"[0-9]{19}")
# A larger frame (parsed on a worker) is translated a slice at a time: a translation of
# the whole of a 16 MiB frame would add its size to what a large append holds.
_SCAN_CHUNK: Final = 1024 * 1024


def _may_hold_long_ints(data: str | bytes) -> bool:
    if isinstance(data, str):
        return _LONG_DIGITS.search(data) is not None
    size = len(data)  # bytes, or a bytearray
    if size <= _SCAN_CHUNK:
        return _LONG_RUN in data.translate(_DIGIT_MARKS)
    overlap = len(_LONG_RUN) - 1  # the slices overlap: no run is cut in two
    for start in range(0, size - overlap, _SCAN_CHUNK):
        if _LONG_RUN in data[start : start + _SCAN_CHUNK + overlap].translate(_DIGIT_MARKS):
            return True
    return False


def _parse_item(obj: Any, long_ints: bool = True, deep: bool = False) -> Request | Invalid:
    if not isinstance(obj, dict):
        return Invalid(
            None,
            InvalidRequestError(f"Invalid Request: expected a JSON object, got {_json_type(obj)}"),
        )
    raw_id = obj.get("id", _MISSING)
    notification = raw_id is _MISSING
    rid: RequestId = None if notification or not _valid_id(raw_id) else raw_id
    if not notification and not _valid_id(raw_id):
        return Invalid(
            None, InvalidRequestError("Invalid Request: id must be a string, an integer or null")
        )
    if obj.get("jsonrpc") != "2.0":
        return Invalid(rid, InvalidRequestError('Invalid Request: jsonrpc must be "2.0"'))
    method = obj.get("method", _MISSING)
    if method is _MISSING:
        return Invalid(rid, InvalidRequestError("Invalid Request: method is missing"))
    if not isinstance(method, str) or not method:
        return Invalid(
            rid, InvalidRequestError("Invalid Request: method must be a non-empty string")
        )
    extra = sorted(set(obj) - {"jsonrpc", "method", "params", "id"})
    if extra:
        return Invalid(rid, InvalidRequestError(f"Invalid Request: unknown member {extra[0]!r}"))
    params = obj.get("params", _MISSING)
    if params is _MISSING or params is None:
        params = {}
    elif not isinstance(params, dict):
        return Invalid(
            rid,
            InvalidParamsError(
                f"params: must be an object (parameters are passed by name), got {_json_type(params)}",
                data={"field": "params"},
            ),
            notification,
        )
    if deep:
        where = deep_path(params)
        if where is not None:
            return Invalid(
                rid,
                InvalidParamsError(
                    f"{where}: nested deeper than {MAX_JSON_DEPTH} levels (arrays and "
                    "objects, params being level 1)",
                    data={"field": where, "max_depth": MAX_JSON_DEPTH},
                ),
                notification,
            )
    return Request(method, params, rid, notification, long_ints)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def parse_frame(data: str | bytes) -> Frame:
    """Parse one frame. Raises ``ParseError`` (not JSON / not UTF-8, or nested too deeply
    for the decoder) or ``InvalidRequestError`` (empty batch); every other problem is an
    ``Invalid`` item (params nested deeper than ``MAX_JSON_DEPTH``: -32602 naming the
    field)."""
    obj = _decode(data)
    long_ints = _may_hold_long_ints(data)
    # Params are level 1; the request object around them and a batch's array add levels.
    envelope = 2 if isinstance(obj, list) else 1
    deep = may_nest_deeper(data) and text_depth(data) > MAX_JSON_DEPTH + envelope
    if isinstance(obj, list):
        if not obj:
            raise InvalidRequestError("Invalid Request: empty batch")
        return Frame([_parse_item(o, long_ints, deep) for o in obj], batch=True)
    return Frame([_parse_item(obj, long_ints, deep)], batch=False)


def result_response(request_id: RequestId, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: RequestId, error: SessionServerError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.to_jsonrpc()}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def encode_message(message: dict[str, Any] | Sequence[dict[str, Any]]) -> bytes:
    """Serialise a response, a batch of responses or a notification to UTF-8 JSON
    (send it as a text frame)."""
    return _ENCODER.encode(message)


ENCODE_CHUNK: Final = 256
"""Items of a list encoded in one call by ``encode_pieces``."""

STRING_CHUNK: Final = 256 * 1024
"""Characters of a long string encoded in one call by ``encode_pieces`` (an export's
file is one string of tens of MB)."""


def _small(value: Any, depth: int = 0) -> bool:
    """True for a value that one encoding call handles in well under a millisecond: few
    containers of few items, no long string (a struct or a number counts as small, as
    it would be one piece anyway)."""
    kind = type(value)
    if kind is str:
        return len(value) <= _SMALL_STR
    if kind is dict:
        items: Iterable[Any] = value.values()
        limit = 32
    elif kind is list or kind is tuple:
        items = value
        limit = 16
    else:
        return True
    if depth >= 4 or len(value) > limit:
        return False
    # Loops, not ``all`` over a generator: this runs for every answer, and most of
    # their leaves are numbers and short strings, taken here without a call.
    for item in items:
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is str:
            if len(item) > _SMALL_STR:
                return False
        elif not _small(item, depth + 1):
            return False
    return True


_SMALL_STR: Final = 65_536


# Leaves ``_small`` takes without a call (an answer's seqs, counts and flags).
_SCALARS: Final = frozenset({int, float, bool, type(None)})


def encode_small(message: Any) -> bytes | None:
    """``encode_message(message)`` when the message is small enough to be encoded in one
    call (most answers), else ``None``: then ``encode_pieces`` encodes it a piece at a
    time."""
    return _ENCODER.encode(message) if _small(message) else None


def encode_pieces(message: Any) -> Iterator[bytes]:
    """``encode_message(message)`` in pieces whose concatenation is exactly its bytes.

    An object's values, every ``ENCODE_CHUNK`` items of a list and every
    ``STRING_CHUNK`` characters of a string are encoded by separate calls, so no single
    call encodes a whole 16 MiB answer: the encoder holds the GIL for the length of one
    call, and a caller that yields between pieces keeps other work (the event loop)
    running. Anything else (a struct) is one piece. A string's escapes are per
    character, so its slices' encodings joined are its encoding.
    """
    if _small(message):  # most answers: one call, no walk of pieces
        yield _ENCODER.encode(message)
    elif type(message) is dict and all(type(k) is str for k in message):
        yield b"{"
        for i, (key, value) in enumerate(message.items()):
            yield (b"," if i else b"") + _ENCODER.encode(key) + b":"
            yield from encode_pieces(value)
        yield b"}"
    elif type(message) in (list, tuple) and len(message) > ENCODE_CHUNK:
        yield b"["
        for start in range(0, len(message), ENCODE_CHUNK):
            piece = _ENCODER.encode(message[start : start + ENCODE_CHUNK])
            yield (b"," if start else b"") + piece[1:-1]
        yield b"]"
    elif type(message) is str and len(message) > STRING_CHUNK:
        yield b'"'
        for start in range(0, len(message), STRING_CHUNK):
            yield _ENCODER.encode(message[start : start + STRING_CHUNK])[1:-1]
        yield b'"'
    else:
        yield _ENCODER.encode(message)


INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


def find_out_of_range_int(value: Any, path: str = "params") -> str | None:
    """The path of the first integer outside the signed 64-bit range in ``value`` (what
    SQLite and every JSON peer can hold), or ``None``."""
    if not _has_out_of_range_int(value):
        return None  # the common case: one walk without building a path per value
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if type(item) is int:
            if not INT64_MIN <= item <= INT64_MAX:
                return where
        elif isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def _has_out_of_range_int(value: Any) -> bool:
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if type(item) is int:
            if not INT64_MIN <= item <= INT64_MAX:
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _loc_path(prefix: str, loc: Sequence[int | str]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def validation_error_field(exc: pydantic.ValidationError, prefix: str = "params") -> str:
    """The path of the first field a ``ValidationError`` names."""
    errors = exc.errors(include_url=False)
    return _loc_path(prefix, errors[0]["loc"]) if errors else prefix


def format_validation_error(exc: pydantic.ValidationError, prefix: str = "params") -> str:
    """One line per problem, ``; ``-joined: ``params.limit: Input should be greater than 0``."""
    parts = []
    for err in exc.errors(include_url=False):
        msg = err["msg"]
        if err["type"] == "missing":
            msg = "Field required"
        elif err["type"] == "extra_forbidden":
            msg = "Unknown field"
        parts.append(f"{_loc_path(prefix, err['loc'])}: {msg}")
    return "; ".join(parts) or f"{prefix}: invalid"
