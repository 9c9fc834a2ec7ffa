#!/usr/bin/env python
"""Write the generated tables of ``docs/reference.md`` from the code they describe.

Two kinds of table sit between ``<!-- gen:NAME:start -->`` and ``<!-- gen:NAME:end -->``
markers in ``docs/reference.md``:

- ``options-COMMAND``: every option of ``session-server COMMAND``, read from the argparse
  parser (``session_server.cli.main.build_parser``) with no ``SESSION_SERVER_*`` variable
  set, so the defaults are the built-in ones; the environment variable is the one the
  option's help names.
- ``strategy``: every key of a compaction strategy, read from
  ``session_server.compaction.config.StrategyConfig`` (type, default, allowed range); the
  meaning of each key is written here, in ``STRATEGY_MEANINGS``, and a key without one is
  an error, so a new key cannot go undocumented.

Everything outside the markers is left as it is. ``--check`` writes nothing and exits 1
when the file differs from what would be written (``tests/test_docs.py`` checks the same).

Run: ``.venv/bin/python scripts/gen_reference.py [--check] [--path docs/reference.md]``
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from session_server.cli.main import COMMANDS  # noqa: E402
from session_server.compaction.config import StrategyConfig  # noqa: E402

REFERENCE = ROOT / "docs" / "reference.md"

STRATEGY_MEANINGS: Mapping[str, str] = {
    "mode": "`none`: no new compactions (the latest compaction record still applies); "
    "`compact`: old tool outputs become placeholders; `summarize`: turns before the raw "
    "tail become episodic and semantic memory",
    "compact_keep": "`compact`: the last N user turns stay whole; tool payloads before "
    "them become placeholders",
    "compact_trigger_turns": "`compact` trigger: more than this many user turns at or after "
    "the current compaction boundary",
    "token_budget": "`compact` trigger: the built context has more tokens than this",
    "token_soft_budget": "`compact` trigger, reported as soft in the record: more tokens than this",
    "context_window_tokens": "the window the `*_remaining_pct` triggers measure against",
    "token_remaining_pct": "`compact` trigger: less than this fraction of "
    "`context_window_tokens` left; 0.2 when no other `compact` trigger is set",
    "token_soft_remaining_pct": "`compact` trigger, reported as soft: less than this fraction left",
    "compact_clear_tool_inputs": "`compact`: also replace the arguments of old tool calls "
    "(`{}` and a placeholder line naming the call)",
    "compact_exclude_tools": "`compact`: tools whose outputs are never replaced",
    "compact_include_tools": "`compact`: when not empty, only these tools' outputs are "
    "replaced (it wins over `compact_exclude_tools`)",
    "raw_tail_turns": "`summarize`: the newest user turns kept verbatim after the memory block",
    "max_episodic_items": "episodic summaries shown in the memory block (the most salient)",
    "max_semantic_items": "semantic facts shown in the memory block (the most salient)",
    "max_context_tokens": "token pressure: the model's context size",
    "max_output_tokens": "token pressure: tokens reserved for the answer",
    "safety_margin_tokens": "token pressure: tokens reserved besides",
    "compaction_ratio": "token pressure: a persist whose prompt exceeds this fraction of "
    "`max_context_tokens - max_output_tokens - safety_margin_tokens` flags the session "
    "for compaction (both modes)",
    "blocks": "memory blocks: the labels of the blocks `context.build` renders for the "
    "session (agent and session scope alike); `null`: every block, `[]`: none",
}

_MARKER = re.compile(r"<!-- gen:(?P<name>[a-z-]+):start -->\n.*?<!-- gen:(?P=name):end -->", re.S)
_ENV = re.compile(r"\s*\(env (SESSION_SERVER_[A-Z_]+)[^()]*\)")
_DEFAULT_NOTE = re.compile(r"default ([^;)]+)")


class _Recording(argparse.ArgumentParser):
    """A parser that keeps every action ``add_argument`` made, in order."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog=prog, add_help=False)
        self.recorded: list[argparse.Action] = []

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.recorded.append(action)
        return action


@contextmanager
def _without_env() -> Iterator[None]:
    """No ``SESSION_SERVER_*`` variable while the parser is built (they are its defaults)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("SESSION_SERVER_")}
    for name in saved:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(saved)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _prose(text: str) -> str:
    """Help text as a table cell: no HTML tags or emphasis read into it."""
    for raw, escaped in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("*", "\\*")):
        text = text.replace(raw, escaped)
    return _cell(text)


def _default(action: argparse.Action, help_text: str) -> str:
    if action.option_strings and action.nargs == 0 and action.const is True:
        return "off"
    value = action.default
    if value is None or value == argparse.SUPPRESS:
        note = _ENV.search(help_text)
        found = _DEFAULT_NOTE.search(note.group(0)) if note else None
        return found.group(1).strip() if found else "—"
    if isinstance(value, int) and "file-mode" in " ".join(action.option_strings):
        return f"`{value:o}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, list | tuple):
        return "`" + " ".join(str(v) for v in value) + "`"
    return f"`{value}`"


def _name(action: argparse.Action) -> str:
    if not action.option_strings:
        metavar = action.metavar or action.dest.upper()
        return f"`{metavar}` (positional)"
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{names}`"
    if action.choices is not None:
        return f"`{names} " + "|".join(str(c) for c in action.choices) + "`"
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    more = " ..." if action.nargs in ("+", "*") else ""
    return f"`{names} {metavar}{more}`"


def option_table(command: str) -> str:
    """The options of ``session-server COMMAND`` as a Markdown table."""
    _summary, (add_arguments, _run) = COMMANDS[command]
    command_parser = _Recording(f"session-server {command}")
    with _without_env():
        add_arguments(command_parser)
    lines = ["| option | default | environment | meaning |", "|---|---|---|---|"]
    for action in command_parser.recorded:
        help_text = action.help or ""
        env = _ENV.search(help_text)
        env_name = f"`{env.group(1)}`" if env else "—"
        meaning = _ENV.sub("", help_text).strip()
        if action.required and action.option_strings:
            meaning = "required; " + meaning
        lines.append(
            f"| {_cell(_name(action))} | {_prose(_default(action, help_text))} | {env_name} "
            f"| {_prose(meaning)} |"
        )
    return "\n".join(lines)


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return " | ".join(f'"{choice}"' for choice in get_args(annotation))
    text = str(annotation) if not isinstance(annotation, type) else annotation.__name__
    return text.replace("typing.", "").replace("NoneType", "null").replace("None", "null")


def _range(metadata: list[Any]) -> str:
    parts = []
    for item in metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            bound = getattr(item, attr, None)
            if bound is not None:
                parts.append(f"{sign} {bound}")
    return ", ".join(parts)


def strategy_table() -> str:
    """Every ``StrategyConfig`` key as a Markdown table (refuses a key without a meaning)."""
    fields = StrategyConfig.model_fields
    missing = sorted(set(fields) - set(STRATEGY_MEANINGS))
    extra = sorted(set(STRATEGY_MEANINGS) - set(fields))
    if missing or extra:
        raise SystemExit(f"STRATEGY_MEANINGS out of step: missing {missing}, unknown {extra}")
    lines = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for name, field in fields.items():
        default = field.get_default(call_default_factory=True)
        shown = "null" if default is None else repr(default).replace("'", '"')
        if isinstance(default, bool):
            shown = str(default).lower()
        allowed = _range(list(field.metadata)) or "—"
        lines.append(
            f"| `{name}` | `{_type_name(field.annotation).replace('|', chr(92) + '|')}` "
            f"| `{shown}` | {allowed} "
            f"| {_cell(STRATEGY_MEANINGS[name])} |"
        )
    return "\n".join(lines)


def tables() -> dict[str, str]:
    """Every generated table by marker name."""
    found = {f"options-{command}": option_table(command) for command in COMMANDS}
    found["strategy"] = strategy_table()
    return found


def render(text: str) -> str:
    """``text`` with every marked table replaced by its generated content."""
    generated = tables()

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in generated:
            raise SystemExit(f"unknown generated table {name!r}")
        return f"<!-- gen:{name}:start -->\n{generated[name]}\n<!-- gen:{name}:end -->"

    return _MARKER.sub(replace, text)


def missing_markers(text: str) -> list[str]:
    """Generated tables the text has no markers for."""
    present = {m.group("name") for m in _MARKER.finditer(text)}
    return sorted(set(tables()) - present)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--path", type=Path, default=REFERENCE)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    text = args.path.read_text(encoding="utf-8")
    missing = missing_markers(text)
    if missing:
        print(f"{args.path}: no markers for {', '.join(missing)}", file=sys.stderr)
        return 1
    new = render(text)
    if args.check:
        if new != text:
            print(f"{args.path} is stale: run scripts/gen_reference.py", file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
