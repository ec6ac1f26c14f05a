// Small text helpers the runner core's files share.
#pragma once

#include <string>
#include <vector>

namespace aoti_runner {

inline std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    out += (i ? sep : "") + parts[i];
  }
  return out;
}

}  // namespace aoti_runner
