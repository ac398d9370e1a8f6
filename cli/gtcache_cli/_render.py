"""Tables and text for the terminal (rich); JSON shapes come from the library's ``to_json``."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

import gtcache
from gtcache.explain import Explanation
from gtcache.warm import PlannedVariant, WarmReport, WarmResult
from gtcache.policies import PruneOutcome, PrunePlan, VerifyReport
from gtcache.store import LedgerTotals
from gtcache_cli import _text

class _Out:
    """``print`` on a console made for this moment's stdout (``_text.console``): the width of
    the terminal, of ``COLUMNS``, or unbounded in a pipe; made per call, so a test's
    redirected stdout and environment count."""

    def print(self, *objects: Any, **options: Any) -> None:
        _text.console().print(*objects, **options)


_console = _Out()
_when = _text.ago


def _program_names(entries: Sequence[gtcache.EntryInfo], *, long: bool) -> dict[str, str]:
    """Key -> the name a table shows: the program's own name, its qualified name with ``long``
    or where two programs of that name from different modules are listed together."""
    modules: dict[str, set[str]] = {}
    for e in entries:
        modules.setdefault(e.program, set()).add(e.qualified_program)
    return {e.key: e.qualified_program if long or len(modules[e.program]) > 1 else e.program for e in entries}


_ENTRY_COLUMNS = (
    _text.Column("KEY"), _text.Column("PROGRAM", wrap=True), _text.Column("BACKEND"),
    _text.Column("SIZE", "right", drop_rank=2), _text.Column("COMPILE", "right", drop_rank=5),
    _text.Column("HITS", "right", drop_rank=4), _text.Column("LAST USED", drop_rank=3),
    _text.Column("STATUS", drop_rank=1),
)


def _shown_size(entry: gtcache.EntryInfo) -> int:
    """SIZE in ``ls``: a sound entry's payload as its record lists it; a broken one's folder as
    measured (its record may be unreadable, or list files that are not as it says)."""
    return entry.size if entry.ok else entry.disk_size


def entries_table(
    entries: Sequence[gtcache.EntryInfo], *, root: pathlib.Path, all_keys: Sequence[str] = (), long: bool = False,
) -> None:
    """``ls``: KEY, PROGRAM and BACKEND always, then SIZE, COMPILE, HITS, LAST USED and STATUS
    as the width allows (COMPILE drops first, then HITS, LAST USED, SIZE; STATUS last). Keys
    shorten only when even those three do not fit, never below a prefix ``info`` accepts and
    that is unique in the store. ``all_keys``: every key of the store, so an ``ls`` whose
    filters match nothing says how many entries the store holds."""
    if not entries:
        where = _text.escape(str(root))
        if all_keys:
            _console.print(f"No entries match in '{where}'"
                           f" ({_text.plural(len(all_keys), 'entry', 'entries')} there).", markup=False)
        else:
            _console.print(f"No entries in '{where}'.", markup=False)
        return
    names = _program_names(entries, long=long)
    width = _text.console().width
    keys = list(all_keys) or [e.key for e in entries]
    for room in (True, False):
        digits = _text.key_digits(keys, room=room)
        rows = [
            [Text(e.key[:digits]), Text(_text.escape(names[e.key])), Text(_text.escape(e.backend)),
             Text(gtcache.format_size(_shown_size(e))), Text(f"{e.compile_seconds:.1f}s"), Text(str(e.hits)), Text(_when(e.last_used)),
             Text("ok") if e.ok else Text("broken", style="red")]
            for e in entries
        ]
        table, fits = _text.fit_table(_ENTRY_COLUMNS, rows, width)
        if fits:
            break
    _console.print(table)
    for e in entries:
        if not e.ok:
            _console.print(f"broken {e.key[:digits]}: {_text.escape(e.problem or '')}", markup=False)
    total = sum(_shown_size(e) for e in entries)
    broken = sum(not e.ok for e in entries)
    note = f", {broken} broken" if broken else ""
    _console.print(f"{_text.plural(len(entries), 'entry', 'entries')}, {gtcache.format_size(total)}{note}"
                   f" in '{_text.escape(str(root))}'.", markup=False)


_REMOTE_COLUMNS = (
    _text.Column("KEY"), _text.Column("PROGRAM", wrap=True), _text.Column("BACKEND"),
    _text.Column("SIZE", "right", drop_rank=2), _text.Column("CREATED", drop_rank=3),
    _text.Column("PUSHED", drop_rank=1),
)


def remote_table(entries: Sequence[Any], *, name: str) -> None:
    """``ls --remote``: KEY, PROGRAM, BACKEND; SIZE (of the signed object), CREATED (compiled)
    and PUSHED (last written) as the width allows; ``?`` where the remote does not say."""
    if not entries:
        _console.print(f"No entries on '{_text.escape(name)}'.", markup=False)
        return
    width = _text.console().width
    keys = [e.key for e in entries]
    for room in (True, False):
        digits = _text.key_digits(keys, room=room)
        rows = [
            [Text(e.key[:digits]), Text(_text.escape(e.program or "?")), Text(_text.escape(e.backend or "?")),
             Text(gtcache.format_size(e.size) if e.size is not None else "?"),
             Text(_when(e.created) if e.created else "?"), Text(_when(e.modified) if e.modified else "?")]
            for e in entries
        ]
        table, fits = _text.fit_table(_REMOTE_COLUMNS, rows, width)
        if fits:
            break
    _console.print(table)
    total = sum(e.size or 0 for e in entries)
    _console.print(f"{_text.plural(len(entries), 'entry', 'entries')}, {gtcache.format_size(total)}"
                   f" on '{_text.escape(name)}'.", markup=False)


def info_json(entry: gtcache.EntryInfo) -> dict[str, Any]:
    data = entry.to_json()
    data["record"] = entry.record.to_json() if entry.record is not None else None
    return data


def info_text(entries: Sequence[gtcache.EntryInfo]) -> None:
    for number, e in enumerate(entries):
        if number:
            _console.print()
        _console.print(Text.assemble((e.key, "bold"), f"  {_text.escape(e.qualified_program)}  ({_text.escape(e.backend)})"))
        rows: list[tuple[str, str]] = [
            ("status", "ok" if e.ok else f"broken: {e.problem}"),
            ("path", str(e.path)),
            ("size", e.size_str),
            ("created", f"{_text.local_time(e.created)} ({_when(e.created)})"),
            ("last used", f"{_text.local_time(e.last_used)} ({_when(e.last_used)})"),
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
            _console.print(f"  {label:<{width}}  {_text.escape(value)}", markup=False)


def _short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclasses.dataclass(frozen=True)
class Usage:
    """Bytes and files on disk (entry folders, records included: what the caps count) and the caps."""

    size: int
    files: int
    max_size: int | None
    max_files: int | None
    #: Why the caps could not be read (a bad gtcache.toml or GTCACHE_MAX_*), if so.
    problem: str | None = None


def hit_rate(ledger: LedgerTotals) -> float | None:
    """Hits per cacheable variant (hits + compiled + failed), as a percentage; None without any."""
    cacheable = ledger.hits + ledger.compiled + ledger.failed
    return round(100 * ledger.hits / cacheable, 2) if cacheable else None


def _ratio(part: float, whole: float) -> str:
    return f"({100 * part / whole:.1f} %)" if whole else ""


def stats_text(
    stats: gtcache.StoreStats, ledger: LedgerTotals, *, root: pathlib.Path, usage: Usage, since: str | None,
    zeroed: bool = False,
) -> None:
    """ccache -s style: calls, hits and misses with rates, then the store against its caps.

    ``since``: when the counts start: the last ``stats --zero`` (``zeroed``), else the oldest run."""
    rows: list[tuple[str, str]] = [("Store", _text.escape(str(root)))]
    runs = _text.plural(ledger.runs, "recorded run")
    if since is None:
        rows.append(("Since", "no recorded runs"))
    elif zeroed:
        rows.append(("Since", f"{_text.local_time(since)} ({_text.ago(since)}), the last 'stats --zero'; {runs}"))
    else:
        rows.append(("Since", f"{_text.local_time(since)} ({_text.ago(since)}), the oldest of {runs}"
                              " (never zeroed)"))
    cacheable = ledger.hits + ledger.compiled + ledger.failed
    variants = cacheable + ledger.bypassed
    width = len(str(variants))

    def count(number: int) -> str:
        return f"{number:>{width}}"

    rows += [
        ("Variants", f"{count(variants)}"),
        ("  Cacheable", f"{count(cacheable)} / {variants} {_ratio(cacheable, variants)}".rstrip()),
        ("    Hits", f"{count(ledger.hits)} / {cacheable} {_ratio(ledger.hits, cacheable)}".rstrip()),
        ("    Compiled", f"{count(ledger.compiled)} / {cacheable} {_ratio(ledger.compiled, cacheable)}".rstrip()),
        ("    Failed", f"{count(ledger.failed)} / {cacheable} {_ratio(ledger.failed, cacheable)}".rstrip()),
        ("  Bypassed", f"{count(ledger.bypassed)} / {variants} {_ratio(ledger.bypassed, variants)}".rstrip()),
        ("Compile time", f"{_text.duration(ledger.compile_seconds_saved)} saved,"
                         f" {_text.duration(ledger.compile_seconds)} spent compiling"),
    ]
    if ledger.unreadable:
        rows.append(("", f"({_text.plural(ledger.unreadable, 'ledger file')} could not be read)"))
    broken = f" ({stats.broken} broken)" if stats.broken else ""
    rows.append(("Entries", f"{_text.plural(stats.entries, 'entry', 'entries')}{broken},"
                            f" {_text.plural(stats.hits, 'hit')} recorded in them"))
    if usage.problem:
        limit_size = limit_files = "no cap: " + usage.problem
    else:
        limit_size = (f"/ {gtcache.format_size(usage.max_size)} {_ratio(usage.size, usage.max_size)}"
                      if usage.max_size is not None else "(no cap: 'gtcache config set max-size 20G')")
        limit_files = (f"/ {usage.max_files} {_ratio(usage.files, usage.max_files)}"
                       if usage.max_files is not None else "(no cap)")
    rows += [("  On disk", f"{gtcache.format_size(usage.size)} {limit_size}"),
             ("  Files", f"{usage.files} {limit_files}")]
    label_width = max(len(label) for label, _ in rows) + 1
    for label, value in rows:
        _console.print(f"{label + ':' if label else '':<{label_width}} {value}".rstrip(), markup=False)
    for title, groups in (("backend", stats.by_backend), ("gt4py", stats.by_gt4py)):
        if not groups:
            continue
        cells = [[Text(_text.escape(name)), Text(str(number)), Text(gtcache.format_size(size))]
                 for name, (number, size) in sorted(groups.items())]
        heads = (_text.Column(title.upper()), _text.Column("ENTRIES", "right"), _text.Column("SIZE", "right"))
        table, _ = _text.fit_table(heads, cells, _text.console().width)  # never cut, however narrow
        _console.print()
        _console.print(table)


_PLAN_COLUMNS = (
    _text.Column("KEY"), _text.Column("PROGRAM", wrap=True), _text.Column("BACKEND", drop_rank=1),
    _text.Column("ON DISK", "right", drop_rank=2), _text.Column("LAST USED", drop_rank=3),
    _text.Column("REASON", wrap=True),
)


def plan_table(plan: PrunePlan, *, on_disk: Mapping[str, int], remaining: int) -> None:
    """The plan's rows; ``on_disk``: key -> bytes its entry folder takes (records included), what
    removing it frees: the column and the total are those, so they match what removal reports;
    ``remaining``: the bytes on disk of the entries that stay."""
    freed = sum(on_disk.values())
    entries = [removal.entry for removal in plan.removals]
    names = _program_names(entries, long=False)
    rows = [
        [Text(r.entry.key[:_text.KEY_DIGITS]), Text(_text.escape(names[r.entry.key])), Text(_text.escape(r.entry.backend)),
         Text(gtcache.format_size(on_disk.get(r.entry.key, 0))), Text(_when(r.entry.last_used)),
         Text(_text.escape(r.reason))]
        for r in plan.removals
    ]
    table, _ = _text.fit_table(_PLAN_COLUMNS, rows, _text.console().width)
    _console.print(table)
    _console.print(
        f"{_text.plural(len(plan.removals), 'entry', 'entries')}, {gtcache.format_size(freed)} to free;"
        f" {_text.plural(plan.remaining_entries, 'entry', 'entries')}"
        f" ({gtcache.format_size(remaining)}) stay in '{_text.escape(str(plan.root))}'.", markup=False,
    )


def removal_outcome(outcome: PruneOutcome) -> None:
    for key, reason in sorted(outcome.failed.items()):
        _console.print(f"not removed {key}: {_text.escape(reason)}", markup=False)
    failed = f"; {len(outcome.failed)} could not be removed" if outcome.failed else ""
    left = (f"; {_text.plural(len(outcome.left), 'entry', 'entries')} used or published again since"
            " the plan, left") if outcome.left else ""
    gone = f"; {len(outcome.gone)} already removed by another process" if outcome.gone else ""
    _console.print(f"Removed {_text.plural(len(outcome.removed), 'entry', 'entries')},"
                   f" freed {gtcache.format_size(outcome.freed)}{left}{gone}{failed}.", markup=False)


def quarantine_note(quarantine: tuple[int, int]) -> None:
    """Say what ``quarantine/`` holds (no listing shows it, no cap counts it): 'gtcache clear
    --quarantine' empties it."""
    count, size = quarantine
    if count:
        _console.print(f"Note: quarantine/ holds {_text.plural(count, 'broken entry', 'broken entries')}"
                       f" ({gtcache.format_size(size)}) that 'verify --repair' moved aside; 'gtcache clear"
                       " --quarantine' removes them.", markup=False)


def verify_text(report: VerifyReport) -> None:
    for problem in report.repaired:
        _console.print(f"repaired {problem.kind}: {problem.path} ({problem.detail})", markup=False)
    for problem in report.problems:
        _console.print(f"{problem.kind}: {problem.path} ({problem.detail})", markup=False)
    for note in report.notes:
        _console.print(f"note: {note}", markup=False)
    state = "no problems" if report.ok else _text.plural(len(report.problems), "problem")
    _console.print(f"Checked {_text.plural(report.entries, 'entry', 'entries')} in"
                   f" '{_text.escape(str(report.root))}': {state}.", markup=False)


def explanations_text(explanations: Sequence[Explanation]) -> None:
    for explanation in explanations:
        if explanation.unplannable is not None:
            _console.print(f"{explanation.program} ({explanation.backend}): cannot plan without compiling:"
                           f" {explanation.unplannable}", markup=False)
            continue
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
    unplannable = sum(p.status == "unplannable" for p in planned)
    note = f", {unplannable} cannot be planned" if unplannable else ""
    _console.print(f"{_text.plural(len(planned), 'variant')}, {missing} to compile{note}.")


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
                                      console=_text.console())
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
