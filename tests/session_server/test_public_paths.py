"""The import paths DESIGN §3 and the README name keep working after the re-layout."""

from __future__ import annotations

import session_server
import session_server.codec as codec
import session_server.context as context
import session_server.errors as errors
import session_server.events as events
from session_server.values import codec as core_codec
from session_server.values import context as core_context
from session_server.values import errors as core_errors
from session_server.values import events as core_events


def test_public_modules_re_export_the_core() -> None:
    for public, core in [
        (events, core_events),
        (codec, core_codec),
        (context, core_context),
        (errors, core_errors),
    ]:
        assert public.__all__ == core.__all__
        for name in core.__all__:
            assert getattr(public, name) is getattr(core, name), name


def test_design_names_resolve() -> None:
    assert events.ContextMessage and events.ToolCall and events.SessionEvent
    assert codec.hydrate_event and codec.dehydrate_event and codec.message_to_event
    assert context.WorkingContext and context.build_working_context
    assert session_server.ActorRegistry.__name__ == "ActorRegistry"
    assert session_server.AgentActor.__name__ == "AgentActor"
    assert issubclass(errors.NotFoundError, session_server.SessionServerError)
