#include "check_plan.h"

namespace aoti_runner {

std::vector<PlannedCheck> plan_checks(bool has_expected, bool has_eager, bool is_identity,
                                      const std::optional<Tolerance>& recorded,
                                      const std::optional<Tolerance>& override_rule) {
  std::vector<PlannedCheck> checks;
  if (has_expected) {
    const auto rule = override_rule && !has_eager ? *override_rule : Tolerance{};
    checks.push_back({"runtime parity", "expected", CheckReferences::kExpected, rule});
  }
  if (has_eager) {
    const auto rule = override_rule.value_or(recorded.value_or(Tolerance{Rule::kClose, 0, {}, {}}));
    checks.push_back({"compiled vs eager", "eager", CheckReferences::kEager, rule});
  }
  if (checks.empty() && is_identity) {
    checks.push_back({"identity", "input", CheckReferences::kInputs, override_rule.value_or(Tolerance{})});
  }
  return checks;
}

}  // namespace aoti_runner
