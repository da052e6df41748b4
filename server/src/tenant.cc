#include "tenant.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "auth.h"
#include "clash/geom/status_macros.h"
#include "log.h"
#include "storage.h"

namespace clash::server {

absl::Status Tenant::AdmitCall() {
  if (limits_.requests_per_second <= 0) return absl::OkStatus();
  const double capacity =
      std::max(1.0, limits_.burst > 0 ? limits_.burst : limits_.requests_per_second);
  std::lock_guard lock(bucket_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (refilled_ == std::chrono::steady_clock::time_point{}) {
    tokens_ = capacity;
  } else {
    const double elapsed = std::chrono::duration<double>(now - refilled_).count();
    tokens_ = std::min(capacity, tokens_ + elapsed * limits_.requests_per_second);
  }
  refilled_ = now;
  if (tokens_ < 1) {
    return Transient(absl::ResourceExhaustedError(absl::StrCat(
        "rate limit of tenant '", name_, "': ", limits_.requests_per_second, " calls/s")));
  }
  tokens_ -= 1;
  return absl::OkStatus();
}

absl::StatusOr<std::uint64_t> Tenant::StorageBytes() const {
  // Folder by folder, so that one that vanishes while it is walked (an import's upload or
  // worker folder under tmp/) is skipped alone: a recursive iterator stops its whole walk at
  // that error, and the quota then counted only what it had seen. Any other error fails the
  // count: a quota check must not pass on a partial total. Links are not followed.
  std::uint64_t total = 0;
  const std::filesystem::path scenes = std::filesystem::path(dir_) / "scenes";
  std::vector<std::filesystem::path> folders = {dir_};
  const auto vanished = [](const std::error_code& ec) {
    return ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory;
  };
  const auto cannot_count = [&](const std::filesystem::path& path, const std::error_code& ec) {
    return absl::InternalError(absl::StrCat("the storage of tenant '", name_,
                                            "' cannot be counted: ", path.string(), ": ",
                                            ec.message()));
  };
  while (!folders.empty()) {
    const std::filesystem::path folder = std::move(folders.back());
    folders.pop_back();
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(folder, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      std::error_code entry_ec;
      const std::filesystem::file_status st = it->symlink_status(entry_ec);
      if (std::filesystem::is_directory(st)) {
        folders.push_back(it->path());
      } else if (std::filesystem::is_regular_file(st)) {
        if (folder == scenes && IsDamagedFileName(it->path().filename().string())) continue;
        const std::uintmax_t size = std::filesystem::file_size(it->path(), entry_ec);
        if (!entry_ec) {
          total += size;
        } else if (!vanished(entry_ec)) {
          return cannot_count(it->path(), entry_ec);
        }
      }
    }
    if (ec && !vanished(ec)) return cannot_count(folder, ec);
  }
  return total;
}

absl::StatusOr<std::uint64_t> Tenant::FreeStorage(std::uint64_t more) const {
  CLASH_ASSIGN_OR_RETURN(std::uint64_t used, StorageBytes());
  const std::uint64_t quota = limits_.max_storage_bytes;
  // (Written so that no sum can wrap around: `more` comes from the client.)
  const bool could_fit = more <= quota && reserved_ <= quota - more;
  if (could_fit && used > quota - more - reserved_ && import_cache_) {
    // The import cache is only a cache: its least recently used entries make room first, when
    // they can (Evict leaves them all when the write would not fit even without them). It takes
    // no lock of the cache: a cache store may be what asks here.
    if (import_cache_->Evict(used - (quota - more - reserved_)) > 0) {
      CLASH_ASSIGN_OR_RETURN(used, StorageBytes());
    }
  }
  if (!could_fit || used > quota - more - reserved_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "storage quota of tenant '", name_, "': ", used, " of ", quota, " bytes used",
        reserved_ > 0 ? absl::StrCat(", ", reserved_, " set aside for writes in progress") : "",
        ", ", more, " more requested"));
  }
  return quota - more - reserved_ - used;
}

absl::StatusOr<std::uint64_t> Tenant::CheckStorage(std::uint64_t more) const {
  if (limits_.max_storage_bytes == 0) return std::numeric_limits<std::uint64_t>::max();
  std::lock_guard lock(storage_mu_);
  return FreeStorage(more);
}

absl::StatusOr<Tenant::StorageReservation> Tenant::ReserveStorage(std::uint64_t bytes) {
  StorageReservation out;
  if (limits_.max_storage_bytes == 0) return out;
  std::lock_guard lock(storage_mu_);
  CLASH_RETURN_IF_ERROR(FreeStorage(bytes).status());  // even for 0 bytes: over the quota?
  reserved_ += bytes;
  out.tenant_ = this;
  out.held_ = bytes;
  return out;
}

Tenant::StorageReservation& Tenant::StorageReservation::operator=(
    StorageReservation&& other) noexcept {
  if (this != &other) {
    Release();
    tenant_ = std::exchange(other.tenant_, nullptr);
    held_ = std::exchange(other.held_, 0);
  }
  return *this;
}

absl::Status Tenant::StorageReservation::Grow(std::uint64_t more, std::uint64_t want) {
  if (tenant_ == nullptr || (more == 0 && want == 0)) return absl::OkStatus();  // no walk
  std::lock_guard lock(tenant_->storage_mu_);
  CLASH_ASSIGN_OR_RETURN(const std::uint64_t free_after, tenant_->FreeStorage(more));
  const std::uint64_t take = more + std::min(want > more ? want - more : 0, free_after);
  tenant_->reserved_ += take;
  held_ += take;
  return absl::OkStatus();
}

void Tenant::StorageReservation::Written(std::uint64_t n) {
  if (tenant_ == nullptr) return;
  n = std::min(n, held_);
  std::lock_guard lock(tenant_->storage_mu_);
  tenant_->reserved_ -= n;
  held_ -= n;
}

void Tenant::StorageReservation::Release() { Written(held_); }

std::size_t Tenant::damaged_files() const {
  return PruneDamagedFiles(dir_ + "/scenes", absl::InfiniteDuration()).kept;
}

std::size_t Tenant::SweepDamagedFiles() const {
  return PruneDamagedFiles(dir_ + "/scenes", limits_.damaged_file_retention).removed;
}

absl::StatusOr<WorkLimiter::Permit> Tenant::TakeTicket(std::optional<WorkLimiter>& limiter,
                                                       int limit, const char* what) {
  if (!limiter) return WorkLimiter::Permit();
  absl::StatusOr<WorkLimiter::Permit> ticket = limiter->Acquire([] { return absl::OkStatus(); });
  if (absl::IsResourceExhausted(ticket.status())) {
    return Transient(absl::ResourceExhaustedError(
        absl::StrCat("tenant '", name_, "' has ", limit, " ", what, " already")));
  }
  return ticket;
}

absl::StatusOr<Tenant::ImportTicket> Tenant::StartImport() {
  return TakeTicket(imports_, limits_.max_concurrent_imports, "imports running");
}

absl::StatusOr<Tenant::QueryTicket> Tenant::StartQuery() {
  return TakeTicket(queries_, limits_.max_concurrent_queries, "queries running or waiting");
}

std::vector<std::shared_ptr<Tenant>> TenantRegistry::Opened() {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Tenant>> out;
  for (const auto& [name, tenant] : open_) out.push_back(tenant);
  return out;
}

std::optional<std::vector<std::shared_ptr<Tenant>>> TenantRegistry::OpenedIfFree() {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  std::vector<std::shared_ptr<Tenant>> out;
  for (const auto& [name, tenant] : open_) out.push_back(tenant);
  return out;
}

namespace {

// The folders of a tenant's folder (all made by the tenant's open).
constexpr const char* kTenantFolders[] = {"parts", "assemblies", "scenes", "import-cache", "tmp"};

// What a file of mode `mode` is, for a message.
const char* KindOf(mode_t mode) {
  if (S_ISREG(mode)) return "a file";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a folder";
}

// OK when `path` can serve as a folder of clashd's (a folder it may read, write and enter, or
// nothing yet: it is made then); else FAILED_PRECONDITION naming it and what is wrong. Reads
// only: nothing is changed.
absl::Status CheckFolder(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      struct stat link {};
      if (::lstat(path.c_str(), &link) == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, " is a symbolic link to nothing, where a folder should be"));
      }
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(
        absl::StrCat(path, " cannot be examined: ", std::strerror(err)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", KindOf(st.st_mode), ", where a folder should be"));
  }
  if (::faccessat(AT_FDCWD, path.c_str(), R_OK | W_OK | X_OK, AT_EACCESS) != 0) {
    const int err = errno;
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is a folder clashd (user ", ::geteuid(),
                     ") cannot read and write: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Tenant>> TenantRegistry::Get(const std::string& name) {
  if (!IsTenantName(name)) return absl::InvalidArgumentError("malformed tenant name");
  std::lock_guard lock(mu_);
  if (auto it = open_.find(name); it != open_.end()) return it->second;
  const auto unusable = unusable_.find(name);
  if (unusable != unusable_.end() && absl::Now() < unusable->second.next_try) {
    return unusable->second.why;
  }
  absl::StatusOr<std::shared_ptr<Tenant>> opened = Open(name);
  if (opened.ok()) {
    if (unusable != unusable_.end()) {
      LogLine(LogLevel::kInfo, absl::StrCat("tenant '", name, "' is served again"));
      unusable_.erase(unusable);
      unusable_count_.store(unusable_.size(), std::memory_order_relaxed);
    }
    open_.emplace(name, *opened);
    return opened;
  }
  // A folder that cannot be used (CheckFolder: FAILED_PRECONDITION) keeps the tenant unserved
  // until an operator repairs it. Any other failure (a full disk, too many open files, a failed
  // sync) may pass: the call answers it with its own code and the next call tries again.
  if (!absl::IsFailedPrecondition(opened.status())) {
    LogLine(LogLevel::kError,
            absl::StrCat("tenant '", name, "' could not be opened: ", opened.status().ToString()));
    return opened.status();
  }
  absl::Status why = absl::FailedPreconditionError(absl::StrCat(
      "tenant '", name, "' is not served: its folder cannot be used: ", opened.status().message(),
      retry_unusable_ == absl::InfiniteDuration() ? "; clashd serves it once repaired and restarted"
                                                  : "; clashd serves it once repaired"));
  if (unusable == unusable_.end() || unusable->second.why != why) {
    LogLine(LogLevel::kError, std::string(why.message()));
  }
  // Tried again after retry_unusable_, then at doubling intervals up to an hour.
  const absl::Duration delay = unusable == unusable_.end()
                                   ? retry_unusable_
                                   : std::clamp(2 * unusable->second.delay, retry_unusable_,
                                                std::max(retry_unusable_, absl::Hours(1)));
  unusable_[name] = {why, absl::Now() + delay, delay};
  unusable_count_.store(unusable_.size(), std::memory_order_relaxed);
  return why;
}

absl::StatusOr<std::shared_ptr<Tenant>> TenantRegistry::Open(const std::string& name) {
  auto tenant = std::shared_ptr<Tenant>(new Tenant(name, absl::StrCat(root_, "/", name), limits_));
  // Checked before anything in the folder is touched: a tenant that cannot be served loses
  // nothing (its upload folder is emptied, and leftover temporaries removed, only once every
  // folder is usable).
  CLASH_RETURN_IF_ERROR(CheckFolder(tenant->dir_));
  for (const char* folder : kTenantFolders) {
    CLASH_RETURN_IF_ERROR(CheckFolder(absl::StrCat(tenant->dir_, "/", folder)));
  }
  // Only this process writes these folders (its owner holds the data folder's lock), and none
  // of its writes into them is under way before the tenant is open: every temporary there is
  // left over, whatever process its name says wrote it (after a crash, another process may have
  // that pid now). The stores' opens below remove what is left by their own rule.
  for (const char* folder : {"parts", "assemblies", "scenes"}) {
    RemoveAllTemporaries(absl::StrCat(tenant->dir_, "/", folder));
  }
  CLASH_ASSIGN_OR_RETURN(tenant->parts_, PartStore::Open(tenant->dir_, max_part_triangles_));
  CLASH_ASSIGN_OR_RETURN(
      tenant->scenes_,
      SceneStore::Open(tenant->dir_ + "/scenes", tenant->parts_.get(), pair_cache_budget_));
  // Damaged scene files kept past their retention go (each removal logged).
  tenant->SweepDamagedFiles();
  cad::ImportCacheOptions cache_options;
  cache_options.max_bytes = limits_.import_cache_max_bytes;
  // An entry is set aside under the quota before it is written (which may evict older ones:
  // the lock order is the cache's store, then storage_mu_; Evict takes neither).
  cache_options.reserve =
      [t = tenant.get()](std::uint64_t bytes) -> absl::StatusOr<std::shared_ptr<void>> {
    CLASH_ASSIGN_OR_RETURN(Tenant::StorageReservation room, t->ReserveStorage(bytes));
    return std::make_shared<Tenant::StorageReservation>(std::move(room));
  };
  CLASH_ASSIGN_OR_RETURN(
      cad::ImportCache cache,
      cad::ImportCache::Open(tenant->dir_ + "/import-cache", std::move(cache_options)));
  // A kill between a cache entry's temporary and its rename leaves the temporary behind. The
  // cache may be shared (clash-import --cache-dir): a running writer's temporaries stay. Here,
  // not in ImportCache::Open: this process writes nothing into the cache before its tenant is
  // open, while an open cache may be opened again by another thread that is writing.
  RemoveAbandonedTemporaries(cache.dir());
  // A bound lowered since the entries were written holds from the start.
  if (const std::uint64_t size = cache.SizeBytes(); size > limits_.import_cache_max_bytes) {
    cache.Evict(size - limits_.import_cache_max_bytes);
  }
  tenant->import_cache_.emplace(std::move(cache));
  {
    std::error_code ec;
    std::filesystem::remove_all(tenant->tmp_dir(), ec);
  }
  CLASH_RETURN_IF_ERROR(MakeDirs(tenant->tmp_dir()));
  return tenant;
}

}  // namespace clash::server
