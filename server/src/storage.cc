#include "storage.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "clash/geom/status_macros.h"

namespace clash::server {

bool IsLowerHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsHexId(const std::string& id, char prefix) {
  return id.size() == 33 && id[0] == prefix && IsLowerHex(std::string_view(id).substr(1));
}

absl::Status ForEachInFolder(
    const std::string& dir,
    const std::function<absl::Status(const std::filesystem::directory_entry&)>& fn) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    CLASH_RETURN_IF_ERROR(fn(*it));
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, " cannot be listed: ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::set<std::string>> IdsInFolder(const std::string& dir, char prefix) {
  std::set<std::string> ids;
  CLASH_RETURN_IF_ERROR(ForEachInFolder(dir, [&](const std::filesystem::directory_entry& entry) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, ".pb")) return absl::OkStatus();
    std::string id = name.substr(0, name.size() - 3);
    if (IsHexId(id, prefix)) ids.insert(std::move(id));
    return absl::OkStatus();
  }));
  return ids;
}

std::string RandomHex(int words) {
  std::random_device rd;
  std::string s;
  for (int i = 0; i < words; ++i) absl::StrAppendFormat(&s, "%08x", rd());
  return s;
}

bool FileGone(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::symlink_status(path, ec);
  return st.type() == std::filesystem::file_type::not_found;
}

absl::Status MakeDirs(const std::string& dir) { return cad::MakeDirsDurably(dir); }

}  // namespace clash::server
