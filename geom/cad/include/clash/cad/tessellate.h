// Reading a STEP or IGES file and tessellating its B-rep into plain triangle buffers.
//
// OCCT 7.6 does all the work, but no OCCT type appears here: callers see millimetres, indices and
// absl::Status only. The buffers are raw: vertices are not welded and degenerate triangles are
// kept, because clash::geom::TriangleMesh::Create validates and cleans them.
//
// OCCT is not safe against malformed files (it can crash or loop forever on some) nor across
// threads; this module serialises every call behind one process-wide mutex, but isolating untrusted
// files in a worker process is the caller's job (RELIABILITY.md, requirement 1).
#ifndef CLASH_CAD_TESSELLATE_H_
#define CLASH_CAD_TESSELLATE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace clash::cad {

/// Smallest accepted deflection as a fraction of the shape's bounding-box diagonal (finer meshes
/// can run for minutes and exhaust memory).
inline constexpr double kMinRelativeDeflection = 1e-5;

/// Tessellation parameters; lengths in millimetres, angles in radians.
struct TessellationOptions {
  /// > 0: absolute chordal deflection in mm; 0: derive it from relative_deflection.
  double linear_deflection_mm = 0.0;
  /// Fraction of this shape's own bounding-box diagonal, used when linear_deflection_mm == 0.
  double relative_deflection = 0.002;
  /// Largest angle between the normals at the ends of a mesh edge; must lie in (0, pi).
  double angular_deflection_rad = 0.35;
  /// Mesh faces on OCCT's thread pool.
  bool parallel = true;
  /// Largest accepted triangle count; more gives RESOURCE_EXHAUSTED.
  std::size_t max_triangles = 20'000'000;
};

/// INVALID_ARGUMENT naming the first bad field of `options` (a deflection that is not finite or
/// is negative, no deflection at all, an angle outside (0, pi), max_triangles 0), else OK. Every
/// import checks its options with it before it reads the file; it needs no OCCT, so that callers
/// (the server) can refuse bad options before they upload a file or start a worker.
[[nodiscard]] absl::Status ValidateTessellationOptions(const TessellationOptions& options);

/// One tessellated shape; lengths in millimetres.
struct MeshBuffers {
  /// Vertex coordinates, 3 per vertex (x, y, z).
  std::vector<double> xyz;
  /// Vertex indices, 3 per triangle, 0-based, counter-clockwise seen from outside.
  std::vector<uint32_t> triangles;
  /// Per triangle: 0-based index of its B-rep face in TopExp::MapShapes(TopAbs_FACE) order.
  std::vector<uint32_t> face_ids;
  /// Number of distinct faces (face + location) in the shape.
  int faces_total = 0;
  /// Faces that produced at least one triangle; less than faces_total means an incomplete mesh.
  int faces_meshed = 0;
  /// Faces whose triangles were flipped because the face is TopAbs_REVERSED.
  int faces_reversed = 0;
  /// Transferable roots found in the file.
  int roots_total = 0;
  /// Roots that OCCT transferred into shapes.
  int roots_transferred = 0;
  /// Entities the file parser reported failures for (content possibly lost).
  int load_failures = 0;
  /// Entities the file parser reported only warnings for.
  int load_warnings = 0;
  /// Linear (chordal) deflection actually used, in mm.
  double deflection_mm = 0;
};

/// CAD exchange formats this module reads.
enum class CadFormat { kStep, kIges };

/// Detects the format from the file's first bytes (at least its first line; 512 bytes is plenty):
/// "ISO-10303-21" opens a STEP file; an 80-column record with 'S' in column 73 opens an IGES file.
/// Returns INVALID_ARGUMENT for anything else.
[[nodiscard]] absl::StatusOr<CadFormat> SniffFormat(std::string_view first_bytes);

/// Reads the STEP or IGES file at `path` (format sniffed from its content) and tessellates the
/// whole file's shape as one mesh (loose IGES faces sewn, unless sewing would lose a face that
/// meshes unsewn). Errors: NOT_FOUND (no such file), INVALID_ARGUMENT (bad options, a STEP file
/// with external references, or a file that cannot be read, transferred or meshed; the message
/// names the phase),
/// RESOURCE_EXHAUSTED (above max_triangles or out of memory), INTERNAL (unexpected failure).
[[nodiscard]] absl::StatusOr<MeshBuffers> ReadAndTessellate(const std::string& path,
                                                            const TessellationOptions& options);

}  // namespace clash::cad

#endif  // CLASH_CAD_TESSELLATE_H_
