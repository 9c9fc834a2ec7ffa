"""Integrations with agent frameworks (each module imports its framework on import).

- :mod:`session_server.integrations.openai_agents`: ``SessionServerSession``, the OpenAI
  Agents SDK's ``Session`` protocol backed by session-server (needs ``openai-agents``).
"""

from __future__ import annotations

__all__: list[str] = []
