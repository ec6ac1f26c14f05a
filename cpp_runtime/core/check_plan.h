// Which checks a runner makes of a package's outputs, and under which rule, and how its
// report lines name each output. Pairs with plan_checks and compared_labels in
// python/aoti_deploy/verify/tolerance.py; tests/contract/check_plan_vectors.json and
// label_vectors.json pin both to the same plan and words.
#pragma once

#include "package_spec.h"
#include "tolerance.h"

#include <optional>
#include <string>
#include <vector>

namespace aoti_runner {

// What a check compares the outputs with.
enum class CheckReferences { kExpected, kEager, kInputs };

struct PlannedCheck {
  std::string name;            // "runtime parity", "compiled vs eager" or "identity", as printed
  std::string reference_name;  // "expected", "eager" or "input", as printed
  CheckReferences references;
  Tolerance tolerance;
};

// The checks, in order:
// - runtime parity, given the package's own outputs (--expected): bitwise;
// - compiled vs eager, given eager's outputs (--eager-reference): the package's
//   `recorded` rule, else torch.testing's defaults for each dtype;
// - without either, for an identity model: the outputs against the inputs, bitwise.
// `override_rule` (--bitwise, --max-ulp, --rtol/--atol) replaces the rule of the eager
// check if there is one, else of the other check. No check: the caller says why.
std::vector<PlannedCheck> plan_checks(bool has_expected, bool has_eager, bool is_identity,
                                      const std::optional<Tolerance>& recorded,
                                      const std::optional<Tolerance>& override_rule);

// How a report names a tensor: "output 'scores'" by its recorded name, "output[0]" by
// index where it has none.
std::string tensor_key(const std::string& role, size_t index, const std::string& name = "");

// How a verify line names each of `count` outputs and what it is compared with:
// "output 'scores' vs expected 'scores'" when the model returns its outputs by name
// (named_outputs), else "output[0] vs expected[0]". `reference_name` is a check's
// ("expected", "eager" or "input"); the identity check's references are the inputs,
// named by their own recorded names ("output 'y' vs input 'x'").
std::vector<std::string> compared_labels(const PackageSpec& spec, const std::string& reference_name, size_t count);

}  // namespace aoti_runner
