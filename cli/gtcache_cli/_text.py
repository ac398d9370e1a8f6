"""Small pieces of terminal text: escaped names, plurals, times, and tables that fit.

Tables are rich tables; ``fit_table`` decides which columns a width leaves room for
(the least important go first, as ``hf cache ls`` does) instead of letting rich cut
every column to an ellipsis.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
from collections.abc import Sequence
from typing import Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gtcache.errors import escape as escape  # the CLI uses it from here: one escape for all

#: The shortest key prefix ``info``, ``rm`` and ``Store.resolve`` accept.
MIN_PREFIX = 4
#: Key digits tables show when there is room.
KEY_DIGITS = 12
#: Width for output that goes to a pipe or file without ``COLUMNS``: nothing is cut.
_PIPE_WIDTH = 1000
#: The fewest characters a column that wraps (PROGRAM) keeps however narrow the width.
WRAP_FLOOR = 12


def console(*, stderr: bool = False) -> Console:
    """A console for this moment's stdout: ``COLUMNS`` if it is a positive number, else the
    terminal's width (80 if the terminal says none), else (a pipe or a file) wide.

    A ``COLUMNS`` of 0, a negative or a non-number (some CI and editor shells set ``0``) is
    ignored, as if unset: rich would take ``0`` and print nothing at all."""
    stream = sys.stderr if stderr else sys.stdout
    width = _columns()
    if width is None:
        width = _terminal_width(stream) if _isatty(stream) else _PIPE_WIDTH
    return Console(highlight=False, width=width, stderr=stderr, soft_wrap=True)  # lines never wrapped, tables fit


def _columns() -> int | None:
    value = os.environ.get("COLUMNS", "").strip()
    return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else None


def _terminal_width(stream: object) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return 80


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """``plural(1, 'entry', 'entries')`` -> ``'1 entry'``; ``plural(2, 'run')`` -> ``'2 runs'``."""
    word = singular if count == 1 else (plural_form or f"{singular}s")
    return f"{count} {word}"


def duration(seconds: float) -> str:
    """A span of compile time as people read it: ``21.7s``, ``7m 42s``, ``39h 18m``, ``3d 4h``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if whole < 3600:
        return f"{minutes}m {secs:02d}s"
    if whole < 86400:
        return f"{hours}h {minutes:02d}m"
    return f"{days}d {hours}h"


def parse_time(iso: str) -> datetime.datetime | None:
    try:
        moment = datetime.datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


_AGO_UNITS = (
    (365 * 86400, "year"), (30 * 86400, "month"), (7 * 86400, "week"), (86400, "day"),
    (3600, "hour"), (60, "minute"),
)


def ago(iso: str, now: datetime.datetime | None = None) -> str:
    """``'3 days ago'``, ``'just now'`` (under a minute, or a clock ahead of this one); ``-`` if unknown."""
    moment = parse_time(iso)
    if moment is None:
        return "-"
    now = now or datetime.datetime.now(datetime.UTC)
    seconds = (now - moment).total_seconds()
    # Days up to two weeks, weeks up to two months, months up to two years: never "1 month" for 5 weeks.
    for size, unit in _AGO_UNITS:
        if seconds >= 2 * size or (unit in ("day", "hour", "minute") and seconds >= size):
            return f"{plural(int(seconds // size), unit)} ago"
    return "just now"


def local_time(iso: str) -> str:
    """ISO 8601 in the local zone (``TZ``), to the second, with its offset: ``2026-12-03T07:16:29+01:00``."""
    moment = parse_time(iso)
    return moment.astimezone().isoformat(timespec="seconds") if moment is not None else "-"


Justify = Literal["left", "right"]


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    justify: Justify = "left"
    #: Dropped when the width leaves no room: higher ranks go first; ``None``: always shown.
    drop_rank: int | None = None
    #: May wrap over lines (else it is never cut).
    wrap: bool = False


def fit_table(
    columns: Sequence[Column], rows: Sequence[Sequence[Text]], width: int | None
) -> tuple[Table, bool]:
    """A rich table of the ``columns`` that fit in ``width`` (``None``: all), least important
    dropped first; and whether the columns that are never dropped fit unwrapped.

    The table is never narrower than what is left needs (a wrapping column keeps
    ``WRAP_FLOOR`` characters, the others all of theirs): below that it is wider than
    ``width``, as ``ls`` of coreutils is, rather than losing a column or cutting keys."""
    shown = list(range(len(columns)))

    def column_width(i: int) -> int:
        return max([len(columns[i].name), *(row[i].cell_len for row in rows)])

    def needed(indices: Sequence[int]) -> int:
        return sum(column_width(i) for i in indices) + 2 * (len(indices) - 1)

    droppable = sorted((c.drop_rank, i) for i, c in enumerate(columns) if c.drop_rank is not None)
    while width is not None and needed(shown) > width and droppable:
        shown.remove(droppable.pop()[1])
    floor = sum(min(column_width(i), max(len(columns[i].name), WRAP_FLOOR)) if columns[i].wrap else column_width(i)
                for i in shown) + 2 * (len(shown) - 1)
    # A set width is the most rich gives the table (it never widens past what the cells need).
    table = Table(box=None, pad_edge=False, header_style="bold", expand=False,
                  width=floor if width is not None and width < floor else None)
    for i in shown:
        column = columns[i]
        table.add_column(column.name, justify=column.justify, no_wrap=not column.wrap,
                         overflow="fold" if column.wrap else "ellipsis")
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    return table, width is None or needed(shown) <= width


def key_digits(keys: Sequence[str], *, room: bool = True) -> int:
    """How many key digits to show: ``KEY_DIGITS``, or with no ``room`` the fewest that keep every
    key of ``keys`` (the whole store) unique, never fewer than ``info`` accepts."""
    ordered = sorted(keys)
    unique = max((_common_prefix(a, b) + 1 for a, b in zip(ordered, ordered[1:], strict=False)), default=0)
    return max(KEY_DIGITS if room else MIN_PREFIX, unique)


def _common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))
