// describe_error and the c10 stack-trace switch (see error_report.h).
#include "train/error_report.h"

#include "train/memory_budget.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <regex>

namespace zest {
namespace {

// LibTorch's CPU allocator says "you tried to allocate N bytes"; CUDA's "Tried to allocate X GiB".
bool mentions_failed_allocation(const std::string& text) {
  return text.find("can't allocate memory") != std::string::npos ||
         text.find("out of memory") != std::string::npos || text.find("Tried to allocate") != std::string::npos;
}

// One line: a multi-line LibTorch message is joined with "; " (the trace is not part of it).
std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  std::string out;
  for (size_t start = 0; start <= text.size();) {
    const size_t nl = std::min(text.find('\n', start), text.size());
    std::string line = text.substr(start, nl - start);
    if (!line.empty()) out += (out.empty() ? "" : "; ") + line;
    start = nl + 1;
  }
  return out;
}

std::string describe_c10(const c10::Error& error) {
  if (debug_traces_enabled()) return error.what();
  const std::string text = one_line(error.what_without_backtrace());
  if (!mentions_failed_allocation(text)) return text;
  std::smatch m;
  static const std::regex bytes_pattern("allocate ([0-9]+) bytes");
  if (std::regex_search(text, m, bytes_pattern))
    return "out of memory: an allocation of " + format_bytes(std::stod(m[1].str())) + " did not fit";
  return "out of memory: " + text;
}

}  // namespace

bool debug_traces_enabled() {
  const char* value = std::getenv("ZEST_DEBUG");
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

void install_error_reporting() {
  if (debug_traces_enabled()) return;
  c10::SetStackTraceFetcher(std::function<std::string()>([] { return std::string("(set ZEST_DEBUG=1 for a C++ stack trace)"); }));
}

namespace {

// A message that echoes a huge value (a megabyte string from a run file) is cut in the middle: the
// start says what is wrong and where, the end what was expected.
std::string bounded(std::string text) {
  constexpr size_t kHead = 3000, kTail = 500;
  if (text.size() <= kHead + kTail + 100) return text;
  const size_t cut = text.size() - kHead - kTail;
  return text.substr(0, kHead) + " [... " + std::to_string(cut) + " characters left out ...] " +
         text.substr(text.size() - kTail);
}

}  // namespace

// The last line of defence for the terminal: whatever a message quotes (a tensor name, a file's first
// line), control characters other than newline and tab, and C1 controls (UTF-8 U+0080..U+009F), reach it
// as \xNN, so no escape sequence in a stranger's file can move the cursor or retitle the window.
std::string terminal_safe(const std::string& text) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c1 = c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9f;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      escape(c);
    } else if (c1) {
      escape(c);
      escape(static_cast<unsigned char>(text[++i]));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string describe_error(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error))
    return terminal_safe(bounded(describe_c10(*c10_error)));
  if (dynamic_cast<const std::bad_alloc*>(&error) != nullptr)
    return std::string("out of memory: an allocation did not fit (") + error.what() + ")";
  return terminal_safe(bounded(error.what()));
}

bool is_out_of_memory(const std::exception& error) {
  if (dynamic_cast<const std::bad_alloc*>(&error) != nullptr) return true;
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error))
    return mentions_failed_allocation(c10_error->what_without_backtrace());
  return false;
}

}  // namespace zest
