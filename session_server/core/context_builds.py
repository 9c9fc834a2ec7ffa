"""``ContextBuilds``: how ``AgentCore`` builds a working context (pure): from the cached
or read window under the session's strategy, or from the snapshot file on the first
build of an activation (only one SQLite vouches for: ``trusted_snapshot_digest``), the
compaction due first, the events a bounded window leaves out, and the parts of the
end-of-turn snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..compaction.builder import BuiltContext, build_compacted_context
from ..values.context import WorkingContext
from ..values.errors import InvalidParamsError
from ..values.plans import SessionState, SnapshotDue
from ..values.recent import SessionView
from .core_state import CoreState
from .decisions import LARGE_WINDOW_EVENTS, CompactionDue, ContextDraft, SnapshotParts
from .needs import Known, Need, NeedCount, NeedSnapshot, known_state

__all__ = ["ContextBuilds", "render_snapshot", "trusted_snapshot_digest"]


def render_snapshot(view: SessionView, instructions: list[str]) -> SnapshotParts:
    """Messages, instructions and last seq of the default context of ``view`` (the window
    of ``context_limit`` events): what ``working_context_snapshot.json`` holds. One
    function for a view from the cache and one read from the file."""
    built = build_compacted_context(
        view.events,
        record=None if view.record is None else view.record.data,
        messages=view.messages,
        system_instructions=instructions,
    )
    return built.messages, built.system_instructions, view.last_seq


def trusted_snapshot_digest(state: SessionState) -> str | None:
    """The digest a snapshot file must have to stand for the session's context, or
    ``None`` when SQLite vouches for none at the session's last seq.

    SQLite binds a snapshot (seq + SHA-256 of its bytes) only after the file was written
    and only at a clean close; a delete clears the binding in its own transaction. So a
    file left by a crash, a snapshot older than a delete, or a hand-edited file (whatever
    its ``last_seq`` says) is never served.
    """
    if state.snapshot_digest is None or state.snapshot_seq != state.last_seq:
        return None
    return state.snapshot_digest


class ContextBuilds(CoreState):
    """The context builds of ``AgentCore`` (see the module docstring)."""

    def build(
        self,
        session_id: str,
        known: Known,
        *,
        instructions: list[str],
        limit: int | None,
        strategy: Mapping[str, Any] | None,
        may_compact: bool = True,
    ) -> WorkingContext | ContextDraft | CompactionDue | Need:
        """The working context under the session's strategy, or the compaction to run
        first (never with ``may_compact=False``: a read-only build, e.g. for an export).
        A window of ``LARGE_WINDOW_EVENTS`` or more gives a ``ContextDraft`` instead of
        the context: the caller builds it (``draft.build()``) where it chooses.

        The first build of an activation, with the defaults, may come from the snapshot
        file when it is current (its ``last_seq`` is the session's) and no compaction can
        be due.
        """
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise InvalidParamsError("limit: must be a positive integer")
        blocks = self.blocks.lookup(session_id)
        if isinstance(blocks, Need):
            return blocks
        if (
            may_compact
            and limit is None
            and strategy is None
            and blocks.empty  # a snapshot holds no blocks: rendered below
            and session_id not in self._built
        ):
            restored = self._restore(session_id, instructions, known)
            if restored is not None:
                return restored
        window = limit or self.context_limit
        view = self.view(session_id, window, known)
        if isinstance(view, Need):
            return view
        config = self.resolve(view.strategy, strategy)
        if isinstance(config, Need):
            return config
        rendered = self.blocks.rendered(session_id, config.blocks)
        if isinstance(rendered, Need):
            return rendered
        if rendered:  # after the caller's instructions, before the summary memory
            instructions = [*instructions, rendered]
        due = (
            may_compact
            and not known.compacted
            and (
                config.mode == "compact"
                or (config.mode == "summarize" and view.compaction_required)
            )
        )
        if due:
            return CompactionDue(session_id, config, instructions, window, force=False)
        omitted = self._omitted_events(session_id, view, known)
        if isinstance(omitted, Need):
            return omitted
        if may_compact:
            self._built.add(session_id)
        draft = ContextDraft(
            view.events,
            None if view.record is None else view.record.data,
            view.messages,
            instructions,
            view.last_seq,
            config,
            omitted,
            # Read from the store for this build (not the cache's memoised window): the
            # draft may free its events once built.
            owned=known.views.get((session_id, window)) is view,
        )
        # A large window is built by the shell, off the event loop.
        return draft if len(view.events) >= LARGE_WINDOW_EVENTS else draft.build()

    def _omitted_events(self, session_id: str, view: SessionView, known: Known) -> int | Need:
        """Events a context of ``view`` neither shows nor summarises: those before its
        window, after what the record's summary covers (from the session's start without
        one). Counted once by the store, then kept up to date from the cache."""
        from_seq = (None if view.record is None else view.record.from_seq) or 1
        first = next((e.seq for e in view.events if e.action != "compaction"), None)
        if first is None or first <= from_seq:
            return 0
        count = known.counts.get((session_id, from_seq, first))
        memo = self._omitted.get(session_id)
        if count is None and memo is not None and memo[0] == from_seq and memo[1] <= first:
            # The window moved forward: add the few events it left behind (cheaper than
            # counting the whole range again on every build).
            more = self._recent.count_between(session_id, memo[1], first)
            count = None if more is None else memo[2] + more
        if count is None:
            count = self._recent.count_between(session_id, from_seq, first)
        if count is None:
            return NeedCount(session_id, from_seq, first)
        self._omitted[session_id] = (from_seq, first, count)
        return count

    def _restore(
        self, session_id: str, instructions: list[str], known: Known
    ) -> WorkingContext | Need | None:
        if not self.snapshots:
            return None
        state = known_state(known, session_id)
        if isinstance(state, Need):
            return state
        if state is None or state.compaction_required or not state.last_seq:
            return None
        if state.last_seq > self.context_limit:
            return None  # the window may leave events out: a build says how many
        # Under a compaction strategy the build may have to compact first: no shortcut.
        config = self.resolve(state.strategy, None)
        if isinstance(config, Need):
            return config
        if config.mode != "none":
            return None
        digest = trusted_snapshot_digest(state)
        if digest is None:
            return None  # no snapshot bound to this content (a delete, a crash, never)
        if session_id not in known.snapshots:
            return NeedSnapshot(session_id, state.last_seq, digest)
        restored = known.snapshots[session_id]
        # The snapshot holds the instructions of the turn that wrote it, followed by the
        # memory block of the latest summary, if any. Only a snapshot taken with exactly
        # this request's instructions can stand for a build: otherwise its memory block
        # would be lost (or a stale instruction served), so rebuild from SQLite.
        if restored is None or restored.system_instructions != instructions:
            return None
        self._built.add(session_id)
        # The one token rule (the builder's), here without stored per-event counts.
        parts = BuiltContext([], restored.messages, 0, None)
        return WorkingContext(
            instructions,
            restored.messages,
            {"restored_from": "working_context_snapshot.json"},
            base_seq=state.last_seq,
            token_count=parts.token_count(instructions),
        )

    def snapshot_parts(self, due: SnapshotDue) -> SnapshotParts | None:
        """Messages, instructions and last seq of the session's default context, from the
        cache as of the latest commit (``None`` when the cache cannot say: no snapshot)."""
        view = self._recent.window(due.session_id, self.context_limit)
        return None if view is None else render_snapshot(view, due.instructions)
