// Errors and exit codes of the runner core, shared by aoti_runner and every other
// C++ consumer of the package contract. Pairs with python/aoti_deploy/errors.py.
#pragma once

#include <stdexcept>
#include <string>

namespace aoti_runner {

// Exit codes shared with the Python runner.
constexpr int kExitPass = 0;
constexpr int kExitMismatch = 1;
constexpr int kExitUsage = 2;

// A failure the user can fix: a full message, the exit code, and a kind where the
// Python side must reach the same verdict (the contract vectors compare kinds).
class RunnerError : public std::runtime_error {
 public:
  explicit RunnerError(const std::string& message, const std::string& kind = "",
                       int exit_code = kExitUsage)
      : std::runtime_error(message), kind_(kind), exit_code_(exit_code) {}
  const std::string& kind() const {
    return kind_;
  }
  int exit_code() const {
    return exit_code_;
  }

 private:
  std::string kind_;
  int exit_code_;
};

// Turns an exception from torch into a RunnerError "what_failed: first line[\nhint]".
[[noreturn]] void rethrow_with_context(const std::string& what_failed, const std::exception& e,
                                       const std::string& hint, const std::string& kind = "");

}  // namespace aoti_runner
