// The --input-shape text, as aoti_runner, run-inference and export-compile read it:
// "4,3,16,16" -> {4, 3, 16, 16}. Pairs with python/aoti_deploy/runtime/input_shape.py;
// tests/contract/input_shape_vectors.json pins both to the same shapes and messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aoti_runner {

// Comma-separated whole numbers >= 0, each ASCII digits with an optional sign and
// spaces or tabs around it; a blank text is a 0-d tensor. Throws RunnerError naming
// the text, the size at fault and the form expected ("1_0", "0x4", "1e3" are refused).
std::vector<int64_t> parse_shape(const std::string& text);

}  // namespace aoti_runner
