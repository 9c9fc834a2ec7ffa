"""``encode_pieces``: the same bytes as one ``encode_message`` call, in bounded pieces."""

from __future__ import annotations

import random
from typing import Any

from session_server.rpc.protocol import (
    ENCODE_CHUNK,
    STRING_CHUNK,
    encode_message,
    encode_pieces,
    encode_small,
)
from session_server.values.events import SessionEvent


def value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 2 else 4)
    if kind == 0:
        return rng.choice([None, True, 1, -2.5, 'é\n"x"', ""])
    if kind == 1:
        return SessionEvent(content="c" * rng.randrange(5), seq=rng.randrange(9))
    if kind == 2:
        return "s" * rng.randrange(50)
    if kind == 3:
        return []
    if kind == 4:
        n = rng.choice([0, 1, ENCODE_CHUNK, ENCODE_CHUNK + 1, 3 * ENCODE_CHUNK + 5])
        return [value(rng, 2 if n > 1 else depth + 1) for _ in range(n)]
    if kind == 5:
        return {f"k{i}": value(rng, depth + 1) for i in range(rng.randrange(4))}
    return tuple(value(rng, 2) for _ in range(rng.randrange(ENCODE_CHUNK + 3)))


def test_pieces_join_to_the_whole_encoding() -> None:
    rng = random.Random(5)
    for _ in range(200):
        message = {"jsonrpc": "2.0", "id": 1, "result": value(rng)}
        assert b"".join(encode_pieces(message)) == encode_message(message)


def test_a_long_list_is_cut_in_chunks() -> None:
    events = [SessionEvent(content="x" * 10, seq=i) for i in range(10 * ENCODE_CHUNK)]
    pieces = list(encode_pieces({"result": {"events": events}}))
    assert len(pieces) >= 10
    assert max(len(p) for p in pieces) < len(encode_message(events)) / 5


def test_a_small_answer_is_encoded_in_one_call_and_a_large_one_left_to_the_pieces() -> None:
    rng = random.Random(7)
    for _ in range(200):
        message = {"jsonrpc": "2.0", "id": 1, "result": value(rng)}
        small = encode_small(message)
        assert small is None or small == encode_message(message)
        assert (small is not None) == (len(list(encode_pieces(message))) == 1)
    answer = {"jsonrpc": "2.0", "id": 3, "result": {"seqs": [1, 2, 3, 4], "last_seq": 4}}
    assert encode_small(answer) == encode_message(answer)
    assert encode_small({"result": ["x" * 70_000]}) is None  # a long string
    assert encode_small({"result": list(range(17))}) is None  # a long list


def test_a_long_string_is_cut_in_chunks_that_join_to_its_encoding() -> None:
    """An export's file is one string of tens of MB: encoded a slice at a time, never in
    one call, and the slices' encodings (escapes, non-ASCII and astral characters cut
    anywhere) join to the string's."""
    rng = random.Random(11)
    alphabet = ["a", '"', "\\", "\n", "\t", "\x01", "é", "€", "😀", "\u2028", "/"]
    text = "".join(rng.choice(alphabet) for _ in range(3 * STRING_CHUNK + 17))
    message = {"jsonrpc": "2.0", "id": 1, "result": {"files": {"raw_traces.jsonl": text}}}
    pieces = list(encode_pieces(message))
    assert b"".join(pieces) == encode_message(message)
    assert len(pieces) >= 3 and max(len(p) for p in pieces) < len(encode_message(text)) / 2
