// UTF-8, categories, lower case and NFC over the generated tables (models/clip/unicode_tables.inc).
#include "models/clip/unicode_text.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace zest::clip {
namespace {

struct CodeRange {
  char32_t first, last;
};
struct LowerCase {
  char32_t cp;
  char32_t lower[3];  // unused slots are 0
};
struct CombiningClass {
  char32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp, first, second;  // second is 0 for a singleton
};
struct Composition {
  char32_t first, second, composed;
};

#include "models/clip/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodeRange (&table)[N], char32_t cp) {
  const auto* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                    [](char32_t value, const CodeRange& r) { return value < r.first; });
  return it != std::begin(table) && cp <= std::prev(it)->last;
}

template <typename Entry, size_t N>
const Entry* find_cp(const Entry (&table)[N], char32_t cp) {
  const auto* it = std::lower_bound(std::begin(table), std::end(table), cp,
                                    [](const Entry& e, char32_t value) { return e.cp < value; });
  return it != std::end(table) && it->cp == cp ? it : nullptr;
}

// Hangul syllables compose and decompose by arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  const CombiningClass* entry = find_cp(kCombiningClasses, cp);
  return entry ? entry->ccc : 0;
}

void decompose(char32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t index = cp - kSBase;
    out.push_back(kLBase + index / kNCount);
    out.push_back(kVBase + (index % kNCount) / kTCount);
    if (index % kTCount != 0) out.push_back(kTBase + index % kTCount);
    return;
  }
  const Decomposition* entry = find_cp(kDecompositions, cp);
  if (!entry) {
    out.push_back(cp);
    return;
  }
  decompose(entry->first, out);
  if (entry->second != 0) decompose(entry->second, out);
}

char32_t compose_pair(char32_t first, char32_t second) {  // 0: the pair does not compose
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto* it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::pair{first, second},
                                    [](const Composition& c, const std::pair<char32_t, char32_t>& key) {
                                      return std::pair{c.first, c.second} < key;
                                    });
  return it != std::end(kCompositions) && it->first == first && it->second == second ? it->composed : 0;
}

}  // namespace

std::u32string utf8_decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      out.push_back(byte);
      ++i;
      continue;
    }
    // Length and the range of the first continuation byte (which rules out overlong forms and surrogates).
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (byte >= 0xC2 && byte <= 0xDF) {
      length = 2;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      length = 3;
      if (byte == 0xE0) low = 0xA0;
      if (byte == 0xED) high = 0x9F;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      length = 4;
      if (byte == 0xF0) low = 0x90;
      if (byte == 0xF4) high = 0x8F;
    }
    if (length == 0) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    char32_t cp = byte & (length == 2 ? 0x1F : length == 3 ? 0x0F : 0x07);
    size_t taken = 1;
    bool valid = true;
    for (; taken < length; ++taken) {
      if (i + taken >= text.size()) {
        valid = false;
        break;
      }
      const auto next = static_cast<unsigned char>(text[i + taken]);
      const unsigned char lo = taken == 1 ? low : 0x80, hi = taken == 1 ? high : 0xBF;
      if (next < lo || next > hi) {
        valid = false;
        break;
      }
      cp = (cp << 6) | (next & 0x3F);
    }
    out.push_back(valid ? cp : char32_t{0xFFFD});
    i += taken;  // an invalid sequence is replaced once, for its maximal valid prefix
  }
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t cp : text) append_utf8(cp, out);
  return out;
}

bool is_letter(char32_t cp) { return in_ranges(kLetters, cp); }
bool is_number(char32_t cp) { return in_ranges(kNumbers, cp); }
bool is_other(char32_t cp) { return in_ranges(kOthers, cp); }
bool is_space_separator(char32_t cp) { return in_ranges(kSpaceSeparators, cp); }

bool is_unicode_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

void append_lowercase(char32_t cp, std::u32string& out) {
  const LowerCase* entry = find_cp(kLowerCase, cp);
  if (!entry) {
    out.push_back(cp);
    return;
  }
  for (const char32_t c : entry->lower) {
    if (c != 0) out.push_back(c);
  }
}

std::u32string nfc(std::u32string_view text) {
  // Full canonical decomposition, then canonical ordering of each run of non-starters (a stable sort by
  // combining class), then composition of each character with the last starter it is not blocked from.
  std::u32string decomposed;
  decomposed.reserve(text.size());
  for (const char32_t cp : text) decompose(cp, decomposed);
  for (size_t i = 0; i < decomposed.size();) {
    if (combining_class(decomposed[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < decomposed.size() && combining_class(decomposed[end]) != 0) ++end;
    std::stable_sort(decomposed.begin() + i, decomposed.begin() + end,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }
  std::u32string out;
  out.reserve(decomposed.size());
  size_t starter = std::u32string::npos;  // index in `out` of the last starter
  int last_class = -1;                    // class of the last character appended after that starter
  for (const char32_t cp : decomposed) {
    const int ccc = combining_class(cp);
    if (starter != std::u32string::npos) {
      const bool blocked = last_class != -1 && (last_class == 0 || last_class >= ccc);
      if (!blocked) {
        if (const char32_t composed = compose_pair(out[starter], cp)) {
          out[starter] = composed;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = out.size();
      last_class = -1;
    } else {
      last_class = ccc;
    }
    out.push_back(cp);
  }
  return out;
}

const char* unicode_version() { return kUnicodeVersion; }

}  // namespace zest::clip
