"""Parsing of the CLIs' text options into the stage functions' values: dynamic dims
and model arguments, and shapes (runtime/input_shape.py, which the C++ runner shares).
Stage functions take the parsed values only."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Sequence

from ..errors import InputError
from ..models.user import DynamicDim
from ..runtime.input_shape import parse_shape  # noqa: F401  (the commands import it from here)

_POSITION = re.compile(r"^(\d+)\.(\d+)$")


def parse_dynamic_dim(text: str) -> DynamicDim:
    """``"0.0,1.0=1:64"`` -> dim 0 of inputs 0 and 1, one shared size in [1, 64];
    ``"0.0=1:"`` (no MAX) -> sizes 1 and up, no upper bound.

    Raises:
        InputError: the text does not follow INPUT.DIM[,INPUT.DIM...]=MIN:[MAX].
    """
    hint = (
        "expected INPUT.DIM[,INPUT.DIM...]=MIN:MAX, e.g. 0.0=1:64 (input 0, dim 0, sizes 1 to 64), or MIN: with "
        "no MAX for no upper bound (0.0=1:)"
    )
    where, eq, bounds = text.partition("=")
    low, colon, high = bounds.partition(":")
    positions = []
    for part in where.split(","):
        match = _POSITION.match(part.strip())
        if not match:
            raise InputError(f"--dynamic-dim {text!r}: bad position {part!r}; {hint}")
        positions.append((int(match.group(1)), int(match.group(2))))
    try:
        if not eq or not colon:
            raise ValueError
        low_value = int(low)
        high_value = int(high) if high.strip() else None
    except ValueError:
        raise InputError(f"--dynamic-dim {text!r}: bad range {bounds!r}; {hint}") from None
    if low_value < 1:
        raise InputError(f"--dynamic-dim {text!r}: MIN must be 1 or more, got {low_value}")
    if high_value is not None and high_value <= low_value:
        raise InputError(f"--dynamic-dim {text!r}: the range holds fewer than two sizes; expected 1 <= MIN < MAX")
    return DynamicDim(tuple(positions), low_value, high_value)


_INPUT_VALUES = re.compile(r"^(\d+)=(-?\d+):(-?\d+)$")


def parse_input_values(texts: Sequence[str]) -> dict[int, tuple[int, int]]:
    """``["0=0:999"]`` -> ``{0: (0, 999)}``: input 0 holds values 0 to 999.

    Raises:
        InputError: a text does not follow INPUT=MIN:MAX, MIN > MAX, or an input twice.
    """
    ranges: dict[int, tuple[int, int]] = {}
    for text in texts:
        match = _INPUT_VALUES.match(text.replace(" ", ""))
        if not match:
            raise InputError(
                f"--input-values {text!r}: expected INPUT=MIN:MAX, e.g. 0=0:999 (input 0 holds values 0 to 999)"
            )
        i, low, high = (int(group) for group in match.groups())
        if low > high:
            raise InputError(f"--input-values {text!r}: the range is empty; expected MIN <= MAX")
        if i in ranges:
            raise InputError(f"--input-values {text!r}: input {i} has a range already; give one per input")
        ranges[i] = (low, high)
    return ranges


def parse_model_args(pairs: Sequence[str]) -> dict[str, object]:
    """``["channels=8", "name=a"]`` -> ``{"channels": 8, "name": "a"}``. A value is read
    as a Python literal (number, bool, None, tuple, ...) when it is one, else as text."""
    return _literal_pairs(pairs, "--model-arg", str.isidentifier, "KEY=VALUE with KEY a Python identifier")


def parse_inductor_configs(pairs: Sequence[str]) -> dict[str, object]:
    """``["freezing=True", "cpp.threads=2"]`` -> ``{"freezing": True, "cpp.threads": 2}``:
    each value read as a Python literal when it is one, else as text."""
    return _literal_pairs(pairs, "--inductor-config", bool, "KEY=VALUE, e.g. freezing=True")


def _literal_pairs(pairs: Sequence[str], flag: str, valid_key: Callable[[str], bool],
                   expected: str) -> dict[str, object]:
    values: dict[str, object] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not valid_key(key):
            raise InputError(f"{flag} {pair!r}: expected {expected}")
        try:
            values[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            values[key] = value
    return values
