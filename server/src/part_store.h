// The content-addressed part store: parts (meshes + hierarchies) and imported assemblies on
// disk, loaded into memory on first use and shared read-only by every scene and query.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clash/cad/assembly.h"
#include "clash/geom/part.h"
#include "clash/v1/parts.pb.h"

namespace clash::server {

/// A loaded part: its description for the API and its geometry.
struct PartEntry {
  v1::Part info;                           ///< What GetPart answers.
  std::shared_ptr<const geom::Part> geom;  ///< Mesh + hierarchy in the part frame.
  double deflection_mm = 0.0;              ///< Tessellation deflection (0: exact).
};

/// Raw part buffers, as imported or uploaded.
struct PartInput {
  std::string name;
  std::span<const double> xyz_mm;
  std::span<const uint32_t> triangles;
  std::span<const uint32_t> face_ids;  ///< Empty or one per triangle.
  double deflection_mm = 0.0;
  int faces_total = 0;
  int faces_meshed = 0;
};

/// The input of an imported part: views of its buffers (it must outlive the input) and its
/// tessellation report.
[[nodiscard]] PartInput PartInputOf(const cad::AssemblyPart& part);

/// An import's placement as a transform (its matrix as given: validate with PoseFromProto when
/// it must be rigid).
[[nodiscard]] geom::RigidTransform TransformOf(const cad::Placement& placement);

class PartStore {
 public:
  /// Opens (creating) `dir` with parts/ and assemblies/ inside. max_triangles caps every part.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<PartStore>> Open(std::string dir,
                                                                       std::size_t max_triangles);

  /// Validates the buffers, builds the part and stores it (durably) unless a part with the same
  /// content exists. INVALID_ARGUMENT for bad buffers, RESOURCE_EXHAUSTED above the limit.
  /// Prepare then Commit. The id is a hash of the buffers as given (before cleaning), the
  /// deflection and the face counts, not the name: the same content under another name gives
  /// the part stored first, with its first name (in memory or only on disk alike), unless its
  /// stored file is missing or damaged, which is then written anew under the new name.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const PartEntry>> Put(const PartInput& input);

  /// A part validated and built, not yet stored.
  struct Prepared {
    std::shared_ptr<const PartEntry> entry;  ///< What GetPart will answer once committed.
    std::string bytes;  ///< The file to write; empty when the part is stored already.
  };
  /// The parts one caller has prepared, by id (see Prepare).
  using PreparedHere = std::map<std::string, std::shared_ptr<const PartEntry>>;
  /// Put's checks and build, writing nothing (the same errors): an import builds all its parts
  /// before it stores any, so that a refused import leaves none behind. With `here`, a part of
  /// the same content as one prepared into it before (an assembly's identical part
  /// definitions) is not built again: it shares that entry and writes nothing.
  [[nodiscard]] absl::StatusOr<Prepared> Prepare(const PartInput& input,
                                                 PreparedHere* here = nullptr) const;
  /// Stores a prepared part (durably) and serves it; the entry already served when another call
  /// stored the same content first (its file, and so its name, is then left as it is). When its
  /// file is written but the folder cannot be synced, the part is served all the same and the
  /// error (INTERNAL) returned.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const PartEntry>> Commit(Prepared prepared);

  /// The part with this id, loaded on first use. NOT_FOUND when unknown (or its file is
  /// damaged, which is logged). Loading builds the part's hierarchy: CPU work as long as a query
  /// for a large part, which callers serving requests bound (see Loaded).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const PartEntry>> Get(const std::string& id);
  /// The part with this id if it is in memory, else null (never reads or builds).
  [[nodiscard]] std::shared_ptr<const PartEntry> Loaded(const std::string& id) const;
  /// True when a part with this id is stored (loaded or not).
  [[nodiscard]] bool Known(const std::string& id) const;

  /// Up to `limit` part ids greater than `after`, in order.
  [[nodiscard]] std::vector<std::string> ListIds(const std::string& after, std::size_t limit) const;

  /// Removes a stored part (durably) and drops it from memory; queries holding it finish with
  /// it. NOT_FOUND for an unknown id. Nothing may use it: the caller checks the scenes and the
  /// assemblies (FirstAssemblyWith) while no new use can begin (Tenant::part_uses_mu).
  [[nodiscard]] absl::Status Remove(const std::string& id);

  /// Stores an assembly (durably) under its id.
  [[nodiscard]] absl::Status PutAssembly(const v1::Assembly& assembly);
  /// NOT_FOUND when unknown.
  [[nodiscard]] absl::StatusOr<v1::Assembly> GetAssembly(const std::string& id) const;
  /// Removes a stored assembly (durably; its parts stay). NOT_FOUND when unknown.
  [[nodiscard]] absl::Status RemoveAssembly(const std::string& id);
  /// The first stored assembly (in id order) one of whose instances places the part, as
  /// "assembly <id> (<what to do>)"; a file that cannot be read or parsed counts (it may name
  /// the part). Reads every assembly file; INTERNAL when the folder
  /// cannot be listed (no answer is not "none"), DEADLINE_EXCEEDED when `deadline` passes
  /// before every file is read (its caller holds the tenant's other writes meanwhile).
  [[nodiscard]] absl::StatusOr<std::optional<std::string>> FirstAssemblyWith(
      const std::string& part_id, absl::Time deadline) const;

  /// Part hierarchies built since the store was opened (by Prepare, Put and Get).
  [[nodiscard]] std::size_t builds() const { return builds_.load(std::memory_order_relaxed); }

  /// True for strings shaped like part ids ("p" + 32 lowercase hex digits).
  [[nodiscard]] static bool IsPartId(const std::string& id);

 private:
  PartStore(std::string dir, std::size_t max_triangles)
      : dir_(std::move(dir)), max_triangles_(max_triangles) {}
  [[nodiscard]] std::string PartPath(const std::string& id) const;
  [[nodiscard]] std::string AssemblyPath(const std::string& id) const;
  // The name in the stored file of part `id`; nullopt when it is not stored, or its file cannot
  // be read, does not parse or holds other content (Prepare writes it anew).
  [[nodiscard]] std::optional<std::string> StoredName(const std::string& id) const;
  // The stored assembly: NOT_FOUND when there is no file, DATA_LOSS when it does not parse or
  // names another id, other errors of the read as they come.
  [[nodiscard]] absl::StatusOr<v1::Assembly> ReadAssembly(const std::string& id) const;

  std::string dir_;
  std::size_t max_triangles_;
  mutable std::mutex mu_;
  std::set<std::string> ids_;                                       // on disk
  std::map<std::string, std::shared_ptr<const PartEntry>> loaded_;  // in memory
  std::set<std::string> writing_;        // parts whose file Commit is writing
  std::condition_variable writes_done_;  // signalled when one of writing_ is done
  mutable std::atomic<std::size_t> builds_{0};
};

}  // namespace clash::server
