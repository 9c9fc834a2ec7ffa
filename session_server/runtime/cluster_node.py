"""``ClusterNode``: this server's membership of a NATS JetStream cluster (I/O shell).

What it keeps in JetStream (``prefix`` defaults to ``ss``):

- the stream ``<PREFIX>_TURNS`` (subjects ``<prefix>.agent.>``, file storage, R3 with three
  servers): one subject per agent, ``<prefix>.agent.<agent_token>``, holding its records
  and owner markers (``values/turn_records.py``);
- the KV bucket ``<prefix>_owners``: per agent ``{node_id, url, generation}``, claimed by
  compare-and-set (``create``, or ``update`` with the revision read); the generation
  grows with each claim;
- the KV bucket ``<prefix>_nodes`` with a TTL of one lease: each node's heartbeat, put
  every third of a lease. A node whose key expired is taken for gone.

Ownership (``locate``): an agent owned here is served here; an unowned agent, or one
whose owner's heartbeat lapsed (or whose owner is this node id, after a restart), is
claimed; else the owner's location is the answer. A claim only says who may append:
``acquire`` (called when the agent's store opens) appends an owner marker with the
expected last subject sequence (the fence: the previous owner's next append is refused),
then the store catches the agent file up from the log (``catch_up``: the local file when
it is current, else its missing tail replayed). Correctness never depends on clocks:
leases only decide when a node may claim; the log's compare-and-set decides who writes.
"""

from __future__ import annotations

import asyncio
import io
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import msgspec
import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import (
    APIError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    ObjectNotFoundError,
)
from nats.js.errors import NotFoundError as JsNotFoundError
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore
from prometheus_client import CollectorRegistry, Counter

from ..storage.turn_log import LogTarget
from ..values.errors import NotOwnerError, StorageError, TooLargeError, UnavailableError
from ..values.ownership import OwnerLocation
from ..values.turn_records import (
    OwnerEntry,
    OwnerMarker,
    TurnRecord,
    agent_from_token,
    agent_token,
    decode_entry,
    decode_owner,
    encode_marker,
    encode_owner,
)
from .cluster_files import file_image, install_image, local_applied_seq
from .cluster_keys import DataKey, KeyRing, new_key, open_sealed, seal, sealed_key_id
from .cluster_log import READ_BATCH, AgentLog

__all__ = ["ClusterNode"]

log = logging.getLogger(__name__)
T = TypeVar("T")

EXPECTED_LAST_SUBJECT_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"
WRONG_LAST_SEQUENCE: Final = 10071
CLAIM_ATTEMPTS: Final = 8
FENCE_ATTEMPTS: Final = 50
# A snapshot after this many bytes of records since the last one (or ``snapshot_every``
# records): a rebuild replays at most about this much.
SNAPSHOT_BYTES: Final = 16 * 1024 * 1024


START_DEADLINE_S: Final = 30.0


async def _settled(step: Callable[[], Awaitable[T]], what: str) -> T:
    """``step()``, again while JetStream is still settling (a stream or bucket just
    created by another node, a leader being elected), for up to ``START_DEADLINE_S``."""
    deadline = time.monotonic() + START_DEADLINE_S
    delay = 0.05
    while True:
        try:
            return await step()
        except (nats.errors.Error, APIError) as exc:
            if time.monotonic() > deadline:
                raise UnavailableError(f"cluster: {what}: {exc!r}") from exc
            await asyncio.sleep(delay)  # backoff between attempts
            delay = min(delay * 2, 1.0)


class _Heartbeat(msgspec.Struct, frozen=True):
    node_id: str
    url: str
    started: float


class ClusterNode:
    """One node of the cluster (see the module doc). ``await start()``, then pass it to
    the registry (``turn_logs=``) and the server (``owner_directory=``); ``await stop()``
    after the registry closed."""

    def __init__(
        self,
        servers: list[str],
        node_id: str,
        url: str,
        *,
        prefix: str = "ss",
        lease_s: float = 3.0,
        replicas: int | None = None,
        append_timeout_s: float = 10.0,
        snapshot_every: int = 10_000,
        snapshot_bytes: int = SNAPSHOT_BYTES,
    ) -> None:
        if not servers:
            raise ValueError("servers: at least one nats:// URL")
        if not node_id or agent_token(node_id) != node_id:
            raise ValueError(f"node_id: letters, digits, '-' and '_' only, got {node_id!r}")
        if lease_s <= 0:
            raise ValueError("lease_s: must be positive")
        self.servers = servers
        self.node_id = node_id
        self.url = url
        self.prefix = prefix
        self.stream = f"{prefix.upper()}_TURNS"
        self.lease_s = float(lease_s)
        self.replicas = replicas if replicas is not None else min(3, len(servers))
        self.append_timeout = float(append_timeout_s)
        self.snapshot_every = snapshot_every
        self.snapshot_bytes = snapshot_bytes
        self._key_bucket: KeyValue | None = None
        self._snapshots: ObjectStore | None = None
        self._rings: dict[str, KeyRing] = {}
        self._snapshotting: dict[str, asyncio.Task[None]] = {}
        self.snapshots = 0
        self.rotations = 0
        self.nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._owners: KeyValue | None = None
        self._nodes: KeyValue | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._tokens: dict[str, str] = {}  # KV key -> agent id, of agents claimed here
        self._owned: dict[str, int] = {}  # agent -> generation claimed here
        self._logs: dict[str, AgentLog] = {}
        self._claims: dict[str, asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = 0.0
        # Called with an agent id when this node loses it (a fence): the wiring hibernates
        # the agent's actor so its caches and file are read again at the next claim.
        self.on_lost: Callable[[str], None] | None = None
        self.failovers = 0
        self.rebuilds = 0
        self.fenced_refusals = 0
        self._counters: dict[str, Counter] = {}

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.nc = await nats.connect(
            self.servers,
            name=f"session-server {self.node_id}",
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.2,
            connect_timeout=2,
            error_cb=self._nats_error,
        )
        self._js = self.nc.jetstream(timeout=5.0)
        js = self._js
        config = js_api.StreamConfig(
            name=self.stream,
            subjects=[f"{self.prefix}.agent.>"],
            storage=js_api.StorageType.FILE,
            num_replicas=self.replicas,
            allow_direct=True,
            discard=js_api.DiscardPolicy.NEW,
        )

        async def ensure_stream() -> None:
            try:
                await js.stream_info(self.stream)
            except JsNotFoundError:
                await js.add_stream(config)

        await _settled(ensure_stream, "the turn log stream")
        self._owners = await _settled(
            lambda: js.create_key_value(
                bucket=f"{self.prefix}_owners", history=1, replicas=self.replicas
            ),
            "the owners bucket",
        )
        self._nodes = await _settled(
            lambda: js.create_key_value(
                bucket=f"{self.prefix}_nodes", history=1, ttl=self.lease_s, replicas=self.replicas
            ),
            "the nodes bucket",
        )
        # Memory storage: the keys never reach a nats-server's disk (``cluster_keys``).
        self._key_bucket = await _settled(
            lambda: js.create_key_value(
                bucket=f"{self.prefix}_keys",
                history=1,
                replicas=self.replicas,
                storage=js_api.StorageType.MEMORY,
            ),
            "the keys bucket",
        )
        self._snapshots = await _settled(
            lambda: js.create_object_store(
                bucket=f"{self.prefix}_snapshots",
                replicas=self.replicas,
                storage=js_api.StorageType.FILE,
            ),
            "the snapshots bucket",
        )
        self._started = time.time()
        await _settled(self._beat, "the first heartbeat")
        self._heartbeat = asyncio.ensure_future(self._beats())
        self._watcher = asyncio.ensure_future(self._watch_owners())

    async def advertise(self, url: str) -> None:
        """Announce ``url`` as this node's (known once the server listens: port 0)."""
        self.url = url
        await self._beat()

    async def _watch_owners(self) -> None:
        """Drop at once an agent another node claimed (its owner entry changed), so that
        this node stops serving reads of it too; the fence already refuses its writes."""
        while True:
            try:
                watcher = await self._kv(self._owners).watchall()
                async for update in watcher:
                    if update is None or not update.value:
                        continue
                    agent_id = self._tokens.get(update.key)
                    if agent_id is None or agent_id not in self._owned:
                        continue
                    entry = decode_owner(update.value)
                    if entry.node_id != self.node_id or entry.generation != self._owned[agent_id]:
                        self._lose(agent_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a reconnect: watch again
                log.info("cluster node %s: owners watch restarted (%s)", self.node_id, exc)
                await asyncio.sleep(self.lease_s / 3)  # before watching again

    def _lose(self, agent_id: str) -> None:
        self._owned.pop(agent_id, None)
        agent_log = self._logs.pop(agent_id, None)
        if agent_log is not None:
            agent_log.fenced = True
        if self.on_lost is not None:
            self.on_lost(agent_id)

    async def leave(self) -> None:
        """Stop the heartbeat and remove it: other nodes may claim this node's agents at
        once (before a shutdown). Its appends still go out, and are fenced once another
        node claims an agent."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
            self._heartbeat = None
        if self.nc is not None and self._nodes is not None:
            try:
                await self._nodes.delete(self.node_id)
            except Exception as exc:  # the cluster may be gone already
                log.info("cluster node %s: heartbeat not removed (%s)", self.node_id, exc)

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        await self.leave()
        if self.nc is not None:
            await self.nc.close()
            self.nc = None

    async def _nats_error(self, exc: Exception) -> None:
        log.warning("cluster node %s: NATS: %s", self.node_id, exc)

    async def _beat(self) -> None:
        beat = _Heartbeat(self.node_id, self.url, self._started)
        await self._kv(self._nodes).put(self.node_id, msgspec.json.encode(beat))

    async def _beats(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)  # the heartbeat's period
            try:
                await self._beat()
            except Exception as exc:
                log.warning("cluster node %s: heartbeat failed (%s)", self.node_id, exc)

    # -- the directory (``values.ownership.OwnerDirectory``) ----------------------------

    async def locate(self, agent_id: str) -> OwnerLocation | None:
        """``None``: served here (owned, or claimed now); else the live owner."""
        if agent_id in self._owned:
            return None
        lock = self._claims.setdefault(agent_id, asyncio.Lock())
        async with lock:
            for _ in range(CLAIM_ATTEMPTS):
                if agent_id in self._owned:
                    return None
                entry, revision = await self._owner_entry(agent_id)
                elsewhere = entry is not None and entry.node_id != self.node_id
                if entry is not None and elsewhere and await self._alive(entry.node_id):
                    return OwnerLocation(entry.node_id, entry.url, entry.generation)
                if await self._claim(agent_id, entry, revision):
                    if elsewhere:
                        self._count("failovers")
                    return None
            raise UnavailableError(
                f"agent {agent_id!r}: ownership is contended; try again",
                data={"reason": "claim_contended", "retryable": True, "agent_id": agent_id},
            )

    def forget(self, agent_id: str) -> None:
        """Nothing cached about other nodes' agents: every ``locate`` reads the KV."""
        return None

    async def owner(self, agent_id: str) -> OwnerEntry | None:
        """The KV's owner entry of the agent (``cluster.owner``), ``None`` if unclaimed."""
        entry, _ = await self._owner_entry(agent_id)
        return entry

    async def known(self, agent_id: str) -> bool:
        """Some node claimed the agent (its log exists): a node without its file rebuilds
        it on the first call instead of answering not found."""
        entry, _ = await self._owner_entry(agent_id)
        return entry is not None

    def owns(self, agent_id: str) -> bool:
        return agent_id in self._owned

    def generation(self, agent_id: str) -> int | None:
        return self._owned.get(agent_id)

    def health(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "connected": self.nc is not None and self.nc.is_connected,
            "owned_agents": self.owned_agents,
            "failovers": self.failovers,
            "rebuilds": self.rebuilds,
            "fenced_refusals": self.fenced_refusals,
        }

    @property
    def owned_agents(self) -> int:
        return len(self._owned)

    async def nodes(self) -> list[dict[str, Any]]:
        """Every node with a live heartbeat (``cluster.status``)."""
        kv = self._kv(self._nodes)
        out: list[dict[str, Any]] = []
        try:
            keys = await kv.keys()
        except Exception:  # nats-py raises NoKeysError for an empty bucket
            keys = []
        for key in sorted(keys):
            try:
                got = await kv.get(key)
            except KeyNotFoundError:
                continue
            if got.value:
                beat = msgspec.json.decode(got.value, type=_Heartbeat)
                out.append({"node_id": beat.node_id, "url": beat.url, "alive": True})
        return out

    async def agent_ids(self) -> list[str]:
        """Every agent with an owner entry (claimed by some node), sorted."""
        try:
            keys = await self._kv(self._owners).keys()
        except Exception:  # nats-py raises NoKeysError for an empty bucket
            return []
        out: list[str] = []
        for key in keys:
            try:
                out.append(agent_from_token(key))
            except (ValueError, UnicodeDecodeError):  # not a key this program wrote
                continue
        return sorted(out)

    # -- claims and the fence ------------------------------------------------------------

    async def acquire(self, agent_id: str, path: Path) -> AgentLog:
        """The agent's turn log, owned here: claimed if it may be (``locate``), fenced
        by an owner marker, its data key loaded, and the agent file at ``path`` replaced
        by the latest snapshot when it is older than that (its tail is replayed when the
        store opens, ``catch_up``); ``NotOwnerError`` naming the owner otherwise."""
        for _ in range(CLAIM_ATTEMPTS):
            location = await self.locate(agent_id)
            if location is not None:
                raise self.not_owner(agent_id, location)
            current = self._logs.get(agent_id)
            if current is not None and not current.fenced:
                return current
            generation = self._owned.get(agent_id)
            if generation is None:
                continue
            marker_seq = await self._fence(agent_id, generation)
            if marker_seq is None:
                continue
            await self._load_keys(agent_id)
            await self._restore(agent_id, path)
            agent_log = AgentLog(
                self, agent_id, self.subject(agent_id), marker_seq, generation, self._running()
            )
            agent_log.path = path
            self._logs[agent_id] = agent_log
            return agent_log
        raise UnavailableError(
            f"agent {agent_id!r}: ownership is contended; try again",
            data={"reason": "claim_contended", "retryable": True, "agent_id": agent_id},
        )

    async def _owner_entry(self, agent_id: str) -> tuple[OwnerEntry | None, int | None]:
        kv = self._kv(self._owners)
        try:
            got = await kv.get(agent_token(agent_id))
        except KeyNotFoundError:  # KeyDeletedError is one too
            return None, None
        if not got.value:
            return None, got.revision
        return decode_owner(got.value), got.revision

    async def _alive(self, node_id: str) -> bool:
        try:
            got = await self._kv(self._nodes).get(node_id)
        except KeyNotFoundError:
            return False
        return bool(got.value)

    async def _claim(self, agent_id: str, entry: OwnerEntry | None, revision: int | None) -> bool:
        generation = (entry.generation if entry is not None else 0) + 1
        value = encode_owner(OwnerEntry(self.node_id, self.url, generation))
        kv = self._kv(self._owners)
        try:
            if revision is None:
                await kv.create(agent_token(agent_id), value)
            else:
                await kv.update(agent_token(agent_id), value, last=revision)
        except KeyWrongLastSequenceError:
            return False
        self._owned[agent_id] = generation
        self._tokens[agent_token(agent_id)] = agent_id
        self._logs.pop(agent_id, None)
        return True

    async def _fence(self, agent_id: str, generation: int) -> int | None:
        """Append the owner marker expecting the subject's last sequence; its sequence,
        or ``None`` when the claim was lost meanwhile (another node's generation)."""
        subject = self.subject(agent_id)
        marker = encode_marker(OwnerMarker(self.node_id, generation))
        js = self._jetstream()
        for _ in range(FENCE_ATTEMPTS):
            last = await self.last_seq(subject)
            try:
                ack = await js.publish(
                    subject,
                    marker,
                    stream=self.stream,
                    headers={EXPECTED_LAST_SUBJECT_SEQ: str(last)},
                )
                return int(ack.seq)
            except APIError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise
            entry, _ = await self._owner_entry(agent_id)  # the old owner appended: still ours?
            if entry is None or entry.node_id != self.node_id or entry.generation != generation:
                self._owned.pop(agent_id, None)
                return None
        raise UnavailableError(
            f"agent {agent_id!r}: the log kept moving while this node claimed it",
            data={"reason": "claim_contended", "retryable": True, "agent_id": agent_id},
        )

    async def last_seq(self, subject: str) -> int:
        try:
            msg = await self._jetstream().get_last_msg(self.stream, subject)
        except JsNotFoundError:
            return 0
        return int(msg.seq or 0)

    # -- appends (called from ``AgentLog.commit_point`` through the loop) ------------------

    async def append(self, agent_log: AgentLog, payload: bytes) -> int:
        try:
            ack = await self._jetstream().publish(
                agent_log.subject,
                payload,
                stream=self.stream,
                headers={EXPECTED_LAST_SUBJECT_SEQ: str(agent_log.expected)},
            )
        except APIError as exc:
            if exc.err_code == WRONG_LAST_SEQUENCE:
                agent_log.fenced = True
                self.fenced(agent_log, True)
                raise self.not_owner(agent_log.agent_id) from None
            raise UnavailableError(
                f"agent {agent_log.agent_id!r}: the cluster's log refused the write ({exc})",
                data={"reason": "cluster_unavailable", "retryable": True},
            ) from None
        except nats.errors.MaxPayloadError:
            raise TooLargeError(
                f"agent {agent_log.agent_id!r}: this write's record ({len(payload)} bytes) is "
                "larger than the nats-servers' max_payload; nothing was committed",
                data={"reason": "record_too_large", "bytes": len(payload)},
            ) from None
        except nats.errors.Error as exc:
            raise UnavailableError(
                f"agent {agent_log.agent_id!r}: the cluster's log is unreachable ({exc!r}); "
                "nothing was committed here",
                data={"reason": "cluster_unavailable", "retryable": True},
            ) from None
        agent_log.expected = int(ack.seq)
        agent_log.since_snapshot += 1
        agent_log.bytes_since_snapshot += len(payload)
        due = (
            agent_log.since_snapshot >= self.snapshot_every
            or agent_log.bytes_since_snapshot >= self.snapshot_bytes
        )
        if due and agent_log.path is not None:
            self.snapshot_soon(agent_log)
        return agent_log.expected

    def fenced(self, agent_log: AgentLog, refused: bool) -> None:
        """On the loop: this node lost ``agent_log``'s agent (a stale append was refused,
        or the file missed a record): forget the claim; the actor is hibernated."""
        agent_id = agent_log.agent_id
        if self._logs.get(agent_id) is agent_log:
            del self._logs[agent_id]
            self._owned.pop(agent_id, None)
        if refused:
            self._count("fenced_refusals")
        if self.on_lost is not None:
            self.on_lost(agent_id)

    def not_owner(self, agent_id: str, owner: OwnerLocation | None = None) -> NotOwnerError:
        data: dict[str, Any] = {"reason": "not_owner", "retryable": True, "agent_id": agent_id}
        if owner is not None:
            data["owner"] = {
                "node_id": owner.node_id,
                "url": owner.url,
                "generation": owner.generation,
            }
            where = f"node {owner.node_id!r} ({owner.url})"
        else:
            where = "another node"
        return NotOwnerError(f"agent {agent_id!r} is owned by {where}, not this node", data=data)

    def seal(self, agent_id: str, payload: bytes) -> bytes:
        """A record as it goes into JetStream: sealed with the agent's current data key."""
        return seal(self._ring(agent_id).current, self.subject(agent_id), payload)

    def _ring(self, agent_id: str) -> KeyRing:
        ring = self._rings.get(agent_id)
        if ring is None:
            raise self.not_owner(agent_id)
        return ring

    def _open(self, agent_id: str, subject: str, data: bytes) -> bytes:
        key_id = sealed_key_id(data)
        if key_id is None:
            return data
        key = self._ring(agent_id).get(key_id)
        if key is None:
            raise StorageError(
                f"agent {agent_id!r}: a log entry is sealed with key {key_id}, which no "
                "longer exists (destroyed by a delete); the snapshot after it should be used"
            )
        return open_sealed(key, subject, data)

    async def _load_keys(self, agent_id: str) -> KeyRing:
        """The agent's key ring from the keys bucket, created with a first key if none."""
        kv = self._kv(self._key_bucket)
        token = agent_token(agent_id)
        for _ in range(CLAIM_ATTEMPTS):
            try:
                got = await kv.get(token)
                if got.value:
                    ring = msgspec.msgpack.decode(got.value, type=KeyRing)
                    self._rings[agent_id] = ring
                    return ring
                revision = got.revision
            except KeyNotFoundError:
                revision = None
            ring = KeyRing([new_key(None)])
            try:
                if revision is None:
                    await kv.create(token, msgspec.msgpack.encode(ring))
                else:
                    await kv.update(token, msgspec.msgpack.encode(ring), last=revision)
            except KeyWrongLastSequenceError:
                continue
            self._rings[agent_id] = ring
            return ring
        raise UnavailableError(f"agent {agent_id!r}: its data key is contended; try again")

    async def _store_ring(self, agent_id: str, ring: KeyRing) -> None:
        await self._kv(self._key_bucket).put(agent_token(agent_id), msgspec.msgpack.encode(ring))
        self._rings[agent_id] = ring

    # -- snapshots and key rotation ------------------------------------------------------

    async def snapshot(self, agent_log: AgentLog) -> int:
        """Put a snapshot of the agent file (sealed with the current key) into the object
        store and purge the agent's log before it; the sequence it covers."""
        assert agent_log.path is not None
        image, applied = await asyncio.to_thread(file_image, agent_log.path)
        subject = agent_log.subject
        key = self._ring(agent_log.agent_id).current
        body = struct.pack(">Q", applied) + seal(key, subject + ".snapshot", image)
        store = self._object_store()
        await store.put(agent_token(agent_log.agent_id), body)
        if applied > 1:  # everything before the snapshot's last entry
            await self._jetstream().purge_stream(self.stream, subject=subject, seq=applied)
        agent_log.since_snapshot = 0
        agent_log.bytes_since_snapshot = 0
        self._count("snapshots")
        return applied

    def snapshot_soon(self, agent_log: AgentLog) -> None:
        """A snapshot in the background (one at a time per agent), after many records."""
        running = self._snapshotting.get(agent_log.agent_id)
        if running is not None and not running.done():
            return

        async def take() -> None:
            try:
                await self.snapshot(agent_log)
            except Exception as exc:
                log.warning("agent %r: snapshot failed (%s)", agent_log.agent_id, exc)

        self._snapshotting[agent_log.agent_id] = asyncio.ensure_future(take())

    async def rotate(self, agent_log: AgentLog) -> None:
        """After a delete: a new data key, a snapshot under it, the log before it
        purged, then the old key destroyed (see ``cluster_keys``). Both keys stay in the
        bucket until the snapshot is in, so a crash in between leaves a readable log."""
        agent_id = agent_log.agent_id
        ring = self._ring(agent_id)
        fresh = new_key(ring.current)
        await self._store_ring(agent_id, KeyRing([*ring.keys, fresh]))
        await self.snapshot(agent_log)
        await self._store_ring(agent_id, KeyRing([fresh]))
        self._count("rotations")

    def current_key(self, agent_id: str) -> DataKey:
        """The agent's current data key (tests check that a destroyed one is gone)."""
        return self._ring(agent_id).current

    async def _restore(self, agent_id: str, path: Path) -> None:
        """Replace the agent file by the latest snapshot when the file is older."""
        received = io.BytesIO()  # nats-py's default joins the chunks one copy at a time
        try:
            await self._object_store().get(agent_token(agent_id), writeinto=received)
        except ObjectNotFoundError:
            return
        data = received.getvalue()
        if len(data) < 8:
            return
        (seq,) = struct.unpack_from(">Q", data)
        if await asyncio.to_thread(local_applied_seq, path) >= seq:
            return
        image = self._open(agent_id, self.subject(agent_id) + ".snapshot", data[8:])
        await asyncio.to_thread(install_image, path, image)
        self._count("rebuilds")

    # -- rebuilds ----------------------------------------------------------------------

    async def catch_up(self, agent_log: AgentLog, target: LogTarget) -> None:
        """Replay the subject's entries after the file's applied sequence, up to
        ``agent_log.expected`` (this node's marker), in batches of transactions."""
        applied = await target.log_applied_seq()
        if applied > agent_log.expected:
            raise StorageError(
                f"agent {agent_log.agent_id!r}: the local file has applied log sequence "
                f"{applied}, past the log's {agent_log.expected} (a log that was reset?)"
            )
        if applied == agent_log.expected:
            return
        self._count("rebuilds")
        async for entries in self.read_entries(agent_log.agent_id, applied + 1, agent_log.expected):
            applied = await target.apply_log(entries)
        if applied != agent_log.expected:
            raise StorageError(
                f"agent {agent_log.agent_id!r}: rebuilt to log sequence {applied}, "
                f"expected {agent_log.expected}"
            )

    async def read_entries(self, agent_id: str, start: int, end: int) -> Any:
        """Batches of ``(seq, entry)`` of the agent's subject from ``start`` to ``end``."""
        subject = self.subject(agent_id)
        js = self._jetstream()
        config = js_api.ConsumerConfig(
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            ack_policy=js_api.AckPolicy.NONE,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        )
        sub = await js.pull_subscribe(subject, stream=self.stream, config=config)
        try:
            seq = start - 1
            while seq < end:
                msgs = await _settled(
                    lambda: sub.fetch(batch=READ_BATCH, timeout=2.0), "reading the log"
                )
                batch: list[tuple[int, TurnRecord | OwnerMarker]] = []
                for msg in msgs:
                    seq = int(msg.metadata.sequence.stream)
                    if seq > end:
                        break
                    batch.append((seq, decode_entry(self._open(agent_id, subject, msg.data))))
                if batch:
                    yield batch
        finally:
            await sub.unsubscribe()

    # -- helpers -----------------------------------------------------------------------

    def subject(self, agent_id: str) -> str:
        return f"{self.prefix}.agent.{agent_token(agent_id)}"

    def register_metrics(self, registry: CollectorRegistry, namespace: str) -> None:
        """Prometheus counters of failovers, rebuilds and fenced refusals."""
        for name, doc in (
            ("failovers", "agents this node claimed from a node whose lease lapsed"),
            ("rebuilds", "agent files this node caught up from the cluster's log"),
            ("fenced_refusals", "appends of this node refused as stale (another owner)"),
            ("snapshots", "agent snapshots this node put into the object store"),
            ("rotations", "data keys rotated after a delete"),
        ):
            self._counters[name] = Counter(
                f"cluster_{name}", doc, namespace=namespace, registry=registry
            )

    def _count(self, name: str) -> None:
        setattr(self, name, getattr(self, name) + 1)
        counter = self._counters.get(name)
        if counter is not None:
            counter.inc()

    def _running(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("ClusterNode.start() first")
        return self._loop

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise RuntimeError("ClusterNode.start() first")
        return self._js

    def _object_store(self) -> ObjectStore:
        if self._snapshots is None:
            raise RuntimeError("ClusterNode.start() first")
        return self._snapshots

    def _kv(self, kv: KeyValue | None) -> KeyValue:
        if kv is None:
            raise RuntimeError("ClusterNode.start() first")
        return kv
