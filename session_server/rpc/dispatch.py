"""``dispatch``: run one JSON-RPC request against a method table.

It refuses a method the table or the endpoint lacks, an integer out of range, and a call
whose token lacks the method's scope (-32003) or reaches beyond the sessions it is
limited to, all before looking at the params; then validates the params (nothing is
written when validation fails), runs the handler and turns every outcome into a response
dict (``None`` for notifications). This module does no I/O itself; it never imports
``asyncio`` or ``websockets``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import pydantic

from ..auth.tokens import Grant, scope_allows
from ..values.errors import (
    ForbiddenError,
    InternalError,
    InvalidParamsError,
    MethodNotFoundError,
    SessionServerError,
)
from .method_spec import SERVER, CallContext, Endpoint, MethodSpec, Observer
from .protocol import (
    Invalid,
    Request,
    error_response,
    find_out_of_range_int,
    format_validation_error,
    result_response,
    validation_error_field,
)

__all__ = ["Offload", "dispatch"]

log = logging.getLogger("session_server.rpc")

T = TypeVar("T")
Offload = Callable[[Callable[[], T]], Awaitable[T]]
"""Runs a pure function elsewhere (a worker thread) and gives its result."""


async def dispatch(
    item: Request | Invalid,
    ctx: CallContext,
    endpoint: Endpoint,
    methods: Mapping[str, MethodSpec],
    observe: Observer | None = None,
    offload: Offload[Any] | None = None,
) -> dict[str, Any] | None:
    """Run one request against ``methods``; return its response dict, or ``None`` for a
    notification.

    ``offload``, when given (the shell passes it for a large frame), runs the work linear
    in the params, the integer range check and the params validation, on a worker: on
    the event loop, a 16 MiB frame of small items took hundreds of milliseconds there.

    ``observe(method, code, seconds)``, when given, is called once per item with the
    method name (``unknown`` when it names no method, ``invalid`` for an unusable item:
    the label set stays bounded whatever clients send), ``ok`` or the JSON-RPC error code,
    and the time taken. It runs among ``ctx.after`` (right after the answer is queued):
    the metrics' work is not part of the answer's latency. The code is ``ctx.outcome``
    as it is then, so a shell that replaces the answer (-32004, too large) says so there.
    """
    if isinstance(item, Invalid):
        ctx.outcome = str(item.error.code)
        if observe is not None:
            ctx.after.append(functools.partial(_observe, observe, "invalid", ctx, 0.0))
        return None if item.notification else error_response(item.id, item.error)
    started = time.perf_counter()
    error: SessionServerError | None = None
    try:
        result = await _call(item, ctx, endpoint, methods, offload)
    except SessionServerError as exc:
        error = exc
    except Exception:
        log.exception("internal error in %s (request id %r)", item.method, item.id)
        error = InternalError("Internal error")
    if error is not None:
        ctx.outcome = str(error.code)
    if observe is not None:
        label = item.method if item.method in methods else "unknown"
        seconds = time.perf_counter() - started
        ctx.after.append(functools.partial(_observe, observe, label, ctx, seconds))
    if item.notification:
        return None
    if error is not None:
        return error_response(item.id, error)
    return result_response(item.id, result)


def _observe(observe: Observer, label: str, ctx: CallContext, seconds: float) -> None:
    # ``ctx.outcome`` is read now, after the answer was encoded: an answer the shell
    # replaced by -32004 (too large to send) is reported as that, not as ``ok``.
    observe(label, ctx.outcome, seconds)


async def _call(
    req: Request,
    ctx: CallContext,
    endpoint: Endpoint,
    table: Mapping[str, MethodSpec],
    offload: Offload[Any] | None,
) -> Any:
    spec = table.get(req.method)
    if spec is None:
        raise MethodNotFoundError(f"Method not found: {req.method!r}")
    if spec.endpoint != endpoint:
        where = "/v1" if spec.endpoint == SERVER else "/v1/agents/<agent_id>"
        raise MethodNotFoundError(
            f"Method not found: {req.method!r} is not available on this endpoint (use {where})"
        )
    # Without ``offload`` the work runs here, with no coroutine or closure per request.
    too_big = None
    if req.long_ints:
        too_big = (
            find_out_of_range_int(req.params)
            if offload is None
            else await offload(lambda: find_out_of_range_int(req.params))
        )
    if too_big is not None:
        raise InvalidParamsError(
            f"{too_big}: integer out of range (must fit in a signed 64-bit integer)",
            data={"field": too_big},
        )
    grant = ctx.grant
    if grant is not None and not scope_allows(grant.scope, spec.scope):
        raise ForbiddenError(
            f"token.scope: {req.method!r} needs scope {spec.scope!r}, this token has "
            f"{grant.scope!r}",
            data={"field": "token.scope", "required": spec.scope, "scope": grant.scope},
        )
    if grant is not None and grant.sessions is not None:
        _check_sessions(spec, req.params, grant)
    ctx.creates_agent = spec.creates_agent
    if offload is None:
        return await spec.handler(ctx, _params(spec, req.params))
    return await spec.handler(ctx, await offload(lambda: _params(spec, req.params)))


def _params(spec: MethodSpec, raw: dict[str, Any]) -> Any:
    """The validated params model."""
    try:
        return spec.params.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise InvalidParamsError(
            format_validation_error(exc), data={"field": validation_error_field(exc)}
        ) from exc


def _check_sessions(spec: MethodSpec, params: dict[str, Any], grant: Grant) -> None:
    """Refuse a call of a token limited to sessions that reaches beyond them (checked on
    the raw params, before validation: a refusal does not depend on the other params)."""
    if spec.sessions in ("filter", "none"):
        return
    if spec.sessions == "deny":
        raise ForbiddenError(
            f"token.sessions: {spec.name!r} is not available to a token limited to sessions",
            data={"field": "token.sessions"},
        )
    session_id = params.get("session_id")
    if not isinstance(session_id, str):
        raise ForbiddenError(
            "params.session_id: a token limited to sessions must name one of them",
            data={"field": "params.session_id"},
        )
    if not grant.permits_session(session_id):
        raise ForbiddenError(
            f"params.session_id: this token may not address session {session_id[:256]!r}",
            data={"field": "params.session_id"},
        )
