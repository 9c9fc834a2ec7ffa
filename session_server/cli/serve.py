"""``session-server serve``: run the WebSocket JSON-RPC server until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..auth.cluster_secret import read_cluster_secret
from ..auth.token_files import AuthSources
from ..auth.tokens import Authenticator, parse_token_spec, split_env_specs
from ..server.origins import parse_allowed_origin
from ..values.cache_budget import DEFAULT_CACHE_BYTES
from ..values.streams import StreamLimits
from ..values.usage import ModelPrice, parse_prices

if TYPE_CHECKING:
    from ..process.limits import DescriptorLimits
    from ..runtime.cluster_node import ClusterNode
    from ..runtime.usage_ledger import UsageSettings

from .cluster_options import cluster_arguments, start_cluster
from .options import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    add_memory_dir,
    add_secret_file,
    env,
    path_env,
    port_number,
    positive_int,
    positive_seconds,
)

__all__ = ["run_serve", "serve_arguments"]


def _token(value: str) -> str:
    try:
        parse_token_spec(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


def _origin(value: str) -> str:
    try:
        return parse_allowed_origin(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def allowed_origins(args: argparse.Namespace) -> list[str]:
    """``--allow-origin`` values, else ``SESSION_SERVER_ALLOW_ORIGIN`` (separated by commas
    or spaces); ``ValueError`` names one that is not an origin."""
    given: list[str] = args.allow_origin or (env("ALLOW_ORIGIN") or "").replace(",", " ").split()
    return [parse_allowed_origin(value) for value in given]


def serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default=env("HOST"),
        help="interface to listen on (env SESSION_SERVER_HOST; default 127.0.0.1). "
        "Without tokens the server stays on 127.0.0.1 unless --host is given",
    )
    p.add_argument(
        "--port",
        type=port_number,
        default=port_number(env("PORT", str(DEFAULT_PORT)) or str(DEFAULT_PORT)),
        help=f"TCP port; 0 lets the system choose (env SESSION_SERVER_PORT; default {DEFAULT_PORT})",
    )
    add_memory_dir(p)
    p.add_argument(
        "--token",
        action="append",
        type=_token,
        metavar="TOKEN[:PATTERN,...]",
        help="accept this bearer token; repeat for several. TOKEN:agent-a-*,agent-b limits "
        "it to agent ids matching those fnmatch patterns (env SESSION_SERVER_TOKENS: "
        "plain tokens comma-separated, restricted specs separated by ';' or spaces). "
        "Without any token, authentication is off",
    )
    add_secret_file(p)
    p.add_argument(
        "--cluster-secret-file",
        type=Path,
        default=path_env("CLUSTER_SECRET_FILE"),
        metavar="FILE",
        help="cluster mode: the secret (at least 32 bytes, the same on every node) from which "
        "a node forwarding a client's connection to the agent's owner proves it is a node "
        "(env SESSION_SERVER_CLUSTER_SECRET_FILE)",
    )
    p.add_argument(
        "--token-file",
        type=Path,
        default=path_env("TOKEN_FILE"),
        metavar="FILE",
        help="also accept the token specs in FILE (one TOKEN[:PATTERN,...[:SCOPE]] per line, "
        "# comments); re-read on SIGHUP and when it changes (env SESSION_SERVER_TOKEN_FILE)",
    )
    p.add_argument(
        "--token-reload-interval",
        type=float,
        default=float(env("TOKEN_RELOAD_INTERVAL", "2") or "2"),
        metavar="SECONDS",
        help="how often to check the token and secret files for changes; 0: only on SIGHUP "
        "(env SESSION_SERVER_TOKEN_RELOAD_INTERVAL; default 2)",
    )
    p.add_argument(
        "--max-connections",
        type=positive_int,
        default=positive_int(env("MAX_CONNECTIONS") or "") if env("MAX_CONNECTIONS") else None,
        help="most simultaneous connections; more are refused with HTTP 503 "
        "(env SESSION_SERVER_MAX_CONNECTIONS; default derived from the descriptor limit)",
    )
    p.add_argument(
        "--max-handshakes",
        type=positive_int,
        default=positive_int(env("MAX_HANDSHAKES", "128") or "128"),
        help="most connections accepted whose WebSocket handshake is not decided yet, apart "
        "from --max-connections; a new one beyond drops the oldest (env "
        "SESSION_SERVER_MAX_HANDSHAKES; default 128)",
    )
    p.add_argument(
        "--handshake-timeout",
        type=positive_seconds,
        default=positive_seconds(env("HANDSHAKE_TIMEOUT", "10") or "10"),
        metavar="SECONDS",
        help="drop a connection whose WebSocket handshake has not completed this many seconds "
        "after it was accepted (env SESSION_SERVER_HANDSHAKE_TIMEOUT; default 10)",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=float(env("IDLE_TIMEOUT", "300") or "300"),
        metavar="SECONDS",
        help="close a connection that sent no request and had nothing in flight for this many "
        "seconds, also when it answers pings or holds subscriptions, unless a subscription "
        "delivered events since the previous look (so a quiet one is closed after one to two "
        "timeouts); 0: never (env SESSION_SERVER_IDLE_TIMEOUT; default 300)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        type=_origin,
        metavar="ORIGIN",
        help="let browser pages of ORIGIN (scheme://host[:port]) use the server; repeat for "
        "several; * allows any page. Requests with another Origin header than the server's "
        "own are refused with 403; requests without one (programs) are not affected (env "
        "SESSION_SERVER_ALLOW_ORIGIN: origins separated by commas or spaces; default: none)",
    )
    p.add_argument(
        "--stop-timeout",
        type=float,
        default=float(env("STOP_TIMEOUT", "10") or "10"),
        help="on SIGTERM/SIGINT, stop within this many seconds whatever the clients do "
        "(env SESSION_SERVER_STOP_TIMEOUT; default 10)",
    )
    p.add_argument(
        "--synchronous",
        choices=("FULL", "NORMAL"),
        default=(env("SYNCHRONOUS", "FULL") or "FULL").upper(),
        help="SQLite synchronous level: FULL survives power loss, NORMAL (WAL) survives "
        "process crashes and is faster (env SESSION_SERVER_SYNCHRONOUS; default FULL)",
    )
    p.add_argument(
        "--max-frame-bytes",
        type=positive_int,
        default=positive_int(env("MAX_FRAME_BYTES", str(16 * 1024 * 1024)) or "16777216"),
        help="largest accepted WebSocket message; bigger ones close the connection with "
        "1009 (env SESSION_SERVER_MAX_FRAME_BYTES; default 16777216 = 16 MiB)",
    )
    p.add_argument(
        "--max-unread-answer-bytes",
        type=positive_int,
        default=positive_int(env("MAX_UNREAD_ANSWER_BYTES") or "")
        if env("MAX_UNREAD_ANSWER_BYTES")
        else None,
        help="answer and notification bytes the server holds for clients that have not "
        "read them yet, all connections together; a request that may answer up to the "
        "answer bound (the frame size) reserves that much before it runs and waits for "
        "room (env SESSION_SERVER_MAX_UNREAD_ANSWER_BYTES; default 16 x the frame size "
        "= 256 MiB)",
    )
    p.add_argument(
        "--max-connection-answer-bytes",
        type=positive_int,
        default=positive_int(env("MAX_CONNECTION_ANSWER_BYTES") or "")
        if env("MAX_CONNECTION_ANSWER_BYTES")
        else None,
        help="each connection's share of --max-unread-answer-bytes: while it is full the "
        "connection is not read and its next requests wait "
        "(env SESSION_SERVER_MAX_CONNECTION_ANSWER_BYTES; default 2 x the frame size "
        "= 32 MiB)",
    )
    p.add_argument(
        "--write-timeout",
        type=float,
        default=float(env("WRITE_TIMEOUT", "60") or "60"),
        help="drop a connection whose socket has not taken a queued answer or "
        "notification within this many seconds (a client that does not read); 0: never "
        "(env SESSION_SERVER_WRITE_TIMEOUT; default 60)",
    )
    p.add_argument(
        "--context-limit",
        type=positive_int,
        default=positive_int(env("CONTEXT_LIMIT", "200") or "200"),
        help="events a context.build without limit or strategy takes (the latest ones; "
        "older turns are left out and counted in omitted_events) "
        "(env SESSION_SERVER_CONTEXT_LIMIT; default 200)",
    )
    p.add_argument(
        "--max-agents",
        type=positive_int,
        default=positive_int(env("MAX_AGENTS", "100000") or "100000"),
        help="agents the memory dir may hold; a write that would create one more is "
        "refused with -32004 (reads never create agents) "
        "(env SESSION_SERVER_MAX_AGENTS; default 100000)",
    )
    p.add_argument(
        "--recent-cache-bytes",
        type=positive_int,
        default=positive_int(env("RECENT_CACHE_BYTES") or str(DEFAULT_CACHE_BYTES)),
        help="bytes the agents' caches of recent events hold together (one session at "
        "most an eighth; the least recently used go first) "
        f"(env SESSION_SERVER_RECENT_CACHE_BYTES; default {DEFAULT_CACHE_BYTES} = 256 MiB)",
    )
    p.add_argument(
        "--idempotency-retention",
        type=positive_seconds,
        default=positive_seconds(env("IDEMPOTENCY_RETENTION", "86400") or "86400"),
        help="seconds a write's idempotency key can be replayed "
        "(env SESSION_SERVER_IDEMPOTENCY_RETENTION; default 86400)",
    )
    p.add_argument(
        "--idempotency-keys",
        type=positive_int,
        default=positive_int(env("IDEMPOTENCY_KEYS", "1000") or "1000"),
        help="idempotency keys kept per session (the newest) "
        "(env SESSION_SERVER_IDEMPOTENCY_KEYS; default 1000)",
    )
    p.add_argument(
        "--stream-idle-seconds",
        type=positive_seconds,
        default=positive_seconds(env("STREAM_IDLE_SECONDS", "600") or "600"),
        help="seconds after which a live turn (stream.open) with no append or close is "
        "abandoned and its chunks erased (env SESSION_SERVER_STREAM_IDLE_SECONDS; "
        "default 600)",
    )
    defaults = StreamLimits()
    for flag, name, what in _STREAM_BOUNDS:
        default = getattr(defaults, name)
        key = flag.removeprefix("--").replace("-", "_").upper()
        p.add_argument(
            flag,
            dest=name,
            metavar=key,
            type=positive_int,
            default=positive_int(env(key, str(default)) or str(default)),
            help=f"{what}; more is refused with -32004 (env SESSION_SERVER_{key}; "
            f"default {default})",
        )
    p.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default=(env("LOOP", "auto") or "auto").lower(),
        help="event loop: uvloop (faster; the 'fast' extra installs it), asyncio's own, or "
        "auto: uvloop when it is installed (env SESSION_SERVER_LOOP; default auto)",
    )
    p.add_argument(
        "--compaction-wait",
        type=positive_seconds,
        default=positive_seconds(env("COMPACTION_WAIT", "2") or "2"),
        help="seconds a context.build / context.render waits for a summary before it "
        "answers with the previous compaction record (the summary goes on in the "
        "background) (env SESSION_SERVER_COMPACTION_WAIT; default 2)",
    )
    p.add_argument(
        "--compaction-timeout",
        type=positive_seconds,
        default=positive_seconds(env("COMPACTION_TIMEOUT", "120") or "120"),
        help="seconds a background summary may take before it counts as failed and is "
        "retried later with backoff (env SESSION_SERVER_COMPACTION_TIMEOUT; default 120)",
    )
    p.add_argument(
        "--no-mirror",
        action="store_true",
        default=(env("MIRROR", "1") or "1").lower() in ("0", "false", "no", "off"),
        help="do not keep the JSONL mirror in the reference layout next to SQLite "
        "(env SESSION_SERVER_MIRROR=0; default: keep it)",
    )
    p.add_argument(
        "--prices",
        type=Path,
        default=env("PRICES"),
        metavar="FILE",
        help='JSON prices per model, per million tokens: {"MODEL": {"input": N, '
        '"output": N, "cached_input": N?, "cache_write": N?}}; checked at start. '
        "Without it memory.usage answers no cost (env SESSION_SERVER_PRICES)",
    )
    p.add_argument(
        "--usage-label",
        default=env("USAGE_LABEL"),
        metavar="REGEX",
        help="regular expression whose first group (or match) of an agent id labels the "
        "usage metrics (at most 100 labels, then 'other'); default: one label, 'all', "
        "never raw agent ids (env SESSION_SERVER_USAGE_LABEL)",
    )
    p.add_argument(
        "--retention-interval",
        type=positive_seconds,
        default=positive_seconds(env("RETENTION_INTERVAL", "3600") or "3600"),
        help="seconds between retention sweeps of every agent "
        "(env SESSION_SERVER_RETENTION_INTERVAL; default 3600)",
    )
    cluster_arguments(p)
    p.add_argument(
        "--log-level",
        default=(env("LOG_LEVEL", "WARNING") or "WARNING").upper(),
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="logging level on stderr (env SESSION_SERVER_LOG_LEVEL; default WARNING)",
    )


def usage_settings(prices: Path | None, label: str | None) -> UsageSettings:
    """The registry's usage settings from ``--prices`` and ``--usage-label``;
    ``ValueError`` naming the file, the model and the field of a wrong price."""
    from ..runtime.usage_ledger import UsageSettings

    table: dict[str, ModelPrice] = {}
    if prices is not None:
        try:
            data = json.loads(prices.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--prices {prices}: {exc}") from None
        table = parse_prices(data, where=f"--prices {prices}")
    if label is not None:
        try:
            re.compile(label)
        except re.error as exc:
            raise ValueError(f"--usage-label: not a regular expression ({exc})") from None
    return UsageSettings(prices=table, metrics_label=label)


def _auth_sources(args: argparse.Namespace) -> AuthSources:
    specs = args.token or split_env_specs(env("TOKENS"))
    return AuthSources(
        specs=tuple(specs),
        token_file=args.token_file,
        secret_file=args.token_secret_file,
        secret=env("TOKEN_SECRET"),
    )


def run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level), format="%(levelname)s %(name)s: %(message)s"
    )
    sources = _auth_sources(args)
    try:
        auth = sources.load()
    except ValueError as exc:
        print(f"session-server: {exc}", file=sys.stderr)
        return 2
    if sources.configured and not auth.enabled:
        print("session-server: the token file holds no token", file=sys.stderr)
        return 2
    try:
        args.usage = usage_settings(args.prices, args.usage_label)
    except ValueError as exc:
        print(f"session-server: {exc}", file=sys.stderr)
        return 2
    try:
        factory = _loop_factory(args.loop)
    except ImportError as exc:
        print(f"session-server: --loop {args.loop}: {exc}", file=sys.stderr)
        return 2
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(_serve(args, sources, auth))
    except KeyboardInterrupt:  # a signal before the handlers were installed
        return 130


def _loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop for ``uvloop`` (``ImportError`` when it is not installed) and
    for ``auto`` when it is installed; ``None`` (asyncio's own) otherwise."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ImportError(
                "uvloop is not installed (pip install 'session-server[fast]')"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


SWITCH_INTERVAL = 0.001
"""Seconds a thread may hold the GIL while another waits for it (``serve``)."""

GC_THRESHOLDS = (2_000, 10, 100)
"""``gc.set_threshold`` of ``serve`` (the default is (700, 10, 10))."""


async def _serve(args: argparse.Namespace, sources: AuthSources, auth: Authenticator) -> int:
    from ..process.limits import derive_limits, raise_nofile_limit
    from ..process.memory import map_large_allocations
    from ..server.rate_limited_log import quiet_accept_errors

    # Descriptors bound both open agents and connections: take what the system allows.
    limits = derive_limits(raise_nofile_limit())
    # Large frames are freed back to the system, so RSS follows what is in use.
    map_large_allocations()
    # Heavy calls run on worker threads, but Python threads share one GIL: each time
    # the event loop wakes from select it waits for a busy worker to hand the GIL
    # over, every switch interval (5 ms by default). A round trip takes several such
    # waits, so a worker rendering an export stalled other clients by 50-80 ms; at
    # SWITCH_INTERVAL the loop gets the GIL back within a millisecond.
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
    # The cyclic garbage collector holds the GIL for a whole pass: building a 14 MB view
    # (hundreds of thousands of live objects) set off full collections of 40-170 ms
    # (measured with gc.callbacks). What exists at start (modules, schemas) is frozen
    # out of every pass, and young objects are collected less often, so no pass walks
    # the whole heap while an answer is being built.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)

    try:
        origins = allowed_origins(args)
    except ValueError as exc:
        print(f"session-server: SESSION_SERVER_ALLOW_ORIGIN: {exc}", file=sys.stderr, flush=True)
        return 2
    host = args.host or DEFAULT_HOST
    tokens = auth.enabled
    if not tokens and args.host is None:
        print(
            "session-server: no tokens configured, so listening on 127.0.0.1 only "
            "(pass --host to listen elsewhere, --token to require a token)",
            file=sys.stderr,
            flush=True,
        )
    elif not tokens:
        print(
            f"session-server: WARNING: no tokens configured and listening on {host}: "
            "anyone who can reach this port can read and write every agent's memory",
            file=sys.stderr,
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    quiet_accept_errors(loop)
    try:
        cluster = await start_cluster(args, f"ws://{host}:{args.port}")
    except (ValueError, OSError) as exc:
        print(f"session-server: cannot join the cluster: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        return await _serve_registry(args, sources, auth, cluster, host, origins, stop, limits)
    finally:
        if cluster is not None:
            await cluster.stop()


async def _serve_registry(
    args: argparse.Namespace,
    sources: AuthSources,
    auth: Authenticator,
    cluster: ClusterNode | None,
    host: str,
    origins: list[str],
    stop: asyncio.Event,
    limits: DescriptorLimits,
) -> int:
    from ..auth.token_files import AuthReloader
    from ..rpc.table import BUILTIN_METHODS
    from ..runtime.registry import ActorRegistry
    from ..server.server import SessionServer
    from ..storage.idempotency import IdempotencyRetention
    from ..values.errors import MemoryDirInUseError

    memory_dir = args.memory_dir.resolve()
    loop = asyncio.get_running_loop()
    async with ActorRegistry(
        memory_dir,
        synchronous=args.synchronous,
        mirror=not args.no_mirror,
        context_limit=args.context_limit,
        max_open=limits.max_open_agents,
        compaction_wait=args.compaction_wait,
        compaction_timeout=args.compaction_timeout,
        max_agents=args.max_agents,
        idempotency=IdempotencyRetention(args.idempotency_retention, args.idempotency_keys),
        recent_cache_bytes=args.recent_cache_bytes,
        stream_limits=stream_limits(args),
        usage=args.usage,
        retention_interval=args.retention_interval,
        turn_logs=cluster,
    ) as registry:
        cluster_secret = None
        if args.cluster_secret_file is not None:
            try:
                cluster_secret = read_cluster_secret(args.cluster_secret_file)
            except ValueError as exc:
                print(f"session-server: {exc}", file=sys.stderr, flush=True)
                return 2
        if cluster is not None:
            from ..runtime.cluster_wiring import join_registry

            join_registry(cluster, registry)
        server = SessionServer(
            registry,
            cluster_secret=cluster_secret,
            host=host,
            port=args.port,
            auth=auth,
            max_frame_bytes=args.max_frame_bytes,
            max_unread_answer_bytes=args.max_unread_answer_bytes,
            max_outgoing_bytes=args.max_connection_answer_bytes,
            write_timeout=args.write_timeout if args.write_timeout > 0 else None,
            methods=BUILTIN_METHODS,
            max_connections=args.max_connections or limits.max_connections,
            max_handshakes=args.max_handshakes,
            handshake_timeout=args.handshake_timeout,
            idle_timeout=args.idle_timeout if args.idle_timeout > 0 else None,
            allow_origins=origins,
            stop_timeout=args.stop_timeout,
            owner_directory=cluster,
        )
        try:
            await server.start()
        except MemoryDirInUseError as exc:
            print(f"session-server: cannot start: {exc.message}", file=sys.stderr, flush=True)
            return 2
        except OSError as exc:
            print(f"session-server: cannot listen on {host}:{args.port}: {exc}", file=sys.stderr)
            return 2
        if cluster is not None and not args.advertise and args.port == 0:
            await cluster.advertise(server.url)  # the port the system chose
        watcher: asyncio.Task[None] | None = None
        if sources.configured:
            reloader = AuthReloader(sources, server)
            loop.add_signal_handler(signal.SIGHUP, reloader.reload)
            if args.token_reload_interval > 0 and (sources.token_file or sources.secret_file):
                watcher = asyncio.create_task(reloader.watch(args.token_reload_interval))
        print(
            f"session-server listening on {server.url} (memory dir {memory_dir})",
            flush=True,
        )
        await stop.wait()
        if watcher is not None:
            watcher.cancel()
        print("session-server: stopping (finishing requests in flight)", file=sys.stderr)
        await server.stop()
    print("session-server: stopped", file=sys.stderr, flush=True)
    return 0


_STREAM_BOUNDS = (
    ("--stream-max-chunk-bytes", "max_chunk_bytes", "bytes of one live-turn chunk (its JSON)"),
    ("--stream-max-append-chunks", "max_chunks_per_append", "chunks in one stream.append"),
    ("--stream-max-chunks", "max_stream_chunks", "chunks one live turn holds"),
    ("--stream-max-bytes", "max_stream_bytes", "bytes of chunk JSON one live turn holds"),
    (
        "--stream-max-per-connection",
        "max_streams_per_connection",
        "live turns one connection has open (opened or taken over by it)",
    ),
)
"""The live-turn bounds given as ``serve`` options: (flag, ``StreamLimits`` field, help)."""


def stream_limits(args: argparse.Namespace) -> StreamLimits:
    """The live-turn bounds of ``serve``'s options (``values.streams.StreamLimits``)."""
    return StreamLimits(
        idle_seconds=args.stream_idle_seconds,
        **{name: getattr(args, name) for _flag, name, _what in _STREAM_BOUNDS},
    )
