#include "auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "storage.h"

namespace clash::server {
namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool IsTenantName(absl::string_view name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

bool IsLoopbackListen(absl::string_view listen) {
  absl::string_view host = listen;
  if (absl::ConsumePrefix(&host, "[")) {
    const std::size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    host = host.substr(0, close);
    return host == "::1";
  }
  const std::size_t colon = host.rfind(':');
  if (colon != absl::string_view::npos) host = host.substr(0, colon);
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8, written as four decimal octets.
  std::vector<absl::string_view> octets = absl::StrSplit(host, '.');
  if (octets.size() != 4 || octets[0] != "127") return false;
  for (absl::string_view o : octets) {
    int v = 0;
    if (o.empty() || o.size() > 3 || !absl::SimpleAtoi(o, &v) || v < 0 || v > 255) return false;
  }
  return true;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileCapped(path, std::size_t{16} << 20);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("cannot read the token file ", path, ": ",
                                            std::string(text.status().message())));
  }
  absl::StatusOr<TokenTable> table = Parse(*text);
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", std::string(table.status().message())));
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text) {
  TokenTable table;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2 || fields[0].size() != 64) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_no, ": expected '<sha256 of the token, 64 hex digits> <tenant>'"));
    }
    Entry e;
    for (int i = 0; i < 32; ++i) {
      const int hi = HexDigit(fields[0][2 * i]);
      const int lo = HexDigit(fields[0][2 * i + 1]);
      if (hi < 0 || lo < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line_no, ": the hash must be 64 hex digits"));
      }
      e.hash[i] = static_cast<unsigned char>(hi * 16 + lo);
    }
    if (!IsTenantName(fields[1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_no, ": tenant names have 1 to 64 of A-Z a-z 0-9 _ . - (no leading .)"));
    }
    e.tenant = std::string(fields[1]);
    for (const Entry& other : table.entries_) {
      if (std::memcmp(other.hash, e.hash, 32) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line_no, ": the same token hash appears twice"));
      }
    }
    table.entries_.push_back(std::move(e));
  }
  if (table.entries_.empty()) return absl::InvalidArgumentError("no token in the token file");
  return table;
}

std::optional<std::string> TokenTable::TenantOf(absl::string_view token) const {
  unsigned char hash[32];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), hash);
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {
    // No early exit: every entry is compared, each comparison in constant time.
    const bool equal = CRYPTO_memcmp(e.hash, hash, 32) == 0;
    found = equal ? &e : found;
  }
  if (found == nullptr || token.empty()) return std::nullopt;
  return found->tenant;
}

absl::StatusOr<absl::string_view> BearerToken(absl::string_view header) {
  constexpr absl::string_view kScheme = "bearer ";
  if (header.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(header.substr(0, kScheme.size()), kScheme)) {
    return absl::UnauthenticatedError("the authorization metadata must be 'Bearer <token>'");
  }
  absl::string_view token = absl::StripAsciiWhitespace(header.substr(kScheme.size()));
  if (token.empty()) return absl::UnauthenticatedError("empty bearer token");
  return token;
}

}  // namespace clash::server
