"""``gtcache._frozen.Frozen``: the hot path's records behave as frozen data classes do."""

from __future__ import annotations

import copy
import functools
import dataclasses
import pickle
from typing import ClassVar

import pytest

from gtcache._frozen import Frozen, asdict, field, replace
from gtcache.settings import BundleTrust, Settings
from gtcache.store._record import FileRecord


class Point(Frozen):
    kind: ClassVar[str] = "point"
    x: int
    y: int = 0
    label: str | None = field(default=None, repr=False)


class Checked(Frozen):
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


class Point3(Point):
    z: int = 0


def test_arguments_fill_fields_by_position_keyword_and_default() -> None:
    assert asdict(Point(1)) == {"x": 1, "y": 0, "label": None}
    assert asdict(Point(1, 2, label="a")) == {"x": 1, "y": 2, "label": "a"}
    assert asdict(Point(y=3, x=4)) == {"x": 4, "y": 3, "label": None}
    assert Point.kind == "point" and "kind" not in asdict(Point(1)), "a ClassVar is not a field"
    assert Point.__match_args__ == ("x", "y", "label")


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((), {}, "missing the argument 'x'"),
        ((1, 2, "a", 4), {}, "takes 3 arguments, 4 given"),
        ((1,), {"x": 2}, "multiple values for argument 'x'"),
        ((1,), {"w": 2}, "unexpected keyword argument 'w'"),
    ],
)
def test_wrong_arguments_are_refused_as_a_data_class_refuses_them(args: tuple, kwargs: dict, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        Point(*args, **kwargs)


def test_fields_cannot_be_set_or_deleted() -> None:
    point = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del point.x  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.other = 1  # type: ignore[attr-defined]
    assert point.x == 1


def test_equality_and_hash_are_by_type_and_fields() -> None:
    assert Point(1, 2) == Point(1, 2) and hash(Point(1, 2)) == hash(Point(1, 2))
    assert Point(1, 2) != Point(1, 3)
    assert Point(1, 2) != Point3(1, 2), "another class is never equal"
    assert len({Point(1), Point(1), Point(2)}) == 2


def test_repr_leaves_out_hidden_fields() -> None:
    assert repr(Point(1, 2, label="secret")) == "Point(x=1, y=2)"
    assert "k3y" not in repr(BundleTrust(key=b"k3y"))
    settings = Settings.from_env(env={"GTCACHE_BUNDLE_KEY": "k3y-material", "GTCACHE_REMOTE_TOKEN": "t0ken"})
    assert settings.bundle_key is not None
    assert "k3y-material" not in repr(settings) and "t0ken" not in repr(settings)


def test_a_subclass_adds_fields_after_its_bases() -> None:
    assert asdict(Point3(1, 2, "a", 3)) == {"x": 1, "y": 2, "label": "a", "z": 3}
    assert repr(Point3(1, z=5)) == "Point3(x=1, y=0, z=5)"


def test_a_field_without_a_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match="'b' without a default follows one with a default"):

        class Bad(Frozen):
            a: int = 0
            b: int


def test_post_init_runs_at_construction_and_replace() -> None:
    assert Checked(1).value == 1
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)
    with pytest.raises(ValueError, match="negative"):
        replace(Checked(1), value=-1)


def test_replace_copies_with_changes_and_refuses_unknown_fields() -> None:
    point = Point(1, 2, label="a")
    assert replace(point, y=5) == Point(1, 5, label="a") and point.y == 2
    with pytest.raises(TypeError, match="unexpected keyword argument 'w'"):
        replace(point, w=1)


def test_records_survive_pickle_and_copy() -> None:
    record = FileRecord("lib.so", 10, "0" * 32)
    assert pickle.loads(pickle.dumps(record)) == record
    assert copy.copy(record) == record and copy.deepcopy(record) == record
    settings = Settings.from_env(env={"GTCACHE_DIR": "/tmp/x"})
    assert pickle.loads(pickle.dumps(settings)) == settings


def test_a_subclass_may_redefine_a_field_and_hide_it() -> None:
    class Shown(Frozen):
        secret: str = "s3cret"

    class Redefined(Shown):
        secret: str = "other"

    class Hidden(Shown):
        secret: str = field(default="s3cret", repr=False)

    class Required(Shown):
        secret: str

    assert repr(Redefined()).endswith("Redefined(secret='other')"), "a redefined field is shown once"
    assert repr(Hidden()).endswith("Hidden()"), "a subclass hides an inherited field"
    with pytest.raises(TypeError, match="missing the argument 'secret'"):
        Required()


def test_slips_that_would_silently_differ_from_a_data_class_are_refused() -> None:
    with pytest.raises(TypeError, match="not dataclasses.field"):

        class WrongField(Frozen):
            items: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="mutable default"):

        class Shared(Frozen):
            items: list[int] = []  # noqa: RUF012 - the slip under test

    class A(Frozen):
        a: int = 0

    class B(Frozen):
        b: int = 0

    with pytest.raises(TypeError, match="more than one base with fields"):

        class Both(A, B):
            pass


def test_replace_keeps_only_the_fields() -> None:
    class Cached(Frozen):
        x: int

        @functools.cached_property
        def twice(self) -> int:
            return 2 * self.x

    record = Cached(2)
    assert record.twice == 4
    assert replace(record, x=3).twice == 6
