"""Tables and text for the terminal (rich); JSON shapes come from the library's ``to_json``."""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

import gtcache
from gtcache.explain import Explanation
from gtcache.warm import PlannedVariant, WarmReport, WarmResult
from gtcache.policies import PrunePlan, VerifyReport
from gtcache.store import LedgerTotals

# On a terminal rich fits tables to its width; in pipes and CI logs nothing is cut.
_console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def _when(iso: str) -> str:
    return iso[:16].replace("T", " ") if iso else "-"


def entries_table(entries: Sequence[gtcache.EntryInfo], *, root: pathlib.Path) -> None:
    if not entries:
        _console.print(f"No entries in '{root}'.")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name, justify in (
        ("KEY", "left"), ("PROGRAM", "left"), ("BACKEND", "left"), ("SIZE", "right"),
        ("COMPILE", "right"), ("HITS", "right"), ("LAST USED", "left"), ("STATUS", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=name != "PROGRAM")  # type: ignore[arg-type]
    for e in entries:
        table.add_row(
            e.key[:12], e.qualified_program, e.backend, e.size_str, f"{e.compile_seconds:.1f}s",
            str(e.hits), _when(e.last_used), "ok" if e.ok else "[red]broken[/red]",
        )
    _console.print(table)
    for e in entries:
        if not e.ok:
            _console.print(f"broken {e.key[:12]}: {e.problem}", markup=False)
    total = sum(e.size for e in entries)
    broken = sum(not e.ok for e in entries)
    note = f", {broken} broken" if broken else ""
    _console.print(f"{len(entries)} entries, {gtcache.format_size(total)}{note} in '{root}'.")


def info_json(entry: gtcache.EntryInfo) -> dict[str, Any]:
    data = entry.to_json()
    data["record"] = entry.record.to_json() if entry.record is not None else None
    return data


def info_text(entries: Sequence[gtcache.EntryInfo]) -> None:
    for number, e in enumerate(entries):
        if number:
            _console.print()
        _console.print(f"[bold]{e.key}[/bold]  {e.qualified_program}  ({e.backend})")
        rows: list[tuple[str, str]] = [
            ("status", "ok" if e.ok else f"broken: {e.problem}"),
            ("path", str(e.path)),
            ("size", e.size_str),
            ("created", _when(e.created)),
            ("last used", _when(e.last_used)),
            ("hits", str(e.hits)),
            ("compile", f"{e.compile_seconds:.2f}s"),
        ]
        if e.record is not None:
            record = e.record
            rows.append(("device", f"{record.device.get('type')} {record.device.get('arch') or ''}".strip()))
            rows.append(("artifact", str(record.artifact.get("kind"))))
            rows += [("file", f"{f.path} ({gtcache.format_size(f.size)}, xxh3 {f.xxh3})") for f in record.files]
            rows += [(f"key: {k}", _short(v)) for k, v in sorted(record.ingredients.items())]
        width = max(len(label) for label, _ in rows)
        for label, value in rows:
            _console.print(f"  {label:<{width}}  {value}", markup=False)


def _short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def stats_text(stats: gtcache.StoreStats, ledger: LedgerTotals, *, root: pathlib.Path) -> None:
    _console.print(f"Store:    {root}")
    broken = f" ({stats.broken} broken)" if stats.broken else ""
    _console.print(f"Entries:  {stats.entries}{broken}, {stats.size_str}")
    _console.print(f"Hits:     {stats.hits} recorded in entries, {stats.compile_seconds_saved:.1f}s of compiling saved")
    _console.print(
        f"Runs:     {ledger.runs}: {ledger.hits} hits, {ledger.compiled} compiled, {ledger.bypassed} bypassed,"
        f" {ledger.failed} failed; {ledger.compile_seconds:.1f}s compiling, {ledger.compile_seconds_saved:.1f}s saved"
    )
    for title, groups in (("backend", stats.by_backend), ("gt4py", stats.by_gt4py)):
        if not groups:
            continue
        table = Table(box=None, pad_edge=False, header_style="bold")
        table.add_column(title.upper())
        table.add_column("ENTRIES", justify="right")
        table.add_column("SIZE", justify="right")
        for name, (count, size) in sorted(groups.items()):
            table.add_row(name, str(count), gtcache.format_size(size))
        _console.print()
        _console.print(table)


def plan_table(plan: PrunePlan) -> None:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("KEY", "PROGRAM", "BACKEND", "SIZE", "LAST USED", "REASON"):
        table.add_column(name, justify="right" if name == "SIZE" else "left", no_wrap=name not in ("PROGRAM", "REASON"))
    for removal in plan.removals:
        e = removal.entry
        table.add_row(e.key[:12], e.qualified_program, e.backend, e.size_str, _when(e.last_used), removal.reason)
    _console.print(table)
    _console.print(
        f"{len(plan.removals)} entries, {plan.freed_str} to free; {plan.remaining_entries} entries"
        f" ({gtcache.format_size(plan.remaining_size)}) stay in '{plan.root}'."
    )


def verify_text(report: VerifyReport) -> None:
    for problem in report.repaired:
        _console.print(f"repaired {problem.kind}: {problem.path} ({problem.detail})", markup=False)
    for problem in report.problems:
        _console.print(f"{problem.kind}: {problem.path} ({problem.detail})", markup=False)
    for note in report.notes:
        _console.print(f"note: {note}", markup=False)
    state = "no problems" if report.ok else f"{len(report.problems)} problems"
    _console.print(f"Checked {report.entries} entries in '{report.root}': {state}.")


def explanations_text(explanations: Sequence[Explanation]) -> None:
    for explanation in explanations:
        head = f"{explanation.program} ({explanation.backend}) key {explanation.key}"
        if explanation.stored:
            _console.print(f"{head}: stored, would load.", markup=False)
            continue
        if not explanation.nearest:
            _console.print(f"{head}: would compile; no stored variant of this program.", markup=False)
            continue
        _console.print(f"{head}: would compile; nearest stored entries:", markup=False)
        for entry, diffs in explanation.nearest:
            _console.print(f"  {entry.key[:12]} ({entry.backend}), {len(diffs)} ingredients differ:", markup=False)
            for diff in diffs:
                _console.print(f"    {diff}", markup=False)


def warm_plan(planned: Sequence[PlannedVariant]) -> None:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("VARIANT", "KEY", "STATUS"):
        table.add_column(name, no_wrap=name != "VARIANT")
    for item in planned:
        status = item.status if item.detail is None else f"{item.status}: {item.detail}"
        table.add_row(item.spec.label, (item.key or "-")[:12], status)
    _console.print(table)
    missing = sum(p.status == "missing" for p in planned)
    _console.print(f"{len(planned)} variants, {missing} to compile.")


class WarmProgress:
    """A progress bar on a terminal; one plain line per finished variant elsewhere (CI logs)."""

    def __init__(self, *, total: int, enabled: bool):
        self.total = total
        self.enabled = enabled
        self._progress: Any = None

    def __enter__(self) -> WarmProgress:
        if self.enabled and self.total:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("warming"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                      console=_console)
            self._progress.start()
            self._task = self._progress.add_task("warm", total=self.total)
        return self

    def done(self, result: WarmResult) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)
        else:
            _console.print(f"{result.status:<9} {result.spec.label}  {result.seconds:.1f}s", markup=False)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def warm_report(report: WarmReport) -> None:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("COMPILED", "CACHED", "BYPASSED", "FAILED", "SECONDS", "JOBS", "PEAK MEMORY"):
        table.add_column(name, justify="right")
    peak = max((r.peak_memory for r in report.results), default=0)
    table.add_row(
        str(report.count("compiled")), str(report.count("cached")), str(report.count("bypassed")),
        str(len(report.failed)), f"{report.seconds:.1f}", str(report.jobs), gtcache.format_size(peak),
    )
    _console.print(table)
    for result in report.failed:
        _console.print(f"{result.status}: {result.spec.label}: {result.detail}", markup=False)
