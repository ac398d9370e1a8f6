"""The reliability suite: tests that attack the store, and the figures they measured.

Each test adds its figures with ``figures.add(section, what, value)``; the
session prints them as a table at the end and writes them to
``build/reliability-figures.md`` (``make reliability`` copies that table into
``docs/recorded/`` for docs/reliability.md).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

_FIGURES: dict[str, list[tuple[str, Any]]] = {}
_OUT = pathlib.Path(__file__).parents[2] / "build" / "reliability-figures.md"


class Figures:
    def add(self, section: str, what: str, value: Any) -> None:
        _FIGURES.setdefault(section, []).append((what, value))


@pytest.fixture(scope="session")
def figures() -> Figures:
    return Figures()


def _table() -> str:
    lines = ["| attack | measured | value |", "|---|---|---|"]
    for section, rows in _FIGURES.items():
        for what, value in rows:
            lines.append(f"| {section} | {what} | {value} |")
    return "\n".join(lines) + "\n"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FIGURES:
        return
    table = _table()
    terminalreporter.write_sep("=", "reliability figures")
    terminalreporter.write(table)
    try:
        _OUT.parent.mkdir(parents=True, exist_ok=True)
        _OUT.write_text(table)
    except OSError:
        pass
