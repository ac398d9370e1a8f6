"""One codec record per artifact kind, and it agrees with gt4py's classes, the schema and the store."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from gtcache.gt4py import _compat, codecs
from gtcache.store._record import ARTIFACT_FILE_FIELDS

SCHEMA = json.loads((pathlib.Path(__file__).parents[2] / "cache_schema/v1/entry.schema.json").read_text())


def _schema_kinds() -> dict[str, dict[str, Any]]:
    artifact = SCHEMA["properties"]["artifact"]
    kinds = {rule["if"]["properties"]["kind"]["const"]: rule["then"]["properties"]["fields"] for rule in artifact["allOf"]}
    assert sorted(kinds) == sorted(artifact["properties"]["kind"]["enum"])
    return kinds


def test_every_kind_has_one_codec_a_gt4py_class_and_a_schema() -> None:
    kinds = _schema_kinds()
    assert sorted(codecs.CODECS) == sorted(_compat.ARTIFACT_CLASSES) == sorted(ARTIFACT_FILE_FIELDS) == sorted(kinds)
    assert all(codec.kind == kind for kind, codec in codecs.CODECS.items())


def test_the_files_a_codec_opens_are_the_schemas_file_name_fields() -> None:
    for kind, fields_schema in _schema_kinds().items():
        file_fields = sorted(
            name for name, prop in fields_schema["properties"].items() if prop.get("$ref") == "#/$defs/file_name"
        )
        assert file_fields == sorted(ARTIFACT_FILE_FIELDS[kind]), kind
        sample = {name: f"lib{name}.so" for name in fields_schema["required"]}
        named = set(codecs.CODECS[kind].file_names(sample))
        # every file field is among what the codec checks before opening (dace adds its stub)
        assert {sample[name] for name in file_fields} <= named, kind
