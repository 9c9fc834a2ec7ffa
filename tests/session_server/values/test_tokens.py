"""Token counting: exact with tiktoken, an estimate (flagged, one warning) without it."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from session_server.values import tokens
from session_server.values.events import ContextMessage, ToolCall
from session_server.values.tokens import (
    DEFAULT_ENCODING,
    MESSAGE_OVERHEAD,
    TokenCount,
    TokenCounter,
    count_messages,
    count_text,
    get_counter,
)

ROOT = Path(__file__).resolve().parents[3]

SAMPLES = [
    "hello world",
    "Le café coûte 3 € — naïve façade. 日本語のテキスト。",
    "def f(x):\n    return x ** 2  # 🐍",
    "<|endoftext|> is just text here",
    " " * 17 + "\n\n\t",
    "a" * 5000,
]


@pytest.fixture(scope="module")
def tiktoken_encodings() -> dict[str, object]:
    tiktoken = pytest.importorskip("tiktoken")
    try:
        return {
            "o200k_base": tiktoken.get_encoding("o200k_base"),
            "cl100k_base": tiktoken.get_encoding("cl100k_base"),
        }
    except Exception as exc:  # pragma: no cover - depends on the environment
        pytest.skip(f"tiktoken encodings not available here ({exc}); see tests/conftest.py")


def unique_bogus_name() -> str:
    return f"bogus_encoding_{uuid.uuid4().hex}"


# --------------------------------------------------------------------------------------
# Exact counts (shared tiktoken cache)
# --------------------------------------------------------------------------------------


class TestExactCounts:
    def test_default_encoding(self) -> None:
        assert DEFAULT_ENCODING == "o200k_base"
        assert get_counter().encoding_name == "o200k_base"
        assert get_counter(None).encoding_name == "o200k_base"

    @pytest.mark.parametrize("text", SAMPLES)
    def test_count_text_matches_tiktoken(
        self, tiktoken_encodings: dict[str, object], text: str
    ) -> None:
        enc = tiktoken_encodings["o200k_base"]
        expected = len(enc.encode(text, disallowed_special=()))  # type: ignore[attr-defined]
        assert count_text(text) == TokenCount(expected, False)

    @pytest.mark.parametrize(
        ("model", "encoding"),
        [
            ("gpt-4o", "o200k_base"),
            ("gpt-4o-mini", "o200k_base"),
            ("gpt-4", "cl100k_base"),
            ("gpt-3.5-turbo", "cl100k_base"),
            ("@cf/meta/llama-3-8b-instruct", "o200k_base"),  # unknown to tiktoken
            ("", "o200k_base"),
        ],
    )
    def test_model_picks_the_encoding(
        self, tiktoken_encodings: dict[str, object], model: str, encoding: str
    ) -> None:
        counter = get_counter(model)
        assert counter.encoding_name == encoding
        assert counter.estimated is False
        text = SAMPLES[1]
        expected = len(tiktoken_encodings[encoding].encode(text))  # type: ignore[attr-defined]
        assert count_text(text, model=model) == TokenCount(expected, False)

    def test_counters_are_cached_per_encoding(self) -> None:
        assert get_counter("gpt-4o") is get_counter() is get_counter("no-such-model")
        assert get_counter("gpt-4") is get_counter("gpt-3.5-turbo")

    def test_empty_text_is_zero(self) -> None:
        assert count_text("") == TokenCount(0, False)

    def test_special_tokens_are_counted_as_text_not_refused(self) -> None:
        assert count_text("<|endoftext|><|im_start|>").tokens > 2

    def test_count_message_formula(self) -> None:
        counter = get_counter()
        msg = ContextMessage(role="user", content="What is 6*7?")
        assert counter.count_message(msg) == MESSAGE_OVERHEAD + counter.count("What is 6*7?")
        tool = ContextMessage(role="tool", content="42", tool_call_id="c1", name="calc")
        assert counter.count_message(tool) == MESSAGE_OVERHEAD + counter.count(
            "42"
        ) + counter.count("calc")
        call = ToolCall("c1", "calc", {"expr": "6*7"})
        asst = ContextMessage(role="assistant", tool_calls=[call])
        assert counter.count_message(asst) == (
            MESSAGE_OVERHEAD + counter.count("calc") + counter.count('{"expr":"6*7"}') + 3
        )

    def test_count_messages_includes_system_instructions(self) -> None:
        msgs = [
            ContextMessage(role="user", content="hi"),
            ContextMessage(role="assistant", content="yo"),
        ]
        counter = get_counter()
        expected = (
            sum(counter.count_message(m) for m in msgs)
            + MESSAGE_OVERHEAD
            + counter.count("Be brief.")
        )
        assert count_messages(msgs, ["Be brief."]) == TokenCount(expected, False)
        assert count_messages([]) == TokenCount(0, False)

    def test_token_count_is_a_named_tuple(self) -> None:
        tc = count_text("hello")
        tokens_, estimated = tc
        assert (tc.tokens, tc.estimated) == (tokens_, estimated)


# --------------------------------------------------------------------------------------
# Fallback: an estimate, flagged, one warning, never an exception
# --------------------------------------------------------------------------------------


class TestFallback:
    def test_bogus_encoding_estimates(self, caplog: pytest.LogCaptureFixture) -> None:
        name = unique_bogus_name()
        with caplog.at_level(logging.WARNING, logger="session_server.values.tokens"):
            counter = TokenCounter(name)
        assert counter.estimated is True
        assert counter.encoding_name == name
        for text in SAMPLES:
            assert counter.count(text) == math.ceil(len(text.encode("utf-8")) / 4)
        assert counter.count("") == 0
        result = counter.count_messages([ContextMessage(role="user", content="abcdefgh")], ["x"])
        assert result == TokenCount(MESSAGE_OVERHEAD + 2 + MESSAGE_OVERHEAD + 1, True)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert name in warnings[0].getMessage()
        assert "estimate" in warnings[0].getMessage()

    def test_one_warning_however_many_counters(self, caplog: pytest.LogCaptureFixture) -> None:
        name = unique_bogus_name()
        with caplog.at_level(logging.WARNING, logger="session_server.values.tokens"):
            counters = [TokenCounter(name) for _ in range(5)]
            for c in counters:
                c.count("some text")
        assert all(c.estimated for c in counters)
        assert len([r for r in caplog.records if name in r.getMessage()]) == 1

    def test_a_failing_loader_never_raises(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import tiktoken

        def explode(name: str) -> object:
            raise OSError("disk on fire")

        monkeypatch.setattr(tiktoken, "get_encoding", explode)
        counter = TokenCounter(unique_bogus_name())
        assert counter.estimated is True
        assert counter.count("abcd") == 1

    def test_subprocess_without_cache_or_network(self, tmp_path: Path) -> None:
        """A fresh process with an empty TIKTOKEN_CACHE_DIR and no reachable network."""
        empty = tmp_path / "tiktoken-empty"
        empty.mkdir()
        script = textwrap.dedent(
            """
            import io, json, logging
            stream = io.StringIO()
            logging.basicConfig(stream=stream, level=logging.WARNING, format="%(levelname)s %(message)s")
            from session_server.values.events import ContextMessage
            from session_server.values.tokens import TokenCounter, count_messages, count_text, get_counter
            texts = ["hello world", "café ☕", ""]
            results = [list(count_text(t)) for t in texts]
            results += [list(count_text(t)) for t in texts]  # again: still one warning
            msgs = list(count_messages([ContextMessage(role="user", content="abcdefgh")]))
            TokenCounter()  # the default encoding again, built directly
            out = {
                "results": results,
                "messages": msgs,
                "estimated": get_counter().estimated,
                "encoding": get_counter().encoding_name,
                "log": stream.getvalue(),
            }
            print(json.dumps(out))
            """
        )
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        env.update(
            TIKTOKEN_CACHE_DIR=str(empty),
            # Make sure no download can succeed even where a network exists.
            HTTPS_PROXY="http://127.0.0.1:9",
            HTTP_PROXY="http://127.0.0.1:9",
            https_proxy="http://127.0.0.1:9",
            http_proxy="http://127.0.0.1:9",
            NO_PROXY="",
            no_proxy="",
        )
        proc = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["estimated"] is True
        assert out["encoding"] == "o200k_base"
        expected = [[3, True], [3, True], [0, True]]  # ceil(11/4), ceil(9 bytes/4), 0
        assert out["results"] == expected + expected
        assert out["messages"] == [MESSAGE_OVERHEAD + 2, True]
        warnings = [line for line in out["log"].splitlines() if line.startswith("WARNING")]
        assert len(warnings) == 1, out["log"]
        assert "o200k_base" in warnings[0]
        assert list(empty.iterdir()) == []  # nothing was downloaded


def test_warned_set_is_module_level() -> None:
    name = unique_bogus_name()
    TokenCounter(name)
    assert name in tokens._WARNED


def recording_counter(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[TokenCounter, list[str], Callable[[str], int]]:
    """A counter whose ``count`` records each text it encodes; the list, and the
    original ``count``."""
    counter = TokenCounter()
    calls: list[str] = []
    original = counter.count

    def counting(text: str) -> int:
        calls.append(text)
        return original(text)

    monkeypatch.setattr(counter, "count", counting)
    return counter, calls, original


def test_instruction_counts_are_remembered_within_their_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A system instruction is encoded once, then its count is reused (builds count it
    every time); the cache never holds more than its bounds."""
    counter, calls, original = recording_counter(monkeypatch)
    prompt = "You are a careful assistant. " * 200
    first = counter.count_instruction(prompt)
    assert first == original(prompt)
    assert counter.count_instruction("".join([prompt])) == first  # an equal string
    assert calls == [prompt]
    # Many distinct texts: the cache is emptied rather than grown past its bounds.
    for i in range(tokens.INSTRUCTION_CACHE_ENTRIES + 10):
        assert counter.count_instruction(f"instruction {i}") == original(f"instruction {i}")
        assert len(counter._instructions) <= tokens.INSTRUCTION_CACHE_ENTRIES
    huge = "word " * (tokens.INSTRUCTION_CACHE_CHARS // 4)
    assert counter.count_instruction(huge) == original(huge)
    assert counter._instruction_chars <= tokens.INSTRUCTION_CACHE_CHARS
    # What a build reports is unchanged.
    messages = [ContextMessage(role="user", content="hi")]
    expected = 2 * tokens.MESSAGE_OVERHEAD + original("hi") + original(prompt)
    assert counter.count_messages(messages, [prompt]).tokens == expected


def test_pinned_instruction_counts_are_used_and_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counts taken ahead (``pin_instructions``): remembered like any count, and used
    while pinned (by each caller that pinned them), even when too large to remember or
    emptied from the cache meanwhile; forgotten from the pins when the last one unpins."""
    counter, calls, original = recording_counter(monkeypatch)
    small = "You are brief. " * 10
    huge = "word " * (tokens.INSTRUCTION_CACHE_CHARS // 4 // 5 + 1)  # past the per-text cap
    assert counter.known_instructions([small, huge]) == {}
    counts = {small: 7, huge: 11}  # not the real counts: shows which one is used
    counter.pin_instructions(counts)
    counter.pin_instructions({huge: 11})  # a second request with the same text
    assert counter.known_instructions([small, huge, "new"]) == counts
    assert (counter.count_instruction(small), counter.count_instruction(huge)) == (7, 11)
    counter._instructions.clear()  # the cache emptied by other counts meanwhile
    assert counter.count_instruction(small) == 7  # still pinned
    counter.unpin_instructions(counts)
    assert counter.count_instruction(huge) == 11  # still pinned by the second request
    counter.unpin_instructions({huge: 11})
    assert counter._pinned == {}
    assert counter.count_instruction(small) == original(small)  # neither, now
    assert counter.count_instruction(small) == original(small)  # remembered again
    assert counter.count_instruction(huge) == original(huge)
    assert calls == [small, huge]
    counter.unpin_instructions({"never pinned": 1})  # nothing to release: no error


def test_pinning_a_remembered_count_again_does_not_grow_the_cache() -> None:
    """Every request with a large prompt pins its count, already remembered after the
    first: the cache's size stays that of the text (counted again on each pin, it
    reached the bound after a hundred 40 KB requests and emptied the cache of every
    other prompt)."""
    counter = TokenCounter()
    prompt = "You are brief. " * 2800  # about 40 KB
    for _ in range(tokens.INSTRUCTION_CACHE_CHARS // len(prompt) + 2):
        counter.pin_instructions({prompt: 9000})
        counter.unpin_instructions({prompt: 9000})
    other = "Answer in French."
    counter.pin_instructions({other: 4})
    counter.unpin_instructions({other: 4})
    assert counter._instruction_chars == len(prompt) + len(other)
    assert counter.known_instructions([prompt, other]) == {prompt: 9000, other: 4}
