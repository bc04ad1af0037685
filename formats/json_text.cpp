// Depth-limited JSON parsing with zest's messages (see json_text.h).
#include "formats/json_text.h"

#include "core/check.h"
#include "core/untrusted_file.h"

#include <exception>

namespace zest {
namespace {

// The parser's message without its "[json.exception.parse_error.101] " prefix (it keeps the byte offset).
std::string json_problem(const std::exception& error) {
  std::string text = error.what();
  if (text.rfind("[json.exception.", 0) == 0) {
    const size_t end = text.find("] ");
    if (end != std::string::npos) text.erase(0, end + 2);
  }
  return text;
}

template <typename Json>
Json parse_bounded(const std::string& text, const std::string& source, int max_depth) {
  auto limit_depth = [&](int depth, typename Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw Error(str(source, ": JSON nested deeper than ", max_depth, " levels (no file zest reads nests so deep; "
                      "the file is corrupt or hostile)"));
    return true;
  };
  try {
    return Json::parse(text, limit_depth);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(source, ": not valid JSON: ", printable(json_problem(e), 300)));
  }
}

}  // namespace

nlohmann::json parse_json(const std::string& text, const std::string& source, int max_depth) {
  return parse_bounded<nlohmann::json>(text, source, max_depth);
}

nlohmann::ordered_json parse_ordered_json(const std::string& text, const std::string& source, int max_depth) {
  return parse_bounded<nlohmann::ordered_json>(text, source, max_depth);
}

}  // namespace zest
