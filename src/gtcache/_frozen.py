"""Frozen records that cost nothing to define: the hot path's data classes.

A frozen ``dataclasses.dataclass`` writes and compiles its ``__init__``, ``__repr__``,
``__eq__``, ``__hash__``, ``__setattr__`` and ``__delattr__`` when its class is made: 0.4-1 ms
each on Python 3.12, paid at import by every process. The start-up hook needs a dozen such
records (settings, entry records, outcomes ...), which was half of what installing it cost.

``Frozen`` gives the same behaviour from methods written once, here: a subclass is made in
microseconds. Type checkers see it as a frozen data class (``dataclass_transform``), so
constructors are checked as before. The differences from ``dataclasses``: ``replace`` and
``asdict`` below instead of the functions of that module, which refuse these records
(``asdict`` is shallow; ``replace`` does not type-check the changes); no ``default_factory``
and no mutable defaults (refused); fields come from the annotations of the class and of
its one base with fields.

Imports nothing but ``dataclasses`` (which gt4py imports anyway) and ``typing``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, dataclass_transform

__all__ = ["Frozen", "asdict", "field", "replace"]

_MISSING: Any = dataclasses.MISSING


class _Field:
    __slots__ = ("default", "repr")

    def __init__(self, default: Any, repr: bool) -> None:
        self.default = default
        self.repr = repr


def field(*, default: Any = _MISSING, repr: bool = True) -> Any:
    """A field with a default and/or hidden from ``repr`` (like ``dataclasses.field``)."""
    return _Field(default, repr)


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Frozen:
    """Base of a frozen record: fields are the class's annotated names, in order."""

    #: The fields, in order (positional arguments fill them in this order).
    _fields_: ClassVar[tuple[str, ...]] = ()
    _defaults_: ClassVar[dict[str, Any]] = {}
    #: The fields ``repr`` leaves out (``field(repr=False)``: secrets).
    _hidden_: ClassVar[frozenset[str]] = frozenset()
    #: The fields ``repr`` shows.
    _shown_: ClassVar[tuple[str, ...]] = ()
    #: The fields, as a set (what keyword arguments may name).
    _names_: ClassVar[frozenset[str]] = frozenset()
    #: The fields without a default.
    _required_: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if sum(1 for base in cls.__bases__ if getattr(base, "_fields_", ())) > 1:
            raise TypeError(f"{cls.__qualname__}: more than one base with fields")
        if "__annotations__" not in cls.__dict__ and "__annotate__" in cls.__dict__:
            # Python 3.14 evaluates annotations lazily: read them with annotationlib then.
            raise TypeError(f"{cls.__qualname__}: annotations are lazy; use 'from __future__ import annotations'")
        fields, defaults, hidden = list(cls._fields_), dict(cls._defaults_), set(cls._hidden_)
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if annotation is ClassVar or str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            value = cls.__dict__.get(name, _MISSING)
            shown = True
            if isinstance(value, _Field):
                value, shown = value.default, value.repr
            elif isinstance(value, dataclasses.Field):
                raise TypeError(f"{cls.__qualname__}.{name}: use gtcache._frozen.field, not dataclasses.field")
            if isinstance(value, (list, dict, set)):
                raise TypeError(f"{cls.__qualname__}.{name}: a mutable default would be shared; use a tuple or None")
            (hidden.discard if shown else hidden.add)(name)
            defaults.pop(name, None)
            if value is _MISSING:
                if name in cls.__dict__:
                    delattr(cls, name)
            else:
                defaults[name] = value
                setattr(cls, name, value)
            if name not in fields:
                fields.append(name)
        for before, name in zip(fields, fields[1:], strict=False):
            if before in defaults and name not in defaults:
                raise TypeError(f"{cls.__qualname__}: field {name!r} without a default follows one with a default")
        cls._fields_, cls._defaults_, cls._hidden_ = tuple(fields), defaults, frozenset(hidden)
        cls._shown_ = tuple(name for name in fields if name not in hidden)
        cls._names_ = frozenset(fields)
        cls._required_ = frozenset(fields).difference(defaults)
        setattr(cls, "__match_args__", cls._fields_)  # noqa: B010 - mypy forbids assigning it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._fields_
        values = kwargs  # a new dict each call; records are made by keyword on the hot path
        if args:
            if len(args) > len(fields):
                raise TypeError(f"{type(self).__qualname__}() takes {len(fields)} arguments, {len(args)} given")
            values = dict(zip(fields, args, strict=False))
            if twice := values.keys() & kwargs.keys():
                raise TypeError(f"{type(self).__qualname__}() got multiple values for argument {min(twice)!r}")
            values.update(kwargs)
        if not values.keys() <= self._names_:
            unexpected = next(name for name in values if name not in self._names_)
            raise TypeError(f"{type(self).__qualname__}() got an unexpected keyword argument {unexpected!r}")
        if len(values) < len(fields):
            if not self._required_ <= values.keys():
                missing = next(name for name in fields if name in self._required_ and name not in values)
                raise TypeError(f"{type(self).__qualname__}() is missing the argument {missing!r}")
            self.__dict__.update(self._defaults_)  # then the values given
        self.__dict__.update(values)
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def _values_(self) -> tuple[Any, ...]:
        return tuple([self.__dict__[name] for name in self._fields_])

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values_() == other._values_()

    def __hash__(self) -> int:
        return hash(self._values_())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self._shown_)
        return f"{type(self).__qualname__}({shown})"


def replace[R: Frozen](record: R, **changes: Any) -> R:
    """A copy of ``record`` with ``changes`` (like ``dataclasses.replace``; an unknown field
    is a ``TypeError``, but type checkers do not check the changes' types)."""
    return type(record)(**{**asdict(record), **changes})


def asdict(record: Frozen) -> dict[str, Any]:
    """The record's fields by name (shallow: nested records stay records)."""
    return {name: record.__dict__[name] for name in record._fields_}
