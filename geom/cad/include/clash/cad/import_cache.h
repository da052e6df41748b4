// A content-addressed cache of tessellated imports on disk, so that importing the same file
// with the same options again neither starts a worker nor runs OCCT. It holds whole-file meshes
// (ImportWithCache) and assemblies (ImportAssemblyWithCache) as entries of distinct keys.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "clash/cad/assembly.h"
#include "clash/cad/isolated_import.h"
#include "clash/cad/tessellate.h"

namespace clash::cad {

/// Version of the cached entry format and of the import pipeline. It is part of every key:
/// bump it when tessellation output changes, and old entries are simply never hit again.
/// Version 2: keys name the kind of import (mesh or assembly).
/// Version 3: assemblies capped at kMaxAssemblyInstances, names valid UTF-8 cut on a character
/// boundary, sibling path segments unique (entries of version 2 could hold duplicate paths).
/// Version 4: an IGES assembly is one part (its roots' faces sewn together); STEP files with
/// external references are refused (entries of version 3 could hold other files' geometry).
/// Version 5: assembly entries carry the import's warnings (the worker result format's version
/// 2); a colour OCCT cannot take no longer fails the import.
inline constexpr int kImportCacheVersion = 5;

/// Largest entry file the cache loads or stores: one worker result, which the worker's default
/// output cap (kDefaultMaxOutputBytes, 2 GiB) bounds, and its 32-byte SHA-256. A load reads the
/// whole entry into memory, so a larger file (damage, or another program's) is never read: it
/// counts as a miss and is removed.
inline constexpr std::size_t kMaxImportCacheEntryBytes = kDefaultMaxOutputBytes + 32;

/// What an import produced, and so what its cache entry holds.
enum class ImportKind {
  kMesh,      ///< The whole file as one MeshBuffers (ImportIsolated).
  kAssembly,  ///< The assembly tree as an ImportedAssembly (ImportAssemblyIsolated).
};

/// SHA-256 of `bytes`, as 64 lowercase hex digits.
[[nodiscard]] std::string Sha256Hex(std::string_view bytes);

/// SHA-256 of a regular file's bytes (read in chunks), as 64 lowercase hex digits. NOT_FOUND for
/// a missing file; INVALID_ARGUMENT for one that cannot be read or is not a regular file (a FIFO,
/// a device such as /dev/zero or a folder: it is refused at once, without waiting for a writer or
/// reading without end); CANCELLED once `*cancel` is true (checked before every chunk).
[[nodiscard]] absl::StatusOr<std::string> Sha256OfFile(const std::string& path,
                                                       const std::atomic<bool>* cancel = nullptr);

/// The cache key of an import: SHA-256 over kImportCacheVersion, the kind of import, the file's
/// SHA-256, every option that changes the tessellation (doubles by their exact bit patterns;
/// `parallel` does not change the result and is left out) and max_triangles. The cap changes
/// no successful result, only which files fail, but clashd makes assembly ids from this key, so
/// it stays in: leaving it out would give every assembly imported before a new id.
[[nodiscard]] std::string ImportCacheKey(std::string_view file_sha256_hex,
                                         const TessellationOptions& options,
                                         ImportKind kind = ImportKind::kMesh);

/// How much an ImportCache keeps.
struct ImportCacheOptions {
  /// Bytes of entries kept at most: a store first removes the least recently used entries
  /// (stored or loaded longest ago, by the files' modification times, so to the resolution of
  /// the file system's timestamps) until the new one fits, and an entry larger than this is
  /// not stored. 0 stores nothing.
  std::uint64_t max_bytes = std::numeric_limits<std::uint64_t>::max();
  /// Called with an entry's size before it is written (after the eviction that makes it fit),
  /// e.g. to set the bytes aside under a disk quota: the returned hold is kept until the entry
  /// is on disk. An error leaves the entry unstored. Empty: nothing to ask. It is called while
  /// the cache's stores are serialised, so it must not store into the same cache (it may Evict).
  std::function<absl::StatusOr<std::shared_ptr<void>>(std::uint64_t bytes)> reserve;
};

/// One folder of entries, one file per key. Entries are written atomically (temporary file,
/// fsync, rename, fsync of the folder) and carry a SHA-256 of their content, checked on every
/// load; a damaged entry (also one above kMaxImportCacheEntryBytes, or one that cannot be read)
/// is removed and counts as a miss. Safe for concurrent use by threads and
/// processes: a reader sees either a whole entry or none. The size bound holds for the stores
/// of one ImportCache (and its copies), which run one at a time; another process writing into
/// the same folder can pass it until the next store.
class ImportCache {
 public:
  /// Opens (creating if needed) the cache folder. INVALID_ARGUMENT when it cannot be used.
  /// Entries beyond `options.max_bytes` are left until the next store or Evict.
  [[nodiscard]] static absl::StatusOr<ImportCache> Open(std::string dir,
                                                        ImportCacheOptions options = {});

  /// The mesh entry for `key`, or nullopt on a miss or a damaged entry (which is removed; see
  /// the class comment).
  /// INVALID_ARGUMENT for a key that is not 64 hex digits.
  [[nodiscard]] absl::StatusOr<std::optional<MeshBuffers>> Load(std::string_view key) const;

  /// Stores `mesh` under `key`, atomically, within the size bound (see ImportCacheOptions).
  /// RESOURCE_EXHAUSTED for an entry larger than the bound or kMaxImportCacheEntryBytes, the
  /// reserve callback's error, or
  /// INTERNAL when the folder cannot be written; the entry is not stored then.
  [[nodiscard]] absl::Status Store(std::string_view key, const MeshBuffers& mesh) const;

  /// The assembly entry for `key`; otherwise as Load. Mesh and assembly entries are separate
  /// files, so neither is ever read as the other.
  [[nodiscard]] absl::StatusOr<std::optional<ImportedAssembly>> LoadAssembly(
      std::string_view key) const;

  /// Stores `assembly` under `key`, atomically; otherwise as Store.
  [[nodiscard]] absl::Status StoreAssembly(std::string_view key,
                                           const ImportedAssembly& assembly) const;

  /// Bytes of the entries in the folder now.
  [[nodiscard]] std::uint64_t SizeBytes() const;

  /// Removes entries, least recently used first, until `bytes` are freed; returns the bytes
  /// freed. When all of them together are fewer bytes, it removes none (and returns 0): a room
  /// the cache cannot make is not worth its entries. Entries are only a cache: a disk quota can
  /// take its room back. Takes no lock (concurrent removals only find files gone), so that a
  /// reserve callback, which runs inside a store, may call it.
  std::uint64_t Evict(std::uint64_t bytes) const;

  /// The folder.
  [[nodiscard]] const std::string& dir() const { return dir_; }

 private:
  ImportCache(std::string dir, ImportCacheOptions options)
      : dir_(std::move(dir)),
        options_(std::move(options)),
        store_mu_(std::make_shared<std::mutex>()) {}
  template <typename T>
  absl::Status StoreBounded(std::string_view key, const T& value) const;

  std::string dir_;
  ImportCacheOptions options_;
  std::shared_ptr<std::mutex> store_mu_;  // one store (eviction and write) at a time
};

/// What ImportWithCache did.
struct CachedImport {
  MeshBuffers mesh;         ///< The tessellated file.
  std::string key;          ///< Its cache key.
  bool from_cache = false;  ///< Loaded from the cache (no worker ran).
  bool stored = false;      ///< A fresh import was written to the cache.
};

/// Imports through the cache: a hit loads the entry; a miss (or a damaged entry) runs
/// ImportIsolated and stores its result. A failed store does not fail the import (`stored`
/// says whether it happened); import errors are returned as ImportIsolated gives them, hashing
/// errors as Sha256OfFile gives them (`cancel` stops the hashing too). The file is hashed again
/// after a fresh import: when it changed meanwhile, the result may be of other content than the
/// key, so nothing is stored and the call returns ABORTED (import again).
[[nodiscard]] absl::StatusOr<CachedImport> ImportWithCache(
    const std::string& path, const TessellationOptions& options, const IsolationLimits& limits,
    const ImportCache& cache, const std::atomic<bool>* cancel = nullptr);

/// What ImportAssemblyWithCache did.
struct CachedAssemblyImport {
  ImportedAssembly assembly;  ///< The file's assembly tree with its tessellated parts.
  std::string key;            ///< Its cache key (ImportKind::kAssembly).
  bool from_cache = false;    ///< Loaded from the cache (no worker ran).
  bool stored = false;        ///< A fresh import was written to the cache.
};

/// ImportWithCache for assemblies: a hit loads the assembly entry; a miss (or a damaged entry)
/// runs ImportAssemblyIsolated and stores its result.
[[nodiscard]] absl::StatusOr<CachedAssemblyImport> ImportAssemblyWithCache(
    const std::string& path, const TessellationOptions& options, const IsolationLimits& limits,
    const ImportCache& cache, const std::atomic<bool>* cancel = nullptr);

}  // namespace clash::cad
