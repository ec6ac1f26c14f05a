"""Packages written before the spec document carry one ``aoti_deploy.<field>`` metadata
entry per field; ``legacy_document`` converts them into a document, read then like any
other. cpp_runtime/core/package_spec.cpp has the same converter."""

from __future__ import annotations

import json
import re
from typing import Any

from .spec_types import LEGACY_PREFIX, malformed


# The legacy grammar: sizes are plain decimal digits, nothing else ("1_0", " 3",
# "+3" and empty parts are malformed), so both converters read it alike.
_SIZE = re.compile(r"^[0-9]+$")


def _legacy_int(text: str, where: str) -> int:
    if not _SIZE.match(text):
        raise malformed(f"{where}: expected a non-negative integer, got {json.dumps(text)}")
    return int(text)


def _legacy_split(text: str, sep: str) -> list[str]:
    """"" -> []; otherwise every part, empty ones included (the caller refuses them)."""
    return text.split(sep) if text else []


def legacy_document(metadata: dict[str, str]) -> dict[str, Any]:
    """Convert the ``aoti_deploy.*`` entries of a package written before the spec
    document (schema 1) into a document. Strict: a part the old writer could not
    have written is malformed.

    Raises:
        SpecError: kind "malformed".
    """

    def get(key: str, default: str = "") -> str:
        return metadata.get(LEGACY_PREFIX + key, default)

    def names(key: str) -> list[str]:
        parts = _legacy_split(get(key), ",")
        if any(not part for part in parts):
            raise malformed(f"{LEGACY_PREFIX}{key}: empty entry in {json.dumps(get(key))}")
        return parts

    inputs = []
    for text in _legacy_split(get("inputs"), ";"):
        dtype, colon, dims_text = text.partition(":")
        if not colon or not dtype:
            raise malformed(f"{LEGACY_PREFIX}inputs: input spec {json.dumps(text)} has no dtype")
        dims = []
        for dim in _legacy_split(dims_text, ","):
            low, dots, high = dim.partition("..")
            where = f"{LEGACY_PREFIX}inputs: input spec {json.dumps(text)}"
            dims.append({"min": _legacy_int(low, where), "max": _legacy_int(high if dots else low, where)})
        inputs.append({"dtype": dtype, "dims": dims})

    # The old writer joined shapes with ";" and sizes with ",", so a 0-d input's shape
    # is an empty part: keep empty parts when they give one shape per input.
    # An empty entry with no 0-d input means no shapes were recorded.
    shapes_text = get("example_shapes")
    parts = shapes_text.split(";")
    if not shapes_text and all(item["dims"] for item in inputs):
        shapes = []
    elif len(parts) == len(inputs):
        shapes = [
            [_legacy_int(size, f"{LEGACY_PREFIX}example_shapes") for size in _legacy_split(part, ",")] for part in parts
        ]
    else:
        raise malformed(f"{LEGACY_PREFIX}example_shapes: {len(parts)} shape(s) for {len(inputs)} input(s)")

    groups = []
    for group in _legacy_split(get("shared_dims"), ";"):
        positions = []
        for position in group.split(","):
            i, dot, d = position.partition(".")
            where = f"{LEGACY_PREFIX}shared_dims"
            if not dot:
                raise malformed(f"{where}: expected INPUT.DIM, got {json.dumps(position)}")
            positions.append([_legacy_int(i, where), _legacy_int(d, where)])
        groups.append(positions)

    verified_text = get("verified")
    try:
        verified = json.loads(verified_text) if verified_text else []
    except ValueError:
        verified = []  # only the cache reads it; a bad entry is a cache miss
    return {
        "schema_version": 1,
        "inputs": inputs,
        "example_shapes": shapes,
        "shared_dims": groups,
        "device": get("device", "cpu"),
        # Schema 1 recorded no overloads: any overload of the name satisfies the check.
        "required_ops": [{"name": name} for name in names("required_ops")],
        "required_classes": names("required_classes"),
        "python_only_ops": names("python_only_ops"),
        "op_libraries": names("op_libraries"),
        "fake_modules": names("fake_modules"),
        "is_identity": get("is_identity") == "1",
        "torch_version": get("torch_version", "unknown"),
        "cpu_flags": get("cpu_flags").split(),
        "optimizations": get("optimizations"),
        "cache_key": get("cache_key"),
        "verified": verified if isinstance(verified, list) else [],
        "onnx_mode": get("onnx_mode"),
    }
