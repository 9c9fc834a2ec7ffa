"""Summarizers: the protocol, the offline extractive default, and the OpenAI-backed one.

This is the one I/O module of the compaction package, and only ``OpenAISummarizer``
does I/O; the ``openai`` SDK is imported when one is constructed, so importing this
module pulls in neither ``openai`` nor ``asyncio``.

A summarizer failure is reported as ``SummarizerError`` and nothing is written (the
caller appends a compaction event only after ``summarize`` returned).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, runtime_checkable

from ..compaction.memory import SemanticFact, select_semantic
from ..compaction.summarize import SummaryRequest, SummaryResult, render_transcript
from ..compaction.summary_json import parse_summary_json
from ..values.errors import SummarizerError

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = [
    "SYSTEM_PROMPT",
    "ExtractiveSummarizer",
    "OpenAISettings",
    "OpenAISummarizer",
    "Summarizer",
    "build_prompt",
    "default_summarizer",
    "resolve_openai_settings",
]


@runtime_checkable
class Summarizer(Protocol):
    """Turns a ``SummaryRequest`` into a ``SummaryResult``; raises ``SummarizerError``.

    A summarizer that only computes (no I/O) may also define ``summarize_sync(request)``
    beside ``summarize``, with the same result: the server then runs it on a worker
    thread instead of awaiting ``summarize`` on the event loop (``ExtractiveSummarizer``
    does; see ``compaction_run``)."""

    @property
    def name(self) -> str: ...

    async def summarize(self, request: SummaryRequest) -> SummaryResult: ...


_PREFERENCE: Final = re.compile(
    r"\b(i prefer|i like|i want|i need|i am|i'm|my name is|call me|always|never|must|"
    r"don't|do not|please use|remember)\b",
    re.IGNORECASE,
)
_SENTENCE: Final = re.compile(r"(?<=[.!?])\s+|\n+")


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class ExtractiveSummarizer:
    """Deterministic, offline summarizer (the default; no network, no model).

    Episodic summary: per turn, the user's request, the tools used and the final
    answer, clipped; when longer than ``max_chars`` the middle turns are elided.
    Semantic facts: system instructions (confidence 0.9, tag ``instruction``) and user
    sentences that state a preference or constraint (confidence 0.6, tags ``user``,
    ``preference``), at most ``request.max_semantic_items``.
    """

    name = "extractive"

    def __init__(self, *, snippet_chars: int = 120, max_chars: int = 1500) -> None:
        self.snippet_chars = snippet_chars
        self.max_chars = max_chars

    def _segments(self, request: SummaryRequest) -> tuple[list[str], list[str]]:
        segments: list[str] = []
        all_tools: list[str] = []
        for turn in request.turns:
            user = [e.content for e in turn.events if e.action == "user_message" and e.content]
            answers = [e.content for e in turn.events if e.action == "agent_message" and e.content]
            tools = list(
                dict.fromkeys(
                    c.name
                    for e in turn.events
                    if e.action == "tool_call_request"
                    for c in e.tool_calls or ()
                )
            )
            all_tools.extend(t for t in tools if t not in all_tools)
            parts = []
            if user:
                parts.append(f'user: "{_clip(user[0], self.snippet_chars)}"')
            if tools:
                parts.append("tools: " + ", ".join(tools))
            if answers:
                parts.append(f'assistant: "{_clip(answers[-1], self.snippet_chars)}"')
            segments.append(f"{turn.turn_id} " + ("; ".join(parts) or "(no text)"))
        return segments, all_tools

    def _join(self, segments: list[str]) -> str:
        text = " | ".join(segments)
        if len(text) <= self.max_chars or len(segments) <= 2:
            return text
        head, tail = [segments[0]], [segments[-1]]
        for i in range(1, len(segments) - 1):
            candidate = [*head, segments[i]]
            omitted = len(segments) - len(candidate) - len(tail)
            if len(" | ".join([*candidate, f"… {omitted} turns …", *tail])) > self.max_chars:
                break
            head = candidate
        omitted = len(segments) - len(head) - len(tail)
        return " | ".join([*head, f"… {omitted} turns …", *tail])

    def _facts(self, request: SummaryRequest) -> list[SemanticFact]:
        facts: list[SemanticFact] = []
        for turn in request.turns:
            for ev in turn.events:
                if ev.action == "system_instruction" and ev.content.strip():
                    facts.append(
                        SemanticFact(f"Instruction: {_clip(ev.content, 300)}", ["instruction"], 0.9)
                    )
                elif ev.action == "user_message":
                    for sentence in _SENTENCE.split(ev.content):
                        if _PREFERENCE.search(sentence):
                            facts.append(
                                SemanticFact(_clip(sentence, 200), ["user", "preference"], 0.6)
                            )
        unique = list({f.fact: f for f in reversed(facts)}.values())[::-1]
        return unique[: request.max_semantic_items]

    def summarize_sync(self, request: SummaryRequest) -> SummaryResult:
        """The same result as ``summarize``, without a coroutine (pure)."""
        segments, tools = self._segments(request)
        return SummaryResult(
            summary=self._join(segments) or "(empty turns)",
            facts=self._facts(request),
            tags=["extractive", *tools[:5]],
            salience=0.5,
        )

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize_sync(request)


class OpenAISettings(NamedTuple):
    base_url: str | None
    api_key: str
    model: str


def _first(*values: str | None) -> str | None:
    return next((v for v in values if v), None)


def resolve_openai_settings(
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    model: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> OpenAISettings:
    """Arguments win, then ``SESSION_SERVER_SUMMARIZER_{BASE_URL,API_KEY,MODEL}``, then
    ``OPENAI_{BASE_URL,API_KEY,MODEL}``. ``model`` is required; without an API key a
    custom ``base_url`` (a local server) gets the placeholder key ``"unused"``."""
    env = os.environ if environ is None else environ
    url = _first(
        base_url, env.get("SESSION_SERVER_SUMMARIZER_BASE_URL"), env.get("OPENAI_BASE_URL")
    )
    key = _first(api_key, env.get("SESSION_SERVER_SUMMARIZER_API_KEY"), env.get("OPENAI_API_KEY"))
    name = _first(model, env.get("SESSION_SERVER_SUMMARIZER_MODEL"), env.get("OPENAI_MODEL"))
    if name is None:
        raise SummarizerError(
            "summarizer model: not set (pass model= or set SESSION_SERVER_SUMMARIZER_MODEL "
            "or OPENAI_MODEL)",
            data={"field": "model"},
        )
    if key is None:
        if url is None:
            raise SummarizerError(
                "summarizer api_key: not set (pass api_key= or set "
                "SESSION_SERVER_SUMMARIZER_API_KEY or OPENAI_API_KEY)",
                data={"field": "api_key"},
            )
        key = "unused"
    return OpenAISettings(url, key, name)


SYSTEM_PROMPT: Final = (
    "You maintain the long-term memory of a conversation between a user and an AI agent. "
    "Summarise the turns you are given into one concise episodic summary (what was asked, "
    "what was done, decisions and outcomes) and extract stable semantic facts worth "
    "remembering (preferences, constraints, decisions, facts about the user or the task). "
    "Do not repeat facts that are already in the existing memory unless they changed. "
    "Answer with one JSON object and nothing else, of the form "
    '{"summary": string, "tags": [string], "salience": number between 0 and 1, '
    '"facts": [{"fact": string, "tags": [string], "confidence": number between 0 and 1}]}.'
)


def build_prompt(request: SummaryRequest) -> str:
    """The user message sent to the model: existing memory, then the turns (pure)."""
    parts: list[str] = []
    if request.previous_episodic:
        lines = [f"{i}) {e.get('summary', '')}" for i, e in enumerate(request.previous_episodic, 1)]
        parts.append("Existing episodic memory:\n" + "\n".join(lines))
    if request.previous_semantic:
        shown = select_semantic(request.previous_semantic, request.max_semantic_items)
        parts.append(
            "Existing semantic memory:\n" + "\n".join(f"- {s.get('fact', '')}" for s in shown)
        )
    parts.append(f"Return at most {request.max_semantic_items} facts.")
    parts.append("Turns to summarise:\n" + render_transcript(request))
    return "\n\n".join(parts)


class OpenAISummarizer:
    """Summarizer on any OpenAI-compatible chat-completions endpoint (``openai`` SDK).

    Asks for strict JSON (``response_format={"type": "json_object"}``, temperature 0)
    and rejects a failed request, an empty or non-JSON answer, or a wrong shape with
    ``SummarizerError``. Settings: see ``resolve_openai_settings``. ``client`` may be
    given (an ``AsyncOpenAI``), e.g. to share a connection pool.
    """

    name = "openai"

    def __init__(
        self,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        environ: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        client: AsyncOpenAI | None = None,
    ) -> None:
        self.settings = resolve_openai_settings(
            base_url=base_url, api_key=api_key, model=model, environ=environ
        )
        if client is None:
            from openai import AsyncOpenAI

            client = AsyncOpenAI(
                base_url=self.settings.base_url,
                api_key=self.settings.api_key,
                timeout=timeout,
                max_retries=max_retries,
            )
        self._client = client

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        import openai

        messages: list[Any] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": build_prompt(request)},
        ]
        try:
            response = await self._client.chat.completions.create(
                model=self.settings.model,
                messages=messages,
                response_format={"type": "json_object"},
                temperature=0,
            )
        except openai.OpenAIError as exc:
            raise SummarizerError(
                f"summarizer request failed: {exc.__class__.__name__}: {exc}",
                data={"model": self.settings.model},
            ) from exc
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list):
            raise SummarizerError(
                f"summarizer answer: not a chat completion (got {type(response).__name__})"
            )
        if not choices:
            raise SummarizerError("summarizer answer: no choices")
        message = getattr(choices[0], "message", None)
        return parse_summary_json(getattr(message, "content", None))

    async def aclose(self) -> None:
        await self._client.close()


def default_summarizer(environ: Mapping[str, str] | None = None) -> Summarizer:
    """``SESSION_SERVER_SUMMARIZER`` = ``extractive`` (default) or ``openai``."""
    env = os.environ if environ is None else environ
    kind = env.get("SESSION_SERVER_SUMMARIZER", "extractive") or "extractive"
    if kind == "extractive":
        return ExtractiveSummarizer()
    if kind == "openai":
        return OpenAISummarizer(environ=env)
    raise SummarizerError(
        f"SESSION_SERVER_SUMMARIZER: unknown summarizer {kind!r} (expected 'extractive' or "
        "'openai')",
        data={"field": "SESSION_SERVER_SUMMARIZER"},
    )
