"""``CompactionDecisions``: what ``AgentCore`` decides about compactions (pure): an
explicit compaction, one compaction at a time per session, what a compaction plans from,
the placeholder record while a summary cannot be had, the append a planned compaction
calls for (or none, when a summary would gain nothing), and ``compaction_report``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from ..compaction.fallback import FallbackCause, plan_placeholder_fallback
from ..compaction.records import CompactionPlan, make_compaction_event
from ..values.plans import AppendBatch
from .core_state import CoreState
from .decisions import AppendPlan, CompactionDue, CompactionInput, PlaceholderFallback
from .needs import Known, Need, NeedWindow
from .turn_pressure import highest_turn

__all__ = ["CompactionDecisions", "compaction_report"]


class CompactionDecisions(CoreState):
    """The compaction decisions of ``AgentCore`` (see the module docstring)."""

    def plan_compact(
        self,
        session_id: str,
        known: Known,
        *,
        strategy: Mapping[str, Any] | None,
        instructions: Iterable[str],
    ) -> CompactionDue | Need:
        """An explicit compaction (``memory.compact``) with the effective strategy."""
        config = self._session_config(session_id, strategy, known)
        if isinstance(config, Need):
            return config
        return CompactionDue(session_id, config, list(instructions), self.context_limit, force=True)

    def begin_compaction(self, session_id: str) -> bool:
        """Mark a compaction of ``session_id`` as running; ``False`` when one already is
        (one at a time per session: a pressure flag is acted on exactly once)."""
        if session_id in self._compacting:
            return False
        self._compacting.add(session_id)
        return True

    def end_compaction(self, session_id: str) -> None:
        self._compacting.discard(session_id)

    def compaction_input(self, due: CompactionDue, known: Known) -> CompactionInput | Need:
        """What to plan from, read under the session's compaction turn."""
        view = self.view(due.session_id, due.limit, known)
        if isinstance(view, Need):
            return view
        if due.config.mode == "summarize":
            # Summaries cover every turn not yet summarised, not only the current window.
            full = known.full.get(due.session_id)
            if full is None:
                return NeedWindow(due.session_id, None, self._recent.version(due.session_id))
            # The whole session, read for this compaction alone (never cached).
            return CompactionInput(full.events, view.record, view.compaction_required, True)
        return CompactionInput(view.events, view.record, view.compaction_required)

    def placeholder_fallback(
        self, due: CompactionDue, cause: FallbackCause, known: Known
    ) -> PlaceholderFallback | Need | None:
        """The summary ``due`` is ``cause`` (``slow``: still running after the wait;
        ``failed``: failed, timed out or backing off): the placeholder record to write
        first, when the strategy sets placeholder parameters and they would replace more
        than the latest record does (see ``compaction.fallback``); else ``None``.

        Planned from the window as it stands, without the session's compaction turn (a
        slow summary holds it): the append expects the session's last seq, so a summary
        or turn committed meanwhile refuses it instead of being overwritten. The pressure
        flag is left set: the summary is still due, and supersedes the fallback."""
        view = self.view(due.session_id, due.limit, known)
        if isinstance(view, Need):
            return view
        plan = plan_placeholder_fallback(
            view.events,
            due.config,
            cause=cause,
            previous_record=None if view.record is None else view.record.data,
            system_instructions=due.instructions,
        )
        if plan.record is None:
            return None
        event = make_compaction_event(due.session_id, plan.record, plan.event_count)
        append = self.plan_events(due.session_id, [event], expected_last_seq=view.last_seq)
        return PlaceholderFallback(append, plan)

    def after_compaction(
        self,
        due: CompactionDue,
        given: CompactionInput,
        plan: CompactionPlan,
        *,
        removals: int | None = None,
    ) -> AppendPlan | None:
        """The append a planned compaction calls for: its event (clearing the flag it
        acted on), the flag alone when there was nothing to do, or nothing.

        ``removals``: the session's removal count read before ``given`` was: the
        append is refused when events were removed since (a summary of deleted text is
        never written after the delete answered; the flag stays for the next build).

        An automatic summary that would gain nothing (no record, or a context no smaller
        than before) is not written; its reason is kept (``futile_note``) and the flag is
        not raised again before a new user turn."""
        before, after = plan.tokens_before, plan.tokens_after
        no_gain = before is not None and after is not None and after >= before
        if due.config.mode == "summarize" and not due.force and (plan.record is None or no_gain):
            reason = (
                plan.reason
                if plan.record is None
                else (f"a summary would not shrink the context ({before} -> {after} tokens)")
            )
            self._futile[due.session_id] = reason
            self._futile_turn[due.session_id] = highest_turn(given.events)
            plan = CompactionPlan(plan.strategy, None, reason)
        if plan.record is None:
            if given.pressure and due.config.mode != "compact":
                # Acted on (nothing to summarise): the flag must not fire on every build.
                return AppendPlan(AppendBatch(due.session_id, compaction_required=False))
            return None
        event = make_compaction_event(due.session_id, plan.record, plan.event_count)
        batch = self.plan_events(due.session_id, [event]).batch
        flag = False if given.pressure else None
        return AppendPlan(
            msgspec.structs.replace(batch, compaction_required=flag), removals=removals
        )


def compaction_report(plan: CompactionPlan) -> dict[str, Any]:
    """The answer of an explicit compaction (``compacted: false`` says why not)."""
    record = plan.record or {}
    return {
        "compacted": plan.record is not None,
        "strategy": plan.strategy,
        "reason": plan.reason,
        "event_count": plan.event_count,
        "items_removed": plan.items_removed,
        "tokens_before": plan.tokens_before,
        "tokens_after": plan.tokens_after,
        "boundary_seq": record.get("boundary_seq"),
    }
