"""``session-server token``: print a signed token (HS256 JWT) for ``--token-secret-file``."""

from __future__ import annotations

import argparse
import sys

from ..auth.token_files import AuthSources
from ..auth.tokens import MAX_TTL_SECONDS, SCOPES, mint_token
from .options import add_secret_file, env, positive_int

__all__ = ["run_token", "token_arguments"]


def _ttl(value: str) -> int:
    number = positive_int(value)
    if number > MAX_TTL_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TTL_SECONDS} (366 days)")
    return number


def token_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--agents",
        nargs="+",
        required=True,
        metavar="PATTERN",
        help="agent ids the token may address (fnmatch patterns, e.g. 'support-*')",
    )
    p.add_argument(
        "--sessions",
        nargs="+",
        metavar="SID",
        help="limit the token to these session ids (default: every session of those agents)",
    )
    p.add_argument(
        "--scope",
        required=True,
        choices=SCOPES,
        help="read: only methods that change nothing; write: also appends, persists, "
        "compaction, session create/update; admin: also deletes, import and cross-agent methods",
    )
    p.add_argument(
        "--ttl",
        required=True,
        type=_ttl,
        metavar="SECONDS",
        help=f"seconds until the token expires (at most {MAX_TTL_SECONDS})",
    )
    add_secret_file(p)


def run_token(args: argparse.Namespace) -> int:
    sources = AuthSources(secret_file=args.token_secret_file, secret=env("TOKEN_SECRET"))
    try:
        secrets = sources.secrets()
        if not secrets:
            raise ValueError(
                "no secret: pass --token-secret-file or set SESSION_SERVER_TOKEN_SECRET"
            )
        token = mint_token(
            secrets[0], agents=args.agents, sessions=args.sessions, scope=args.scope, ttl=args.ttl
        )
    except ValueError as exc:
        print(f"session-server token: {exc}", file=sys.stderr)
        return 2
    print(token)
    return 0
