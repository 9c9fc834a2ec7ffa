"""working_context_snapshot.json: build, validate, restore, cache checks."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from session_server.mirror.snapshot import (
    RestoredSnapshot,
    build_snapshot,
    message_from_snapshot,
    restore_snapshot,
    snapshot_problem,
    validate_snapshot,
)
from session_server.mirror_io.snapshot_files import (
    REJECTED_SNAPSHOTS,
    load_snapshot_cache,
    read_snapshot,
    snapshot_digest,
)
from session_server.values.events import ContextMessage, ToolCall
from tests.support.paths import FIXTURES

MESSAGES = [
    ContextMessage(role="user", content="look", images=["data:image/png;base64,AA"]),
    ContextMessage(
        role="assistant",
        content="checking",
        reasoning="think",
        tool_calls=[ToolCall(id="c1", name="read", arguments={"p": 1})],
    ),
    ContextMessage(role="tool", content='{"a": 1}', tool_call_id="c1", name="read"),
    ContextMessage(role="tool", content="failed", tool_call_id="c2", name="x", is_error=True),
    ContextMessage(role="system", content="[MEMORY]", compacted=True, metadata={"k": 1}),
    ContextMessage(role="assistant", content="done", name="bot"),
]


def test_build_has_reference_shape_and_restores_exactly() -> None:
    snap = build_snapshot(
        agent_id="a",
        messages=MESSAGES,
        system_instructions=["sys"],
        epoch_id=3,
        last_compaction_ts=12.5,
        last_seq=9,
        session_id="s1",
    )
    assert validate_snapshot(snap)
    assert (snap["schema_version"], snap["epoch_id"], snap["last_seq"]) == (1, 3, 9)
    first = snap["messages"][0]
    assert list(first) == [
        "role",
        "content",
        "reasoning_content",
        "image_urls",
        "audio_urls",
        "video_urls",
        "tool_payload",
    ]
    assert snap["messages"][2]["tool_payload"] == {
        "tool_calls": [{"id": "c1", "name": "read", "arguments": {"p": 1}}]
    }
    assert snap["messages"][3]["tool_payload"] == {
        "tool_call_id": "c1",
        "tool_name": "read",
        "tool_result": {"a": 1},
        "tool_error": None,
    }
    assert snap["messages"][4]["tool_payload"]["tool_error"] == "failed"
    restored = restore_snapshot(json.loads(json.dumps(snap)))
    assert restored.system_instructions == ["sys"]
    assert restored.messages == MESSAGES
    assert (restored.epoch_id, restored.last_compaction_ts, restored.last_seq) == (3, 12.5, 9)


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ([], "must be a JSON object"),
        ({"agent_id": "a", "messages": []}, "schema_version"),
        ({"schema_version": True, "agent_id": "a", "messages": []}, "schema_version"),
        ({"schema_version": "1", "agent_id": "a", "messages": []}, "schema_version"),
        ({"schema_version": 1, "agent_id": 5, "messages": []}, "agent_id"),
        ({"schema_version": 1, "agent_id": "a", "messages": {}}, "messages"),
        ({"schema_version": 1, "agent_id": "a", "messages": ["x"]}, "messages[0]"),
        (
            {"schema_version": 1, "agent_id": "a", "messages": [{"role": "robot"}]},
            "messages[0].role",
        ),
        (
            {"schema_version": 1, "agent_id": "a", "messages": [{"content": "x"}]},
            "messages[0].role",
        ),
        (
            {"schema_version": 1, "agent_id": "a", "messages": [{"role": "user", "content": 3}]},
            "content",
        ),
        (
            {
                "schema_version": 1,
                "agent_id": "a",
                "messages": [{"role": "tool", "tool_payload": []}],
            },
            "tool_payload",
        ),
        ({"schema_version": 1, "agent_id": "a", "messages": [], "last_seq": "9"}, "last_seq"),
    ],
)
def test_invalid_snapshots_are_named(payload: Any, problem: str) -> None:
    found = snapshot_problem(payload)
    assert found is not None and problem in found
    assert not validate_snapshot(payload)


@pytest.mark.parametrize(
    "path",
    sorted((FIXTURES / "agents").glob("*/working_context_snapshot.json")),
    ids=lambda p: p.parent.name,
)
def test_fixture_snapshots_validate_and_restore(path: Path) -> None:
    payload = read_snapshot(path)
    assert payload is not None
    restored = restore_snapshot(payload)
    assert restored.agent_id == path.parent.name
    assert restored.system_instructions == []  # reference files carry no instruction count
    assert len(restored.messages) == len(payload["messages"])


def test_reference_tool_messages_with_null_content() -> None:
    msg = message_from_snapshot(
        {
            "role": "tool",
            "content": None,
            "tool_payload": {
                "tool_call_id": "1",
                "tool_name": "w",
                "tool_result": ["a"],
                "tool_error": None,
            },
        }
    )
    assert (msg.content, msg.tool_call_id, msg.name, msg.is_error) == ('["a"]', "1", "w", False)
    call = message_from_snapshot(
        {
            "role": "assistant",
            "content": None,
            "tool_payload": {"tool_calls": [{"id": "9", "name": "w", "arguments": "bad"}]},
        }
    )
    assert call.content == "" and call.tool_calls == [ToolCall(id="9", name="w", arguments="bad")]


def test_cache_loader_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "working_context_snapshot.json"

    def load() -> RestoredSnapshot | None:
        # Bound to the bytes on disk: only the digest check is not under test here.
        digest = snapshot_digest(path.read_bytes()) if path.exists() else "0" * 64
        return load_snapshot_cache(tmp_path, last_seq=1, digest=digest)

    assert load() is None  # missing
    path.write_bytes(b"\x00\xffgarbage")
    with caplog.at_level(logging.WARNING):
        assert load() is None
    assert str(path) in caplog.text
    path.write_text(json.dumps({"schema_version": 1, "agent_id": "a", "messages": [{"role": "x"}]}))
    assert load() is None  # invalid
    path.write_text(json.dumps(build_snapshot(agent_id="a", messages=MESSAGES)))
    assert load() is None  # no last_seq: cannot be trusted
    path.write_text(json.dumps(build_snapshot(agent_id="a", messages=MESSAGES, last_seq=1)))
    cached = load()
    assert cached is not None and cached.messages == MESSAGES


def test_cache_is_served_only_with_the_recorded_digest(tmp_path: Path) -> None:
    path = tmp_path / "working_context_snapshot.json"
    path.write_text(json.dumps(build_snapshot(agent_id="a", messages=MESSAGES, last_seq=1)))
    digest = snapshot_digest(path.read_bytes())
    assert load_snapshot_cache(tmp_path, last_seq=1, digest=digest) is not None
    before = REJECTED_SNAPSHOTS.count
    edited = build_snapshot(agent_id="a", messages=MESSAGES, last_seq=1, system_instructions=["x"])
    path.write_text(json.dumps(edited))  # same last_seq, other content
    assert load_snapshot_cache(tmp_path, last_seq=1, digest=digest) is None
    assert REJECTED_SNAPSHOTS.count == before + 1
