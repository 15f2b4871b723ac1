// UTF-8 helpers and the PCRE2 regex wrapper shared by the tokenizer sources (internal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace luminal::models::detail {

// Length of the UTF-8 sequence starting at s[i] (1 for a stray byte); s must be valid at i.
size_t utf8_len(unsigned char lead);
// Decode the code point at s[i] (s valid UTF-8); sets len to its byte length.
char32_t utf8_decode(std::string_view s, size_t i, size_t& len);
void utf8_append(std::string& out, char32_t cp);
// Offset of the first invalid byte, or npos when s is valid UTF-8.
size_t utf8_first_invalid(std::string_view s);
// Replace each maximal invalid subsequence with U+FFFD (like Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);
// Unicode White_Space (Rust's char::is_whitespace).
bool is_unicode_whitespace(char32_t cp);

// Translate an Oniguruma pattern (what `tokenizers` runs) into PCRE2 syntax where the two
// differ: Oniguruma's \s also matches U+0085 (NEL), PCRE2's (UCP) does not.
std::string onig_to_pcre2(std::string_view pattern);

// A compiled PCRE2 pattern (UTF + UCP, JIT when available). Thread-safe for matching.
class Regex {
 public:
  // literal: match the pattern text verbatim. Throws std::runtime_error with PCRE2's
  // message on a bad pattern (the caller adds the file name).
  Regex(std::string_view pattern, bool literal);
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();
  // All non-overlapping matches (byte offsets [start, end)) in s, which must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  // Whether the pattern matches at exactly offset `at` (anchored).
  bool matches_at(std::string_view s, size_t at) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace luminal::models::detail
