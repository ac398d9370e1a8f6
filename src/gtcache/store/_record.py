"""The entry record (``entry.json``, schema version 2) as a frozen dataclass.

``cache_schema/v1/entry.schema.json`` is the published form of what
``EntryRecord.from_json`` accepts; the tests validate every record written
against it. Validation here is by hand so that loading an entry does not need
``jsonschema`` on the lookup path.

Schema 2 adds ``record_xxh3``: the checksum of the record itself, without the
usage fields (``last_used``, ``hits``) that every hit may rewrite. A record is
not only metadata: its ``artifact`` names entry points and, for dace, holds the
Python source that binds arguments, so a flipped byte there must never load.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping
from typing import Any

import xxhash

from gtcache._frozen import Frozen
from gtcache.store._layout import ENTRY_FILE, KEY_PATTERN

__all__ = ["ARTIFACT_FILE_FIELDS", "SCHEMA_VERSION", "EntryRecord", "FileRecord", "now_iso"]

#: Version of ``entry.json`` this code writes and reads.
SCHEMA_VERSION = 2
#: Fields ``record_xxh3`` does not cover: usage counters, rewritten on hits.
_UNCHECKED = frozenset({"last_used", "hits", "record_xxh3"})

#: Payload files are flat names inside the entry folder: no separators, no "..".
_FILE_NAME = re.compile(r"^(?!\.\.?$)[A-Za-z0-9._+-]{1,200}$")
_HEX = re.compile(r"^[0-9a-f]{32}$")

#: The artifact fields that name payload files, by artifact kind (the ``file_name`` fields
#: of ``entry.schema.json``). Each must be one of the entry's ``files``: an entry names only
#: its own files, never a path outside its folder. The codecs check the same (and the
#: dace stub beside the library) before anything is opened.
ARTIFACT_FILE_FIELDS: Mapping[str, tuple[str, ...]] = {
    "gtfn": ("module",),
    "dace": ("library", "sdfg"),
    "roundtrip": ("source",),
}


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")


class FileRecord(Frozen):
    """One payload file of an entry, with what loading checks it against."""

    path: str
    size: int
    xxh3: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "xxh3": self.xxh3}


class EntryRecord(Frozen):
    """Everything known about one stored program variant."""

    key: str
    #: Named key ingredients; the key is the hash of their canonical JSON.
    ingredients: Mapping[str, Any]
    #: ``{"name": ..., "module": ...}`` of the DSL program.
    program: Mapping[str, str]
    #: ``{"name": ..., "options": {...}}``.
    backend: Mapping[str, Any]
    #: ``{"type": "CPU" | "CUDA" | "ROCM" | ..., "arch": str | None}``.
    device: Mapping[str, Any]
    #: Versions and identities of what built the payload (gt4py, compiler, Python ABI ...).
    toolchain: Mapping[str, Any]
    #: ``{"kind": "gtfn" | "dace" | "roundtrip", "fields": {...}}``; paths relative to the entry.
    artifact: Mapping[str, Any]
    files: tuple[FileRecord, ...]
    created: str
    last_used: str
    hits: int
    compile_seconds: float
    gtcache_version: str
    schema_version: int = SCHEMA_VERSION

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def program_name(self) -> str:
        return str(self.program.get("name", "?"))

    @property
    def backend_name(self) -> str:
        return str(self.backend.get("name", "?"))

    def to_json(self) -> dict[str, Any]:
        data = {
            "schema_version": self.schema_version,
            "key": self.key,
            "ingredients": dict(self.ingredients),
            "program": dict(self.program),
            "backend": dict(self.backend),
            "device": dict(self.device),
            "toolchain": dict(self.toolchain),
            "artifact": dict(self.artifact),
            "files": [f.to_json() for f in self.files],
            "created": self.created,
            "last_used": self.last_used,
            "hits": self.hits,
            "compile_seconds": self.compile_seconds,
            "gtcache_version": self.gtcache_version,
        }
        data["record_xxh3"] = record_digest(data)
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, data: Any) -> EntryRecord:
        """Check ``data`` (parsed ``entry.json``) and build the record; ``ValueError`` if bad."""
        if not isinstance(data, dict):
            raise ValueError("the record is not a JSON object.")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"schema version {version!r} is not {SCHEMA_VERSION}.")
        if data.keys() != _ALL_FIELDS:
            missing = sorted(_FIELD_TYPES.keys() - data.keys())
            if missing:
                raise ValueError(f"missing field(s) {', '.join(repr(m) for m in missing)}.")
            unknown = sorted(data.keys() - _ALL_FIELDS)
            raise ValueError(f"unknown field(s) {', '.join(repr(u) for u in unknown)}.")
        for name, types in _FIELD_TYPE_ITEMS:  # types as JSON parses them (a bool is no int)
            if type(data[name]) not in types:
                raise ValueError(f"field '{name}' has the wrong type.")
        if not KEY_PATTERN.fullmatch(data["key"]):
            raise ValueError("field 'key' is not 32 hex digits.")
        if data["hits"] < 0 or data["compile_seconds"] < 0:
            raise ValueError("fields 'hits' and 'compile_seconds' must not be negative.")
        for part in ("program", "backend", "artifact"):
            if not isinstance(data[part].get("name" if part != "artifact" else "kind"), str):
                raise ValueError(f"field '{part}' lacks its name.")
        if not isinstance(data["artifact"].get("fields"), dict):
            raise ValueError("field 'artifact' lacks its 'fields' object.")
        if data["record_xxh3"] != record_digest(data):
            raise ValueError("the record does not match its checksum ('record_xxh3').")
        files = _parse_files(data["files"])
        _check_artifact_files(data["artifact"], files)
        return cls(
            key=data["key"],
            ingredients=data["ingredients"],
            program=data["program"],
            backend=data["backend"],
            device=data["device"],
            toolchain=data["toolchain"],
            artifact=data["artifact"],
            files=files,
            created=data["created"],
            last_used=data["last_used"],
            hits=data["hits"],
            compile_seconds=float(data["compile_seconds"]),
            gtcache_version=data["gtcache_version"],
        )

    @classmethod
    def loads(cls, text: str | bytes) -> EntryRecord:
        try:
            data = json.loads(text)
        except ValueError as error:
            raise ValueError(f"'{ENTRY_FILE}' is not valid JSON ({error}).") from None
        except RecursionError:
            raise ValueError(f"'{ENTRY_FILE}' is nested too deeply.") from None
        return cls.from_json(data)


def record_digest(data: Mapping[str, Any]) -> str:
    """The ``record_xxh3`` of a record's JSON object: every field but the usage counters."""
    covered = dict(data)
    for name in _UNCHECKED:
        covered.pop(name, None)
    text = _RECORD_ENCODER.encode(covered)
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8", "surrogatepass"))


#: ``record_digest``'s encoder, made once (``json.dumps`` with options makes one a call).
_RECORD_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)

_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "key": (str,),
    "ingredients": (dict,),
    "program": (dict,),
    "backend": (dict,),
    "device": (dict,),
    "toolchain": (dict,),
    "artifact": (dict,),
    "files": (list,),
    "created": (str,),
    "last_used": (str,),
    "hits": (int,),
    "compile_seconds": (int, float),
    "gtcache_version": (str,),
    "record_xxh3": (str,),
}
_FIELD_TYPE_ITEMS = tuple(_FIELD_TYPES.items())
_ALL_FIELDS = frozenset({*_FIELD_TYPES, "schema_version"})


def _check_artifact_files(artifact: Mapping[str, Any], files: tuple[FileRecord, ...]) -> None:
    kind = artifact["kind"]
    if kind not in ARTIFACT_FILE_FIELDS:
        raise ValueError(f"artifact kind '{kind}' is not one of {', '.join(sorted(ARTIFACT_FILE_FIELDS))}.")
    names = {f.path for f in files}
    fields = artifact["fields"]
    for field in ARTIFACT_FILE_FIELDS[kind]:
        value = fields.get(field)
        if not isinstance(value, str) or value not in names:
            raise ValueError(f"artifact field '{field}' ({value!r}) is not a file of the entry.")


def _parse_files(items: list[Any]) -> tuple[FileRecord, ...]:
    files = []
    seen = set()
    for item in items:
        if not isinstance(item, dict):
            raise ValueError("an item of 'files' is not an object.")
        path, size, digest = item.get("path"), item.get("size"), item.get("xxh3")
        if not isinstance(path, str) or not _FILE_NAME.fullmatch(path) or path == ENTRY_FILE:
            raise ValueError(f"file name {path!r} is not a plain name inside the entry.")
        if path in seen:
            raise ValueError(f"file '{path}' is listed twice.")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"file '{path}' has a bad size.")
        if not isinstance(digest, str) or not _HEX.fullmatch(digest):
            raise ValueError(f"file '{path}' has a bad checksum.")
        seen.add(path)
        files.append(FileRecord(path=path, size=size, xxh3=digest))
    return tuple(files)
