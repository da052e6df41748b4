#include "storage.h"

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace clash::server {

bool IsHexId(const std::string& id, char prefix) {
  if (id.size() != 33 || id[0] != prefix) return false;
  for (std::size_t i = 1; i < id.size(); ++i) {
    const char c = id[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
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
