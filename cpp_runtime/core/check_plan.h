// Which checks a runner makes of a package's outputs, and under which rule. Pairs with
// plan_checks in python/aoti_deploy/verify/tolerance.py; tests/contract/
// check_plan_vectors.json pins both to the same plan.
#pragma once

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

}  // namespace aoti_runner
