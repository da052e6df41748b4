// Scenes in memory and on disk: instances placing parts, the broad phase over their world
// bounds, named groups, and a cache of pair results that survives moves of other instances.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clash/geom/aabb.h"
#include "clash/geom/broad_phase.h"
#include "clash/geom/interference.h"
#include "clash/geom/transform.h"
#include "clash/v1/scenes.pb.h"
#include "part_store.h"

namespace clash::server {

/// One placed part.
struct InstanceRec {
  uint64_t id = 0;
  std::shared_ptr<const PartEntry> part;
  std::string path;
  std::string name;
  geom::RigidTransform X_WP;
  bool enabled = true;
  std::set<std::string> groups;
  geom::Aabb world_box;       ///< Bounds of the posed part (world).
  int32_t proxy = -1;         ///< Broad-phase handle while enabled.
  uint64_t pose_version = 0;  ///< Changes whenever the pose changes.
};

/// A cached classification of one pair, valid while both poses and the tolerances are the same.
struct CachedPair {
  uint64_t pose_version_a = 0;
  uint64_t pose_version_b = 0;
  double contact_mm = 0;
  double clearance_mm = 0;
  /// The depth the answer resolves (PairTolerances::depth_cap_mm): it serves requests that
  /// need no more (an answer of the full depth, +inf, serves every request).
  double depth_cap_mm = 0;
  geom::PairClassification result;
};

class PairCache;

/// The pair caches of a server's scenes count their entries against one budget, so that the
/// memory they hold is bounded whatever the number of scenes (about 200 bytes an entry).
///
/// A cache whose new entry finds the budget spent makes room, in this order: it empties the
/// other caches idle for at least `idle` (no lookup or store), least recently used first; then
/// itself; and when other caches still hold the whole budget, it stores nothing. So a scene left
/// idle does not keep the budget from the scenes in use, and scenes in use at once (a batch job
/// beside a CAD plugin) do not empty each other's caches.
class PairCacheBudget {
 public:
  explicit PairCacheBudget(std::size_t max_entries, absl::Duration idle = absl::Seconds(10))
      : max_(max_entries), idle_(idle) {}
  PairCacheBudget(const PairCacheBudget&) = delete;
  PairCacheBudget& operator=(const PairCacheBudget&) = delete;
  [[nodiscard]] std::size_t max_entries() const { return max_; }
  /// Entries held by every cache on it.
  [[nodiscard]] std::size_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  friend class PairCache;
  // Takes one entry, when one is left.
  bool Take();
  // Empties other idle caches, least recently used first, until an entry can be taken (and
  // takes it): each under its guard, taken with try_lock (a cache in use is skipped). False
  // when none could be. Called with `self`'s guard held.
  bool TakeFromIdle(const PairCache* self);

  const std::size_t max_;
  const absl::Duration idle_;
  std::atomic<std::size_t> used_{0};
  // Until when (steady clock, ns) a scan that found no idle cache to empty is not repeated: while
  // caches in use hold the budget, a store pays a scan under mu_ at most this often.
  std::atomic<int64_t> no_scan_until_ns_{0};
  std::mutex mu_;                   // guards caches_
  std::vector<PairCache*> caches_;  // the caches that others may empty (those with a guard)
};

/// A scene's cache of classified pairs (by instance ids, low then high), on a budget shared
/// with other scenes. Not synchronised: the mutex `guard` (Scene::cache_mu) guards it.
class PairCache {
 public:
  using Key = std::pair<uint64_t, uint64_t>;
  /// A budget of its own of `kDefaultEntries` when `budget` is null. `guard`: the mutex its
  /// users hold, which another cache on the budget takes (try_lock) to empty this one when it
  /// is idle; null: only this cache empties itself. The guard must outlive the cache.
  explicit PairCache(std::shared_ptr<PairCacheBudget> budget, std::mutex* guard = nullptr);
  ~PairCache();
  PairCache(const PairCache&) = delete;
  PairCache& operator=(const PairCache&) = delete;

  static constexpr std::size_t kDefaultEntries = std::size_t{1} << 20;

  /// The entry, or nullptr.
  [[nodiscard]] const CachedPair* Find(const Key& key) const;
  /// Stores the entry. When the budget is spent, room is made as PairCacheBudget says; when
  /// there is none, the entry is not stored.
  void Put(const Key& key, const CachedPair& value);
  void Clear();
  [[nodiscard]] std::size_t size() const { return map_.size(); }

 private:
  friend class PairCacheBudget;
  void Used() const;

  std::shared_ptr<PairCacheBudget> budget_;
  std::mutex* guard_;
  absl::flat_hash_map<Key, CachedPair> map_;
  // Read by other caches without the guard: when the cache was last used (steady clock, ns),
  // and its size.
  mutable std::atomic<int64_t> last_use_ns_{0};
  std::atomic<std::size_t> entries_{0};
};

/// A scene. Readers hold `mu` shared, writers exclusive; `cache_mu` guards the pair cache, which
/// readers fill.
class Scene {
 public:
  /// `pair_cache_budget`: shared with the server's other scenes (null: one of its own).
  explicit Scene(std::string id, std::shared_ptr<PairCacheBudget> pair_cache_budget = nullptr)
      : pair_cache(std::move(pair_cache_budget), &cache_mu), id_(std::move(id)) {}
  [[nodiscard]] const std::string& id() const { return id_; }

  /// Timed, so that a writer waits for running queries only until its call's deadline.
  mutable std::shared_timed_mutex mu;
  /// Set (under mu, exclusively) when the scene is deleted: no write may follow.
  bool deleted = false;
  std::string name;
  uint64_t version = 0;
  /// Counts the mutations below that changed something (an edit that changes nothing keeps the
  /// version and is not written).
  uint64_t changes = 0;
  /// The last write's file is in place but its folder was not synced (it may not survive a
  /// crash): the next edit is written even when it changes nothing, so a retry is durable.
  bool unsynced = false;
  int64_t create_time_s = 0;
  int64_t update_time_s = 0;
  uint64_t next_instance_id = 1;
  std::map<uint64_t, InstanceRec> instances;
  /// Instance ids by path, ordered so that the instances under a path prefix are one range.
  std::map<std::string, uint64_t, std::less<>> by_path;
  std::map<std::string, std::set<uint64_t>> groups;
  geom::DynamicAabbTree tree;
  uint64_t pose_clock = 0;
  /// Largest tessellation deflection and part diagonal of any instance added since the scene
  /// was loaded (never lowered on removal: they size broad-phase margins, where larger is safe).
  double max_deflection_mm = 0;
  double max_part_diagonal_mm = 0;

  mutable std::mutex cache_mu;
  mutable PairCache pair_cache;

  /// Largest magnitude (mm) of a world coordinate that an edit, a pose override, a motion or
  /// a ray may reach. A double resolves about 1.2e-4 mm at 1e12 mm, still well below any
  /// contact tolerance a tessellation gives, and the narrow phase's arithmetic stays far from
  /// overflow; beyond it an answer's tolerances would be rounding. (Scenes stored by earlier
  /// versions, which accepted up to geom::DynamicAabbTree::kMaxCoordinateMm, load as stored.)
  static constexpr double kMaxCoordinateMm = 1e12;

  /// INVALID_ARGUMENT, naming `what()` (built only then), unless `world_box` is not empty and
  /// every coordinate is within ±kMaxCoordinateMm (a NaN is refused). Every check of a pose,
  /// motion or staged pose comes here before anything changes.
  [[nodiscard]] static absl::Status CheckReach(const geom::Aabb& world_box,
                                               absl::FunctionRef<std::string()> what);
  /// CheckReach of `part`'s box at `X_WP`, naming `what` as what places the part.
  [[nodiscard]] static absl::Status CheckPlaceable(const PartEntry& part,
                                                   const geom::RigidTransform& X_WP,
                                                   const std::string& what);

  // Mutations (hold mu exclusively). They keep by_path, groups and the tree consistent.
  void Add(InstanceRec rec);
  void SetPose(InstanceRec& rec, const geom::RigidTransform& X_WP);
  void SetEnabled(InstanceRec& rec, bool enabled);
  void Remove(uint64_t id);
  void SetGroup(const std::string& group, const std::set<uint64_t>& members);
  /// Bumps the version and the update time.
  void Touch();

  /// The instance, or nullptr.
  [[nodiscard]] const InstanceRec* Find(uint64_t id) const;
  [[nodiscard]] InstanceRec* Find(uint64_t id);

  /// The wire description.
  void ToProto(v1::Scene* out) const;
  static void InstanceToProto(const InstanceRec& rec, v1::Instance* out);

 private:
  std::string id_;
};

/// All scenes, persisted one file per scene under <dir>/scenes.
class SceneStore {
 public:
  /// Asked before a scene's file is written larger than it is on disk, with the bytes it grows
  /// by: an error refuses the write (a tenant's storage quota, which sets the bytes aside until
  /// the file is written and the quota counts it).
  using GrowthCheck = std::function<absl::Status(std::uint64_t growth)>;

  /// Opens the folder and loads every scene (parts come from `parts`). A scene file that cannot
  /// be read is logged and moved aside, <name>.<time>.damaged, never silently dropped. A scene one
  /// of whose parts does not load (a damaged part file, or a part above a lowered triangle
  /// limit) is logged and not served; its file is kept until it loads (RetryUnserved, or a
  /// later start; Get answers FAILED_PRECONDITION with the reason; Delete removes it).
  /// `pair_cache_budget`: the budget of its scenes' pair caches (null: one per scene).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SceneStore>> Open(
      std::string dir, PartStore* parts,
      std::shared_ptr<PairCacheBudget> pair_cache_budget = nullptr);

  /// A new scene, written before it is served (`grows`: as for Commit).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Scene>> Create(const std::string& name,
                                                              const GrowthCheck& grows = nullptr);
  /// NOT_FOUND for an unknown id; FAILED_PRECONDITION for a scene Open kept but does not serve.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<Scene>> Get(const std::string& id) const;
  /// Up to `limit` scenes with ids greater than `after`, in id order.
  [[nodiscard]] std::vector<std::shared_ptr<Scene>> List(const std::string& after,
                                                         std::size_t limit) const;
  /// Deletes a scene once no query or edit holds it: waits for its lock until `deadline`
  /// (DEADLINE_EXCEEDED after that, nothing deleted). NOT_FOUND for an unknown id.
  [[nodiscard]] absl::Status Delete(const std::string& id, absl::Time deadline);

  /// The first scene (in id order) with an instance of the part, as "scene <id> (<what to
  /// do>)", or nullopt. A served scene is read under its lock, waited for until `deadline`
  /// (DEADLINE_EXCEEDED after that); a scene kept but not served, from its file (one that no
  /// longer reads counts as a user: it may name the part).
  [[nodiscard]] absl::StatusOr<std::optional<std::string>> FirstUserOf(const std::string& part_id,
                                                                       absl::Time deadline) const;

  /// The scene's lock for a write, waited for until `deadline`: DEADLINE_EXCEEDED when a query
  /// still holds it then; when the scene was deleted or stopped being served meanwhile, what
  /// Get answers now (NOT_FOUND, FAILED_PRECONDITION), or ABORTED when it is served again by
  /// then (RetryUnserved: another object, which Get returns; the call may try again).
  [[nodiscard]] absl::StatusOr<std::unique_lock<std::shared_timed_mutex>> LockForWrite(
      Scene& scene, absl::Time deadline) const;
  /// The scene's lock for a read, likewise (DEADLINE_EXCEEDED when an edit still holds it).
  [[nodiscard]] absl::StatusOr<std::shared_lock<std::shared_timed_mutex>> LockForRead(
      const Scene& scene, absl::Time deadline) const;
  /// LockForWrite and LockForRead of the scene served under *scene's id: when it was served
  /// again while this waited, *scene becomes the object served now, whose lock is taken
  /// instead (never ABORTED). What request handlers use.
  [[nodiscard]] absl::StatusOr<std::unique_lock<std::shared_timed_mutex>> LockCurrentForWrite(
      std::shared_ptr<Scene>* scene, absl::Time deadline) const;
  [[nodiscard]] absl::StatusOr<std::shared_lock<std::shared_timed_mutex>> LockCurrentForRead(
      std::shared_ptr<Scene>* scene, absl::Time deadline) const;

  /// Writes the scene (hold its mu). On failure the in-memory scene is restored from its file,
  /// so memory never runs ahead of the disk; when that read fails too, the scene is not served
  /// (FAILED_PRECONDITION, until RetryUnserved or a start reads its file). NOT_FOUND for a deleted
  /// scene (nothing written), RESOURCE_EXHAUSTED when the file would pass the 1 GiB that Open
  /// reads, and `grows`'s error when it refuses a file larger than the one on disk (a new scene's
  /// file grows by all of its bytes).
  [[nodiscard]] absl::Status Commit(Scene& scene, const GrowthCheck& grows = nullptr);

  /// Reads again each scene kept but not served whose turn has come, and serves those that
  /// load now (their parts load: a damaged part uploaded again, a file readable again); returns
  /// how many. A scene that still does not load waits `min_delay` before its next try, then
  /// twice as long after each failure, up to an hour; its reason is logged when it changes.
  /// A scene served again is a new object: calls that hold the old one get ABORTED from
  /// LockForRead/LockForWrite (LockCurrentForRead/Write take the new one's lock instead).
  /// A scene whose part did not load at its last try is tried at once when that part is in
  /// memory again (uploaded again). A file that no longer parses is moved aside as in Open.
  /// clashd calls this every --unserved-scene-retry-seconds; one call runs at a time.
  /// `slot` (optional) is asked before each part not in memory is built: what it returns is held
  /// during that build, and null postpones the rest to the next call (no wait added); `stop`
  /// (optional) ends the call before the next scene when it returns true.
  std::size_t RetryUnserved(absl::Duration min_delay,
                            const std::function<std::shared_ptr<void>()>& slot = nullptr,
                            const std::function<bool()>& stop = nullptr);
  /// Scenes kept but not served.
  [[nodiscard]] std::size_t unserved() const;
  /// After an edit that did not complete (its write failed, or an exception left it half
  /// done), with the scene's lock held: memory is read back from the scene's file, or, when
  /// that fails, the scene is no longer served (kept unserved, `what` in the reason) until it
  /// loads. Nothing for a scene not served (a new one).
  void Undo(Scene& scene, const char* what);

 private:
  SceneStore(std::string dir, PartStore* parts, std::shared_ptr<PairCacheBudget> budget)
      : dir_(std::move(dir)), parts_(parts), pair_cache_budget_(std::move(budget)) {}
  [[nodiscard]] std::string ScenePath(const std::string& id) const;
  [[nodiscard]] absl::Status Load(const std::string& path, Scene& scene);
  /// LockForWrite (`Lock` std::unique_lock) and LockForRead (std::shared_lock).
  template <typename Lock>
  [[nodiscard]] absl::StatusOr<Lock> LockScene(const Scene& scene, absl::Time deadline) const;
  template <typename Lock>
  [[nodiscard]] absl::StatusOr<Lock> LockCurrent(std::shared_ptr<Scene>* scene,
                                                 absl::Time deadline) const;

  std::string dir_;
  PartStore* parts_;
  std::shared_ptr<PairCacheBudget> pair_cache_budget_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Scene>> scenes_;
  /// A scene kept on disk and not served.
  struct Unserved {
    std::string why;
    absl::Time next_try = absl::InfinitePast();   ///< RetryUnserved's next read of it.
    absl::Duration delay = absl::ZeroDuration();  ///< Its wait after the last failed read.
    std::string failed_part;  ///< The part that did not load then: once it is in memory, now.
  };
  /// Marks a scene not served (hold mu_).
  void KeepUnserved(const std::string& id, std::string why);

  std::map<std::string, Unserved> unserved_;    // id -> why and when to try again
  std::atomic<std::size_t> unserved_count_{0};  // its size, read without mu_ (metrics)
  std::mutex retry_mu_;                         // one RetryUnserved at a time
};

}  // namespace clash::server
