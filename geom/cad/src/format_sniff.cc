// Format detection from file content (never from the file name).
//
// STEP: ISO 10303-21 clause 5 opens every exchange structure with the token "ISO-10303-21;".
// IGES: IGES 5.3 section 2.1 fixes 80-column records whose column 73 holds the section letter; the
// first record belongs to the Start section ('S') and columns 74-80 hold its sequence number.
#include <cctype>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clash/cad/tessellate.h"

namespace clash::cad {
namespace {

constexpr std::string_view kStepMagic = "ISO-10303-21";
constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
constexpr std::size_t kIgesSectionColumn = 72;  // column 73, 0-based
constexpr std::size_t kIgesRecordLength = 80;

bool LooksLikeStep(std::string_view bytes) {
  if (bytes.substr(0, kUtf8Bom.size()) == kUtf8Bom) bytes.remove_prefix(kUtf8Bom.size());
  while (!bytes.empty() && std::isspace(static_cast<unsigned char>(bytes.front()))) {
    bytes.remove_prefix(1);
  }
  return bytes.substr(0, kStepMagic.size()) == kStepMagic;
}

bool LooksLikeIges(std::string_view bytes) {
  std::string_view line = bytes.substr(0, bytes.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.size() <= kIgesSectionColumn || line[kIgesSectionColumn] != 'S') return false;
  // The sequence number after the section letter: digits and spaces only, not all blank.
  std::string_view sequence =
      line.substr(kIgesSectionColumn + 1, kIgesRecordLength - kIgesSectionColumn - 1);
  bool has_digit = false;
  for (char c : sequence) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      has_digit = true;
    } else if (c != ' ') {
      return false;
    }
  }
  return has_digit || sequence.empty();
}

}  // namespace

absl::StatusOr<CadFormat> SniffFormat(std::string_view first_bytes) {
  if (first_bytes.empty()) return absl::InvalidArgumentError("read: the file is empty");
  if (LooksLikeStep(first_bytes)) return CadFormat::kStep;
  if (LooksLikeIges(first_bytes)) return CadFormat::kIges;
  return absl::InvalidArgumentError(
      "read: unrecognised format: neither STEP (\"ISO-10303-21\") nor IGES (80-column records "
      "with 'S' in column 73)");
}

}  // namespace clash::cad
