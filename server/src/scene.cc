#include "scene.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "clash/geom/status_macros.h"
#include "convert.h"
#include "log.h"
#include "server/proto/store.pb.h"
#include "storage.h"

namespace clash::server {
namespace {

constexpr std::size_t kMaxSceneFileBytes = std::size_t{1} << 30;
// How far from orthonormal a stored rotation may be (see Load).
constexpr double kStoredRotationTolerance = 1e-4;

geom::Aabb WorldBox(const InstanceRec& rec) {
  return rec.part->geom->bounds().Transformed(rec.X_WP);
}

}  // namespace

void Scene::Add(InstanceRec rec) {
  max_deflection_mm = std::max(max_deflection_mm, rec.part->deflection_mm);
  max_part_diagonal_mm = std::max(max_part_diagonal_mm, rec.part->geom->bounds().Diagonal());
  rec.world_box = WorldBox(rec);
  rec.pose_version = ++pose_clock;
  rec.proxy = rec.enabled ? tree.Insert(rec.world_box, rec.id) : -1;
  by_path[rec.path] = rec.id;
  for (const std::string& g : rec.groups) groups[g].insert(rec.id);
  const uint64_t id = rec.id;
  instances.emplace(id, std::move(rec));
  ++changes;
}

absl::Status Scene::CheckReach(const geom::Aabb& world_box, absl::FunctionRef<std::string()> what) {
  // Written so that a NaN coordinate fails the test.
  if (!world_box.IsEmpty() && (world_box.min.array() >= -kMaxCoordinateMm).all() &&
      (world_box.max.array() <= kMaxCoordinateMm).all()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what(), " beyond the scene's reach: world coordinates must stay within ±",
                   kMaxCoordinateMm, " mm, where a double still resolves the tolerances"));
}

absl::Status Scene::CheckPlaceable(const PartEntry& part, const geom::RigidTransform& X_WP,
                                   const std::string& what) {
  return CheckReach(part.geom->bounds().Transformed(X_WP),
                    [&] { return absl::StrCat(what, " places the part"); });
}

void Scene::SetPose(InstanceRec& rec, const geom::RigidTransform& X_WP) {
  // The same pose: nothing changes, so its pairs stay cached (pose_version is their key).
  if (rec.X_WP.R == X_WP.R && rec.X_WP.t == X_WP.t && (rec.proxy >= 0 || !rec.enabled)) return;
  rec.X_WP = X_WP;
  rec.world_box = WorldBox(rec);
  rec.pose_version = ++pose_clock;
  ++changes;
  if (rec.proxy >= 0) {
    tree.Move(rec.proxy, rec.world_box);
  } else if (rec.enabled) {
    // (Enabled but outside the tree: a stored pose the tree refused. Back in reach, it goes in.)
    rec.proxy = tree.Insert(rec.world_box, rec.id);
  }
}

void Scene::SetEnabled(InstanceRec& rec, bool enabled) {
  if (rec.enabled == enabled) return;
  rec.enabled = enabled;
  ++changes;
  if (enabled) {
    rec.proxy = tree.Insert(rec.world_box, rec.id);
  } else {
    tree.Remove(rec.proxy);
    rec.proxy = -1;
  }
}

void Scene::Remove(uint64_t id) {
  auto it = instances.find(id);
  if (it == instances.end()) return;
  InstanceRec& rec = it->second;
  if (rec.proxy >= 0) tree.Remove(rec.proxy);
  by_path.erase(rec.path);
  for (const std::string& g : rec.groups) {
    auto git = groups.find(g);
    if (git == groups.end()) continue;
    git->second.erase(id);
    if (git->second.empty()) groups.erase(git);
  }
  instances.erase(it);
  ++changes;
}

void Scene::SetGroup(const std::string& group, const std::set<uint64_t>& members) {
  const auto old = groups.find(group);
  if (old == groups.end() ? members.empty() : old->second == members) return;
  ++changes;
  if (old != groups.end()) {
    for (uint64_t id : old->second) {
      if (InstanceRec* rec = Find(id)) rec->groups.erase(group);
    }
    groups.erase(old);
  }
  for (uint64_t id : members) {
    if (InstanceRec* rec = Find(id)) {
      rec->groups.insert(group);
      groups[group].insert(id);
    }
  }
}

void Scene::Touch() {
  ++version;
  update_time_s = absl::ToUnixSeconds(absl::Now());
}

namespace {

// The steady clock in ns: idleness must not jump with the wall clock.
int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// How long a scan that found no idle cache to empty is not repeated (PairCacheBudget).
constexpr int64_t kNoScanNs = 100'000'000;

}  // namespace

bool PairCacheBudget::Take() {
  // Atomically: scenes fill their caches at once.
  std::size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (used >= max_) return false;
  } while (!used_.compare_exchange_weak(used, used + 1, std::memory_order_relaxed));
  return true;
}

bool PairCacheBudget::TakeFromIdle(const PairCache* self) {
  if (idle_ == absl::InfiniteDuration()) return false;
  const int64_t now = SteadyNowNs();
  if (now < no_scan_until_ns_.load(std::memory_order_relaxed)) return false;
  const int64_t idle_before = now - absl::ToInt64Nanoseconds(idle_);
  std::lock_guard lock(mu_);
  std::vector<std::pair<int64_t, PairCache*>> idle;
  for (PairCache* c : caches_) {
    const int64_t last = c->last_use_ns_.load(std::memory_order_relaxed);
    if (c != self && last <= idle_before && c->entries_.load(std::memory_order_relaxed) > 0) {
      idle.emplace_back(last, c);
    }
  }
  std::sort(idle.begin(), idle.end());
  for (const auto& [last, c] : idle) {
    // (A cache in use is skipped: waiting here, under mu_, for a guard whose holder may be
    // waiting for mu_ would deadlock.)
    std::unique_lock guard(*c->guard_, std::try_to_lock);
    if (!guard.owns_lock()) continue;
    // Used since the scan above (before its guard was taken): not idle after all.
    if (c->last_use_ns_.load(std::memory_order_relaxed) > idle_before) continue;
    c->Clear();
    if (Take()) return true;
  }
  no_scan_until_ns_.store(now + kNoScanNs, std::memory_order_relaxed);
  return false;
}

PairCache::PairCache(std::shared_ptr<PairCacheBudget> budget, std::mutex* guard)
    : budget_(budget != nullptr ? std::move(budget)
                                : std::make_shared<PairCacheBudget>(kDefaultEntries)),
      guard_(guard) {
  Used();
  if (guard_ != nullptr) {
    std::lock_guard lock(budget_->mu_);
    budget_->caches_.push_back(this);
  }
}

PairCache::~PairCache() {
  if (guard_ != nullptr) {
    std::lock_guard lock(budget_->mu_);
    std::erase(budget_->caches_, this);
  }
  Clear();
}

void PairCache::Used() const { last_use_ns_.store(SteadyNowNs(), std::memory_order_relaxed); }

const CachedPair* PairCache::Find(const Key& key) const {
  Used();
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

void PairCache::Put(const Key& key, const CachedPair& value) {
  if (budget_->max_entries() == 0) return;
  Used();
  if (auto it = map_.find(key); it != map_.end()) {
    it->second = value;
    return;
  }
  if (!budget_->Take() && !budget_->TakeFromIdle(this)) {
    Clear();
    if (!budget_->Take()) return;
  }
  map_.emplace(key, value);
  entries_.store(map_.size(), std::memory_order_relaxed);
}

void PairCache::Clear() {
  budget_->used_.fetch_sub(map_.size(), std::memory_order_relaxed);
  map_.clear();
  entries_.store(0, std::memory_order_relaxed);
}

const InstanceRec* Scene::Find(uint64_t id) const {
  auto it = instances.find(id);
  return it == instances.end() ? nullptr : &it->second;
}

InstanceRec* Scene::Find(uint64_t id) {
  auto it = instances.find(id);
  return it == instances.end() ? nullptr : &it->second;
}

void Scene::ToProto(v1::Scene* out) const {
  out->set_scene_id(id_);
  out->set_name(name);
  out->set_version(version);
  out->set_instance_count(instances.size());
  for (const auto& [g, members] : groups) (*out->mutable_group_sizes())[g] = members.size();
  out->set_create_time_s(create_time_s);
  out->set_update_time_s(update_time_s);
}

void Scene::InstanceToProto(const InstanceRec& rec, v1::Instance* out) {
  out->set_instance_id(rec.id);
  out->set_part_id(rec.part->info.part_id());
  out->set_path(rec.path);
  out->set_name(rec.name);
  server::ToProto(rec.X_WP, out->mutable_pose());
  out->set_enabled(rec.enabled);
  for (const std::string& g : rec.groups) out->add_groups(g);
  server::ToProto(rec.world_box, out->mutable_world_bounds());
}

absl::StatusOr<std::unique_ptr<SceneStore>> SceneStore::Open(
    std::string dir, PartStore* parts, std::shared_ptr<PairCacheBudget> pair_cache_budget) {
  std::unique_ptr<SceneStore> store(
      new SceneStore(std::move(dir), parts, std::move(pair_cache_budget)));
  CLASH_RETURN_IF_ERROR(MakeDirs(store->dir_));
  RemoveAbandonedTemporaries(store->dir_);
  // A folder that cannot be listed fails the open: serving no scene would hide the ones on
  // disk, from clients and from DeletePart's check of the parts they use.
  CLASH_ASSIGN_OR_RETURN(const std::set<std::string> ids, IdsInFolder(store->dir_, 's'));
  for (const std::string& id : ids) {
    const std::string path = store->ScenePath(id);
    auto scene = std::make_shared<Scene>(id, store->pair_cache_budget_);
    absl::Status st = store->Load(path, *scene);
    if (absl::IsNotFound(st)) continue;  // removed since the listing
    if (!st.ok() && !absl::IsDataLoss(st) && !absl::IsInvalidArgument(st)) {
      // The file may be sound: one of its parts does not load (damaged, or above a lowered
      // triangle limit), or the file itself does not read now (permissions, I/O). Moved
      // aside, the scene would be lost for good; kept, it is served again once it and its
      // parts load (RetryUnserved, or a later start), and it holds every part it may name
      // meanwhile.
      LogLine(LogLevel::kError, absl::StrCat("scene store: scene ", id, " is not served: ",
                                             st.message(), "; its file is kept"));
      std::lock_guard lock(store->mu_);
      store->KeepUnserved(id, std::string(st.message()));
      continue;
    }
    if (!st.ok()) {  // the file reads but is not a scene: damaged
      LogLine(LogLevel::kError, absl::StrCat("scene store: cannot load ", path, ": ", st.ToString(),
                                             "; moved aside to .damaged"));
      (void)MoveAsideDamaged(path);  // (logged when it fails: the file then stays)
      continue;
    }
    store->scenes_.emplace(id, std::move(scene));
  }
  return store;
}

std::string SceneStore::ScenePath(const std::string& id) const {
  return absl::StrCat(dir_, "/", id, ".pb");
}

absl::Status SceneStore::Load(const std::string& path, Scene& scene) {
  CLASH_ASSIGN_OR_RETURN(std::string bytes, ReadFileCapped(path, kMaxSceneFileBytes));
  CLASH_ASSIGN_OR_RETURN(const std::string_view payload, UnsealRecord(bytes));
  store::v1::StoredScene stored;
  if (!stored.ParseFromArray(payload.data(), static_cast<int>(payload.size())) ||
      stored.scene_id() != scene.id()) {
    return absl::DataLossError("scene file does not parse");
  }
  // (Every scene written has a version and hands out ids from 1: zeros are a file damaged in a
  // way that still parses, as an older, unsealed one cut short can be.)
  if (stored.version() == 0 || stored.next_instance_id() == 0) {
    return absl::DataLossError("scene file has no version or next instance id");
  }
  scene.instances.clear();
  scene.by_path.clear();
  scene.groups.clear();
  scene.tree = geom::DynamicAabbTree();
  scene.max_deflection_mm = 0;
  scene.max_part_diagonal_mm = 0;
  {
    std::lock_guard lock(scene.cache_mu);
    scene.pair_cache.Clear();
  }
  scene.name = stored.name();
  scene.version = stored.version();
  scene.next_instance_id = stored.next_instance_id();
  scene.create_time_s = stored.create_time_s();
  scene.update_time_s = stored.update_time_s();
  for (const store::v1::StoredInstance& si : stored.instances()) {
    InstanceRec rec;
    rec.id = si.instance_id();
    // What no edit writes: a file edited or damaged (moved aside by the callers, as one that
    // does not parse), rather than a scene with two instances of one id or path, or ids reused.
    if (rec.id == 0 || rec.id >= scene.next_instance_id || scene.instances.contains(rec.id) ||
        si.path().empty() || scene.by_path.contains(si.path())) {
      return absl::DataLossError(
          absl::StrCat("scene file holds instance ", rec.id, " (path '", si.path(),
                       "'), which is a repeat, has no path, or is not below the next instance id ",
                       scene.next_instance_id));
    }
    absl::StatusOr<std::shared_ptr<const PartEntry>> part = parts_->Get(si.part_id());
    if (!part.ok()) {
      return absl::UnavailableError(absl::StrCat("part ", si.part_id(), " of instance ", rec.id,
                                                 " does not load: ", part.status().message()));
    }
    rec.part = *std::move(part);
    rec.path = si.path();
    rec.name = si.name();
    // Stored exactly as held: an instance of an assembly holds the product of the client's pose
    // (orthonormal within 1e-6) and the assembly's, which may be up to ~3e-6 off.
    CLASH_ASSIGN_OR_RETURN(rec.X_WP, PoseFromProto(si.pose(), rec.path, kStoredRotationTolerance));
    rec.enabled = si.enabled();
    rec.groups.insert(si.groups().begin(), si.groups().end());
    scene.Add(std::move(rec));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Scene>> SceneStore::Create(const std::string& name,
                                                          const GrowthCheck& grows) {
  auto scene = std::make_shared<Scene>("s" + RandomHex(4), pair_cache_budget_);
  scene->name = name;
  scene->create_time_s = absl::ToUnixSeconds(absl::Now());
  scene->update_time_s = scene->create_time_s;
  scene->version = 1;
  {
    std::unique_lock lock(scene->mu);
    if (absl::Status st = Commit(*scene, grows); !st.ok()) {
      // Written but not synced: the caller is told the scene was not made, so its file goes
      // (it would be a scene nobody knows the id of, and a restart would serve it).
      const std::string path = ScenePath(scene->id());
      if (!FileGone(path)) {
        if (absl::Status removed = RemoveFileDurably(path); !removed.ok()) {
          LogLine(LogLevel::kError,
                  absl::StrCat("scene store: a scene not made stays on disk: ", removed.message()));
        }
        return absl::InternalError(absl::StrCat("scene not created: ", st.message()));
      }
      return st;
    }
  }
  std::lock_guard lock(mu_);
  scenes_.emplace(scene->id(), scene);
  return scene;
}

absl::StatusOr<std::shared_ptr<Scene>> SceneStore::Get(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = scenes_.find(id);
  if (it == scenes_.end()) {
    if (auto u = unserved_.find(id); u != unserved_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("scene ", id, " is not served: ", u->second.why,
                       "; clashd serves it again once it loads (it tries again from time to "
                       "time, and at a start), or delete it"));
    }
    return absl::NotFoundError(absl::StrCat("no scene ", id));
  }
  return it->second;
}

std::vector<std::shared_ptr<Scene>> SceneStore::List(const std::string& after,
                                                     std::size_t limit) const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Scene>> out;
  for (auto it = scenes_.upper_bound(after); it != scenes_.end() && out.size() < limit; ++it) {
    out.push_back(it->second);
  }
  return out;
}

template <typename Lock>
absl::StatusOr<Lock> SceneStore::LockScene(const Scene& scene, absl::Time deadline) const {
  Lock lock(scene.mu, absl::ToChronoTime(deadline));
  if (!lock.owns_lock()) {
    return absl::DeadlineExceededError(
        absl::StrCat("scene ", scene.id(), " is busy (",
                     std::is_same_v<Lock, std::unique_lock<std::shared_timed_mutex>>
                         ? "a running query or sequence holds it"
                         : "an edit holds it",
                     "); try again"));
  }
  if (scene.deleted) {  // deleted, or no longer served: what Get answers for its id now
    absl::Status now = Get(scene.id()).status();
    if (now.ok()) {  // served again since (RetryUnserved), as another object
      return absl::AbortedError(absl::StrCat(
          "scene ", scene.id(), " was loaded again while this call waited; try again"));
    }
    return now;
  }
  return lock;
}

template <typename Lock>
absl::StatusOr<Lock> SceneStore::LockCurrent(std::shared_ptr<Scene>* scene,
                                             absl::Time deadline) const {
  for (;;) {  // (each turn needs the scene served anew; the deadline bounds the waits)
    absl::StatusOr<Lock> lock = LockScene<Lock>(**scene, deadline);
    if (!absl::IsAborted(lock.status())) return lock;
    CLASH_ASSIGN_OR_RETURN(*scene, Get((*scene)->id()));
  }
}

absl::StatusOr<std::unique_lock<std::shared_timed_mutex>> SceneStore::LockCurrentForWrite(
    std::shared_ptr<Scene>* scene, absl::Time deadline) const {
  return LockCurrent<std::unique_lock<std::shared_timed_mutex>>(scene, deadline);
}

absl::StatusOr<std::shared_lock<std::shared_timed_mutex>> SceneStore::LockCurrentForRead(
    std::shared_ptr<Scene>* scene, absl::Time deadline) const {
  return LockCurrent<std::shared_lock<std::shared_timed_mutex>>(scene, deadline);
}

absl::StatusOr<std::unique_lock<std::shared_timed_mutex>> SceneStore::LockForWrite(
    Scene& scene, absl::Time deadline) const {
  return LockScene<std::unique_lock<std::shared_timed_mutex>>(scene, deadline);
}

absl::StatusOr<std::shared_lock<std::shared_timed_mutex>> SceneStore::LockForRead(
    const Scene& scene, absl::Time deadline) const {
  return LockScene<std::shared_lock<std::shared_timed_mutex>>(scene, deadline);
}

absl::StatusOr<std::optional<std::string>> SceneStore::FirstUserOf(const std::string& part_id,
                                                                   absl::Time deadline) const {
  std::vector<std::pair<std::string, std::shared_ptr<Scene>>> scenes;  // id order, all of them
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, scene] : scenes_) scenes.emplace_back(id, scene);
    for (const auto& [id, unserved] : unserved_) scenes.emplace_back(id, nullptr);
  }
  std::sort(scenes.begin(), scenes.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // A scene not served is read from its file: it holds every part its file names.
  const auto user_from_file = [&](const std::string& id) -> std::optional<std::string> {
    absl::StatusOr<std::string> bytes = ReadFileCapped(ScenePath(id), kMaxSceneFileBytes);
    if (absl::IsNotFound(bytes.status())) return std::nullopt;  // deleted meanwhile
    store::v1::StoredScene stored;
    absl::StatusOr<std::string_view> payload =
        bytes.ok() ? UnsealRecord(*bytes) : absl::StatusOr<std::string_view>(bytes.status());
    if (!payload.ok() ||
        !stored.ParseFromArray(payload->data(), static_cast<int>(payload->size()))) {
      return absl::StrCat("scene ", id,
                          ", which is not served and whose file does not read (delete it)");
    }
    for (const store::v1::StoredInstance& si : stored.instances()) {
      if (si.part_id() == part_id) {
        return absl::StrCat("scene ", id,
                            ", which is not served (delete it, or let its parts load: clashd "
                            "serves it again then)");
      }
    }
    return std::nullopt;
  };
  for (const auto& [id, listed] : scenes) {
    if (std::shared_ptr<Scene> scene = listed) {
      // Served when listed: read under its lock (the object served now, when it was served
      // again meanwhile).
      absl::StatusOr<std::shared_lock<std::shared_timed_mutex>> lock =
          LockCurrentForRead(&scene, deadline);
      if (absl::IsDeadlineExceeded(lock.status())) return lock.status();
      if (lock.ok()) {
        for (const auto& [instance_id, rec] : scene->instances) {
          if (rec.part->info.part_id() == part_id) {
            return absl::StrCat("scene ", id, " (remove its instances first)");
          }
        }
        continue;
      }
      if (!absl::IsFailedPrecondition(lock.status())) continue;  // deleted meanwhile
    }
    // Not served (now): its file tells.
    if (std::optional<std::string> user = user_from_file(id)) return user;
  }
  return std::nullopt;
}

absl::Status SceneStore::Delete(const std::string& id, absl::Time deadline) {
  // A scene not served is only its file. A served scene may stop being served while this call
  // waits for its lock (then it is deleted as such), or be served again as another object
  // (LockCurrentForWrite then waits for that one).
  const auto delete_unserved = [&]() -> std::optional<absl::Status> {
    std::lock_guard lock(mu_);
    auto u = unserved_.find(id);
    if (u == unserved_.end()) return std::nullopt;
    absl::Status removed = RemoveFileDurably(ScenePath(id));
    if (!removed.ok() && !FileGone(ScenePath(id))) return removed;
    unserved_.erase(u);
    unserved_count_.store(unserved_.size(), std::memory_order_relaxed);
    return removed;
  };
  for (;;) {
    if (std::optional<absl::Status> done = delete_unserved()) return *done;
    absl::StatusOr<std::shared_ptr<Scene>> got = Get(id);
    if (absl::IsFailedPrecondition(got.status())) continue;  // stopped being served just now
    CLASH_ASSIGN_OR_RETURN(std::shared_ptr<Scene> scene, std::move(got));
    // The scene's lock first, without the store's: a query may hold it for long, and Get must
    // not wait for that.
    absl::StatusOr<std::unique_lock<std::shared_timed_mutex>> scene_lock =
        LockCurrentForWrite(&scene, deadline);
    if (absl::IsFailedPrecondition(scene_lock.status())) continue;  // now as not served
    if (!scene_lock.ok()) return scene_lock.status();
    std::lock_guard lock(mu_);
    auto it = scenes_.find(id);
    if (it == scenes_.end() || it->second != scene) {
      return absl::NotFoundError(absl::StrCat("no scene ", id));
    }
    // A file removed whose folder could not be synced is gone as far as anyone can see: the
    // scene too (the error says a crash may bring it back).
    absl::Status removed = RemoveFileDurably(ScenePath(id));
    if (!removed.ok() && !FileGone(ScenePath(id))) return removed;
    scene->deleted = true;  // an edit that fetched it before cannot write it back
    scenes_.erase(it);
    return removed;
  }
}

absl::Status SceneStore::Commit(Scene& scene, const GrowthCheck& grows) {
  if (scene.deleted) return absl::NotFoundError(absl::StrCat("no scene ", scene.id()));
  store::v1::StoredScene stored;
  stored.set_scene_id(scene.id());
  stored.set_name(scene.name);
  stored.set_version(scene.version);
  stored.set_next_instance_id(scene.next_instance_id);
  stored.set_create_time_s(scene.create_time_s);
  stored.set_update_time_s(scene.update_time_s);
  for (const auto& [id, rec] : scene.instances) {
    store::v1::StoredInstance* si = stored.add_instances();
    si->set_instance_id(id);
    si->set_part_id(rec.part->info.part_id());
    si->set_path(rec.path);
    si->set_name(rec.name);
    server::ToProtoExact(rec.X_WP, si->mutable_pose());  // read back bit for bit
    si->set_enabled(rec.enabled);
    for (const std::string& g : rec.groups) si->add_groups(g);
  }
  // What Load would refuse is not written, nor what `grows` refuses (and the edit is undone
  // below).
  const std::size_t size = stored.ByteSizeLong() + kRecordHeaderBytes;
  const std::string path = ScenePath(scene.id());
  absl::Status refused = size > kMaxSceneFileBytes
                             ? absl::ResourceExhaustedError(
                                   absl::StrCat("scene ", scene.id(), " would take ", size,
                                                " bytes on disk; at most ", kMaxSceneFileBytes))
                             : absl::OkStatus();
  if (refused.ok() && grows) {  // (the file's size is looked up only for a growth check)
    std::error_code size_ec;
    const std::uintmax_t on_disk = std::filesystem::file_size(path, size_ec);
    const std::uint64_t growth = size_ec ? size : size > on_disk ? size - on_disk : 0;
    if (growth > 0) refused = grows(growth);
  }
  std::string bytes;
  bool in_place = false;
  absl::Status st =
      !refused.ok() ? refused
      : !SerializeSealed(stored, &bytes)
          ? absl::InternalError(absl::StrCat("scene ", scene.id(), " does not serialize"))
          : WriteFileAtomically(path, bytes, &in_place);
  if (!st.ok()) {
    // A refusal for room is the caller's answer; the rest is the server's trouble.
    if (!absl::IsResourceExhausted(refused)) {
      LogLine(LogLevel::kError, absl::StrCat("scene store: ", st.ToString()));
    }
    // Written but its folder not synced: memory holds what the file does, which a later edit
    // writes (and syncs) again even when it changes nothing (Scene::unsynced).
    if (in_place) {
      scene.unsynced = true;
      return st;
    }
    Undo(scene, "an edit could not be written");
  }
  if (st.ok()) scene.unsynced = false;
  return st;
}

void SceneStore::Undo(Scene& scene, const char* what) {
  const auto is_served = [&] {
    const auto it = scenes_.find(scene.id());
    return it != scenes_.end() && it->second.get() == &scene;
  };
  {
    std::lock_guard lock(mu_);
    if (!is_served()) return;  // a new scene, not stored yet
  }
  // The edit is undone by reading the file back (the scene's lock, which the caller holds,
  // keeps it served meanwhile). When that fails too (what stopped the write may stop the read:
  // no file descriptor, I/O errors, no memory), memory holds an edit its file does not, or half
  // a scene: it is served no more, rather than answer from a state that was never stored, until
  // RetryUnserved or a start reads the file (the last state stored).
  absl::Status restored;
  try {
    restored = Load(ScenePath(scene.id()), scene);
  } catch (const std::exception& e) {
    restored = absl::ResourceExhaustedError(e.what());
  }
  if (!restored.ok()) {
    const std::string why =
        absl::StrCat(what, " and the scene could not be read back (", restored.message(),
                     "); its file keeps the last state stored");
    LogLine(LogLevel::kError, absl::StrCat("scene store: scene ", scene.id(), ": ", why));
    scene.deleted = true;  // calls that fetched it before cannot write it
    std::lock_guard lock(mu_);
    if (is_served()) {
      scenes_.erase(scene.id());
      KeepUnserved(scene.id(), why);
    }
  }
}

void SceneStore::KeepUnserved(const std::string& id, std::string why) {
  Unserved& u = unserved_[id] = Unserved();  // (tried again at the next RetryUnserved)
  u.why = std::move(why);
  unserved_count_.store(unserved_.size(), std::memory_order_relaxed);
}

std::size_t SceneStore::unserved() const { return unserved_count_.load(std::memory_order_relaxed); }

std::size_t SceneStore::RetryUnserved(absl::Duration min_delay,
                                      const std::function<std::shared_ptr<void>()>& slot,
                                      const std::function<bool()>& stop) {
  std::lock_guard retry(retry_mu_);  // no two reads of one scene race to serve it
  std::vector<std::string> due;
  {
    std::lock_guard lock(mu_);
    const absl::Time now = absl::Now();
    for (const auto& [id, u] : unserved_) {
      // Due, or the part that kept it from loading is in memory now (uploaded again).
      if (u.next_try <= now || (!u.failed_part.empty() && parts_->Loaded(u.failed_part))) {
        due.push_back(id);
      }
    }
  }
  std::size_t served = 0;
  for (const std::string& id : due) {
    if (stop && stop()) break;
    // Read without the store's lock. Only a served scene's Commit writes its file, and this
    // one is not served: what is read is its last state stored, unless Delete removes it
    // meanwhile, which the check under the lock below sees.
    const std::string path = ScenePath(id);
    std::string failed_part;
    absl::Status part_failure;  // why failed_part did not load
    // Its parts first, each not in memory yet built on a slot of its own (`slot`): the read
    // holds none for the whole scene, and a pass stops as soon as a query waits.
    bool postponed = false;
    {
      absl::StatusOr<std::string> bytes = ReadFileCapped(path, kMaxSceneFileBytes);
      store::v1::StoredScene stored;
      absl::StatusOr<std::string_view> payload =
          bytes.ok() ? UnsealRecord(*bytes) : absl::StatusOr<std::string_view>(bytes.status());
      if (payload.ok() &&
          stored.ParseFromArray(payload->data(), static_cast<int>(payload->size()))) {
        std::set<std::string> tried;
        for (const store::v1::StoredInstance& si : stored.instances()) {
          if (!tried.insert(si.part_id()).second || parts_->Loaded(si.part_id())) continue;
          std::shared_ptr<void> held;
          if (slot && (held = slot()) == nullptr) {
            postponed = true;
            break;
          }
          if (absl::Status got = parts_->Get(si.part_id()).status(); !got.ok()) {
            failed_part = si.part_id();
            part_failure = absl::UnavailableError(
                absl::StrCat("part ", si.part_id(), " of instance ", si.instance_id(),
                             " does not load: ", got.message()));  // (as Load says it)
            break;
          }
        }
      }
    }
    if (postponed) break;  // no room now: at the next call, with no wait added
    // Load builds nothing now (every part is in memory), unless a part did not load: then it is
    // not called (it would build the others without a slot).
    auto scene = std::make_shared<Scene>(id, pair_cache_budget_);
    const absl::Status st = failed_part.empty() ? Load(path, *scene) : part_failure;
    std::lock_guard lock(mu_);
    auto u = unserved_.find(id);
    if (u == unserved_.end()) continue;  // deleted meanwhile
    if (st.ok()) {
      unserved_.erase(u);
      unserved_count_.store(unserved_.size(), std::memory_order_relaxed);
      scenes_.emplace(id, std::move(scene));
      ++served;
      LogLine(LogLevel::kInfo, absl::StrCat("scene store: scene ", id, " is served again"));
      continue;
    }
    if (absl::IsNotFound(st) || absl::IsDataLoss(st) || absl::IsInvalidArgument(st)) {
      // Its file is gone (removed by hand), or reads but is no scene (as at a start: moved
      // aside, never silently dropped).
      unserved_.erase(u);
      unserved_count_.store(unserved_.size(), std::memory_order_relaxed);
      if (absl::IsNotFound(st)) {
        LogLine(LogLevel::kWarning,
                absl::StrCat("scene store: scene ", id, " is gone: its file was removed"));
      } else {
        LogLine(LogLevel::kError, absl::StrCat("scene store: cannot load ", path, ": ",
                                               st.ToString(), "; moved aside to .damaged"));
        (void)MoveAsideDamaged(path);  // (logged when it fails: the file then stays)
      }
      continue;
    }
    const std::string why(st.message());
    if (why != u->second.why) {
      LogLine(LogLevel::kError,
              absl::StrCat("scene store: scene ", id, " is still not served: ", why));
      u->second.why = why;
    }
    u->second.failed_part = failed_part;
    u->second.delay =
        std::clamp(2 * u->second.delay, min_delay, std::max(min_delay, absl::Hours(1)));
    u->second.next_try = absl::Now() + u->second.delay;
  }
  return served;
}

}  // namespace clash::server
