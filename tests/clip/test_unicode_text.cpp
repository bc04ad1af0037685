// The Unicode helpers of the CLIP tokenizer: UTF-8 decoding with Python's replacement rule, NFC
// (composition, canonical ordering, Hangul), lower case, categories. Expected values are Python's.
#include "models/clip/unicode_text.h"

#include <gtest/gtest.h>

namespace zest::clip {
namespace {

TEST(UnicodeText, DecodesUtf8AndReplacesInvalidSequencesAsPythonDoes) {
  EXPECT_EQ(utf8_decode("a\xc3\xa9\xe7\x8c\xab\xf0\x9f\x98\x80"), (std::u32string{U'a', 0xE9, 0x732B, 0x1F600}));
  EXPECT_EQ(utf8_decode("\xe2\x82"), U"\uFFFD");                        // truncated: one replacement
  EXPECT_EQ(utf8_decode("\xc0\xaf"), U"\uFFFD\uFFFD");                  // overlong start, lone continuation
  EXPECT_EQ(utf8_decode("\xed\xa0\x80"), U"\uFFFD\uFFFD\uFFFD");        // a surrogate
  EXPECT_EQ(utf8_decode("\xf0\x9f\x98"), U"\uFFFD");
  EXPECT_EQ(utf8_decode("a\xff" "b"), U"a\uFFFDb");
  EXPECT_EQ(utf8_decode("\xf4\x90\x80\x80"), U"\uFFFD\uFFFD\uFFFD\uFFFD");  // above U+10FFFF
  const std::u32string text = U"caf\u00e9 \u732b \U0001F600";
  EXPECT_EQ(utf8_decode(utf8_encode(text)), text);
}

TEST(UnicodeText, Nfc) {
  EXPECT_EQ(nfc(U"e\u0301"), U"\u00e9");
  EXPECT_EQ(nfc(U"a\u0301\u0328"), U"\u0105\u0301");  // reordered by combining class, then composed
  EXPECT_EQ(nfc(U"\u1100\u1161\u11a8"), U"\uac01");   // Hangul L V T
  EXPECT_EQ(nfc(U"\u212b"), U"\u00c5");               // a singleton decomposition (Angstrom sign)
  EXPECT_EQ(nfc(U"A\u030a\u0301"), U"\u01fa");
  EXPECT_EQ(nfc(U"\u00e9t\u00e9"), U"\u00e9t\u00e9");
  EXPECT_EQ(nfc(U""), U"");
}

TEST(UnicodeText, LowerCaseAndCategories) {
  std::u32string out;
  for (const char32_t c : std::u32string(U"A\u00c9\u0130\u03a3\u0416z1")) append_lowercase(c, out);
  EXPECT_EQ(out, U"a\u00e9i\u0307\u03c3\u0436z1");
  EXPECT_TRUE(is_letter(U'a'));
  EXPECT_TRUE(is_letter(0x732B));
  EXPECT_FALSE(is_letter(U'1'));
  EXPECT_TRUE(is_number(0x0663));  // Arabic-Indic three
  EXPECT_TRUE(is_number(0x2167));  // Roman numeral eight (Nl)
  EXPECT_TRUE(is_other(0x200B));   // zero-width space (Cf)
  EXPECT_TRUE(is_other(0x07));
  EXPECT_FALSE(is_other(U'a'));
  EXPECT_TRUE(is_space_separator(0x3000));
  EXPECT_FALSE(is_space_separator(U'\n'));
  EXPECT_TRUE(is_unicode_white_space(0x85));
  EXPECT_FALSE(is_unicode_white_space(0x200B));
}

}  // namespace
}  // namespace zest::clip
