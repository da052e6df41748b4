// UTF-8 checks for the names and paths clash_cad hands out (internal to clash_cad).
//
// The server copies part names, instance names and paths into protobuf `string` fields, and
// protobuf 3.21 refuses to parse a message holding one that is not well-formed UTF-8: one bad name
// would make a stored assembly or a whole scene file unreadable. So every string leaving geom/cad
// is well-formed UTF-8: names from OCCT are repaired (ToValidUtf8), long strings are cut on a
// character boundary (Utf8Prefix), and the worker result parser refuses anything else.
//
// Well-formed means Unicode 15.0, section 3.9, table 3-7 (RFC 3629): no overlong forms, no
// surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
#ifndef CLASH_CAD_SRC_UTF8_H_
#define CLASH_CAD_SRC_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace clash::cad::internal {

/// True when `bytes` is well-formed UTF-8.
[[nodiscard]] bool IsValidUtf8(std::string_view bytes);

/// `bytes` with each maximal ill-formed subsequence replaced by U+FFFD (the practice the Unicode
/// standard recommends in section 3.9); well-formed input comes back unchanged.
[[nodiscard]] std::string ToValidUtf8(std::string_view bytes);

/// The longest prefix of `text` of at most `max_bytes` bytes that does not end inside a character
/// (it drops the continuation bytes of a cut character and their lead byte): well-formed when
/// `text` is.
[[nodiscard]] std::string_view Utf8Prefix(std::string_view text, std::size_t max_bytes);

}  // namespace clash::cad::internal

#endif  // CLASH_CAD_SRC_UTF8_H_
