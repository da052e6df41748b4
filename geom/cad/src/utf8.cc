// UTF-8 checks; see utf8.h.
#include "utf8.h"

namespace clash::cad::internal {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed character at the start of `bytes` (not empty), or 0 when there is
// none; then *ill_formed is the length (>= 1) of the maximal ill-formed subsequence there: the
// lead byte and the continuation bytes that could still have completed it. Table 3-7: the second
// byte's range depends on the lead byte (no overlong forms, surrogates or values past U+10FFFF),
// every later byte is 80..BF.
std::size_t CharLength(std::string_view bytes, std::size_t* ill_formed) {
  const auto at = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = at(0);
  *ill_formed = 1;
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong below U+0800
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // overlong below U+10000
    if (lead == 0xF4) high = 0x8F;  // past U+10FFFF
  } else {
    return 0;  // 80..C1 (continuation or overlong lead) or F5..FF
  }
  for (std::size_t i = 1; i < length; ++i) {
    if (i >= bytes.size() || at(i) < low || at(i) > high) {
      *ill_formed = i;
      return 0;
    }
    low = 0x80;
    high = 0xBF;
  }
  return length;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  std::size_t ill_formed = 0;
  for (std::size_t i = 0; i < bytes.size();) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t length = CharLength(bytes.substr(i), &ill_formed);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string ToValidUtf8(std::string_view bytes) {
  if (IsValidUtf8(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  std::size_t ill_formed = 0;
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t length = CharLength(bytes.substr(i), &ill_formed);
    if (length == 0) {
      out.append(kReplacement);
      i += ill_formed;
    } else {
      out.append(bytes.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string_view Utf8Prefix(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  // text[max_bytes] starts the first character left out unless it continues one (10xxxxxx): then
  // back up over the continuation bytes (at most 3) to that character's lead byte.
  std::size_t end = max_bytes;
  for (int back = 0; back < 3 && end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80;
       ++back) {
    --end;
  }
  if ((static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) end = max_bytes;  // not UTF-8
  return text.substr(0, end);
}

}  // namespace clash::cad::internal
