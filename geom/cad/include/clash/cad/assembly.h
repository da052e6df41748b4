// Reading a STEP or IGES file as an assembly: distinct parts, each tessellated once in its own
// frame, and the instances that place them in the assembly (world) frame.
//
// OCCT 7.6's XCAF document (XDE) does the reading; no OCCT type appears here. Like
// ReadAndTessellate, this runs OCCT in the calling process behind the module's one mutex; isolating
// untrusted files in a worker process is the caller's job.
#ifndef CLASH_CAD_ASSEMBLY_H_
#define CLASH_CAD_ASSEMBLY_H_

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clash/cad/tessellate.h"

namespace clash::cad {

/// Most instances an imported assembly may have. Shared sub-assemblies multiply: a 60 KB file of 20
/// levels, each placing the level below twice, expands to 2^20 instances (gigabytes in the server).
/// ReadAssembly counts the expansion before meshing and returns RESOURCE_EXHAUSTED naming the
/// count and this cap; the worker result parser refuses a larger instance count.
inline constexpr std::size_t kMaxAssemblyInstances = 100'000;

/// Longest name, in bytes, kept in an instance path segment; a longer one is cut on a character
/// boundary (before its ":<n>" suffix), so that no path exceeds what the worker's result holds.
inline constexpr std::size_t kMaxPathSegmentBytes = 960;

/// Rigid placement mapping a part's frame into the assembly (world) frame: world = R * p + t.
struct Placement {
  /// Row-major 3x3 matrix R (a rotation; it carries the scale if the file has one).
  std::array<double, 9> rotation{1, 0, 0, 0, 1, 0, 0, 0, 1};
  /// Translation t in millimetres.
  std::array<double, 3> translation_mm{};
};

/// One distinct part definition, tessellated once.
struct AssemblyPart {
  /// The part definition's name (from the file, else "part<k>" with k its index).
  std::string name;
  /// The part's mesh in its own frame, in mm; deflection_mm is relative to this part's own size.
  MeshBuffers mesh;
};

/// One placed occurrence of a part in the assembly tree.
struct AssemblyInstance {
  /// Names from the root down, '/'-separated, unique among the instances, e.g.
  /// "as1/rod-assembly_1/rod_1". A segment is the name with '/' made '_', cut to
  /// kMaxPathSegmentBytes; a segment shared by siblings gets ":<n>" on each occurrence (1-based, in
  /// file order, skipping any n that gives another sibling's segment).
  std::string path;
  /// This occurrence's name: the instance's own name, else its part's name.
  std::string name;
  /// Index into ImportedAssembly::parts.
  int part = 0;
  /// Composed placement from the part's frame to the world frame.
  Placement placement;
  /// sRGB colour in [0, 1] of the instance or, failing that, of its part, when the file has one.
  std::optional<std::array<float, 3>> color_rgb;
};

/// An assembly read from a file.
struct ImportedAssembly {
  /// Distinct part definitions with geometry.
  std::vector<AssemblyPart> parts;
  /// Every leaf occurrence of a part, depth-first in file order.
  std::vector<AssemblyInstance> instances;
  /// Transferable roots found in the file.
  int roots_total = 0;
  /// Shapes OCCT transferred from those roots.
  int roots_transferred = 0;
  /// Entities the file parser reported failures for (content possibly lost).
  int load_failures = 0;
  /// Entities the file parser reported only warnings for.
  int load_warnings = 0;
  /// Part definitions without faces, left out of parts (with their instances).
  int empty_parts = 0;
  /// What the import left out that is no geometry (so CheckImportComplete does not count it), one
  /// human-readable line each, e.g. colours dropped; clashd adds them to ImportReport.warnings.
  std::vector<std::string> warnings;
};

/// Reads the STEP or IGES file at `path` (format sniffed from its content) as an assembly tree and
/// tessellates every distinct part once; relative deflection is measured on each part's own
/// bounding box, and max_triangles caps the sum over parts. An IGES file, which has no product
/// structure, is one part (its roots' faces sewn together, as ReadAndTessellate meshes them) with
/// one instance at the identity. A STEP file that refers to other files (external references) is
/// refused: OCCT would read them from anywhere on the host. Colours the file has are kept, but
/// never at the cost of the geometry: when OCCT fails transferring the file with its colours (a
/// STEP COLOUR_RGB with a negative component raises Standard_OutOfRange in OCCT 7.6), the file is
/// read again without any, and a colour that comes out of OCCT not finite in [0, 1] is left out;
/// either is said in `warnings`. Errors: NOT_FOUND (no such file),
/// INVALID_ARGUMENT (bad options, external references, a file that cannot be read or transferred,
/// no part with geometry, or a part that cannot be meshed; the message names the phase),
/// RESOURCE_EXHAUSTED (above max_triangles, more than kMaxAssemblyInstances instances, or out of
/// memory), INTERNAL (unexpected failure).
[[nodiscard]] absl::StatusOr<ImportedAssembly> ReadAssembly(const std::string& path,
                                                            const TessellationOptions& options);

/// Strict mode (RELIABILITY.md, requirement 4). OK when nothing was lost: every root transferred,
/// every face of every part meshed, no load failures. Otherwise INVALID_ARGUMENT
/// "incomplete import: ..." naming what was lost, e.g. "2 of 40 faces of part 'bolt' not meshed"
/// (the first few parts by index, then how many more). Load warnings and empty parts (part
/// definitions without faces) are reported by the import but are not losses.
[[nodiscard]] absl::Status CheckImportComplete(const ImportedAssembly& assembly);

/// The same for a whole file imported as one mesh: every root transferred, every face meshed, no
/// load failures.
[[nodiscard]] absl::Status CheckImportComplete(const MeshBuffers& mesh);

}  // namespace clash::cad

#endif  // CLASH_CAD_ASSEMBLY_H_
