#include "json_text.h"

namespace aoti_runner {

nlohmann::json parse_json_limited(const std::string& text) {
  // nlohmann skips a byte-order mark; Python's reader refuses it, so both refuse.
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) {
    throw JsonTextError("it starts with a byte-order mark");
  }
  bool too_deep = false;
  try {
    return nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth >= kMaxJsonDepth) {  // nlohmann counts from 0: the top level is depth 0
        too_deep = true;
        throw JsonTextError("nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
      }
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    std::string detail = e.what();
    const auto bracket = detail.find("] ");
    if (bracket != std::string::npos) {
      detail = detail.substr(bracket + 2);
    }
    throw JsonTextError(detail.substr(0, detail.find("; last read")));
  }
}

std::string brief_json(const nlohmann::json& value, size_t limit) {
  // Values come from parse_json_limited, so dump's recursion is bounded; only the
  // length needs a cut.
  auto text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > limit) {
    text = text.substr(0, limit) + "...";
  }
  return text;
}

}  // namespace aoti_runner
