#include "clash/cad/import_cache.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker_format.h"

namespace clash::cad {
namespace {

constexpr std::size_t kDigestBytes = 32;
constexpr std::string_view kEntrySuffix = ".clshmesh";

struct EvpDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

// Incremental SHA-256 through OpenSSL's EVP interface.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void Update(std::string_view bytes) { EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()); }
  std::array<unsigned char, kDigestBytes> Finish() {
    std::array<unsigned char, kDigestBytes> out{};
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), out.data(), &n);
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, EvpDeleter> ctx_;
};

std::string Hex(const std::array<unsigned char, kDigestBytes>& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * d.size(), '0');
  for (std::size_t i = 0; i < d.size(); ++i) {
    s[2 * i] = kDigits[d[i] >> 4];
    s[2 * i + 1] = kDigits[d[i] & 15];
  }
  return s;
}

bool IsKey(std::string_view key) {
  if (key.size() != 2 * kDigestBytes) return false;
  for (char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Writes all of `bytes` to fd; false on error.
bool WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

std::string Sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return Hex(h.Finish());
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot be read"));
  Sha256 h;
  std::string buffer(1 << 20, '\0');
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    h.Update(std::string_view(buffer.data(), static_cast<std::size_t>(in.gcount())));
  }
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(path, ": read error"));
  return Hex(h.Finish());
}

std::string ImportCacheKey(std::string_view file_sha256_hex, const TessellationOptions& options) {
  auto bits = [](double d) { return std::bit_cast<uint64_t>(d); };
  return Sha256Hex(absl::StrCat("clash-import-cache/", kImportCacheVersion, "\n",
                                std::string(file_sha256_hex),
                                "\nlinear=", bits(options.linear_deflection_mm),
                                "\nrelative=", bits(options.relative_deflection),
                                "\nangular=", bits(options.angular_deflection_rad),
                                "\nmax_triangles=", options.max_triangles, "\n"));
}

absl::StatusOr<ImportCache> ImportCache::Open(std::string dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("import cache folder ", dir, " cannot be used",
                                                   ec ? absl::StrCat(": ", ec.message()) : ""));
  }
  return ImportCache(std::move(dir));
}

std::string ImportCache::EntryPath(std::string_view key) const {
  return absl::StrCat(dir_, "/", std::string(key), std::string(kEntrySuffix));
}

absl::StatusOr<std::optional<MeshBuffers>> ImportCache::Load(std::string_view key) const {
  if (!IsKey(key)) return absl::InvalidArgumentError("import cache key must be 64 hex digits");
  const std::string path = EntryPath(key);
  absl::StatusOr<std::string> bytes =
      internal::ReadEncodedFile(path, std::numeric_limits<std::size_t>::max());
  if (!bytes.ok()) return std::nullopt;  // a miss
  // Entry = encoded mesh + SHA-256 of it. Anything else is damage: drop the entry.
  bool ok = bytes->size() > kDigestBytes;
  std::optional<MeshBuffers> mesh;
  if (ok) {
    const std::string_view payload(bytes->data(), bytes->size() - kDigestBytes);
    Sha256 h;
    h.Update(payload);
    const auto digest = h.Finish();
    ok = std::memcmp(digest.data(), bytes->data() + payload.size(), kDigestBytes) == 0;
    if (ok) {
      absl::StatusOr<MeshBuffers> parsed = internal::ParseWorkerOutput(payload, payload.size());
      ok = parsed.ok();
      if (ok) mesh = *std::move(parsed);
    }
  }
  if (!ok) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return std::nullopt;
  }
  return mesh;
}

absl::Status ImportCache::Store(std::string_view key, const MeshBuffers& mesh) const {
  if (!IsKey(key)) return absl::InvalidArgumentError("import cache key must be 64 hex digits");
  std::string bytes = internal::EncodeWorkerOutput<MeshBuffers>(mesh);
  Sha256 h;
  h.Update(bytes);
  const auto digest = h.Finish();
  bytes.append(reinterpret_cast<const char*>(digest.data()), digest.size());

  std::random_device rd;
  const std::string tmp = absl::StrCat(dir_, "/.tmp-", std::string(key), "-", getpid(), "-", rd());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("import cache: cannot create ", tmp, ": ", std::strerror(errno)));
  }
  const bool written = WriteAll(fd, bytes) && fsync(fd) == 0;
  const bool closed = close(fd) == 0;
  if (!written || !closed || rename(tmp.c_str(), EntryPath(key).c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("import cache: cannot write entry ", std::string(key),
                                            ": ", std::strerror(err)));
  }
  // Make the rename itself durable.
  const int dir_fd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  return absl::OkStatus();
}

absl::StatusOr<CachedImport> ImportWithCache(const std::string& path,
                                             const TessellationOptions& options,
                                             const IsolationLimits& limits,
                                             const ImportCache& cache,
                                             const std::atomic<bool>* cancel) {
  absl::StatusOr<std::string> file_hash = Sha256OfFile(path);
  if (!file_hash.ok()) return file_hash.status();
  CachedImport out;
  out.key = ImportCacheKey(*file_hash, options);
  absl::StatusOr<std::optional<MeshBuffers>> hit = cache.Load(out.key);
  if (!hit.ok()) return hit.status();
  if (hit->has_value()) {
    out.mesh = **std::move(hit);
    out.from_cache = true;
    return out;
  }
  absl::StatusOr<MeshBuffers> mesh = ImportIsolated(path, options, limits, cancel);
  if (!mesh.ok()) return mesh.status();
  out.mesh = *std::move(mesh);
  out.stored = cache.Store(out.key, out.mesh).ok();
  return out;
}

}  // namespace clash::cad
