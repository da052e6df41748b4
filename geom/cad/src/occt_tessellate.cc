// STEP/IGES reading and B-rep tessellation of a whole file as one mesh, with OCCT 7.6. The shared
// helpers (mutex, parameter guard, meshing, exception mapping) live in occt_common.cc.
//
// Pitfalls handled (STYLE.md section 7, items 11 and 12):
// - One process-wide mutex serialises all OCCT work: Interface_Static and the reader sessions are
//   global state, and concurrent readers crash.
// - "xstep.cascade.unit" (the unit OCCT converts lengths into) is set to MM through an RAII guard
//   that restores the previous value. OCCT 7.6 applies it at transfer time
//   (XSAlgo_AlgoContainer::PrepareForTransfer), so the guard spans reading and transfer.
// - Tessellation parameters are always explicit (absolute deflection, angle, Relative = false).
// - Each face's triangulation is moved by its TopLoc_Location, its 1-based node indices are made
//   0-based, and TopAbs_REVERSED faces get their winding flipped.
// - OCCT's messenger printers are detached while OCCT runs: a library never prints.
// - Standard_Failure and std::exception are turned into absl::Status here; nothing escapes.
#include <IFSelect_ReturnStatus.hxx>
#include <IGESControl_Reader.hxx>
#include <STEPControl_Reader.hxx>
#include <TopoDS_Shape.hxx>
#include <XSControl_WorkSession.hxx>
#include <mutex>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "clash/cad/tessellate.h"
#include "occt_common.h"

namespace clash::cad {
namespace {

using internal::Phase;

// The shape of a whole file plus the transfer report.
struct ReadResult {
  TopoDS_Shape shape;
  int roots_total = 0;
  int roots_transferred = 0;
  int load_failures = 0;
  int load_warnings = 0;
};

// Runs ReadFile and TransferRoots on a STEPControl_Reader or IGESControl_Reader.
template <typename Reader>
absl::StatusOr<ReadResult> ReadWith(Reader& reader, const std::string& path, const char* format,
                                    Phase* phase) {
  // Constructing the reader registered the translator's statics, so the guard can set them now.
  internal::ScopedInterfaceStatic unit("xstep.cascade.unit", "MM");
  if (!unit.active()) {
    return absl::InternalError("read: cannot set OCCT parameter xstep.cascade.unit to MM");
  }
  *phase = Phase::kRead;
  const IFSelect_ReturnStatus read_status = reader.ReadFile(path.c_str());
  if (read_status != IFSelect_RetDone) {
    return absl::InvalidArgumentError(absl::StrCat("read: OCCT cannot parse the ", format,
                                                   " file (IFSelect status ",
                                                   static_cast<int>(read_status), ")"));
  }
  if constexpr (std::is_same_v<Reader, STEPControl_Reader>) {
    // STEPControl_Reader itself follows no reference, but a file that has them is refused the
    // same in every import path (see RefuseExternalReferences).
    if (absl::Status refused = internal::RefuseExternalReferences(reader.WS()); !refused.ok()) {
      return refused;
    }
  }
  ReadResult result;
  const internal::LoadChecks checks = internal::CountLoadChecks(reader.WS());
  result.load_failures = checks.failures;
  result.load_warnings = checks.warnings;
  *phase = Phase::kTransfer;
  result.roots_total = reader.NbRootsForTransfer();
  if (result.roots_total <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer: the ", format, " file has no transferable roots"));
  }
  result.roots_transferred = reader.TransferRoots();
  if (result.roots_transferred <= 0 || reader.NbShapes() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("transfer: none of the ", result.roots_total,
                                                   " roots of the ", format, " file gave a shape"));
  }
  result.shape = reader.OneShape();
  if (result.shape.IsNull()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer: the ", format, " file gave no shape"));
  }
  return result;
}

// Read, transfer and mesh; `phase` tracks progress for the exception handler.
absl::StatusOr<MeshBuffers> ImportLocked(const std::string& path, CadFormat format,
                                         const TessellationOptions& options, Phase* phase) {
  *phase = Phase::kRead;
  absl::StatusOr<ReadResult> read;
  if (format == CadFormat::kStep) {
    STEPControl_Reader reader;
    read = ReadWith(reader, path, "STEP", phase);
  } else {
    IGESControl_Reader reader;
    read = ReadWith(reader, path, "IGES", phase);
  }
  if (!read.ok()) return read.status();

  *phase = Phase::kMesh;
  // The shape came out of a reader local to this call, so nobody else holds it. IGES faces are
  // sewn first, unless sewing would lose one (MeshLooseFaces).
  absl::StatusOr<MeshBuffers> mesh = format == CadFormat::kIges
                                         ? internal::MeshLooseFaces(read->shape, options)
                                         : internal::MeshOwnedShape(read->shape, options);
  if (!mesh.ok()) return mesh.status();
  mesh->roots_total = read->roots_total;
  mesh->roots_transferred = read->roots_transferred;
  mesh->load_failures = read->load_failures;
  mesh->load_warnings = read->load_warnings;
  return mesh;
}

}  // namespace

absl::StatusOr<MeshBuffers> ReadAndTessellate(const std::string& path,
                                              const TessellationOptions& options) {
  return internal::RunLockedImport<MeshBuffers>(path, options, [&](CadFormat format, Phase* phase) {
    return ImportLocked(path, format, options, phase);
  });
}

}  // namespace clash::cad
