// The Unicode character data the CLIP tokenizer needs: UTF-8 decoding, general categories, lower case,
// canonical composition (NFC). Tables generated from Python's unicodedata (unicode_tables.inc).
#pragma once

#include <string>
#include <string_view>

namespace zest::clip {

// The code points of UTF-8 text; an invalid byte sequence becomes U+FFFD per maximal invalid subpart,
// as Python's bytes.decode(errors="replace") does.
std::u32string utf8_decode(std::string_view text);
std::string utf8_encode(std::u32string_view text);
void append_utf8(char32_t cp, std::string& out);

bool is_letter(char32_t cp);            // general category L*
bool is_number(char32_t cp);            // general category N*
bool is_other(char32_t cp);             // general category C* (controls, formats, unassigned, ...)
bool is_space_separator(char32_t cp);   // general category Zs
bool is_unicode_white_space(char32_t cp);  // the White_Space property (what \s matches in Unicode regexes)

// The full lower-case mapping of one code point (İ becomes two), as Python's str.lower() and Rust's
// char::to_lowercase() give it without the context-dependent final-sigma rule.
void append_lowercase(char32_t cp, std::u32string& out);

// Normalization Form C.
std::u32string nfc(std::u32string_view text);

const char* unicode_version();

}  // namespace zest::clip
