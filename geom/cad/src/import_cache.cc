#include "clash/cad/import_cache.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "clash/cad/assembly.h"
#include "clash/cad/durable_file.h"
#include "worker_format.h"

namespace clash::cad {
namespace {

constexpr std::size_t kDigestBytes = 32;
static_assert(kMaxImportCacheEntryBytes == kDefaultMaxOutputBytes + kDigestBytes);

// The kind of entry that holds a T.
template <typename T>
constexpr ImportKind kKindOf = ImportKind::kMesh;
template <>
constexpr ImportKind kKindOf<ImportedAssembly> = ImportKind::kAssembly;

const char* KindName(ImportKind kind) { return kind == ImportKind::kMesh ? "mesh" : "assembly"; }

// Entry files end in the kind: "<key>.clshmesh" or "<key>.clshasm".
std::string EntryPath(const std::string& dir, std::string_view key, ImportKind kind) {
  return absl::StrCat(dir, "/", std::string(key),
                      kind == ImportKind::kMesh ? ".clshmesh" : ".clshasm");
}

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

}  // namespace

std::string Sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return Hex(h.Finish());
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path, const std::atomic<bool>* cancel) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (nor a device for its carrier); the
  // type is checked on the open descriptor, so the file cannot be swapped in between.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot be read: ", std::strerror(error)));
  }
  const ScopedFd closer(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    // A FIFO or a device (/dev/zero) would never end, or block: only files are imported.
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  Sha256 h;
  std::string buffer(1 << 20, '\0');
  for (;;) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      return absl::CancelledError(absl::StrCat("hashing ", path, " cancelled"));
    }
    const ssize_t n = read(fd, buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InvalidArgumentError(absl::StrCat(path, ": read error: ", std::strerror(errno)));
    }
    h.Update(std::string_view(buffer.data(), static_cast<std::size_t>(n)));
  }
  return Hex(h.Finish());
}

std::string ImportCacheKey(std::string_view file_sha256_hex, const TessellationOptions& options,
                           ImportKind kind) {
  auto bits = [](double d) { return std::bit_cast<uint64_t>(d); };
  return Sha256Hex(absl::StrCat("clash-import-cache/", kImportCacheVersion,
                                "\nkind=", KindName(kind), "\n", std::string(file_sha256_hex),
                                "\nlinear=", bits(options.linear_deflection_mm),
                                "\nrelative=", bits(options.relative_deflection),
                                "\nangular=", bits(options.angular_deflection_rad),
                                "\nmax_triangles=", options.max_triangles, "\n"));
}

absl::StatusOr<ImportCache> ImportCache::Open(std::string dir, ImportCacheOptions options) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("import cache folder ", dir, " cannot be used",
                                                   ec ? absl::StrCat(": ", ec.message()) : ""));
  }
  return ImportCache(std::move(dir), std::move(options));
}

namespace {

// The T entry for `key` in `dir`, or nullopt on a miss or a damaged entry (which is removed).
template <typename T>
absl::StatusOr<std::optional<T>> LoadEntry(const std::string& dir, std::string_view key) {
  if (!IsKey(key)) return absl::InvalidArgumentError("import cache key must be 64 hex digits");
  const std::string path = EntryPath(dir, key, kKindOf<T>);
  // Capped, so that a huge file under an entry's name is never read into memory. What is there
  // and is no entry this cache wrote whole (not a regular file, above the cap) is dropped as
  // damage, and a store puts a good one in its place. A read that fails for want of resources
  // (file descriptors, memory, I/O) is a plain miss: the entry may be good, and is kept.
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return std::nullopt;  // a miss
  bool ok =
      S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) <= kMaxImportCacheEntryBytes;
  absl::StatusOr<std::string> bytes;
  if (ok) {
    bytes = ReadFileCapped(path, kMaxImportCacheEntryBytes);
    if (!bytes.ok()) return std::nullopt;  // a miss (it changed meanwhile: the next load sees)
  }
  // Entry = encoded payload + SHA-256 of it. Anything else is damage: drop the entry.
  ok = ok && bytes->size() > kDigestBytes;
  std::optional<T> value;
  if (ok) {
    const std::string_view payload(bytes->data(), bytes->size() - kDigestBytes);
    Sha256 h;
    h.Update(payload);
    const auto digest = h.Finish();
    ok = std::memcmp(digest.data(), bytes->data() + payload.size(), kDigestBytes) == 0;
    if (ok) {
      absl::StatusOr<T> parsed = internal::ParseWorkerOutput<T>(payload, payload.size());
      ok = parsed.ok();
      if (ok) value = *std::move(parsed);
    }
  }
  if (!ok) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return std::nullopt;
  }
  // A hit is a use: the entry's time moves to now, so that eviction takes it last. (When that
  // fails, the entry is only evicted earlier.)
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return value;
}

// An entry's bytes: the encoded value followed by its SHA-256.
template <typename T>
std::string EncodeEntry(const T& value) {
  std::string bytes = internal::EncodeWorkerOutput(absl::StatusOr<T>(value));
  Sha256 h;
  h.Update(bytes);
  const auto digest = h.Finish();
  bytes.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  return bytes;
}

// An entry file of the folder.
struct EntryFile {
  std::string name;  // the file name in the folder: "<key>.clshmesh" or "<key>.clshasm"
  std::uint64_t size = 0;
  timespec used{};  // the file's modification time: when it was stored or last loaded
};

// The entry files in `dir` (regular files named as entries: not the temporaries of writes in
// progress, nor links), least recently used first, to the resolution of the file system's
// timestamps (ties by name, so that the order is the same for every caller).
std::vector<EntryFile> ListEntries(const std::string& dir) {
  std::vector<EntryFile> out;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::filesystem::path& p = it->path();
    if ((p.extension() != ".clshmesh" && p.extension() != ".clshasm") ||
        !IsKey(p.stem().string())) {
      continue;
    }
    struct stat st {};
    if (lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({p.filename().string(), static_cast<std::uint64_t>(st.st_size), st.st_mtim});
  }
  std::sort(out.begin(), out.end(), [](const EntryFile& a, const EntryFile& b) {
    return std::tie(a.used.tv_sec, a.used.tv_nsec, a.name) <
           std::tie(b.used.tv_sec, b.used.tv_nsec, b.name);
  });
  return out;
}

// Removes `entries` of `dir` in order until `bytes` are freed; returns the bytes freed. An
// entry that is already gone (another store or an Evict took it) counts as freed: its bytes are.
std::uint64_t RemoveUntilFreed(const std::string& dir, const std::vector<EntryFile>& entries,
                               std::uint64_t bytes) {
  std::uint64_t freed = 0;
  for (const EntryFile& e : entries) {
    if (freed >= bytes) break;
    if (unlink((dir + "/" + e.name).c_str()) == 0 || errno == ENOENT) freed += e.size;
  }
  return freed;
}

std::uint64_t TotalSize(const std::vector<EntryFile>& entries) {
  std::uint64_t total = 0;
  for (const EntryFile& e : entries) total += e.size;
  return total;
}

// Imports through the cache: `import()` runs on a miss, and `out->*value` receives the result.
template <typename T, typename Cached, typename Import>
absl::StatusOr<Cached> ImportThroughCache(const std::string& path,
                                          const TessellationOptions& options,
                                          const ImportCache& cache, T Cached::*value,
                                          const std::atomic<bool>* cancel, Import import) {
  absl::StatusOr<std::string> file_hash = Sha256OfFile(path, cancel);
  if (!file_hash.ok()) return file_hash.status();
  Cached out;
  out.key = ImportCacheKey(*file_hash, options, kKindOf<T>);
  absl::StatusOr<std::optional<T>> hit = LoadEntry<T>(cache.dir(), out.key);
  if (!hit.ok()) return hit.status();
  if (hit->has_value()) {
    out.*value = **std::move(hit);
    out.from_cache = true;
    return out;
  }
  absl::StatusOr<T> imported = import();
  if (!imported.ok()) return imported.status();
  // The worker opened `path` again: when the file changed since it was hashed, the result may
  // be of other content than the key names, and must not be stored (nor handed out under it).
  absl::StatusOr<std::string> hash_after = Sha256OfFile(path, cancel);
  if (!hash_after.ok()) return hash_after.status();
  if (*hash_after != *file_hash) {
    return absl::AbortedError(
        absl::StrCat(path, " changed while it was imported; nothing was cached (import it again)"));
  }
  out.*value = *std::move(imported);
  if constexpr (kKindOf<T> == ImportKind::kMesh) {
    out.stored = cache.Store(out.key, out.*value).ok();
  } else {
    out.stored = cache.StoreAssembly(out.key, out.*value).ok();
  }
  return out;
}

}  // namespace

absl::StatusOr<std::optional<MeshBuffers>> ImportCache::Load(std::string_view key) const {
  return LoadEntry<MeshBuffers>(dir_, key);
}

template <typename T>
absl::Status ImportCache::StoreBounded(std::string_view key, const T& value) const {
  if (!IsKey(key)) return absl::InvalidArgumentError("import cache key must be 64 hex digits");
  const std::string bytes = EncodeEntry(value);
  const std::uint64_t size = bytes.size();
  if (size > kMaxImportCacheEntryBytes) {  // it would never be loaded
    return absl::ResourceExhaustedError(
        absl::StrCat("import cache: an entry of ", size, " bytes is larger than the ",
                     kMaxImportCacheEntryBytes, " bytes loaded (kMaxImportCacheEntryBytes)"));
  }
  if (size > options_.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("import cache: an entry of ", size,
                                                     " bytes is larger than the cache's bound of ",
                                                     options_.max_bytes, " bytes"));
  }
  const std::string path = EntryPath(dir_, key, kKindOf<T>);
  const std::string name = path.substr(dir_.size() + 1);
  std::lock_guard lock(*store_mu_);
  std::vector<EntryFile> entries = ListEntries(dir_);
  // An entry of the same key is replaced by the rename: its bytes do not stay.
  std::erase_if(entries, [&](const EntryFile& e) { return e.name == name; });
  const std::uint64_t total = TotalSize(entries);
  if (total > options_.max_bytes - size) {
    const std::uint64_t excess = total - (options_.max_bytes - size);
    if (RemoveUntilFreed(dir_, entries, excess) < excess) {
      return absl::ResourceExhaustedError(
          absl::StrCat("import cache: older entries in ", dir_, " cannot be removed to make room"));
    }
  }
  std::shared_ptr<void> hold;  // kept until the entry is on disk
  if (options_.reserve) {
    absl::StatusOr<std::shared_ptr<void>> reserved = options_.reserve(size);
    if (!reserved.ok()) return reserved.status();
    hold = *std::move(reserved);
  }
  absl::Status written = WriteFileAtomically(path, bytes);
  if (!written.ok()) {
    return absl::Status(written.code(),
                        absl::StrCat("import cache: ", std::string(written.message())));
  }
  return absl::OkStatus();
}

absl::Status ImportCache::Store(std::string_view key, const MeshBuffers& mesh) const {
  return StoreBounded(key, mesh);
}

absl::StatusOr<std::optional<ImportedAssembly>> ImportCache::LoadAssembly(
    std::string_view key) const {
  return LoadEntry<ImportedAssembly>(dir_, key);
}

absl::Status ImportCache::StoreAssembly(std::string_view key,
                                        const ImportedAssembly& assembly) const {
  return StoreBounded(key, assembly);
}

std::uint64_t ImportCache::SizeBytes() const { return TotalSize(ListEntries(dir_)); }

std::uint64_t ImportCache::Evict(std::uint64_t bytes) const {
  if (bytes == 0) return 0;
  const std::vector<EntryFile> entries = ListEntries(dir_);
  return TotalSize(entries) < bytes ? 0 : RemoveUntilFreed(dir_, entries, bytes);
}

absl::StatusOr<CachedImport> ImportWithCache(const std::string& path,
                                             const TessellationOptions& options,
                                             const IsolationLimits& limits,
                                             const ImportCache& cache,
                                             const std::atomic<bool>* cancel) {
  return ImportThroughCache(path, options, cache, &CachedImport::mesh, cancel,
                            [&] { return ImportIsolated(path, options, limits, cancel); });
}

absl::StatusOr<CachedAssemblyImport> ImportAssemblyWithCache(const std::string& path,
                                                             const TessellationOptions& options,
                                                             const IsolationLimits& limits,
                                                             const ImportCache& cache,
                                                             const std::atomic<bool>* cancel) {
  return ImportThroughCache(path, options, cache, &CachedAssemblyImport::assembly, cancel,
                            [&] { return ImportAssemblyIsolated(path, options, limits, cancel); });
}

}  // namespace clash::cad
