"""The --input-shape text, as run-inference, export-compile and aoti_runner read it:
``"4,3,16,16"`` -> (4, 3, 16, 16). Pairs with cpp_runtime/core/input_shape.cpp;
tests/contract/input_shape_vectors.json pins both to the same shapes and messages."""

from __future__ import annotations

import re

from ..errors import InputError

# A size: ASCII digits with an optional sign. Python's int() would also take "1_0",
# non-ASCII digits and any whitespace, which the C++ runner does not.
_SIZE = re.compile(r"([+-]?)([0-9]+)")
_BLANK = " \t"
_LARGEST = 2**63 - 1


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,3,224,224"`` -> (1, 3, 224, 224): comma-separated whole numbers >= 0, with
    spaces or tabs around each; a blank text is a 0-d tensor.

    Raises:
        InputError: the text, the size at fault and the form expected ("1_0", "0x4"
            and "1e3" are refused).
    """
    if not text.strip(_BLANK):
        return ()
    given = f"--input-shape '{text}': "
    shape = []
    for part in text.split(","):
        size = part.strip(_BLANK)
        match = _SIZE.fullmatch(size)
        if match is None:
            what = "a size is empty" if not size else f"'{size}' is not a whole number (digits only)"
            raise InputError(f"{given}expected comma-separated sizes, e.g. 1,3,224,224; {what}")
        sign, digits = match.groups()
        value = int(digits)
        if sign == "-" and value != 0:
            raise InputError(f"{given}sizes must be >= 0, got {size}")
        if value > _LARGEST:
            raise InputError(f"{given}size {size} is too large; sizes must be <= {_LARGEST}")
        shape.append(value)
    return tuple(shape)
