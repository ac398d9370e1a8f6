"""mkdocs hook: render ``cache_schema/v1/entry.schema.json`` as tables at build time.

A page asks for the tables with the line ``<!-- entry-schema-fields -->``; the hook
replaces it with one table of the record's fields (nested objects flattened to
dotted names, ``[]`` for array items) and one table of ``artifact.fields`` per
artifact kind. The schema file is the only source: edit it, rebuild, the page follows.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- entry-schema-fields -->"
SCHEMA = pathlib.Path("cache_schema/v1/entry.schema.json")


def on_config(config: Any) -> Any:
    config.watch.append(str(_root(config) / SCHEMA))  # `mkdocs serve` rebuilds on edits
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    schema = json.loads((_root(config) / SCHEMA).read_text(encoding="utf-8"))
    return markdown.replace(MARKER, render(schema))


def _root(config: Any) -> pathlib.Path:
    return pathlib.Path(config.config_file_path).resolve().parent


def render(schema: dict[str, Any]) -> str:
    closed = " No other fields are allowed." if schema.get("additionalProperties") is False else ""
    lines = [
        f"*{schema.get('title', '')}*. {schema.get('description', '')}{closed}",
        "",
        "| field | type | required | meaning |",
        "|---|---|---|---|",
    ]
    lines += [_row(*row) for row in _fields(schema, schema, "")]
    for kind, fields in _artifact_kinds(schema):
        lines += [
            "",
            f"`artifact.fields` when `artifact.kind` is `{kind}`"
            + (" (no other fields allowed)" if fields.get("additionalProperties") is False else "")
            + ":",
            "",
            "| field | type | required | meaning |",
            "|---|---|---|---|",
        ]
        lines += [_row(*row) for row in _fields(schema, fields, "artifact.fields.")]
    return "\n".join(lines) + "\n"


def _row(name: str, kind: str, required: bool, meaning: str) -> str:
    cells = (f"`{name}`", kind, "yes" if required else "", meaning)
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _fields(root: dict[str, Any], node: dict[str, Any], prefix: str) -> Iterator[tuple[str, str, bool, str]]:
    required = set(node.get("required", ()))
    for name, sub in node.get("properties", {}).items():
        sub = _resolve(root, sub)
        yield prefix + name, _type(root, sub), name in required, _meaning(sub)
        if "properties" in sub:
            yield from _fields(root, sub, f"{prefix}{name}.")
        items = _resolve(root, sub.get("items", {}))
        if "properties" in items:
            yield from _fields(root, items, f"{prefix}{name}[].")


def _artifact_kinds(root: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for case in root["properties"]["artifact"].get("allOf", ()):
        kind = case["if"]["properties"]["kind"]["const"]
        yield kind, case["then"]["properties"]["fields"]


def _resolve(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if not ref:
        return node
    target: Any = root
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**target, **{k: v for k, v in node.items() if k != "$ref"}}


def _type(root: dict[str, Any], node: dict[str, Any]) -> str:
    if "const" in node:
        return f"always `{json.dumps(node['const'])}`"
    if "enum" in node:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in node["enum"])
    if "oneOf" in node:
        return " or ".join(_type(root, _resolve(root, n)) for n in node["oneOf"])
    kind = node.get("type", "any")
    kind = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "array":
        kind = f"array of {_type(root, _resolve(root, node.get('items', {})))}s"
    return kind


def _meaning(node: dict[str, Any]) -> str:
    parts = [node["description"]] if "description" in node else []
    if "pattern" in node:
        parts.append(f"Matches `{node['pattern']}`.")
    if "format" in node:
        parts.append(f"Format: {node['format']}.")
    if "minimum" in node:
        parts.append(f"At least {node['minimum']}.")
    if "not" in node and "const" in node["not"]:
        parts.append(f"Never `{node['not']['const']}`.")
    return " ".join(parts)
