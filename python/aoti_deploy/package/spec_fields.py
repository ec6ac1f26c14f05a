"""Reading a spec document's fields, each checked for type and range as
cpp_runtime/core/package_spec.cpp checks it: integers, strings, qualified names,
tensors with their dims, names and value ranges, the tolerance, baked-in constants and
Inductor settings."""

from __future__ import annotations

import json
from typing import Any

from .dtypes import NAMES
from .spec_types import (
    CLOSE,
    INT64_MAX,
    OUTPUT_KINDS,
    RULES,
    SCALAR_DTYPES,
    TENSOR_KIND,
    TENSOR_NAME,
    TENSOR_NAME_LIMIT,
    ULP,
    UNBOUNDED_SCHEMA_VERSION,
    VALUE_DTYPES,
    DimSpec,
    TensorSpec,
    Tolerance,
    ValueRange,
    malformed,
)


def reject_constant(name: str) -> None:
    # Python's json reads NaN and Infinity, which JSON (and nlohmann-json) does not.
    raise ValueError(f"{name} is not JSON")



def type_name_of(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def int_of(value: Any, where: str, low: int = 0) -> int:
    # bool is an int in Python, not in JSON; floats (1.0) are not ints either.
    if type(value) is not int or not low <= value <= INT64_MAX:
        raise malformed(f"{where}: expected an integer >= {low}, got {json.dumps(value)}")
    return value


def str_of(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise malformed(f"{where}: expected a string, got {type_name_of(value)}")
    return value


def list_of(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise malformed(f"{where}: expected an array, got {type_name_of(value)}")
    return value


def qualified_of(value: Any, where: str) -> str:
    name = str_of(value, where)
    namespace, sep, rest = name.partition("::")
    if not sep or not namespace or not rest:
        raise malformed(f"{where}: expected a qualified name 'namespace::name', got {json.dumps(name)}")
    return name


def tolerance_of(value: Any, where: str) -> Tolerance:
    if not isinstance(value, dict):
        raise malformed(f"{where}: expected an object, got {type_name_of(value)}")
    rule = value.get("rule")
    if rule not in RULES:
        raise malformed(f"{where}.rule: expected one of {', '.join(RULES)}, got {json.dumps(rule)}")
    max_ulp = int_of(value.get("max_ulp", 0), f"{where}.max_ulp")
    bounds = []
    for key in ("rtol", "atol"):
        bound = value.get(key)
        if bound is not None and (type(bound) not in (int, float) or not 0 <= bound < float("inf")):
            raise malformed(f"{where}.{key}: expected a finite number >= 0 or null, got {json.dumps(bound)}")
        try:
            bounds.append(None if bound is None else float(bound))
        except OverflowError:  # an integer past float's range
            raise malformed(f"{where}.{key}: expected a finite number >= 0 or null, got {json.dumps(bound)}") from None
    if (bounds[0] is None) != (bounds[1] is None):
        raise malformed(f"{where}: rtol and atol are both numbers or both null")
    if rule == ULP and max_ulp == 0:
        raise malformed(f"{where}: the ulp rule needs max_ulp >= 1 (0 is the bitwise rule)")
    return Tolerance(rule, max_ulp if rule == ULP else 0, *(bounds if rule == CLOSE else (None, None)))


def tensor_specs_of(value: Any, key: str, version: int) -> list[TensorSpec]:
    """The ``inputs`` or ``outputs`` entry (``key``): one object per tensor, with a
    known dtype and dims of non-empty [min, max] ranges. ``"max": null`` (schema 3) is
    unbounded, and so is INT64_MAX: what version-2 writers recorded for int_oo."""
    specs = []
    for i, item in enumerate(list_of(value, key)):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise malformed(f"{where}: expected an object, got {type_name_of(item)}")
        dtype = str_of(item.get("dtype"), f"{where}.dtype")
        if dtype not in NAMES:
            raise malformed(f"{where}.dtype: unknown dtype {json.dumps(dtype)}")
        dims = []
        for d, dim in enumerate(list_of(item.get("dims"), f"{where}.dims")):
            if not isinstance(dim, dict):
                raise malformed(f"{where}.dims[{d}]: expected an object, got {type_name_of(dim)}")
            low = int_of(dim.get("min"), f"{where}.dims[{d}].min")
            if "max" in dim and dim["max"] is None:
                if version < UNBOUNDED_SCHEMA_VERSION:
                    raise malformed(
                        f"{where}.dims[{d}].max: null (unbounded) needs schema_version {UNBOUNDED_SCHEMA_VERSION}, "
                        f"but the spec is version {version}"
                    )
                high = None
            else:
                high = int_of(dim.get("max"), f"{where}.dims[{d}].max")
                if high == INT64_MAX:
                    high = None
            if high is not None and low > high:
                raise malformed(f"{where}.dims[{d}]: the range {low}..{high} is empty")
            dims.append(DimSpec(low, high))
        values = None if item.get("values") is None else _value_range(item["values"], dtype, f"{where}.values")
        name = _tensor_name(item["name"], f"{where}.name") if "name" in item else ""
        kind = _kind(item["kind"], key, where, dtype, dims) if "kind" in item else TENSOR_KIND
        specs.append(TensorSpec(tuple(dims), dtype, values, name, kind))
    _check_names(specs, key)
    return specs


def _kind(value: Any, key: str, where: str, dtype: str, dims: list[DimSpec]) -> str:
    """An output's ``kind``: one of OUTPUT_KINDS; a scalar's entry is 0-d, of its
    kind's dtype. Inputs have none: a package takes tensors only."""
    if key != "outputs":
        raise malformed(f"{where}.kind: only an output has a kind (a package takes tensors only)")
    if not isinstance(value, str) or value not in OUTPUT_KINDS:
        shown = json.dumps(value, ensure_ascii=False)  # cut as the C++ parser's brief_json cuts it
        raise malformed(f"{where}.kind: expected one of {', '.join(OUTPUT_KINDS)}, got "
                        f"{shown[:80] + '...' if len(shown) > 80 else shown}")
    if value != TENSOR_KIND and (dims or dtype != SCALAR_DTYPES[value]):
        shape = "[" + ", ".join(str(d) for d in dims) + "]"
        raise malformed(f'{where}: kind "{value}" is a 0-d {SCALAR_DTYPES[value]} tensor, got {shape} {dtype}')
    return value


def _tensor_name(value: Any, where: str) -> str:
    """A tensor's ``name``: a string matching TENSOR_NAME, of TENSOR_NAME_LIMIT
    characters at most."""
    name = str_of(value, where)
    # The characters first: then every name measured is ASCII, one byte per character
    # in C++ as here.
    if not TENSOR_NAME.fullmatch(name):
        shown = json.dumps(name, ensure_ascii=False)  # cut as the C++ parser's brief_json cuts it
        raise malformed(
            f"{where}: expected a name of ASCII letters, digits, '_' and '.' that does not start with a digit or "
            f"'.', got {shown[:80] + '...' if len(shown) > 80 else shown}"
        )
    if len(name) > TENSOR_NAME_LIMIT:
        raise malformed(f"{where}: a name has at most {TENSOR_NAME_LIMIT} characters, got {len(name)}")
    return name


def _check_names(specs: list[TensorSpec], key: str) -> None:
    """Names on every entry of ``key`` or on none, and no name twice."""
    named = [i for i, spec in enumerate(specs) if spec.name]
    if named and len(named) != len(specs):
        unnamed = next(i for i, spec in enumerate(specs) if not spec.name)
        raise malformed(f"{key}[{unnamed}]: has no name, but {key}[{named[0]}] has one (name every entry or none)")
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.name in seen:
            raise malformed(f"{key}[{i}].name: {json.dumps(spec.name)} is also {key}[{seen[spec.name]}]'s name")
        if spec.name:
            seen[spec.name] = i


def _value_range(value: Any, dtype: str, where: str) -> ValueRange:
    """An input's ``values`` entry: integers min <= max that the input's (integer)
    dtype holds, and a string ``why``."""
    if not isinstance(value, dict):
        raise malformed(f"{where}: expected an object, got {type_name_of(value)}")
    if dtype not in VALUE_DTYPES:
        raise malformed(f"{where}: a value range applies to an integer input ({', '.join(VALUE_DTYPES)}), got {dtype}")
    bounds = []
    for key in ("min", "max"):
        bound = value.get(key)
        if type(bound) is not int or not -(2**63) <= bound <= INT64_MAX:
            raise malformed(f"{where}.{key}: expected a 64-bit integer, got {json.dumps(bound)}")
        bounds.append(bound)
    low, high = bounds
    if low > high:
        raise malformed(f"{where}: the range {low}..{high} is empty")
    lowest, highest = VALUE_DTYPES[dtype]
    if low < lowest or high > highest:
        raise malformed(f"{where}: the range {low}..{high} does not fit {dtype}")
    why = value.get("why")
    return ValueRange(low, high, "" if why is None else str_of(why, f"{where}.why"))


def constant_inputs_of(value: Any) -> list[dict[str, Any]]:
    """The ``constant_inputs`` entry: objects with a string ``name``, an integer
    ``index`` and a JSON scalar ``value`` (or an array of them). Only the Python
    runtime reads it: the C++ runners take the package's tensors only."""
    constants = []
    for k, item in enumerate(list_of(value, "constant_inputs")):
        where = f"constant_inputs[{k}]"
        if not isinstance(item, dict):
            raise malformed(f"{where}: expected an object, got {type_name_of(item)}")
        scalar = item.get("value")
        if isinstance(scalar, (dict, list)):
            raise malformed(f"{where}.value: expected a number, boolean, string or null, got {type_name_of(scalar)}")
        constants.append({"name": str_of(item.get("name"), f"{where}.name"), "index": int_of(item.get("index"), f"{where}.index"),
                          "value": scalar})
    return constants


def inductor_configs_of(value: Any) -> dict[str, bool | int | str]:
    """The ``inductor_configs`` entry: an object of non-empty keys whose values are
    booleans, 64-bit integers or strings (as the C++ reader takes them)."""
    if not isinstance(value, dict):
        raise malformed(f"inductor_configs: expected an object, got {type_name_of(value)}")
    configs: dict[str, bool | int | str] = {}
    for key, setting in value.items():
        if not key:
            raise malformed("inductor_configs: a key is empty")
        integer = type(setting) is int and -(2**63) <= setting <= INT64_MAX
        if not (type(setting) in (bool, str) or integer):
            raise malformed(f"inductor_configs.{key}: expected a boolean, integer or string, got {json.dumps(setting)}")
        configs[key] = setting
    return configs


def tuning_of(value: Any) -> list[dict[str, Any]]:
    """The ``tuning`` entry: an array of {"name": string, "inductor_configs": object,
    "p50_us": a number >= 0 or null, "result": string}."""
    rows = list_of(value, "tuning")
    checked = []
    for i, row in enumerate(rows):
        where = f"tuning[{i}]"
        if not isinstance(row, dict):
            raise malformed(f"{where}: expected an object, got {type_name_of(row)}")
        p50 = row.get("p50_us")
        if p50 is not None and (type(p50) not in (int, float) or not 0 <= p50 < float("inf")):
            raise malformed(f"{where}.p50_us: expected a finite number >= 0 or null, got {json.dumps(p50)}")
        checked.append({
            "name": str_of(row.get("name"), f"{where}.name"),
            "inductor_configs": inductor_configs_of(row.get("inductor_configs", {})),
            "p50_us": p50,
            "result": str_of(row.get("result"), f"{where}.result"),
        })
    return checked


QUANTIZE_MODES = ("int8", "int8-dynamic")
_QUANTIZATION_COUNTS = ("calibration_calls", "convolutions", "linears", "fp32_heavy", "int8_convolutions",
                        "int8_linears")


def quantization_of(value: Any) -> dict[str, Any]:
    """The ``quantization`` entry (an int8 export): {"mode": "int8" or "int8-dynamic",
    the integers >= 0 "calibration_calls", "convolutions", "linears", "fp32_heavy",
    "int8_convolutions", "int8_linears", "max_abs": a finite number >= 0,
    "top1_agreement": a number in 0..1 or null}; {} when absent."""
    if not isinstance(value, dict):
        raise malformed(f"quantization: expected an object, got {type_name_of(value)}")
    if not value:
        return {}
    mode = str_of(value.get("mode"), "quantization.mode")
    if mode not in QUANTIZE_MODES:
        raise malformed(f"quantization.mode: expected one of {', '.join(QUANTIZE_MODES)}, got {json.dumps(mode)}")
    record: dict[str, Any] = {"mode": mode}
    for key in _QUANTIZATION_COUNTS:
        record[key] = int_of(value.get(key), f"quantization.{key}")
    max_abs = value.get("max_abs")
    if type(max_abs) not in (int, float) or not 0 <= max_abs < float("inf"):
        raise malformed(f"quantization.max_abs: expected a finite number >= 0, got {json.dumps(max_abs)}")
    top1 = value.get("top1_agreement")
    if top1 is not None and (type(top1) not in (int, float) or not 0 <= top1 <= 1):
        raise malformed(f"quantization.top1_agreement: expected a number in 0..1 or null, got {json.dumps(top1)}")
    record["max_abs"], record["top1_agreement"] = max_abs, top1
    return record


def describe_quantization(record: dict[str, Any]) -> str:
    """The record in one line, for inspect (aoti_runner --inspect prints the same)."""
    kernels = (f"{record['int8_convolutions']} of {record['convolutions']} quantized convolution(s) and "
               f"{record['int8_linears']} of {record['linears']} linear(s) run oneDNN int8 kernels")
    if (small := record["linears"] - record["int8_linears"]) > 0:
        kernels += f" ({small} small linear(s) in Inductor's own kernels, from the int8 weights)"
    top1 = record["top1_agreement"]
    against = f"max abs {record['max_abs']:.3g}" + ("" if top1 is None else f", top-1 agreement {100 * top1:.1f} %")
    kind = "dynamic" if record["mode"] == "int8-dynamic" else "static"
    return (f"{record['mode']} ({kind}, {record['calibration_calls']} calibration call(s)): {kernels}; "
            f"against the fp32 model: {against}")
