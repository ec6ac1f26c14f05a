"""JSON from untrusted files (a package's metadata and spec), parsed with the
nesting limit of cpp_runtime/core/json_text.h before Python's recursive decoder
sees it."""

from __future__ import annotations

import json
from typing import Any, Callable

MAX_JSON_DEPTH = 64


class JsonTextError(ValueError):
    """Why a text is not JSON."""


def _depth_problem(text: str) -> str:
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return f"nested more than {MAX_JSON_DEPTH} levels deep"
        elif char in "]}":
            depth -= 1
    return ""


def parse_json_limited(text: str | bytes, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads``, refusing more than MAX_JSON_DEPTH levels of nesting first.

    Raises:
        JsonTextError: not JSON, or nested too deeply.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    problem = _depth_problem(text)
    if problem:
        raise JsonTextError(problem)
    try:
        return json.loads(text, parse_constant=parse_constant)
    except (ValueError, RecursionError) as error:
        raise JsonTextError(str(error)) from None
