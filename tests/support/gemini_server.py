"""A scripted Gemini ``generateContent`` API for ADK tests, on ``FakeOpenAIServer``'s
HTTP server (127.0.0.1, no network): ``weather_gemini`` calls ``get_weather`` for the
city of the newest user text, then answers with what the tool returned. Requests whose
function calls and responses do not pair are refused with a 400, as Gemini does."""

from __future__ import annotations

from typing import Any

__all__ = ["gemini_base_url", "gemini_text", "weather_gemini"]


def gemini_base_url(openai_base_url: str) -> str:
    """The base URL for ADK's ``Gemini(base_url=...)``: the fake server's root."""
    return openai_base_url.removesuffix("/v1")


def _reply(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 5, "totalTokenCount": 55},
        "modelVersion": "gemini-2.5-flash",
    }


def gemini_text(content: dict[str, Any]) -> str:
    return "".join(str(p.get("text") or "") for p in content.get("parts") or [])


def weather_gemini(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if ":generateContent" not in path:
        return 404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}}
    contents = body.get("contents") or []
    calls = sum(1 for c in contents for p in c.get("parts") or [] if "functionCall" in p)
    responses = sum(1 for c in contents for p in c.get("parts") or [] if "functionResponse" in p)
    if calls != responses:
        message = f"{calls} function calls but {responses} function responses"
        return 400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    last = contents[-1]
    for part in last.get("parts") or []:
        if "functionResponse" in part:
            result = part["functionResponse"].get("response") or {}
            forecast = result.get("forecast") or result.get("result") or result
            return 200, _reply([{"text": f"It is {forecast}."}])
    text = gemini_text(last)
    city = text.removeprefix("Weather in ").removesuffix("?")
    return 200, _reply([{"functionCall": {"name": "get_weather", "args": {"city": city}}}])
