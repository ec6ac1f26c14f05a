"""JSON from untrusted files (a package's metadata and spec), parsed with the
nesting limit of cpp_runtime/core/json_text.h before Python's recursive decoder
sees it."""

from __future__ import annotations

import json
import math
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


def _no_constant(name: str) -> Any:
    raise JsonTextError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonTextError(f"number {text[:40]} is out of range")
    return value


def _bounded_int(text: str) -> int | float:
    # nlohmann keeps integers within 64 bits and reads larger ones as doubles.
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 64) else _finite_float(text)


def parse_json_limited(text: str | bytes, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads`` with the rules of the C++ reader (nlohmann): strict UTF-8, no
    byte-order mark, no NaN or Infinity, no number beyond a double's range, no lone
    surrogate escape; and more than MAX_JSON_DEPTH levels of nesting refused first.

    Raises:
        JsonTextError: not JSON, or nested too deeply.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise JsonTextError(f"invalid UTF-8 at byte {error.start}") from None
    if text.startswith("\ufeff"):
        raise JsonTextError("it starts with a byte-order mark")
    problem = _depth_problem(text)
    if problem:
        raise JsonTextError(problem)
    try:
        document = json.loads(text, parse_constant=parse_constant or _no_constant, parse_float=_finite_float,
                              parse_int=_bounded_int)
        # A lone surrogate escape ("\ud800") decodes to a str that is not UTF-8.
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except JsonTextError:
        raise
    except UnicodeEncodeError:
        raise JsonTextError("a string holds a lone surrogate escape") from None
    except (ValueError, RecursionError) as error:
        raise JsonTextError(str(error)) from None
    return document
