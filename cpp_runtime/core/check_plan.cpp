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

std::string tensor_key(const std::string& role, size_t index, const std::string& name) {
  return name.empty() ? role + "[" + std::to_string(index) + "]" : role + " '" + name + "'";
}

std::vector<std::string> compared_labels(const PackageSpec& spec, const std::string& reference_name, size_t count) {
  const auto names = named_outputs(spec, count);
  // With outputs by name, each reference is named too: an output's own name, or for the
  // identity check the input it is compared with.
  const auto references = names.empty() ? names : reference_name == "input" ? tensor_names(spec.inputs) : names;
  std::vector<std::string> labels;
  for (size_t k = 0; k < count; ++k) {
    labels.push_back(tensor_key("output", k, names.empty() ? "" : names[k]) + " vs " +
                     tensor_key(reference_name, k, k < references.size() ? references[k] : ""));
  }
  return labels;
}

}  // namespace aoti_runner
