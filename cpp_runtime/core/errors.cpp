#include "errors.h"

#include <c10/util/Exception.h>

namespace aoti_runner {

void rethrow_with_context(const std::string& what_failed, const std::exception& e,
                          const std::string& hint, const std::string& kind) {
  std::string message = e.what();
  // c10::Error appends a C++ backtrace; the first line is what the user needs.
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    message = c10_error->what_without_backtrace();
  }
  const auto newline = message.find("\nException raised from");
  if (newline != std::string::npos) {
    message = message.substr(0, newline);
  }
  // Appended piece by piece: gcc 12 warns (-Wrestrict, a false positive) on the
  // temporary of `"\n" + hint`, and the CUDA check builds with warnings as errors.
  std::string full = what_failed;
  full.append(": ").append(message);
  if (!hint.empty()) {
    full.append("\n").append(hint);
  }
  throw RunnerError(full, kind);
}

}  // namespace aoti_runner
