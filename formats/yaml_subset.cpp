// A small YAML reader/writer for config.yml (see yaml_subset.h): lines are split into indentation and
// content first, then a recursive block parser builds JSON values; flow collections get their own
// recursive-descent parser over one (joined) string. Both recursions stop at kMaxYamlDepth levels, so a
// file of 100,000 '[' is an error naming the line, not a stack overflow.
#include "formats/yaml_subset.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/input_limits.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <regex>
#include <sstream>

namespace zest {
namespace {

using Json = nlohmann::ordered_json;

struct Line {
  int number = 0;  // 1-based, for messages
  int indent = 0;
  std::string text;  // without indentation, comment and trailing blanks
};

// Content before a comment: '#' at the start or after a blank, outside quotes.
std::string strip_comment(const std::string& text) {
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      if (i == 0 || text[i - 1] == ' ' || text[i - 1] == '[' || text[i - 1] == '{' || text[i - 1] == ',' ||
          text[i - 1] == ':')
        quote = c;
    } else if (c == '#' && (i == 0 || text[i - 1] == ' ')) {
      return text.substr(0, i);
    }
  }
  return text;
}

std::string rtrim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string ltrim(const std::string& s) {
  const size_t begin = s.find_first_not_of(' ');
  return begin == std::string::npos ? "" : s.substr(begin);
}

std::vector<Line> split_lines(const std::string& text, const std::string& source) {
  std::vector<Line> lines;
  std::istringstream in(text);
  int number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    size_t indent = 0;
    while (indent < raw.size() && raw[indent] == ' ') ++indent;
    if (indent < raw.size() && raw[indent] == '\t')
      ZEST_FAIL(source, ":", number, ": a tab in the indentation (YAML indents with spaces)");
    const std::string content = rtrim(strip_comment(raw.substr(indent)));
    if (content.empty()) continue;
    if (indent == 0 && content == "---") {
      ZEST_CHECK(lines.empty(), source, ":", number, ": a second YAML document; config.yml holds one");
      continue;
    }
    if (indent == 0 && content == "...") break;
    lines.push_back({number, static_cast<int>(indent), content});
  }
  return lines;
}

[[noreturn]] void unsupported(const std::string& source, int line, const std::string& what) {
  ZEST_FAIL(source, ":", line, ": ", what, " is not supported by zest's YAML reader (plain mappings, lists and ",
            "scalars only)");
}

// ---- scalars ----

Json resolve_plain(const std::string& s) {
  static const std::regex kNull("^(~|null|Null|NULL|)$");
  static const std::regex kTrue("^(yes|Yes|YES|true|True|TRUE|on|On|ON)$");
  static const std::regex kFalse("^(no|No|NO|false|False|FALSE|off|Off|OFF)$");
  static const std::regex kInt("^[-+]?(0b[01_]+|0x[0-9a-fA-F_]+|0[0-7_]+|0|[1-9][0-9_]*)$");
  static const std::regex kFloat(
      "^([-+]?[0-9][0-9_]*\\.[0-9_]*([eE][-+][0-9]+)?|\\.[0-9][0-9_]*([eE][-+][0-9]+)?|[-+]?\\.(inf|Inf|INF)|"
      "\\.(nan|NaN|NAN))$");
  if (std::regex_match(s, kNull)) return nullptr;
  if (std::regex_match(s, kTrue)) return true;
  if (std::regex_match(s, kFalse)) return false;
  std::string digits;
  for (const char c : s)
    if (c != '_') digits += c;
  if (std::regex_match(s, kInt)) {
    const bool negative = digits[0] == '-';
    std::string body = digits[0] == '-' || digits[0] == '+' ? digits.substr(1) : digits;
    int base = 10;
    if (body.rfind("0b", 0) == 0) base = 2, body = body.substr(2);
    else if (body.rfind("0x", 0) == 0) base = 16, body = body.substr(2);
    else if (body.size() > 1 && body[0] == '0') base = 8, body = body.substr(1);
    int64_t value = 0;
    const auto result = std::from_chars(body.data(), body.data() + body.size(), value, base);
    if (result.ec == std::errc() && result.ptr == body.data() + body.size()) return negative ? -value : value;
    return s;  // too large for an integer: kept as text
  }
  if (std::regex_match(s, kFloat)) {
    if (s.find("inf") != std::string::npos || s.find("Inf") != std::string::npos || s.find("INF") != std::string::npos)
      return s[0] == '-' ? -INFINITY : INFINITY;
    if (s.find_first_of("nN") != std::string::npos) return NAN;
    return std::strtod(digits.c_str(), nullptr);  // out of range: ±inf or 0, as PyYAML's float() gives
  }
  return s;
}

// A quoted scalar starting at text[pos] (a quote); advances pos past the closing quote.
std::string read_quoted(const std::string& text, size_t& pos, const std::string& source, int line) {
  const char quote = text[pos++];
  std::string out;
  while (pos < text.size()) {
    const char c = text[pos++];
    if (quote == '\'' && c == '\'') {
      if (pos < text.size() && text[pos] == '\'') {
        out += '\'';
        ++pos;
        continue;
      }
      return out;
    }
    if (quote == '"' && c == '"') return out;
    if (quote == '"' && c == '\\') {
      ZEST_CHECK(pos < text.size(), source, ":", line, ": a string ends in a backslash");
      const char e = text[pos++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case ' ': out += ' '; break;
        default: unsupported(source, line, std::string("the escape \\") + e);
      }
      continue;
    }
    out += c;
  }
  ZEST_FAIL(source, ":", line, ": a quoted string is not closed");
}

// ---- flow collections: [a, b], {k: v} ----

class FlowParser {
 public:
  FlowParser(std::string text, std::string source, int line)
      : text_(std::move(text)), source_(std::move(source)), line_(line) {}

  Json parse_all() {
    Json value = parse_value(false);
    skip_blanks();
    if (pos_ != text_.size()) fail("unexpected text after a flow collection: " + printable(text_.substr(pos_), 80));
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { ZEST_FAIL(source_, ":", line_, ": ", what); }
  // One level deeper for the lifetime of the guard; past kMaxYamlDepth, an error naming the line.
  struct Level {
    explicit Level(FlowParser& p) : parser(p) {
      if (++parser.depth_ > kMaxYamlDepth) parser.fail(str("flow collections nested deeper than ", kMaxYamlDepth, " levels"));
    }
    ~Level() { --parser.depth_; }
    FlowParser& parser;
  };
  void skip_blanks() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool at(char c) {
    skip_blanks();
    return pos_ < text_.size() && text_[pos_] == c;
  }

  Json parse_value(bool is_key) {
    skip_blanks();
    if (pos_ >= text_.size()) fail("a flow collection ends early");
    const char c = text_[pos_];
    if (c == '[') return parse_list();
    if (c == '{') return parse_map();
    if (c == '"' || c == '\'') return read_quoted(text_, pos_, source_, line_);
    if (c == '&' || c == '*' || c == '!') unsupported(source_, line_, "an anchor, alias or tag");
    const size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != ']' && text_[pos_] != '}' &&
           !(is_key && text_[pos_] == ':'))
      ++pos_;
    return resolve_plain(rtrim(text_.substr(begin, pos_ - begin)));
  }

  Json parse_list() {
    const Level level(*this);
    ++pos_;  // '['
    Json out = Json::array();
    while (!at(']')) {
      out.push_back(parse_value(false));
      if (at(',')) ++pos_;
      else if (!at(']')) fail("expected ',' or ']' in a flow list");
    }
    ++pos_;
    return out;
  }

  Json parse_map() {
    const Level level(*this);
    ++pos_;  // '{'
    Json out = Json::object();
    while (!at('}')) {
      const Json key = parse_value(true);
      if (!at(':')) fail("expected ':' after a key in a flow mapping");
      ++pos_;
      out[key.is_string() ? key.get<std::string>() : key.dump()] = at(',') || at('}') ? Json() : parse_value(false);
      if (at(',')) ++pos_;
      else if (!at('}')) fail("expected ',' or '}' in a flow mapping");
    }
    ++pos_;
    return out;
  }

  std::string text_;
  std::string source_;
  int line_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// ---- blocks ----

bool is_sequence_item(const std::string& text) { return text == "-" || text.rfind("- ", 0) == 0; }

// Position of the ':' that ends a mapping key ("key: value" / "key:"), or npos.
size_t key_colon(const std::string& text) {
  if (text.empty() || text[0] == '[' || text[0] == '{') return std::string::npos;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if ((c == '"' || c == '\'') && i == 0) {
      quote = c;
    } else if (c == ':' && (i + 1 == text.size() || text[i + 1] == ' ')) {
      return i;
    }
  }
  return std::string::npos;
}

class BlockParser {
 public:
  BlockParser(std::vector<Line> lines, std::string source) : lines_(std::move(lines)), source_(std::move(source)) {}

  // The top level: a mapping at indent 0 of which only `keys` are parsed.
  Json read_entries(const std::vector<std::string>& keys) {
    Json out = Json::object();
    while (pos_ < lines_.size()) {
      const Line& line = lines_[pos_];
      const size_t colon = key_colon(line.text);
      if (line.indent != 0 || colon == std::string::npos)
        ZEST_FAIL(source_, ":", line.number, ": expected a top-level 'key: value' entry, got '", printable(line.text, 120), "'");
      const std::string key = key_text(line.text.substr(0, colon), line.number);
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        skip_entry();
        continue;
      }
      ZEST_CHECK(!out.contains(key), source_, ":", line.number, ": key '", key, "' appears twice");
      out[key] = entry_value(colon, 0);
    }
    return out;
  }

 private:
  std::string key_text(const std::string& raw, int line) {
    const std::string key = rtrim(raw);
    if (!key.empty() && (key[0] == '"' || key[0] == '\'')) {
      size_t pos = 0;
      return read_quoted(key, pos, source_, line);
    }
    if (!key.empty() && (key[0] == '?' || key[0] == '&' || key[0] == '*' || key[0] == '!'))
      unsupported(source_, line, "a complex key, anchor, alias or tag");
    return key;
  }

  void skip_entry() {
    ++pos_;
    while (pos_ < lines_.size() && (lines_[pos_].indent > 0 || is_sequence_item(lines_[pos_].text))) ++pos_;
  }

  // The value of the mapping entry at lines_[pos_] whose key ends at `colon`; the entry is at `indent`.
  Json entry_value(size_t colon, int indent) {
    const Line line = lines_[pos_++];
    const std::string rest = ltrim(line.text.substr(colon + 1));
    if (!rest.empty()) return inline_value(rest, line.number, indent);
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) return block(lines_[pos_].indent);
    if (pos_ < lines_.size() && lines_[pos_].indent == indent && is_sequence_item(lines_[pos_].text))
      return sequence(indent);  // PyYAML writes a list under a key at the key's own indent
    return nullptr;
  }

  Json block(int indent) {
    if (++depth_ > kMaxYamlDepth) {
      ZEST_FAIL(source_, ":", lines_[pos_].number, ": mappings and lists nested deeper than ", kMaxYamlDepth,
                " levels");
    }
    struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{depth_};
    const std::string& text = lines_[pos_].text;
    if (is_sequence_item(text)) return sequence(indent);
    if (key_colon(text) != std::string::npos) return mapping(indent);
    const Line line = lines_[pos_++];
    return inline_value(line.text, line.number, indent - 1);
  }

  Json mapping(int indent) {
    Json out = Json::object();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && !is_sequence_item(lines_[pos_].text)) {
      const Line& line = lines_[pos_];
      const size_t colon = key_colon(line.text);
      if (colon == std::string::npos) ZEST_FAIL(source_, ":", line.number, ": expected 'key: value', got '", printable(line.text, 120), "'");
      const std::string key = key_text(line.text.substr(0, colon), line.number);
      ZEST_CHECK(!out.contains(key), source_, ":", line.number, ": key '", key, "' appears twice");
      out[key] = entry_value(colon, indent);
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent)
      ZEST_FAIL(source_, ":", lines_[pos_].number, ": unexpected indentation");
    return out;
  }

  Json sequence(int indent) {
    Json out = Json::array();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && is_sequence_item(lines_[pos_].text)) {
      Line& line = lines_[pos_];
      const std::string rest = ltrim(line.text.substr(1));
      if (rest.empty()) {
        ++pos_;
        const bool nested = pos_ < lines_.size() && lines_[pos_].indent > indent;
        out.push_back(nested ? block(lines_[pos_].indent) : Json());
        continue;
      }
      if (is_sequence_item(rest) || key_colon(rest) != std::string::npos) {
        // "- key: v" / "- - x": the item is a block that starts on this line, indented by its position.
        line.indent = indent + static_cast<int>(line.text.size() - rest.size());
        line.text = rest;
        out.push_back(block(line.indent));
        continue;
      }
      ++pos_;
      out.push_back(inline_value(rest, line.number, indent));
    }
    return out;
  }

  // A value written after "key:" or "- ": a flow collection or a scalar, which may continue on the
  // following lines indented deeper than `owner_indent`.
  Json inline_value(std::string text, int line, int owner_indent) {
    const char c = text[0];
    if (c == '&' || c == '*' || c == '!') unsupported(source_, line, "an anchor, alias or tag");
    if (c == '|' || c == '>') unsupported(source_, line, "a block scalar (| or >)");
    if (c == '?' || c == '%' || c == '@' || c == '`') unsupported(source_, line, std::string("'") + c + "'");
    OpenScan scan(text);
    while (pos_ < lines_.size() && lines_[pos_].indent > owner_indent && !scan.closed()) {
      const std::string& more = lines_[pos_++].text;  // a flow collection or quoted string spanning lines
      text += " ";
      text += more;
      scan.feed(more);  // each line scanned once: a collection over many lines is not quadratic
    }
    if (c == '[' || c == '{') return FlowParser(text, source_, line).parse_all();
    if (c == '"' || c == '\'') {
      size_t pos = 0;
      const std::string value = read_quoted(text, pos, source_, line);
      ZEST_CHECK(ltrim(text.substr(pos)).empty(), source_, ":", line, ": text after a quoted string");
      return value;
    }
    while (pos_ < lines_.size() && lines_[pos_].indent > owner_indent) {
      const Line& next = lines_[pos_++];
      if (key_colon(next.text) != std::string::npos || is_sequence_item(next.text))
        ZEST_FAIL(source_, ":", next.number, ": unexpected indentation (a mapping or list cannot follow a value)");
      text += " " + next.text;  // a plain scalar folded over several lines
    }
    return resolve_plain(text);
  }

  // Whether the brackets and quotes opened so far are all closed (plain scalars always are), fed line
  // by line.
  class OpenScan {
   public:
    explicit OpenScan(const std::string& first)
        : tracks_(!first.empty() && (first[0] == '[' || first[0] == '{' || first[0] == '"' || first[0] == '\'')) {
      feed(first);
    }
    void feed(const std::string& text) {
      if (!tracks_) return;
      for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (quote_) {
          if (quote_ == '"' && c == '\\') ++i;
          else if (c == quote_) quote_ = 0;
        } else if (c == '"' || c == '\'') {
          quote_ = c;
        } else if (c == '[' || c == '{') {
          ++depth_;
        } else if (c == ']' || c == '}') {
          --depth_;
        }
      }
    }
    bool closed() const { return !tracks_ || (quote_ == 0 && depth_ <= 0); }

   private:
    bool tracks_;
    int64_t depth_ = 0;
    char quote_ = 0;
  };

  std::vector<Line> lines_;
  std::string source_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// ---- writing ----

std::string float_text(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  // PyYAML's float needs a dot and a signed exponent: 1e-05 → 1.0e-05, 65536 → 65536.0.
  const size_t e = text.find('e');
  std::string mantissa = text.substr(0, e), exponent = e == std::string::npos ? "" : text.substr(e + 1);
  if (mantissa.find('.') == std::string::npos) mantissa += ".0";
  if (!exponent.empty() && exponent[0] != '-' && exponent[0] != '+') exponent = "+" + exponent;
  return exponent.empty() ? mantissa : mantissa + "e" + exponent;
}

std::string string_text(const std::string& s) {
  const bool plain = !s.empty() && resolve_plain(s).is_string() && s.find_first_of("\n\r\t\"'") == std::string::npos &&
                     std::string("-?:,[]{}#&*!|>%@` ").find(s[0]) == std::string::npos &&
                     s.find(": ") == std::string::npos && s.find(" #") == std::string::npos && s.back() != ' ' &&
                     s.back() != ':';
  if (plain) return s;
  if (s.find_first_of("\n\r\t") == std::string::npos) {
    std::string out = "'";
    for (const char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  }
  std::string out = "\"";
  for (const char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c == '"' || c == '\\') out += std::string("\\") + c;
    else out += c;
  }
  return out + "\"";
}

std::string scalar_text(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case Json::value_t::number_integer: return std::to_string(value.get<int64_t>());
    case Json::value_t::number_unsigned: return std::to_string(value.get<uint64_t>());
    case Json::value_t::number_float: return float_text(value.get<double>());
    case Json::value_t::string: return string_text(value.get<std::string>());
    case Json::value_t::array: return "[]";  // only empty collections are written inline
    case Json::value_t::object: return "{}";
    default: ZEST_FAIL("cannot write ", value.dump(), " as YAML");
  }
}

void pad(std::string& out, int indent) {
  for (int i = 0; i < indent; ++i) out += ' ';
}

bool is_block(const Json& value) { return (value.is_array() || value.is_object()) && !value.empty(); }

void write_node(const Json& value, int indent, std::string& out);

void write_mapping(const Json& mapping, int indent, std::string& out, bool first_inline) {
  bool first = true;
  for (const auto& [key, value] : mapping.items()) {
    if (!(first && first_inline)) pad(out, indent);
    first = false;
    out += string_text(key);
    out += ':';
    if (!is_block(value)) {
      out += ' ';
      out += scalar_text(value);
      out += '\n';
    } else {
      out += "\n";
      write_node(value, value.is_array() ? indent : indent + 2, out);
    }
  }
}

void write_node(const Json& value, int indent, std::string& out) {
  if (value.is_object()) {
    write_mapping(value, indent, out, false);
    return;
  }
  for (const Json& item : value) {
    pad(out, indent);
    out += "- ";
    if (item.is_object() && !item.empty()) {
      write_mapping(item, indent + 2, out, true);
    } else if (item.is_array() && !item.empty()) {
      out += "\n";
      write_node(item, indent + 2, out);
    } else {
      out += scalar_text(item) + "\n";
    }
  }
}

}  // namespace

nlohmann::ordered_json read_yaml_entries(const std::string& text, const std::string& source,
                                         const std::vector<std::string>& keys) {
  return BlockParser(split_lines(text, source), source).read_entries(keys);
}

std::string write_yaml(const nlohmann::ordered_json& mapping) {
  ZEST_CHECK(mapping.is_object(), "write_yaml: expected a mapping");
  std::string out;
  write_mapping(mapping, 0, out, false);
  return out;
}

}  // namespace zest
