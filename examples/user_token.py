"""A backend hands one user a token for that user's session, and nothing else.

Run the server with a secret, then this file with the same secret:

    head -c 48 /dev/urandom | base64 > secret.txt
    scripts/serve --token-secret-file secret.txt
    .venv/bin/python examples/user_token.py ws://127.0.0.1:8765 secret.txt
"""

import asyncio
import sys
from pathlib import Path

from session_server.auth import mint_token
from session_server.client import SessionClient
from session_server.errors import ForbiddenError

AGENT = "support-bot"


def token_for_user(secret: str, session_id: str) -> str:
    """What the backend returns to the user's page: read-only, this session, 15 minutes.
    The page connects with
    ``new WebSocket(url + "/v1/agents/support-bot", ["jsonrpc", "bearer." + token])``."""
    return mint_token(secret, agents=[AGENT], sessions=[session_id], scope="read", ttl=900)


async def main(url: str, secret: str) -> None:
    # The backend's own token: every session of the agent, short-lived like any other.
    backend_token = mint_token(secret, agents=[AGENT], scope="admin", ttl=60)
    async with SessionClient(url, AGENT, token=backend_token) as backend:
        mine = await backend.create_session(metadata={"user": "ada"})
        await backend.create_session(metadata={"user": "someone else"})

    async with SessionClient(url, AGENT, token=token_for_user(secret, mine)) as user:
        print("visible sessions:", [s["metadata"]["user"] for s in await user.list_sessions()])
        try:
            await user.create_session()
        except ForbiddenError as exc:
            print("refused:", exc.message)


if __name__ == "__main__":
    server_url = sys.argv[1] if len(sys.argv) > 1 else "ws://127.0.0.1:8765"
    secret_file = Path(sys.argv[2] if len(sys.argv) > 2 else "secret.txt")
    asyncio.run(main(server_url, secret_file.read_text().splitlines()[0].strip()))
