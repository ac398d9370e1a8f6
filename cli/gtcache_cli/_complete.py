"""Shell completion from the store's index: keys and program names for ``info``/``rm``,
program and backend names for ``--program``/``--backend``.

click calls these with a context that was parsed but not run (the group's callback has
not made the settings), so the store is found from the parsed ``--cache-dir`` /
``--index-dir`` (or their environment variables), opened read-only, never created.
A completion never fails: anything going wrong completes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import click
from click.shell_completion import CompletionItem

import gtcache


def _entries(ctx: click.Context) -> list[gtcache.EntryInfo]:
    root = ctx.find_root()
    try:
        settings = gtcache.Settings.from_env(cache_dir=root.params.get("cache_dir"),
                                             index_dir=root.params.get("index_dir"))
        store = gtcache.open_store(settings.cache_dir, index_dir=settings.index_dir, create=False,
                                   read_only=True, allow_untrusted=True)
        return list(store.scan().entries)
    except Exception:  # a completion must never print a traceback into the prompt
        return []


def _items(candidates: Iterable[tuple[str, str]], incomplete: str) -> list[CompletionItem]:
    seen: dict[str, str] = {}
    for value, help_text in candidates:
        if value.startswith(incomplete) and value not in seen and value.isprintable() and value.strip() == value:
            seen[value] = help_text
    return [CompletionItem(value, help=help_text) for value, help_text in sorted(seen.items())]


def entry_queries(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Full keys (once some digits are typed) and program names, short and qualified."""
    entries = _entries(ctx)
    names = [(e.program, e.qualified_program) for e in entries] + [(e.qualified_program, "") for e in entries]
    keys = [(e.key, f"{e.program} ({e.backend})") for e in entries] if incomplete else []
    return _items([*keys, *names], incomplete)


def _names(of: Callable[[gtcache.EntryInfo], str]) -> Callable[[click.Context, click.Parameter, str], list[CompletionItem]]:
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        return _items(((of(e), "") for e in _entries(ctx)), incomplete)

    return complete


program_names = _names(lambda e: e.program)
backend_names = _names(lambda e: e.backend)
