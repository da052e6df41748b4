#include "import_store.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "clash/geom/status_macros.h"
#include "convert.h"
#include "storage.h"

namespace clash::server {
namespace {

// MaxWorkerOutputBytes: per triangle, at worst 3 vertices of its own (OCCT meshes each face
// apart, and a face of one triangle has 3 nodes) of 3 doubles, 3 u32 indices and a u32 face id.
constexpr std::size_t kWorkerBytesPerTriangle = 3 * 3 * sizeof(double) + 4 * sizeof(uint32_t);
// Everything else: headers, part names and kMaxAssemblyInstances instances of ~2.6 KiB each
// (a 121-byte record with its path and name).
constexpr std::size_t kWorkerOutputSlackBytes = std::size_t{256} << 20;

}  // namespace

std::size_t MaxWorkerOutputBytes(std::size_t max_triangles) {
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  if (max_triangles > (kMax - kWorkerOutputSlackBytes) / kWorkerBytesPerTriangle) return kMax;
  return max_triangles * kWorkerBytesPerTriangle + kWorkerOutputSlackBytes;
}

absl::Status StoreImportedAssembly(
    const cad::ImportedAssembly& assembly, const ImportFacts& facts, PartStore& parts,
    absl::FunctionRef<absl::Status(std::uint64_t bytes)> reserve_storage,
    v1::ImportCadResponse* response) {
  // The cap is on the sum over all parts (what the worker meshed: each part definition, shared
  // content or not). The worker stops at it, but its output, like a cache entry, is not trusted.
  uint64_t triangles_in = 0;
  for (const cad::AssemblyPart& p : assembly.parts) triangles_in += p.mesh.triangles.size() / 3;
  if (triangles_in > facts.options.max_triangles) {
    return absl::ResourceExhaustedError(
        absl::StrCat("import: ", triangles_in, " triangles over all parts, above the limit of ",
                     facts.options.max_triangles));
  }
  const absl::Status complete = cad::CheckImportComplete(assembly);
  if (facts.strict && !complete.ok()) return complete;

  v1::Assembly out;
  out.set_assembly_id(absl::StrCat("a", facts.cache_key.substr(0, 32)));
  out.set_file_name(facts.file_name);
  out.set_file_sha256(facts.sha256);
  v1::TessellationOptions* used = out.mutable_tessellation();
  used->set_linear_deflection_mm(facts.options.linear_deflection_mm);
  used->set_relative_deflection(facts.options.relative_deflection);
  used->set_angular_deflection_rad(facts.options.angular_deflection_rad);
  used->set_max_triangles(facts.options.max_triangles);
  v1::ImportReport* report = out.mutable_report();
  report->set_roots_total(assembly.roots_total);
  report->set_roots_transferred(assembly.roots_transferred);
  report->set_load_failures(assembly.load_failures);
  report->set_load_warnings(assembly.load_warnings);
  report->set_empty_parts(assembly.empty_parts);
  report->set_complete(complete.ok());
  if (!complete.ok()) report->add_warnings(std::string(complete.message()));
  // What the reader left out that is no geometry (colours dropped): said, but no loss.
  for (const std::string& warning : assembly.warnings) report->add_warnings(warning);
  report->set_from_cache(facts.from_cache);

  // 1. Every part built, nothing written.
  std::vector<std::optional<PartStore::Prepared>> prepared(assembly.parts.size());
  int64_t faces_total = 0;  // summed in 64 bits: each count is up to INT32_MAX
  int64_t faces_meshed = 0;
  PartStore::PreparedHere built;  // identical part definitions are built once
  std::set<std::string> counted;  // ids whose faces are in faces_total
  for (std::size_t i = 0; i < assembly.parts.size(); ++i) {
    const cad::AssemblyPart& p = assembly.parts[i];
    absl::StatusOr<PartStore::Prepared> part = parts.Prepare(PartInputOf(p), &built);
    // Only the file's fault (a part whose triangles are all degenerate) is a warning; a part
    // above the limit fails the import.
    if (!part.ok() && !absl::IsInvalidArgument(part.status())) return part.status();
    if (!part.ok()) {
      const std::string why =
          absl::StrCat("part '", p.name, "' left out: ", std::string(part.status().message()));
      if (facts.strict) return absl::InvalidArgumentError(absl::StrCat("incomplete import: ", why));
      // Left out, with its instances, and said so.
      report->add_warnings(why);
      report->set_complete(false);
      continue;
    }
    // Faces over the distinct parts, as the triangles below: definitions of one content (one
    // id, one part listed) count once.
    if (counted.insert(part->entry->info.part_id()).second) {
      faces_total += p.mesh.faces_total;
      faces_meshed += p.mesh.faces_meshed;
    }
    prepared[i] = std::move(*part);
  }
  constexpr int64_t kMaxCount = std::numeric_limits<int32_t>::max();
  report->set_faces_total(static_cast<int32_t>(std::min(faces_total, kMaxCount)));
  report->set_faces_meshed(static_cast<int32_t>(std::min(faces_meshed, kMaxCount)));

  // 2. The instances, each of a part kept, placed by a rigid motion.
  for (const cad::AssemblyInstance& inst : assembly.instances) {
    if (inst.part < 0 || static_cast<std::size_t>(inst.part) >= prepared.size() ||
        !prepared[inst.part]) {
      continue;
    }
    // A scaled or mirrored placement has no rigid pose: the instance is left out, and said so.
    const geom::RigidTransform X_AP = TransformOf(inst.placement);
    if (!X_AP.IsValid()) {
      const std::string why = absl::StrCat("instance '", inst.path,
                                           "' left out: its placement is not a rigid motion "
                                           "(scaled or mirrored)");
      if (facts.strict) return absl::InvalidArgumentError(why);
      report->add_warnings(why);
      report->set_complete(false);
      continue;
    }
    v1::AssemblyInstance* ai = out.add_instances();
    ai->set_path(inst.path);
    ai->set_name(inst.name);
    ai->set_part_id(prepared[inst.part]->entry->info.part_id());
    ToProto(X_AP, ai->mutable_pose());
    if (inst.color_rgb) {
      ai->mutable_color()->set_r((*inst.color_rgb)[0]);
      ai->mutable_color()->set_g((*inst.color_rgb)[1]);
      ai->mutable_color()->set_b((*inst.color_rgb)[2]);
    }
  }
  if (out.instances().empty()) {
    return absl::InvalidArgumentError("mesh: no part of the file has usable triangles");
  }

  // 3. Room on disk for what is written below: the new parts (a part stored already, loaded
  // or not, or identical to one prepared above, writes nothing; one whose stored file is
  // missing or damaged is written again, and counted), and the assembly with the report's last
  // two fields, set below (32 bytes at most), in its sealed file.
  std::uint64_t bytes = out.ByteSizeLong() + 32 + kRecordHeaderBytes;
  for (const auto& p : prepared) {
    if (p) bytes += p->bytes.size();
  }
  CLASH_RETURN_IF_ERROR(reserve_storage(bytes));

  // 4. Stored: the parts (identical parts share an id: listed once), then the assembly.
  std::set<std::string> listed;
  uint64_t triangles = 0;
  for (std::size_t i = 0; i < prepared.size(); ++i) {
    if (!prepared[i]) continue;
    CLASH_ASSIGN_OR_RETURN(std::shared_ptr<const PartEntry> entry,
                           parts.Commit(std::move(*prepared[i])));
    if (listed.insert(entry->info.part_id()).second) {
      triangles += entry->info.triangle_count();
      *response->add_parts() = entry->info;
    }
  }
  report->set_triangles(triangles);
  report->set_import_seconds(absl::ToDoubleSeconds(absl::Now() - facts.start));
  CLASH_RETURN_IF_ERROR(parts.PutAssembly(out));
  *response->mutable_assembly() = std::move(out);
  return absl::OkStatus();
}

}  // namespace clash::server
