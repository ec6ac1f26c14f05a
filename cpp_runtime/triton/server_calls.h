// Calling Triton's C API from C++: a failed call becomes a RunnerError, and a C++
// exception becomes a TRITONSERVER_Error at the entry points, so none escapes into Triton.
#pragma once

#include "errors.h"
#include "triton_api.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace aoti_triton {

// Throws RunnerError("what: Triton's message") for a failed call; frees the error.
inline void check(TRITONSERVER_Error* error, const std::string& what) {
  if (error == nullptr) {
    return;
  }
  std::string message = what + ": " + TRITONSERVER_ErrorMessage(error);
  TRITONSERVER_ErrorDelete(error);
  throw aoti_runner::RunnerError(message);
}

// Allocates nothing of ours: for the paths that must not throw.
inline void log_message(TRITONSERVER_LogLevel level, const char* message, int line = 0) noexcept {
  // A failed log call has nowhere to report to.
  if (auto* error = TRITONSERVER_LogMessage(level, "aoti backend", line, message)) {
    TRITONSERVER_ErrorDelete(error);
  }
}

inline void log(TRITONSERVER_LogLevel level, const std::string& message, int line = 0) {
  log_message(level, message.c_str(), line);
}

// The message of whatever a call threw: c10 errors without their C++ backtrace.
inline std::string describe_current_exception() {
  try {
    throw;
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception (not derived from std::exception)";
  }
}

// Runs `body`; returns nullptr, or the exception as a new error (the caller's to give
// to Triton, which takes ownership of an entry point's returned error).
template <class Body>
TRITONSERVER_Error* guarded(TRITONSERVER_Error_Code code, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (...) {
    return TRITONSERVER_ErrorNew(code, describe_current_exception().c_str());
  }
}

// Triton's statistics clock: its queue times are measured with the same one.
inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace aoti_triton
