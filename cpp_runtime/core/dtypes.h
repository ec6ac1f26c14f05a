// The dtype-name table of the package contract: Python's spelling ("float32",
// "complex64") for every ScalarType a spec may name, and Triton's data type for it
// ("FP32"; none for complex and float8), the one source of both. Pairs with
// python/aoti_deploy/package/dtypes.py; tests/contract/dtypes.json pins the two.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <vector>

namespace aoti_runner {

// The dtype a spec names, or nullopt for a name outside the table.
std::optional<c10::ScalarType> dtype_from_name(const std::string& name);

// Python's spelling; for a ScalarType outside the table, c10's own name.
std::string dtype_name(c10::ScalarType dtype);

// The dtypes export_compile builds for, and runners draw random inputs of.
bool is_export_dtype(const std::string& name);

// The integer and bool dtypes, whose random values are uniform integers (in a
// recorded value range, else 0 or 1). Python's INTEGER_DTYPES.
bool is_integer_dtype(const std::string& name);

// Every name of the table, in table order.
std::vector<std::string> dtype_names();

// Triton's data type for a dtype's tensors ("FP32", "UINT32"; a config.pbtxt writes
// TYPE_ + it), or nullopt for a dtype Triton has no type for (or a name outside the table).
std::optional<std::string> triton_type(const std::string& name);

// The dtype whose Triton data type is `triton` ("FP32" -> "float32"), or nullopt.
std::optional<std::string> dtype_of_triton_type(const std::string& triton);

// The names that have a Triton data type, in table order (for messages).
std::vector<std::string> triton_servable_names();

}  // namespace aoti_runner
