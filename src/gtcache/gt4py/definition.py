"""Content fingerprint of a DSL definition and everything its lowering reads, before lowering.

gt4py fingerprints DSL functions by reference (qualified name) in its own keys,
and its ``semantic_fingerprinter`` includes source locations. The direct key
needs what the frontend reads, by content and without locations:

- the function's source text (dedented; no file name, no line numbers),
- its annotations (evaluated in the enclosing scope),
- its closure variables as gt4py's frontend collects them
  (``source_utils.get_closure_vars_from_function``), each by value:
  field/scan operators and programs recursively through their definition
  functions and attributes, dimensions and offsets by their fields, numbers,
  strings, constant namespaces, enum classes and members by value,
- for a closure variable that is a *module*, the value of every attribute chain
  the source reads from it (``constants.CPD`` -> the value of ``CPD``), since
  the frontend resolves those at lowering time.

Anything gtcache cannot fingerprint by content (a non-importable object, a
function without source) raises ``ValueError``: there is then no direct key and
the lookup falls back to the build key after lowering. Correctness over speed.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import enum
import functools
import inspect
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any

from gtcache.gt4py import _compat, _facts
from gtcache.keys import digest

__all__ = ["definition_fingerprint"]


def definition_fingerprint(definition_stage: Any) -> str:
    """Fingerprint a ``DSLProgramDef`` / ``DSLFieldOperatorDef`` by content, location-free.

    Every call reads the definition and its closure anew (a closure variable may have been
    rebound since; the hits of one gt4py ``compile()`` call share one reading:
    ``ingredients.one_compile_call``), but gt4py's fingerprinting, slow per object, runs only
    for content not fingerprinted yet, in this process or (through the store's facts file) in
    an earlier one in this environment: ``_content_key`` serializes what the fingerprinter
    reads, fast, and equal serializations have equal fingerprints.
    """
    with _facts_shard(definition_stage) as shard:
        key = _content_key(definition_stage)
        if key is not None and (known := _fingerprints.get(key)) is not None:
            return known
        facts = _facts.active()
        if key and facts and shard and (stored := facts.definition(shard, key)) is not None:
            _fingerprints[key] = stored
            return stored
        try:
            fingerprint = str(_fingerprinter(definition_stage))
        except RecursionError:
            raise ValueError("the definition's closure is too deep to fingerprint") from None
        except Exception as error:  # the fingerprinter rejects what it cannot key by content
            raise ValueError(f"cannot fingerprint the definition by content ({error})") from error
        if key is not None:
            if len(_fingerprints) >= _MAX_FINGERPRINTS:
                _fingerprints.pop(next(iter(_fingerprints)))
            _fingerprints[key] = fingerprint
            if facts is not None and shard is not None:
                facts.remember_definition(shard, key, fingerprint)
        return fingerprint


#: Fingerprints by ``_content_key`` (this process's; bounded).
_fingerprints: dict[str, str] = {}
_MAX_FINGERPRINTS = 8192


def _content_key(definition_stage: Any) -> str | None:
    """A digest of everything the fingerprinter reads (None: cannot tell, fingerprint it)."""
    with _facts_shard(definition_stage):
        made = _compat.content_bytes(definition_stage, _REDUCTIONS)
    return None if made is None else _facts.content_key(*made)


#: The facts shard of the definition being keyed (``_facts.shard_of`` its source file's
#: name), where the facts of its functions are kept too, so that a program's first hit reads
#: one shard of the store's facts; None: no facts are used.
_shard: contextvars.ContextVar[str | None] = contextvars.ContextVar("gtcache_facts_shard", default=None)


@contextlib.contextmanager
def _facts_shard(definition_stage: Any) -> Iterator[str | None]:
    """Sets ``_shard`` for the definition (unless set: the same definition, one level up)."""
    if (shard := _shard.get()) is not None:
        yield shard
        return
    code = getattr(definition_stage.definition, "__code__", None)
    shard = _facts.shard_of(code.co_filename) if code is not None and _facts.active() else None
    token = _shard.set(shard)
    try:
        yield shard
    finally:
        _shard.reset(token)


@functools.lru_cache(maxsize=4096)
def _source_text(code: types.CodeType, func: types.FunctionType) -> str:
    """Dedented source of a function. Cached per code object."""
    try:
        return textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError) as error:
        raise ValueError(f"no source for '{func.__qualname__}'") from error


@functools.lru_cache(maxsize=4096)
def _attribute_chains(code: types.CodeType, func: types.FunctionType) -> dict[str, list[tuple[str, ...]]]:
    """Per root name, the attribute chains the source reads. Cached per code object; parsed
    only for functions with a module or a constant namespace among their closure variables
    (``_READ_THROUGH``: nothing else uses it)."""
    chains: dict[str, list[tuple[str, ...]]] = {}
    _collect_chains(ast.parse(_source_text(code, func)), chains, every_name=False)
    return chains


def _collect_chains(tree: ast.AST, chains: dict[str, list[tuple[str, ...]]], *, every_name: bool) -> None:
    """Adds the attribute chains ``tree`` reads, by root name (``every_name``: with no chain too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and every_name:
            chains.setdefault(node.id, [])
        elif isinstance(node, ast.Attribute):
            parts: list[str] = []
            value: ast.expr = node
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                chains.setdefault(value.id, []).append(tuple(reversed(parts)))


def _chain_reads(root: Any, chains: list[tuple[str, ...]]) -> dict[str, Any]:
    """The value of each attribute chain the source reads from ``root`` (a module, or a value
    gt4py folds the attributes of), by the chain's name; a chain is followed to its end, as
    gt4py's ``getattr`` follows it (``consts.PHYS.FACTOR``: a class attribute of the
    namespace, which the namespace's own value does not hold). Modules on the way are not
    values: their attributes read are."""
    reads: dict[str, Any] = {}
    for chain in sorted(set(chains)):
        value: Any = root
        for depth, attr in enumerate(chain):
            value = getattr(value, attr, _MISSING)
            if value is _MISSING:
                break
            if not isinstance(value, types.ModuleType):
                reads[".".join(chain[: depth + 1])] = value
    return reads


_MISSING = object()


def _function_pieces(
    func: types.FunctionType, entry: _Source, source: str
) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """What the direct key reads of a DSL function (``entry``: its ``_source_entry``); ``source``:
    its text, or the text's digest.

    ``ValueError`` if its file changed since the process started: gt4py parsed a field operator
    when it was decorated (and reads a program's text again for a new ``Program``), so the
    text now may not be what gt4py lowers; the build key, after lowering, is always right.
    """
    if _facts.changed_since_start(entry.code.co_filename):
        raise ValueError(f"the source file of '{func.__qualname__}' changed since the process started")
    closure = _compat.closure_vars(func, _global_names(entry))
    by_value = {}
    reads = {}
    for name, value in closure.items():
        if not isinstance(value, types.ModuleType):
            by_value[name] = value
        if isinstance(value, _READ_THROUGH):
            reads[name] = _chain_reads(value, _chains(func, entry).get(name, []))
    return source, by_value, reads, _annotations(func, entry)


#: Closure values whose attributes gt4py's frontend folds to constants: modules, and its
#: constant namespaces (``FrozenNamespace`` instances, enum classes: a class attribute or an
#: ``enum.nonmember`` is in neither their own value nor their members).
_READ_THROUGH = (types.ModuleType, *_compat.CONSTANT_NAMESPACES)


def _annotations(func: types.FunctionType, entry: _Source) -> dict[str, Any]:
    """The annotations gt4py evaluates (``typing.get_type_hints``). Texts, as ``from __future__
    import annotations`` keeps them, come with the values of the global names they use (the
    closure leaves names only annotations use out): a dimension's kind, a type alias."""
    annotations = dict(func.__annotations__)
    texts = tuple(value for value in annotations.values() if isinstance(value, str))
    if texts:
        chains = _text_annotation_chains(entry, texts)
        resolved: dict[str, Any] = {}
        # Sorted: the facts file keeps the chains in sorted order, a parse in the order found.
        for name, value in sorted(_compat.global_values(func, chains).items()):  # (a name neither has: gt4py fails)
            if not isinstance(value, types.ModuleType):
                resolved[name] = value
            if isinstance(value, _READ_THROUGH):
                resolved[f"{name}."] = _chain_reads(value, chains[name])
        annotations["<globals>"] = resolved
    return annotations


@functools.lru_cache(maxsize=4096)
def _annotation_chains(texts: tuple[str, ...]) -> dict[str, list[tuple[str, ...]]]:
    """Per global name in annotation texts, the attribute chains read from it."""
    chains: dict[str, list[tuple[str, ...]]] = {}
    for text in texts:
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError:
            continue  # gt4py's evaluation fails: it compiles nothing
        _collect_chains(tree, chains, every_name=True)
    return chains


def _deconstruct_function(func: types.FunctionType) -> Any:
    entry = _source_entry(func)
    pieces = _function_pieces(func, entry, _source_text(entry.code, func))
    return _compat.fingerprinting.Deconstruction.from_pieces(*pieces, state=b"gtcache-dsl-function")


class _Source:
    """What the direct key knows of a code object's source text: ``facts``, the digest of the
    text and (once needed) the attribute chains and global names it reads, as ``_source_entry``
    found them; ``usable``, the forms ``_source_fact`` gave of these (checked and interned
    once). A function's keying takes it once and hands it on: reading ``__code__`` raises an
    audit event, as ``id()`` does (see ``_compat.identity``)."""

    __slots__ = ("code", "facts", "usable")

    def __init__(self, code: types.CodeType, facts: dict[str, Any]) -> None:
        self.code = code
        self.facts = facts
        self.usable: dict[str, Any] = {}


#: Per code object, by identity (a process reads one text per code object; bounded). Not by
#: equality: code objects that differ only in comments or a local variable's annotation
#: (which gt4py's frontend reads) compare equal, as two files' copies of a function can.
_sources: dict[int, _Source] = {}


def _source_entry(func: types.FunctionType) -> _Source:
    """What is known of a function's source text: its digest from the store's facts when its
    file is as it was (no read, no tokenizing: ``inspect.getsource`` costs about 0.15 ms a
    function); else read, and kept in the facts (``_facts.source_file_key`` says when it can)."""
    code = func.__code__
    if (known := _sources.get(_compat.identity(code))) is not None and known.code is code:
        return known
    facts, shard = _facts.active(), _shard.get()
    key = _facts.source_file_key(code.co_filename) if facts is not None and shard is not None else None
    value = facts.source(shard, code.co_filename, key, _name_in_file(code)) if facts is not None and shard and key else None
    if value is None:
        value = {"digest": digest(_source_text(code, func))}
        _remember_source(code, key, value)
    if len(_sources) >= _MAX_FINGERPRINTS:
        _sources.pop(next(iter(_sources)))
    entry = _sources[_compat.identity(code)] = _Source(code, value)
    return entry


def _chains(func: types.FunctionType, entry: _Source) -> dict[str, list[tuple[str, ...]]]:
    """``_attribute_chains`` of a function, from its ``_source_entry`` facts when they have them."""
    def compute() -> dict[str, list[list[str]]]:
        return {name: [list(chain) for chain in found] for name, found in _attribute_chains(entry.code, func).items()}

    return _source_fact(entry, "chains", compute, _stored_chains, _usable_chains)


def _text_annotation_chains(entry: _Source, texts: tuple[str, ...]) -> dict[str, list[tuple[str, ...]]]:
    """``_annotation_chains`` of a function's annotation texts (part of its source text), from
    its ``_source_entry`` facts when they have them: parsed once per environment, not per process."""
    def compute() -> dict[str, list[list[str]]]:
        return {name: [list(chain) for chain in found] for name, found in _annotation_chains(texts).items()}

    return _source_fact(entry, "annotations", compute, _stored_chains, _usable_chains)


def _stored_chains(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(chains, list) and all(_names(chain) for chain in chains) for chains in value.values()
    )


def _usable_chains(stored: dict[str, list[list[str]]]) -> dict[str, list[tuple[str, ...]]]:
    return {sys.intern(name): [tuple(map(sys.intern, chain)) for chain in chains] for name, chains in stored.items()}


def _global_names(entry: _Source) -> list[str] | None:
    """The global names gt4py's frontend finds in a function's source (``_compat.closure_vars``),
    from its ``_source_entry`` facts when they have them; None where gt4py finds them otherwise."""
    if not _compat.CLOSURE_FROM_SOURCE:
        return None
    # Interned, as the names in code are: ``content_bytes`` (pickle) writes a string seen before
    # as a reference to it only when it is the same object, and the bytes must not differ
    # between a name read from the facts file and the same name found by parsing.
    return _source_fact(entry, "globals", lambda: _compat.closure_global_names(entry.code), _names,
                        lambda names: [sys.intern(name) for name in names])


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(name, str) for name in value)


def _source_fact[T](
    entry: _Source, name: str, compute: Callable[[], Any], valid: Callable[[Any], bool], use: Callable[[Any], T],
) -> T:
    """``use`` of a fact of a function's source text besides its digest: stored with it (if
    ``valid``), else computed (and stored with it from then on); made once per code object
    (callers do not change it)."""
    if name in entry.usable:
        return entry.usable[name]  # type: ignore[no-any-return]  # what ``use`` made
    if name in entry.facts and valid(entry.facts[name]):
        value = entry.facts[name]
    else:
        value = compute()
        entry.facts = {**entry.facts, name: value}  # (a new dict: the old one may be the facts file's)
        _remember_source(entry.code, _facts.source_file_key(entry.code.co_filename), entry.facts)
    entry.usable[name] = made = use(value)
    return made


def _name_in_file(code: types.CodeType) -> str:
    """What tells a function from the others in its source file (in the facts)."""
    return f"{code.co_firstlineno}:{code.co_qualname}"


def _remember_source(code: types.CodeType, file_key: str | None, value: dict[str, Any]) -> None:
    """Keep ``value`` in the facts (the definition's shard), if its file has not changed since
    ``file_key`` was made of it."""
    facts, shard = _facts.active(), _shard.get()
    if facts is not None and shard is not None and file_key is not None and _facts.source_unchanged(code.co_filename):
        facts.remember_source(shard, code.co_filename, file_key, _name_in_file(code), value)


def _refuse_module(module: types.ModuleType) -> Any:
    # A module reached other than as a closure variable (e.g. through an object's
    # attributes) cannot be keyed by content: which of its attributes matter is unknown.
    raise ValueError(f"module '{module.__name__}' is reached outside a closure")


def _deconstruct_enum_class(cls: type[enum.Enum]) -> Any:
    # By value, not by reference: the frontend folds 'MyEnum.MEMBER' to the member's
    # value, so an edited value must change the key and a moved module must not.
    members = {name: member.value for name, member in cls.__members__.items()}
    return _compat.fingerprinting.Deconstruction.from_pieces(
        cls.__qualname__, members, state=b"gtcache-enum-class"
    )


def _deconstruct_enum_member(member: enum.Enum) -> Any:
    return _compat.fingerprinting.Deconstruction.from_pieces(
        type(member).__qualname__, member.name, member.value, state=b"gtcache-enum-member"
    )


# The same pieces for ``_content_key`` (each tagged like its deconstruction's ``state``).
def _reduce_function(func: types.FunctionType) -> _compat.Reduction:
    # The text's digest for the text: equal digests, equal texts, equal fingerprints.
    entry = _source_entry(func)
    return _compat.mirrored, (b"gtcache-dsl-function", *_function_pieces(func, entry, entry.facts["digest"]))


def _reduce_enum_class(cls: type[enum.Enum]) -> _compat.Reduction:
    return _compat.mirrored, (b"gtcache-enum-class", cls.__qualname__, {n: m.value for n, m in cls.__members__.items()})


def _reduce_enum_member(member: enum.Enum) -> _compat.Reduction:
    return _compat.mirrored, (b"gtcache-enum-member", type(member).__qualname__, member.name, member.value)


_REDUCTIONS: dict[type, Any] = {
    types.FunctionType: _reduce_function,
    types.ModuleType: _refuse_module,
    enum.EnumMeta: _reduce_enum_class,
    enum.Enum: _reduce_enum_member,
}


_fingerprinter = _compat.fingerprinting.make_fingerprinter(
    deconstructor=_compat.fingerprinting.make_strict_data_deconstructor(
        {
            types.FunctionType: _deconstruct_function,
            types.ModuleType: _refuse_module,
            enum.EnumMeta: _deconstruct_enum_class,
            enum.Enum: _deconstruct_enum_member,
        }
    )
)
