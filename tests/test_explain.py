"""Explaining misses: the ingredient that changed is named, with old and new values."""

from __future__ import annotations

import json
import pathlib

import pytest
from click.testing import CliRunner

import gtcache
from gtcache import examples
from gtcache.explain import explain, ingredient_differences
from gtcache.gt4py import compile_variants
from gtcache_cli.main import cli
from gtcache.examples import scale_by
from tests.helpers import publish

TARGET = "gtcache.examples:scale_by"


def test_ingredient_differences_names_old_and_new() -> None:
    diffs = ingredient_differences({"a": 1, "b": 2, "gone": 0}, {"a": 1, "b": 3, "new": 4})
    assert [(d.ingredient, d.stored, d.current) for d in diffs] == [("b", 2, 3), ("gone", 0, None), ("new", None, 4)]
    assert str(diffs[0]) == "b: 2 -> 3"


def test_nearest_entry_first(tmp_path: pathlib.Path) -> None:
    store = gtcache.open_store(tmp_path / "s")
    near = publish(store, "prog", extra="x")
    publish(store, "prog", extra="y", more="z")
    current = {**near.record.ingredients, "toolchain.gt4py": "9.9"}
    explanation = explain(store.scan(), program="prog", backend="run_gtfn_cpu", key="f" * 32, ingredients=current)
    assert not explanation.stored
    assert explanation.nearest[0][0].key == near.key
    assert [d.ingredient for d in explanation.nearest[0][1]] == ["toolchain.gt4py"]
    assert "toolchain.gt4py: None -> '9.9'" in explanation.summary()


@pytest.fixture
def store_with_variant(tmp_path: pathlib.Path) -> pathlib.Path:
    store = gtcache.open_store(tmp_path / "s")
    compile_variants(store, scale_by, backend=examples.backend_by_name("roundtrip"), static_args={"factor": [2.0]})
    return store.root


def explain_json(root: pathlib.Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(cli, ["--cache-dir", str(root), "explain", TARGET, "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def changed(report: list[dict]) -> set[str]:
    [variant] = report
    return {d["ingredient"] for d in variant["nearest"][0]["differences"]}


def test_explain_stored_variant(store_with_variant: pathlib.Path) -> None:
    [variant] = explain_json(store_with_variant, "--backend", "roundtrip", "--static", "factor=2.0")
    assert variant["stored"] is True


def test_explain_names_the_static_arg(store_with_variant: pathlib.Path) -> None:
    report = explain_json(store_with_variant, "--backend", "roundtrip", "--static", "factor=3.0")
    assert "static_args" in changed(report)
    diff = next(d for d in report[0]["nearest"][0]["differences"] if d["ingredient"] == "static_args")
    assert "2.0" in json.dumps(diff["stored"]) and "3.0" in json.dumps(diff["current"])


def test_explain_names_the_backend(store_with_variant: pathlib.Path) -> None:
    report = explain_json(store_with_variant, "--backend", "gtfn_cpu", "--static", "factor=2.0")
    assert {"backend", "backend_config"} <= changed(report)
    assert "program_ir" not in changed(report)


def test_explain_text_and_bad_target(store_with_variant: pathlib.Path) -> None:
    result = CliRunner().invoke(
        cli, ["--cache-dir", str(store_with_variant), "explain", TARGET, "--backend", "roundtrip", "--static", "factor=5.0"]
    )
    assert result.exit_code == 0 and "would compile" in result.output and "static_args" in result.output
    result = CliRunner().invoke(cli, ["--cache-dir", str(store_with_variant), "explain", "tests.nope:x"])
    assert result.exit_code == 2 and "Cannot import 'tests.nope'" in result.output
    result = CliRunner().invoke(cli, ["--cache-dir", str(store_with_variant), "explain", TARGET, "--static", "factor"])
    assert result.exit_code == 2 and "name=value" in result.output
