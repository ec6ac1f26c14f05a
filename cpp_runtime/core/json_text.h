// JSON from untrusted files (a package's metadata and spec, a signature): parsed with
// a nesting limit before any recursive code sees it, and quoted briefly in messages.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace aoti_runner {

// Deeper than any document the toolkit or torch writes.
inline constexpr int kMaxJsonDepth = 64;

// Why a text is not JSON: nlohmann's own words (without its "[json.exception...]"
// prefix), or "nested more than 64 levels deep".
class JsonTextError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses `text`, refusing more than kMaxJsonDepth levels of nesting as it goes.
nlohmann::json parse_json_limited(const std::string& text);

// The value as compact JSON, cut to about `limit` characters ("..." marks a cut),
// for messages that quote what a file held.
std::string brief_json(const nlohmann::json& value, size_t limit = 80);

}  // namespace aoti_runner
