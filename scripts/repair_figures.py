"""Issue 12 figures: the context after 20 turns against a 2,000-token summarize budget.

Runs a real server on 127.0.0.1 in a temporary memory dir and persists 20 turns of about
370 tokens each through the real client, four ways: no strategy (the baseline), the
strategy passed with every request, the strategy set on the session, and the strategy on
the session with no ``usage`` at all (the server's own count). Prints the token count of
the final context and the number of compaction records::

    .venv/bin/python scripts/repair_figures.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from session_server.client import SessionClient
from tests.session_server.server.test_server_compaction_safety import SUMMARIZE, turn
from tests.support.server import running_server

MODES = ("none", "request", "session", "no-usage")


async def run(mode: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            running_server(Path(tmp)) as server,
            SessionClient(server.url, "bot") as client,
        ):
            sid = await client.create_session()
            if mode in ("session", "no-usage"):
                await client.call("memory.set_strategy", {"session_id": sid, "strategy": SUMMARIZE})
            request = SUMMARIZE if mode == "request" else None
            for i in range(20):
                ctx = await client.build_context(sid, strategy=request)
                ctx.add_messages(turn(i))
                reported = mode in ("request", "session")
                usage = {"prompt_tokens": ctx.token_count or 0} if reported else None
                await client.persist_context(sid, ctx, usage=usage, strategy=request)
            final = await client.build_context(sid, strategy=request)
            records = await client.load_events(sid, limit=None, actions=["compaction"])
            return f"{mode:9s} context tokens={final.token_count} compactions={len(records)}"


async def main() -> None:
    for mode in sys.argv[1:] or MODES:
        print(await run(mode), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
