"""``dispatch`` reports each request to its observer after the answer is queued (among
``ctx.after``): the metrics' work is not part of the answer's latency."""

from __future__ import annotations

from typing import Any, cast

from session_server.rpc.dispatch import dispatch
from session_server.rpc.method_spec import AGENT, CallContext, MethodSpec, RpcParams
from session_server.rpc.protocol import Invalid, Request
from session_server.values.errors import InvalidRequestError


class EchoParams(RpcParams):
    text: str


async def echo(ctx: CallContext, p: EchoParams) -> dict[str, Any]:
    return {"text": p.text}


METHODS = {"echo": MethodSpec("echo", EchoParams, echo, AGENT, scope="read")}


def context() -> CallContext:
    return CallContext(registry=cast(Any, None), agent_id="a", connection=cast(Any, None))


async def test_each_request_is_observed_once_its_answer_is_queued() -> None:
    seen: list[tuple[str, str]] = []

    def observe(method: str, code: str, seconds: float) -> None:
        assert seconds >= 0
        seen.append((method, code))

    items: list[Request | Invalid] = [
        Request("echo", {"text": "hi"}, 1),
        Request("echo", {"text": 5}, 2),
        Request("nope", {}, 3),
        Invalid(4, InvalidRequestError("Invalid Request: method is missing")),
    ]
    expected = [("echo", "ok"), ("echo", "-32602"), ("unknown", "-32601"), ("invalid", "-32600")]
    for item, observed in zip(items, expected, strict=True):
        ctx = context()
        response = await dispatch(item, ctx, AGENT, METHODS, observe)
        assert response is not None and response["id"] == item.id
        assert seen == []  # nothing yet: the caller sends the answer first
        for callback in ctx.after:
            callback()
        assert seen == [observed]
        seen.clear()
