// CheckImportComplete: strict mode over an import's report (no OCCT here).
#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clash/cad/assembly.h"
#include "clash/cad/tessellate.h"

namespace clash::cad {
namespace {

// Parts with unmeshed faces named one by one in the message; the rest are counted.
constexpr std::size_t kMaxPartsNamed = 5;

// The losses every import can report: roots not transferred and entities that failed to load.
void AddFileLosses(int roots_total, int roots_transferred, int load_failures,
                   std::vector<std::string>* losses) {
  if (roots_transferred < roots_total) {
    losses->push_back(absl::StrCat(roots_total - roots_transferred, " of ", roots_total,
                                   " roots not transferred"));
  }
  if (load_failures > 0) {
    losses->push_back(absl::StrCat(load_failures, load_failures == 1 ? " entity" : " entities",
                                   " failed to load"));
  }
}

// "" when the mesh lost no face, else "<lost> of <total> faces<where> not meshed".
std::string FaceLoss(const MeshBuffers& mesh, const std::string& where) {
  if (mesh.faces_meshed >= mesh.faces_total) return "";
  return absl::StrCat(mesh.faces_total - mesh.faces_meshed, " of ", mesh.faces_total, " faces",
                      where, " not meshed");
}

absl::Status Verdict(const std::vector<std::string>& losses) {
  if (losses.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("incomplete import: ", absl::StrJoin(losses, "; ")));
}

}  // namespace

absl::Status CheckImportComplete(const ImportedAssembly& assembly) {
  std::vector<std::string> losses;
  AddFileLosses(assembly.roots_total, assembly.roots_transferred, assembly.load_failures, &losses);
  std::size_t incomplete_parts = 0;
  for (const AssemblyPart& part : assembly.parts) {
    std::string loss = FaceLoss(part.mesh, absl::StrCat(" of part '", part.name, "'"));
    if (loss.empty()) continue;
    if (++incomplete_parts <= kMaxPartsNamed) losses.push_back(std::move(loss));
  }
  if (incomplete_parts > kMaxPartsNamed) {
    losses.push_back(
        absl::StrCat(incomplete_parts - kMaxPartsNamed, " more parts with faces not meshed"));
  }
  return Verdict(losses);
}

absl::Status CheckImportComplete(const MeshBuffers& mesh) {
  std::vector<std::string> losses;
  AddFileLosses(mesh.roots_total, mesh.roots_transferred, mesh.load_failures, &losses);
  if (std::string loss = FaceLoss(mesh, ""); !loss.empty()) losses.push_back(std::move(loss));
  return Verdict(losses);
}

}  // namespace clash::cad
