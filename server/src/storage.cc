#include "storage.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace clash::server {

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsHexId(const std::string& id, char prefix) {
  return id.size() == 33 && id[0] == prefix && IsLowerHex(std::string_view(id).substr(1));
}

std::string RandomHex(int words) {
  std::random_device rd;
  std::string s;
  for (int i = 0; i < words; ++i) absl::StrAppendFormat(&s, "%08x", rd());
  return s;
}

absl::Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create folder ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace clash::server
