"""Cheap mirror activation: a checkpoint of the writer's state and of the files (pure).

At a clean close the shell stores, per session, in SQLite (``sessions.mirror_state`` and
``sessions.mirror_files``): the ``MirrorModel`` the writer needs to go on appending, and
the size, modification time, status-change time (ns) and inode of each mirror file.
Activation then costs a few ``stat`` calls per session, whatever the history's length:
``plan_activation`` resumes from the checkpoint when SQLite says the mirror was current
at close (cursor = last seq = the checkpoint's seq) and every file still has the stamps
recorded; anything else (a crash, a delete, a truncated, edited, missing, replaced or
extra file, an old file format, stamps stored before the change time was) means a
streamed repair. The change time is what no edit can keep: an edit in place that keeps
the size and sets the mtime back (``touch -r``) changes it, as the ``utime`` call does
itself; a file replaced by another has another inode. A copy or move of the memory folder
changes them too, and costs one repair per session, never a wrong resume.

The model checkpoint keeps what future lines can depend on, not the whole history: the
current turn and its line counter, the calls still waiting for a result (with their
turns' counters), the compaction count and time, and the keys of the episodic/semantic
items already written. A later event that needs anything dropped (a line for an older
turn than the checkpoint knows: a second result for an old call) raises ``MirrorGap`` in
``MirrorModel.step``; the writer then stops mirroring the session and the next write
repairs it from SQLite.

``orphan_folders`` says which session folders have no session left (a delete whose folder
removal a crash interrupted): activation removes them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from .model import MirrorModel
from .traces import TraceState

__all__ = [
    "CHECKPOINT_VERSION",
    "FileStamps",
    "Repair",
    "Resume",
    "decode_stamps",
    "encode_stamps",
    "model_checkpoint",
    "model_from_checkpoint",
    "orphan_folders",
    "plan_activation",
    "repair_reason",
    "stamps_match",
]

CHECKPOINT_VERSION: Final = 1
# file name -> (size in bytes, mtime ns, ctime ns, inode); a file that does not exist
# has no entry.
FileStamps = dict[str, tuple[int, int, int, int]]
STAMP_FIELDS: Final = 4

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def model_checkpoint(model: MirrorModel) -> str:
    """The JSON text of ``model``, pruned to what later events can need (see module doc)."""
    traces = model.traces
    keep_turns = {traces.turn} | {turn for turn, _, _ in traces.pending.values()}
    return _ENCODER.encode(
        {
            "v": CHECKPOINT_VERSION,
            "last_seq": model.last_seq,
            "turn": traces.turn,
            "next_seq": [[t, n] for t, n in traces.next_seq.items() if t in keep_turns],
            "pending": [[cid, t, name, args] for cid, (t, name, args) in traces.pending.items()],
            "compactions": model.compactions,
            "last_compaction_ts": model.last_compaction_ts,
            "episodic": sorted(model.item_keys["episodic"]),
            "semantic": sorted(model.item_keys["semantic"]),
        }
    ).decode("utf-8")


def model_from_checkpoint(text: str | None) -> MirrorModel | None:
    """The model of a checkpoint, or ``None`` when it is missing or not one we wrote."""
    if not text:
        return None
    try:
        raw = _DECODER.decode(text)
        if not isinstance(raw, dict) or raw.get("v") != CHECKPOINT_VERSION:
            return None
        model = MirrorModel()
        traces = TraceState()
        traces.turn = _int_field(raw, "turn")
        traces.next_seq = {_int_of(t): _int_of(n) for t, n in raw["next_seq"]}
        for cid, turn, name, args in raw["pending"]:
            if not isinstance(cid, str) or not isinstance(name, str):
                return None
            traces.pending[cid] = (_int_of(turn), name, args)
            traces.call_turns[cid] = _int_of(turn)
        model.traces = traces
        model.last_seq = _int_field(raw, "last_seq")
        model.compactions = _int_field(raw, "compactions")
        ts = raw.get("last_compaction_ts")
        if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int | float)):
            return None
        model.last_compaction_ts = None if ts is None else float(ts)
        for kind in ("episodic", "semantic"):
            keys = raw[kind]
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                return None
            model.item_keys[kind] = set(keys)
        model.floor_turn = traces.turn
    except (msgspec.DecodeError, KeyError, TypeError, ValueError):
        return None
    return model


def _int_of(value: object) -> int:
    if not _is_int(value):
        raise TypeError("not an int")
    assert isinstance(value, int)
    return value


def _int_field(raw: Mapping[str, Any], key: str) -> int:
    return _int_of(raw.get(key))


def encode_stamps(stamps: FileStamps) -> str:
    return _ENCODER.encode({name: list(stamp) for name, stamp in sorted(stamps.items())}).decode(
        "utf-8"
    )


def decode_stamps(text: str | None) -> FileStamps | None:
    """Stamps stored by ``encode_stamps``; ``None`` when missing or malformed."""
    if not text:
        return None
    try:
        raw = _DECODER.decode(text)
    except msgspec.DecodeError:
        return None
    if not isinstance(raw, dict):
        return None
    out: FileStamps = {}
    for name, stamp in raw.items():
        # Stamps stored before the change time was (two fields) are not a match: repaired.
        if not (
            isinstance(stamp, list)
            and len(stamp) == STAMP_FIELDS
            and all(_is_int(v) for v in stamp)
        ):
            return None
        out[name] = (stamp[0], stamp[1], stamp[2], stamp[3])
    return out


def stamps_match(recorded: FileStamps | None, observed: FileStamps) -> bool:
    """Whether the files are exactly those recorded (same names and stamps)."""
    return recorded is not None and recorded == observed


@dataclass(frozen=True, slots=True)
class Resume:
    """The files are as the checkpoint says: go on from ``model``."""

    model: MirrorModel


@dataclass(frozen=True, slots=True)
class Repair:
    """Rewrite the files from SQLite (streamed); ``reason`` is for the log."""

    reason: str


def repair_reason(
    *, last_seq: int, mirror_seq: int, has_checkpoint: bool, files: str | None, observed: FileStamps
) -> str | None:
    """Why a session's mirror needs a repair, or ``None`` when its files are as recorded
    at the last clean close (the check activation runs for every session: no decoding
    of the checkpoint itself)."""
    if mirror_seq != last_seq:
        return "the mirror cursor is behind (a crash or a delete)"
    if not has_checkpoint:
        return "no checkpoint of the mirror"
    if not stamps_match(decode_stamps(files), observed):
        return "the files differ from their recorded sizes, times or inodes"
    return None


def plan_activation(
    *,
    last_seq: int,
    mirror_seq: int,
    state: str | None,
    files: str | None,
    observed: FileStamps,
) -> Resume | Repair:
    """How to activate a session's mirror (see the module doc)."""
    reason = repair_reason(
        last_seq=last_seq,
        mirror_seq=mirror_seq,
        has_checkpoint=bool(state),
        files=files,
        observed=observed,
    )
    if reason is not None:
        return Repair(reason)
    model = model_from_checkpoint(state)
    if model is None:
        return Repair("the checkpoint of the mirror is not readable")
    if model.last_seq > last_seq:
        return Repair("the checkpoint is ahead of SQLite")
    return Resume(model)


def orphan_folders(folders: Iterable[str], session_ids: Collection[str]) -> list[str]:
    """The session folders whose session no longer exists, sorted."""
    return sorted(name for name in folders if name not in session_ids)
