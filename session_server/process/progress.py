"""Progress bars for long export, import, backup and restore (tqdm, on a terminal only).

One factory, so every long command behaves alike: ``progress=None`` shows a bar only when
the output is a terminal and only once the work has taken ``delay`` seconds (short runs
and pipes stay quiet); ``True`` always, ``False`` never. The bar is removed when done.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, Any, TypeVar, cast

from tqdm import tqdm

__all__ = ["progress_bar"]

T = TypeVar("T")


def progress_bar(
    iterable: Iterable[T] | None = None,
    *,
    desc: str,
    unit: str,
    total: int | None = None,
    progress: bool | None = None,
    delay: float = 0.5,
    file: IO[str] | None = None,
) -> tqdm[T]:
    """A tqdm bar over ``iterable`` (or counting to ``total``); see the module docstring."""
    options: dict[str, Any] = {}
    if unit == "B":
        options["unit_scale"] = True
    bar = tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        disable=None if progress is None else not progress,
        delay=delay,
        leave=False,
        file=file,
        **options,
    )
    return cast("tqdm[T]", bar)
