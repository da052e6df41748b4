#include "part_store.h"

#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "clash/cad/import_cache.h"
#include "clash/geom/mesh.h"
#include "clash/geom/status_macros.h"
#include "convert.h"
#include "log.h"
#include "server/proto/store.pb.h"
#include "storage.h"

namespace clash::server {
namespace {

constexpr std::size_t kMaxPartFileBytes = std::size_t{4} << 30;

// The id of a stored part: a hash of everything but its name.
std::string ContentId(store::v1::StoredPart part) {
  part.clear_name();
  std::string bytes;
  part.SerializeToString(&bytes);
  return absl::StrCat("p", cad::Sha256Hex(bytes).substr(0, 32));
}

template <class T>
std::span<const T> Span(const google::protobuf::RepeatedField<T>& f) {
  return {f.data(), static_cast<std::size_t>(f.size())};
}

absl::StatusOr<std::shared_ptr<const PartEntry>> Build(const std::string& id,
                                                       const store::v1::StoredPart& stored,
                                                       std::size_t max_triangles) {
  geom::MeshOptions mesh_options;
  mesh_options.max_triangles = max_triangles;
  CLASH_ASSIGN_OR_RETURN(
      geom::TriangleMesh mesh,
      geom::TriangleMesh::FromBuffers(Span(stored.xyz_mm()), Span(stored.triangles()),
                                      Span(stored.face_ids()), mesh_options));
  CLASH_ASSIGN_OR_RETURN(std::shared_ptr<const geom::Part> part,
                         geom::Part::Create(std::move(mesh)));
  auto entry = std::make_shared<PartEntry>();
  entry->geom = part;
  entry->deflection_mm = stored.deflection_mm();
  v1::Part& info = entry->info;
  info.set_part_id(id);
  info.set_name(stored.name());
  const geom::TriangleMesh& m = part->mesh();
  info.set_triangle_count(m.num_triangles());
  info.set_vertex_count(m.vertices().size());
  ToProto(m.bounds(), info.mutable_bounds());
  info.set_closed(m.IsClosed());
  info.set_deflection_mm(stored.deflection_mm());
  info.set_faces_total(stored.faces_total());
  info.set_faces_meshed(stored.faces_meshed());
  const geom::PartStats& s = part->stats();
  v1::HierarchyStats* h = info.mutable_hierarchy();
  h->set_nodes(s.nodes);
  h->set_leaves(s.leaves);
  h->set_aabb_nodes(s.aabb_nodes);
  h->set_obb_nodes(s.obb_nodes);
  h->set_depth(s.depth);
  h->set_volume_saved_fraction(s.VolumeSaved());
  info.set_memory_bytes(s.memory_bytes);
  info.set_welded_vertices(m.stats().welded_vertices);
  info.set_degenerate_triangles(m.stats().degenerate_triangles);
  info.set_boundary_edges(m.stats().boundary_edges);
  return std::shared_ptr<const PartEntry>(std::move(entry));
}

}  // namespace

bool PartStore::IsPartId(const std::string& id) { return IsHexId(id, 'p'); }

PartInput PartInputOf(const cad::AssemblyPart& part) {
  PartInput in;
  in.name = part.name;
  in.xyz_mm = part.mesh.xyz;
  in.triangles = part.mesh.triangles;
  in.face_ids = part.mesh.face_ids;
  in.deflection_mm = part.mesh.deflection_mm;
  in.faces_total = part.mesh.faces_total;
  in.faces_meshed = part.mesh.faces_meshed;
  return in;
}

geom::RigidTransform TransformOf(const cad::Placement& placement) {
  geom::RigidTransform X;
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 3; ++c) X.R(r, c) = placement.rotation[3 * r + c];
    X.t[r] = placement.translation_mm[r];
  }
  return X;
}

absl::StatusOr<std::unique_ptr<PartStore>> PartStore::Open(std::string dir,
                                                           std::size_t max_triangles) {
  std::unique_ptr<PartStore> store(new PartStore(std::move(dir), max_triangles));
  CLASH_RETURN_IF_ERROR(MakeDirs(store->dir_ + "/parts"));
  CLASH_RETURN_IF_ERROR(MakeDirs(store->dir_ + "/assemblies"));
  RemoveAbandonedTemporaries(store->dir_ + "/parts");
  RemoveAbandonedTemporaries(store->dir_ + "/assemblies");
  // A folder that cannot be listed fails the open: serving no part would leave the tenant's
  // scenes unserved and its parts unknown.
  CLASH_ASSIGN_OR_RETURN(store->ids_, IdsInFolder(store->dir_ + "/parts", 'p'));
  return store;
}

std::string PartStore::PartPath(const std::string& id) const {
  return absl::StrCat(dir_, "/parts/", id, ".pb");
}

std::string PartStore::AssemblyPath(const std::string& id) const {
  return absl::StrCat(dir_, "/assemblies/", id, ".pb");
}

absl::StatusOr<std::shared_ptr<const PartEntry>> PartStore::Put(const PartInput& input) {
  CLASH_ASSIGN_OR_RETURN(Prepared prepared, Prepare(input));
  return Commit(std::move(prepared));
}

absl::StatusOr<PartStore::Prepared> PartStore::Prepare(const PartInput& input,
                                                       PreparedHere* here) const {
  if (input.triangles.size() / 3 > max_triangles_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("part '", input.name, "' has ", input.triangles.size() / 3,
                     " triangles, above the limit of ", max_triangles_));
  }
  if (!std::isfinite(input.deflection_mm) || input.deflection_mm < 0) {
    return absl::InvalidArgumentError("deflection_mm must be finite and >= 0");
  }
  store::v1::StoredPart stored;
  stored.set_name(input.name);
  stored.mutable_xyz_mm()->Add(input.xyz_mm.begin(), input.xyz_mm.end());
  stored.mutable_triangles()->Add(input.triangles.begin(), input.triangles.end());
  stored.mutable_face_ids()->Add(input.face_ids.begin(), input.face_ids.end());
  stored.set_deflection_mm(input.deflection_mm);
  stored.set_faces_total(input.faces_total);
  stored.set_faces_meshed(input.faces_meshed);
  const std::string id = ContentId(stored);
  Prepared prepared;
  {
    std::lock_guard lock(mu_);
    if (auto it = loaded_.find(id); it != loaded_.end()) {
      prepared.entry = it->second;
      return prepared;
    }
  }
  if (here != nullptr) {
    if (auto it = here->find(id); it != here->end()) {
      prepared.entry = it->second;
      return prepared;
    }
  }
  // The first stored name wins, loaded or not: a part stored before a restart keeps the name
  // in its file, which is not written again (as a loaded part keeps its own, above). Only a
  // file that is missing or damaged is written anew, under this name.
  const std::optional<std::string> stored_name = StoredName(id);
  if (stored_name) stored.set_name(*stored_name);
  // Validates the buffers (and builds the hierarchy).
  builds_.fetch_add(1, std::memory_order_relaxed);
  CLASH_ASSIGN_OR_RETURN(prepared.entry, Build(id, stored, max_triangles_));
  if (here != nullptr) here->emplace(id, prepared.entry);
  if (!stored_name) stored.SerializeToString(&prepared.bytes);
  return prepared;
}

std::optional<std::string> PartStore::StoredName(const std::string& id) const {
  if (!Known(id)) return std::nullopt;
  absl::StatusOr<std::string> bytes = ReadFileCapped(PartPath(id), kMaxPartFileBytes);
  store::v1::StoredPart stored;
  if (!bytes.ok() || !stored.ParseFromString(*bytes) || ContentId(stored) != id) {
    return std::nullopt;
  }
  return stored.name();
}

absl::StatusOr<std::shared_ptr<const PartEntry>> PartStore::Commit(Prepared prepared) {
  const std::string id = prepared.entry->info.part_id();
  absl::Status written;
  std::unique_lock lock(mu_);
  if (!prepared.bytes.empty()) {
    // One write of a part at a time, and none once it is served: the same content prepared
    // twice under two names before either was stored is served under the first name stored,
    // so the second must not replace that name in the file.
    writes_done_.wait(lock, [&] { return !writing_.contains(id); });
    if (auto it = loaded_.find(id); it != loaded_.end()) return it->second;
    writing_.insert(id);
    lock.unlock();
    bool in_place = false;
    {
      absl::Cleanup done = [&] {  // however the write ends, with the lock held after it
        lock.lock();
        writing_.erase(id);
        writes_done_.notify_all();
      };
      written = WriteFileAtomically(PartPath(id), prepared.bytes, &in_place);
    }
    if (!in_place) return written;
    // (In place but its folder not synced: served, as the folder shows it, with the error.)
  }
  ids_.insert(id);
  auto [it, inserted] = loaded_.emplace(id, std::move(prepared.entry));
  if (!written.ok()) return written;
  return it->second;
}

absl::StatusOr<std::shared_ptr<const PartEntry>> PartStore::Get(const std::string& id) {
  {
    std::lock_guard lock(mu_);
    if (auto it = loaded_.find(id); it != loaded_.end()) return it->second;
    if (!ids_.contains(id)) return absl::NotFoundError(absl::StrCat("no part ", id));
  }
  // A part the store knows but cannot serve is not NOT_FOUND (a client would take it for
  // gone): its file cannot be read now (INTERNAL), is missing or damaged (DATA_LOSS), or holds
  // more than a lowered --max-part-triangles (FAILED_PRECONDITION).
  absl::StatusOr<std::string> bytes = ReadFileCapped(PartPath(id), kMaxPartFileBytes);
  store::v1::StoredPart stored;
  const bool parsed = bytes.ok() && stored.ParseFromString(*bytes) && ContentId(stored) == id;
  if (!parsed) {
    if (!Known(id)) return absl::NotFoundError(absl::StrCat("no part ", id));  // removed meanwhile
    LogLine(LogLevel::kError,
            absl::StrCat("part store: ", PartPath(id), " is unreadable or damaged: ",
                         bytes.ok() ? "does not parse" : bytes.status().ToString()));
    // (A file above the size a part file can have is damaged, not unreadable.)
    if (!bytes.ok() && !absl::IsNotFound(bytes.status()) &&
        !absl::IsResourceExhausted(bytes.status())) {
      return absl::InternalError(absl::StrCat("part ", id, ": its stored file cannot be read (",
                                              bytes.status().message(), ")"));
    }
    return absl::DataLossError(
        absl::StrCat("part ", id, ": its stored file is ",
                     absl::IsNotFound(bytes.status()) ? "missing" : "damaged",
                     " (delete the part, then upload or import it again)"));
  }
  builds_.fetch_add(1, std::memory_order_relaxed);
  absl::StatusOr<std::shared_ptr<const PartEntry>> built = Build(id, stored, max_triangles_);
  if (absl::IsResourceExhausted(built.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stored part ", id, " is above this server's limit (", built.status().message(),
        "); a start with a higher --max-part-triangles serves it"));
  }
  if (!built.ok()) {
    return absl::DataLossError(absl::StrCat("part ", id, ": its stored mesh does not build (",
                                            built.status().message(), ")"));
  }
  std::shared_ptr<const PartEntry> entry = *std::move(built);
  std::lock_guard lock(mu_);
  // A part removed while it was being built is not served (nothing can use it again).
  if (!ids_.contains(id)) return absl::NotFoundError(absl::StrCat("no part ", id));
  auto [it, inserted] = loaded_.emplace(id, entry);
  return it->second;
}

std::shared_ptr<const PartEntry> PartStore::Loaded(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = loaded_.find(id);
  return it == loaded_.end() ? nullptr : it->second;
}

bool PartStore::Known(const std::string& id) const {
  std::lock_guard lock(mu_);
  return ids_.contains(id);
}

std::vector<std::string> PartStore::ListIds(const std::string& after, std::size_t limit) const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (auto it = ids_.upper_bound(after); it != ids_.end() && out.size() < limit; ++it) {
    out.push_back(*it);
  }
  return out;
}

absl::Status PartStore::PutAssembly(const v1::Assembly& assembly) {
  std::string bytes;
  if (!SerializeSealed(assembly, &bytes)) {
    return absl::InternalError(
        absl::StrCat("assembly ", assembly.assembly_id(), " does not serialize"));
  }
  return WriteFileAtomically(AssemblyPath(assembly.assembly_id()), bytes);
}

absl::StatusOr<v1::Assembly> PartStore::ReadAssembly(const std::string& id) const {
  absl::StatusOr<std::string> bytes = ReadFileCapped(AssemblyPath(id), kMaxPartFileBytes);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(absl::StrCat("no assembly ", id));
  }
  if (!bytes.ok()) return bytes.status();
  // (A file cut short at a field's end parses, with instances missing: the seal tells.)
  const absl::StatusOr<std::string_view> payload = UnsealRecord(*bytes);
  v1::Assembly assembly;
  if (!payload.ok() ||
      !assembly.ParseFromArray(payload->data(), static_cast<int>(payload->size())) ||
      assembly.assembly_id() != id) {
    return absl::DataLossError(absl::StrCat("no assembly ", id, " (stored file damaged)"));
  }
  return assembly;
}

absl::StatusOr<v1::Assembly> PartStore::GetAssembly(const std::string& id) const {
  if (!IsHexId(id, 'a')) return absl::NotFoundError(absl::StrCat("no assembly ", id));
  absl::StatusOr<v1::Assembly> assembly = ReadAssembly(id);
  if (absl::IsDataLoss(assembly.status())) {
    return absl::NotFoundError(assembly.status().message());
  }
  return assembly;
}

absl::Status PartStore::Remove(const std::string& id) {
  {
    // Unknown first (Get no longer reads the file it is about to lose), then the file without
    // the lock, which every lookup of the tenant's parts takes.
    std::lock_guard lock(mu_);
    if (ids_.erase(id) == 0) return absl::NotFoundError(absl::StrCat("no part '", id, "'"));
    loaded_.erase(id);
  }
  absl::Status removed = RemoveFileDurably(PartPath(id));
  if (!removed.ok() && !FileGone(PartPath(id))) {
    std::lock_guard lock(mu_);
    ids_.insert(id);  // still stored: served again (loaded from its file on first use)
  }
  // (Gone but its folder not synced: unknown now, as the folder shows, with the error.)
  return removed;
}

absl::Status PartStore::RemoveAssembly(const std::string& id) {
  std::error_code ec;
  if (!IsHexId(id, 'a') || !std::filesystem::is_regular_file(AssemblyPath(id), ec)) {
    return absl::NotFoundError(absl::StrCat("no assembly '", id, "'"));
  }
  return RemoveFileDurably(AssemblyPath(id));
}

absl::StatusOr<std::optional<std::string>> PartStore::FirstAssemblyWith(const std::string& part_id,
                                                                        absl::Time deadline) const {
  absl::StatusOr<std::set<std::string>> ids = IdsInFolder(dir_ + "/assemblies", 'a');
  if (!ids.ok()) {
    return absl::InternalError(absl::StrCat(ids.status().message(), ": nothing deleted"));
  }
  for (const std::string& id : *ids) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the tenant's ", ids->size(),
                       " assemblies were not all read before the deadline: "
                       "nothing deleted; try again with a longer deadline"));
    }
    absl::StatusOr<v1::Assembly> assembly = ReadAssembly(id);
    if (absl::IsNotFound(assembly.status())) continue;  // removed meanwhile
    if (!assembly.ok()) return absl::StrCat("assembly ", id, ", whose file is damaged (delete it)");
    for (const v1::AssemblyInstance& inst : assembly->instances()) {
      if (inst.part_id() == part_id) return absl::StrCat("assembly ", id, " (delete it first)");
    }
  }
  return std::nullopt;
}

}  // namespace clash::server
