"""Progress bars: on a terminal only (or when asked), never on a pipe; one factory."""

from __future__ import annotations

import io
from pathlib import Path

from session_server.process.progress import progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_is_drawn_on_a_terminal() -> None:
    out = Terminal()
    items = list(progress_bar(range(5), desc="export a", unit="event", delay=0, file=out))
    assert items == [0, 1, 2, 3, 4]
    assert "export a" in out.getvalue()
    assert "/5" in out.getvalue()


def test_no_bar_on_a_pipe_unless_asked() -> None:
    pipe = io.StringIO()
    assert list(progress_bar(range(3), desc="import", unit="row", delay=0, file=pipe)) == [0, 1, 2]
    assert pipe.getvalue() == ""
    forced = io.StringIO()
    list(progress_bar(range(3), desc="import", unit="row", delay=0, progress=True, file=forced))
    assert "import" in forced.getvalue()
    never = Terminal()
    list(progress_bar(range(3), desc="import", unit="row", delay=0, progress=False, file=never))
    assert never.getvalue() == ""


def test_a_short_run_stays_quiet_even_on_a_terminal() -> None:
    out = Terminal()
    list(progress_bar(range(3), desc="backup", unit="B", file=out))  # default delay 0.5 s
    assert out.getvalue() == ""


def test_byte_bars_scale_units() -> None:
    out = Terminal()
    with progress_bar(desc="restore", unit="B", total=3 * 1024 * 1024, delay=0, file=out) as bar:
        bar.update(3 * 1024 * 1024)
    assert "3.15M" in out.getvalue()


def test_every_long_command_uses_the_factory() -> None:
    root = Path(__file__).resolve().parents[3] / "session_server"
    for rel in ("mirror_io/export.py", "mirror_io/import_.py", "runtime/backups.py"):
        text = (root / rel).read_text(encoding="utf-8")
        assert "progress_bar(" in text, rel
        assert "tqdm(" not in text, rel
