"""Compilation artifacts <-> JSON descriptions plus payload files, per backend kind.

An entry never needs ``pickle``: every artifact field is a path, a string, a
flag or an enum, so ``encode`` describes it as JSON (paths as names of files
inside the entry) and ``decode`` rebuilds it with paths under the entry folder
the store holds now, wherever that is.

Each kind is one ``Codec`` record in ``CODECS`` (encode, decode, the files its
description names); where gt4py defines its artifact class is the adapter's
``_compat.ARTIFACT_CLASSES``, and the fields that name files are the on-disk
format's (``entry.schema.json``, mirrored by the store's record validation). A
test checks the four agree.

An entry names only its own files: every path a description holds (gtfn
``module``; dace ``library``, its stub ``libdacestub_*`` and ``sdfg``; roundtrip
``source``) must be a plain file name listed in the entry's ``files``. ``decode``
checks that before it opens anything and raises ``CorruptEntryError`` otherwise
(the store's record validation checks the same fields, so such an entry is
listed as broken and never looked up as sound).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Collection, Mapping
from typing import Any, NamedTuple

from gtcache._frozen import Frozen
from gtcache.errors import CorruptEntryError, UnsupportedArtifactError
from gtcache.gt4py import _compat

__all__ = ["CODECS", "Codec", "EncodedArtifact", "decode", "encode"]

_SDFG_FILE = "program.sdfg.json"
_ROUNDTRIP_FILE = "program.py"


class EncodedArtifact(NamedTuple):
    """An artifact as the store keeps it (a NamedTuple: created at import, cheaply)."""

    #: ``{"kind": ..., "fields": {...}}``: the ``artifact`` field of ``entry.json``.
    description: Mapping[str, Any]
    #: Entry file name -> source path or content.
    files: Mapping[str, pathlib.Path | bytes]
    #: ``{"type": "CPU", "arch": None}``.
    device: Mapping[str, Any]


def encode(artifact: object, *, device_arch: str | None = None) -> EncodedArtifact:
    """Describe ``artifact``; ``UnsupportedArtifactError`` for kinds gtcache cannot rebuild."""
    kind = _compat.artifact_kind(artifact)
    if kind is None:
        raise UnsupportedArtifactError(f"unknown artifact class '{type(artifact).__qualname__}'.")
    fields, files = CODECS[kind].encode(artifact)
    device_type = getattr(artifact, "device_type", _compat.DeviceType.CPU)
    return EncodedArtifact(
        description={"kind": kind, "fields": fields},
        files=files,
        device={"type": device_type.name, "arch": device_arch},
    )


def decode(description: Mapping[str, Any], entry_path: pathlib.Path, *, files: Collection[str], key: str = "?") -> object:
    """Rebuild the artifact an entry describes, with paths inside ``entry_path``.

    ``files``: the names the entry's record lists. A description naming any other
    path (``../x``, ``/abs``, a name not listed) is ``CorruptEntryError`` for ``key``.
    """
    kind = description.get("kind")
    codec = CODECS.get(kind) if isinstance(kind, str) else None
    if codec is None:
        raise UnsupportedArtifactError(f"unknown artifact kind {kind!r}.")
    fields = description["fields"]
    try:
        for name in codec.file_names(fields):
            if not isinstance(name, str) or name not in files or "/" in name or name in (".", ".."):
                raise CorruptEntryError(key, f"its '{kind}' artifact names {name!r}, which is not a file of the entry.")
        return codec.decode(fields, entry_path)
    except (KeyError, TypeError, ValueError) as error:
        raise UnsupportedArtifactError(f"bad '{kind}' artifact description ({error!r}).") from None


def _device(name: str) -> Any:
    return _compat.DeviceType.__members__[name]


# -- gtfn: one nanobind extension module ------------------------------------------------


def _encode_gtfn(artifact: Any) -> tuple[dict[str, Any], dict[str, pathlib.Path | bytes]]:
    module = pathlib.Path(artifact.src_dir) / artifact.module
    # The file name must stay as it is: Python finds 'PyInit_<name>' from it.
    fields = {
        "module": module.name,
        "entry_point_name": artifact.entry_point_name,
        "device_type": artifact.device_type.name,
    }
    return fields, {module.name: module}


def _decode_gtfn(fields: Mapping[str, Any], entry_path: pathlib.Path) -> object:
    return _compat.artifact_class("gtfn")(
        src_dir=entry_path,
        module=pathlib.Path(fields["module"]),
        entry_point_name=fields["entry_point_name"],
        device_type=_device(fields["device_type"]),
    )


# -- dace: the SDFG library, its stub beside it, and the SDFG JSON ----------------------


def _encode_dace(artifact: Any) -> tuple[dict[str, Any], dict[str, pathlib.Path | bytes]]:
    library = pathlib.Path(artifact.library_path)
    if not library.name.startswith("lib"):
        raise UnsupportedArtifactError(f"dace library '{library.name}' does not start with 'lib'.")
    stub = library.with_name("libdacestub_" + library.name[3:])
    fields = {
        "library": library.name,
        "sdfg": _SDFG_FILE,
        "binding_source_code": artifact.binding_source_code,
        "bind_func_name": artifact.bind_func_name,
        "device_type": artifact.device_type.name,
    }
    files: dict[str, pathlib.Path | bytes] = {
        library.name: library,
        stub.name: stub,
        _SDFG_FILE: artifact.sdfg_json.encode("utf-8"),
    }
    return fields, files


def _decode_dace(fields: Mapping[str, Any], entry_path: pathlib.Path) -> object:
    return _compat.artifact_class("dace")(
        library_path=entry_path / fields["library"],
        sdfg_json=(entry_path / fields["sdfg"]).read_text(encoding="utf-8"),
        binding_source_code=fields["binding_source_code"],
        bind_func_name=fields["bind_func_name"],
        device_type=_device(fields["device_type"]),
    )


# -- roundtrip: generated Python source --------------------------------------------------


def _encode_roundtrip(artifact: Any) -> tuple[dict[str, Any], dict[str, pathlib.Path | bytes]]:
    if artifact.dispatch_backend is not None:
        raise UnsupportedArtifactError("roundtrip artifacts with a dispatch backend.")
    axis = artifact.column_axis
    fields = {
        "source": _ROUNDTRIP_FILE,
        "entry_point_name": artifact.entry_point_name,
        "column_axis": None if axis is None else {"value": axis.value, "kind": axis.kind.value},
        "debug": bool(artifact.debug),
    }
    return fields, {_ROUNDTRIP_FILE: artifact.source_code.encode("utf-8")}


def _decode_roundtrip(fields: Mapping[str, Any], entry_path: pathlib.Path) -> object:
    axis = fields["column_axis"]
    column_axis = None
    if axis is not None:
        column_axis = _compat.Dimension(axis["value"], kind=_compat.DimensionKind(axis["kind"]))
    return _compat.artifact_class("roundtrip")(
        source_code=(entry_path / fields["source"]).read_text(encoding="utf-8"),
        entry_point_name=fields["entry_point_name"],
        column_axis=column_axis,
        dispatch_backend=None,
        debug=bool(fields["debug"]),
    )


def _dace_files(fields: Mapping[str, Any]) -> tuple[Any, ...]:
    library = fields["library"]
    if not (isinstance(library, str) and library.startswith("lib")):
        return (library, None)  # no stub can be beside it: never loadable
    return (library, "libdacestub_" + library[3:], fields["sdfg"])


class Codec(Frozen):
    """Everything gtcache does with one artifact kind."""

    kind: str
    #: artifact -> (the description's ``fields``, entry file name -> source path or content).
    encode: Callable[[Any], tuple[dict[str, Any], dict[str, pathlib.Path | bytes]]]
    #: (``fields``, entry folder) -> the artifact, its paths inside the folder.
    decode: Callable[[Mapping[str, Any], pathlib.Path], object]
    #: The entry files a description names: all ``decode`` and gt4py's load may open
    #: (gt4py loads the dace stub from beside the library, so it counts too).
    file_names: Callable[[Mapping[str, Any]], tuple[Any, ...]]


CODECS: Mapping[str, Codec] = {
    codec.kind: codec
    for codec in (
        Codec("gtfn", _encode_gtfn, _decode_gtfn, lambda fields: (fields["module"],)),
        Codec("dace", _encode_dace, _decode_dace, _dace_files),
        Codec("roundtrip", _encode_roundtrip, _decode_roundtrip, lambda fields: (fields["source"],)),
    )
}
