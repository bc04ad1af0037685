// The bounded JSON reader, its messages and short excerpts of values (see json_text.h).
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
  // The last key seen: a number the parser cannot represent (1e309) is reported with the key it belongs to.
  std::string last_key;
  auto limit_depth = [&](int depth, typename Json::parse_event_t event, Json& parsed) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw Error(str(source, ": JSON nested deeper than ", max_depth, " levels (no file zest reads nests so deep; "
                      "the file is corrupt or hostile)"));
    if (event == Json::parse_event_t::key && parsed.is_string()) last_key = parsed.template get<std::string>();
    return true;
  };
  try {
    return Json::parse(text, limit_depth);
  } catch (const nlohmann::json::out_of_range& e) {
    throw Error(str(source, ": ", last_key.empty() ? "" : "field '" + printable(last_key, 80) + "': ",
                    "a number too large to represent (", printable(json_problem(e), 120), ")"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(source, ": not valid JSON: ", printable(json_problem(e), 300)));
  }
}

// `value` as JSON into `out`, stopping once `out` holds more than `limit` characters (so a value of
// gigabytes or deep nesting costs no more than the excerpt).
template <typename Json>
void excerpt_into(const Json& value, std::string& out, size_t limit) {
  constexpr auto kReplace = nlohmann::json::error_handler_t::replace;
  auto quoted = [&](const std::string& s) { out += Json(s.substr(0, limit + 1)).dump(-1, ' ', false, kReplace); };
  if (value.is_object()) {
    out += '{';
    for (auto it = value.begin(); it != value.end() && out.size() <= limit; ++it) {
      if (it != value.begin()) out += ", ";
      quoted(it.key());
      out += ": ";
      excerpt_into(it.value(), out, limit);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    for (auto it = value.begin(); it != value.end() && out.size() <= limit; ++it) {
      if (it != value.begin()) out += ", ";
      excerpt_into(*it, out, limit);
    }
    out += ']';
  } else if (value.is_string()) {
    quoted(value.template get_ref<const std::string&>());
  } else {
    out += value.dump();
  }
}

template <typename Json>
std::string excerpt(const Json& value, size_t max_chars) {
  std::string out;
  excerpt_into(value, out, max_chars);
  if (out.size() > max_chars) {
    out.resize(max_chars);
    out += "...";
  }
  return printable(out, max_chars + 3);
}

}  // namespace

nlohmann::json parse_json(const std::string& text, const std::string& source, int max_depth) {
  return parse_bounded<nlohmann::json>(text, source, max_depth);
}

nlohmann::ordered_json parse_ordered_json(const std::string& text, const std::string& source, int max_depth) {
  return parse_bounded<nlohmann::ordered_json>(text, source, max_depth);
}

nlohmann::ordered_json read_json_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  return parse_ordered_json(read_text_file(path, what, max_bytes), printable(path));
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) { return excerpt(value, max_chars); }
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars) { return excerpt(value, max_chars); }

}  // namespace zest
