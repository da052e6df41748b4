// Tenants: each has its own part store, scene store, import cache and upload folder under
// <data-dir>/tenants/<name>, so one tenant's ids name nothing of another's, and its own quotas.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clash/cad/import_cache.h"
#include "limiter.h"
#include "part_store.h"
#include "scene.h"

namespace clash::server {

/// Per-tenant limits; 0 means no limit.
struct TenantLimits {
  /// Bytes on disk (parts, assemblies, scenes, import cache, uploads in progress). The import
  /// cache's least recently used entries are evicted before a write is refused for it.
  std::uint64_t max_storage_bytes = 0;
  /// Bytes of the import cache (unlike the others, 0 means no entries: nothing is cached).
  std::uint64_t import_cache_max_bytes = std::uint64_t{1} << 30;
  /// Imports of the tenant running or waiting at once.
  int max_concurrent_imports = 0;
  /// Queries (and part builds) of the tenant running or waiting for a query slot at once, so
  /// that one tenant cannot fill every slot and the whole queue.
  int max_concurrent_queries = 0;
  /// Calls per second (token bucket) and the burst above that rate.
  double requests_per_second = 0;
  double burst = 0;
  /// How long a scene file set aside as damaged is kept (counted from the time in its name,
  /// see MoveAsideDamaged) before it is removed, when the tenant opens and at every
  /// SweepDamagedFiles; InfiniteDuration keeps them until an operator removes them.
  absl::Duration damaged_file_retention = absl::Hours(30 * 24);
};

class Tenant {
 public:
  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] const std::string& dir() const { return dir_; }
  /// The folder for upload temporaries (emptied when the tenant is opened).
  [[nodiscard]] std::string tmp_dir() const { return dir_ + "/tmp"; }

  /// Held shared by every call that can begin a new use of a stored part (an import or upload
  /// storing parts and assemblies, AddInstances) from before it looks the parts up until its
  /// use is stored; held exclusively by DeletePart and DeleteAssembly, so that the scenes and
  /// assemblies they check cannot gain a use of what they delete.
  std::shared_timed_mutex part_uses_mu;

  PartStore& parts() { return *parts_; }
  SceneStore& scenes() { return *scenes_; }
  cad::ImportCache& import_cache() { return *import_cache_; }

  /// Takes one call from the rate budget: RESOURCE_EXHAUSTED when it is spent.
  [[nodiscard]] absl::Status AdmitCall();

  /// Bytes the tenant's folder holds now (a walk of the folder, done only for writes; files
  /// and folders removed while it walks are skipped), but for the scene files set aside as
  /// damaged: the tenant did not make them and cannot remove them (they are bounded by their
  /// retention instead). INTERNAL when a folder or file cannot be read: a quota must not pass
  /// on a partial count.
  [[nodiscard]] absl::StatusOr<std::uint64_t> StorageBytes() const;
  /// RESOURCE_EXHAUSTED when adding `more` bytes would pass the storage quota, counting the
  /// bytes on disk and those other writes have set aside (StorageReservation); returns the
  /// bytes still free (UINT64_MAX without a quota). When the import cache's entries stand in
  /// the way, and removing them makes room, it evicts them first (as ReserveStorage and Grow).
  [[nodiscard]] absl::StatusOr<std::uint64_t> CheckStorage(std::uint64_t more) const;

  /// Bytes of the storage quota set aside for a write in progress (an upload, an import's
  /// parts), so that writes running at once cannot together pass the quota that each was
  /// checked against alone. The bytes are held until marked written (they are then on disk,
  /// where the quota counts them) or until the reservation is destroyed. Bytes written but not
  /// yet marked so count twice (on disk and held) until they are marked or the reservation
  /// ends (for a mesh upload and an import's parts, until the call returns): the quota may
  /// refuse a little early, never let a write past it. Empty, and free, without a quota.
  /// Move-only; must not outlive its tenant (tenants stay open while the server runs).
  class StorageReservation {
   public:
    StorageReservation() = default;
    StorageReservation(StorageReservation&& other) noexcept { *this = std::move(other); }
    StorageReservation& operator=(StorageReservation&& other) noexcept;
    StorageReservation(const StorageReservation&) = delete;
    StorageReservation& operator=(const StorageReservation&) = delete;
    ~StorageReservation() { Release(); }

    /// Bytes still held.
    [[nodiscard]] std::uint64_t held() const { return held_; }
    /// Sets aside `more` bytes besides those held: RESOURCE_EXHAUSTED (nothing more held) when
    /// they would pass the quota. With `want` > `more`, sets aside up to `want` when the quota
    /// leaves room (one walk of the tenant's folder either way; none for nothing at all).
    [[nodiscard]] absl::Status Grow(std::uint64_t more, std::uint64_t want = 0);
    /// `n` of the bytes held are now written: no longer held (at most held()).
    void Written(std::uint64_t n);

   private:
    friend class Tenant;
    void Release();
    Tenant* tenant_ = nullptr;
    std::uint64_t held_ = 0;
  };
  /// Sets aside `bytes` of the storage quota: RESOURCE_EXHAUSTED when they would pass it (as
  /// CheckStorage). The reservation can grow as a write of unknown size goes on.
  [[nodiscard]] absl::StatusOr<StorageReservation> ReserveStorage(std::uint64_t bytes);

  /// Scene files set aside as damaged in the tenant's folder now (a listing of scenes/).
  [[nodiscard]] std::size_t damaged_files() const;
  /// Removes the scene files set aside as damaged longer ago than the limits' retention (each
  /// removal logged); returns how many it removed.
  std::size_t SweepDamagedFiles() const;

  /// Held while an import of this tenant runs (empty without a limit).
  using ImportTicket = WorkLimiter::Permit;
  /// RESOURCE_EXHAUSTED when the tenant already has its maximum of imports.
  [[nodiscard]] absl::StatusOr<ImportTicket> StartImport();
  /// Held while a query of this tenant runs or waits for a query slot (empty without a limit).
  using QueryTicket = WorkLimiter::Permit;
  /// RESOURCE_EXHAUSTED when the tenant already has its maximum of queries.
  [[nodiscard]] absl::StatusOr<QueryTicket> StartQuery();

 private:
  friend class TenantRegistry;
  // The bytes free after `more` (with a quota), or RESOURCE_EXHAUSTED: walks the folder, and
  // evicts import cache entries to make room before it refuses. Called with storage_mu_ held.
  absl::StatusOr<std::uint64_t> FreeStorage(std::uint64_t more) const;
  // A ticket of `limiter` (none without a limit): RESOURCE_EXHAUSTED at once, naming `limit`
  // and `what`, when the tenant holds all of them.
  absl::StatusOr<WorkLimiter::Permit> TakeTicket(std::optional<WorkLimiter>& limiter, int limit,
                                                 const char* what);
  Tenant(std::string name, std::string dir, const TenantLimits& limits)
      : name_(std::move(name)), dir_(std::move(dir)), limits_(limits) {
    // No queue: an import beyond the limit is refused at once.
    if (limits.max_concurrent_imports > 0)
      imports_.emplace(name_, limits.max_concurrent_imports, 0);
    if (limits.max_concurrent_queries > 0)
      queries_.emplace(name_, limits.max_concurrent_queries, 0);
  }

  std::string name_;
  std::string dir_;
  TenantLimits limits_;
  std::unique_ptr<PartStore> parts_;
  std::unique_ptr<SceneStore> scenes_;
  std::optional<cad::ImportCache> import_cache_;
  std::optional<WorkLimiter> imports_;
  std::optional<WorkLimiter> queries_;
  // Serialises the quota's checks and reservations (a check walks the folder under it).
  mutable std::mutex storage_mu_;
  std::uint64_t reserved_ = 0;  // bytes set aside by StorageReservations, under storage_mu_
  std::mutex bucket_mu_;
  double tokens_ = 0;
  std::chrono::steady_clock::time_point refilled_{};
};

/// Opens tenants on first use (loading their scenes) and keeps them open. Its owner holds the
/// data folder's DataFolderLock (ClashServer does): a tenant's parts, assemblies and scenes are
/// then written by this process alone, so every temporary found there when the tenant opens is
/// a leftover of an interrupted write, and is removed (the import cache, which clash-import may
/// share, keeps those of writers still running).
///
/// A tenant whose folder cannot be used (a file where one of its folders should be, a folder
/// clashd may not read or write) is not served, alone: Get answers FAILED_PRECONDITION naming
/// the folder and what is wrong, and the error is logged once. Its folder is checked before
/// anything in it is touched, so nothing there is removed or overwritten. Get tries to open it
/// again `retry_unusable` after a failure, then at doubling intervals up to an hour (never, with
/// InfiniteDuration), so that it is served once an operator repairs the folder. Any other
/// failure to open a tenant (a full disk, too many open files, a failed sync) is answered with
/// its own code, logged, and tried again at the next call.
class TenantRegistry {
 public:
  /// `pair_cache_budget`: shared by every tenant's scenes (null: one per scene).
  TenantRegistry(std::string data_dir, std::size_t max_part_triangles, TenantLimits limits,
                 std::shared_ptr<PairCacheBudget> pair_cache_budget = nullptr,
                 absl::Duration retry_unusable = absl::InfiniteDuration())
      : root_(std::move(data_dir) + "/tenants"),
        max_part_triangles_(max_part_triangles),
        limits_(limits),
        pair_cache_budget_(std::move(pair_cache_budget)),
        retry_unusable_(retry_unusable) {}

  /// The tenant of this name (a valid tenant name), opening its stores when needed.
  /// FAILED_PRECONDITION when its folder cannot be used (see above).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Tenant>> Get(const std::string& name);
  /// Tenants not served because their folder cannot be used (found so by Get).
  [[nodiscard]] std::size_t unusable() const {
    return unusable_count_.load(std::memory_order_relaxed);
  }

  [[nodiscard]] const std::string& root() const { return root_; }
  /// The tenants opened so far.
  [[nodiscard]] std::vector<std::shared_ptr<Tenant>> Opened();
  /// Opened(), or nullopt when a tenant is being opened (without waiting for that).
  [[nodiscard]] std::optional<std::vector<std::shared_ptr<Tenant>>> OpenedIfFree();

 private:
  std::string root_;
  std::size_t max_part_triangles_;
  TenantLimits limits_;
  std::shared_ptr<PairCacheBudget> pair_cache_budget_;
  absl::Duration retry_unusable_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Tenant>> open_;
  /// A tenant whose folder cannot be used: why, and when Get tries it again.
  struct Unusable {
    absl::Status why;
    absl::Time next_try;
    absl::Duration delay;  // since the last try
  };
  std::map<std::string, Unusable> unusable_;    // under mu_
  std::atomic<std::size_t> unusable_count_{0};  // its size, read without mu_ (metrics)

  // Opens the tenant's stores (Get, with mu_ held).
  absl::StatusOr<std::shared_ptr<Tenant>> Open(const std::string& name);
};

}  // namespace clash::server
