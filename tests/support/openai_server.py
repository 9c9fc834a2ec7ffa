"""A local OpenAI-compatible HTTP server for tests (no network beyond 127.0.0.1).

Usage::

    with FakeOpenAIServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        client.chat.completions.create(model="m", messages=[...])
        server.requests[-1]["body"]["messages"]

The server binds ``127.0.0.1`` on a port the system chooses (port 0) and serves from a
background thread (``http.server.ThreadingHTTPServer``) from construction until
``close()`` (called by ``__exit__``). ``base_url`` is ``"http://127.0.0.1:PORT/v1"``.

Every request is recorded in ``requests`` (in arrival order) as ``{"path": str,
"headers": dict, "body": ...}``: ``path`` as sent (``/v1/chat/completions``), header names
lower-cased, ``body`` the parsed JSON (``None`` for an empty body, the raw text when it
is not JSON). The record is appended before the reply is computed, so it is there as soon
as the client call returns.

``reply(path, body) -> (status, payload)`` chooses the answer (``body`` is the parsed
JSON object, ``{}`` when the request had none): a ``dict`` payload is sent
as ``application/json``, a ``str`` payload as the raw text (``text/plain``). The default
reply answers ``POST /v1/chat/completions`` with a valid ``chat.completion`` (content
``"ok"``, usage 10 prompt + 1 completion tokens) and ``POST /v1/responses`` with a valid
Responses API ``response`` object (output text ``"ok"``, the same usage); anything else
gets a 404 with an OpenAI-style error object.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["FakeOpenAIServer", "ReplyFn", "async_client", "default_reply", "response_payload"]

ReplyFn = Callable[[str, dict[str, Any]], tuple[int, dict[str, Any] | str]]

_USAGE_PROMPT = 10
_USAGE_COMPLETION = 1


def _chat_completion(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "test-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok", "refusal": None},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": _USAGE_PROMPT,
            "completion_tokens": _USAGE_COMPLETION,
            "total_tokens": _USAGE_PROMPT + _USAGE_COMPLETION,
        },
    }


def _response(body: dict[str, Any]) -> dict[str, Any]:
    return response_payload(
        body,
        [
            {
                "type": "message",
                "id": "msg_test",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
            }
        ],
    )


def response_payload(
    body: dict[str, Any],
    output: list[dict[str, Any]],
    *,
    input_tokens: int = _USAGE_PROMPT,
    output_tokens: int = _USAGE_COMPLETION,
    response_id: str = "resp_test",
) -> dict[str, Any]:
    """A valid Responses API ``response`` object with the given ``output`` items and usage
    (for scripted fake models: ``reply`` functions build their answers with it)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": body.get("model", "test-model"),
        "instructions": body.get("instructions"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "metadata": {},
        "error": None,
        "incomplete_details": None,
        "temperature": None,
        "top_p": None,
        "text": {"format": {"type": "text"}},
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    }


def default_reply(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
    """The default answers described in the module docstring."""
    route = path.split("?", 1)[0]
    if route == "/v1/chat/completions":
        return 200, _chat_completion(body)
    if route == "/v1/responses":
        return 200, _response(body)
    return 404, {
        "error": {
            "message": f"no route for {path}",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found",
        }
    }


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 that records requests (module docstring)."""

    def __init__(self, reply: ReplyFn | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self._reply: ReplyFn = reply or default_reply
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        # A short poll interval keeps close() (shutdown waits for the loop to poll) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"fake-openai-{port}",
            daemon=True,
        )
        self._thread.start()
        self._closed = False

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body are written separately: TCP_NODELAY sends both at once
            # (clients should set it too, see ``async_client``).
            disable_nagle_algorithm = True

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode("utf-8") if length else ""
                body: Any
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                headers = {k.lower(): v for k, v in self.headers.items()}
                server.requests.append({"path": self.path, "headers": headers, "body": body})
                status, payload = server._reply(self.path, body if isinstance(body, dict) else {})
                if isinstance(payload, str):
                    data, ctype = payload.encode("utf-8"), "text/plain; charset=utf-8"
                else:
                    data, ctype = json.dumps(payload).encode("utf-8"), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = _handle
            do_GET = _handle
            do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                return  # keep test output quiet

        return Handler

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> FakeOpenAIServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def async_client(base_url: str) -> Any:
    """An ``openai.AsyncOpenAI`` for a fake server whose connections set TCP_NODELAY.

    The SDK's HTTP library writes a request's headers and body separately; with Nagle's
    algorithm on, the body waits for the server's delayed ACK, 40 ms or more per call.
    The transport class is taken from whichever httpx flavour the ``openai`` package uses.
    """
    import importlib

    import openai

    http = importlib.import_module(
        openai.DefaultAsyncHttpxClient.__mro__[1].__module__.split(".")[0]
    )
    transport = http.AsyncHTTPTransport(
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    )
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key="test",
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(transport=transport),
    )
