// Who is calling: bearer tokens mapped to tenants, and the rules for listen addresses.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace clash::server {

/// Tenant names: 1 to 64 of [A-Za-z0-9_.-], not starting with '.'; they become folder names.
[[nodiscard]] bool IsTenantName(absl::string_view name);

/// True when `listen` ("host:port") binds only the loopback interface: 127.0.0.0/8, ::1 or
/// "localhost". "0.0.0.0", "[::]" and any other host are not loopback.
[[nodiscard]] bool IsLoopbackListen(absl::string_view listen);

/// The token file: one entry per line, "<sha256 of the token, 64 hex digits> <tenant>";
/// blank lines and lines starting with '#' are ignored. The file holds no token itself, so
/// reading it gives nothing away; make a line with `printf %s "$TOKEN" | sha256sum`.
class TokenTable {
 public:
  /// INVALID_ARGUMENT (with the line number) for a malformed line, a duplicate hash or an
  /// empty table; NOT_FOUND when the file cannot be read.
  [[nodiscard]] static absl::StatusOr<TokenTable> Load(const std::string& path);
  [[nodiscard]] static absl::StatusOr<TokenTable> Parse(absl::string_view text);

  /// The tenant of a presented token, or nothing. Compares the token's hash with every entry
  /// in constant time, so neither the match nor its position shows in the timing.
  [[nodiscard]] std::optional<std::string> TenantOf(absl::string_view token) const;

  [[nodiscard]] std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    unsigned char hash[32];
    std::string tenant;
  };
  std::vector<Entry> entries_;
};

/// The token of an "authorization: Bearer <token>" header value (scheme case-insensitive).
/// UNAUTHENTICATED when the value is not of that form; the message never contains the value.
[[nodiscard]] absl::StatusOr<absl::string_view> BearerToken(absl::string_view header);

}  // namespace clash::server
