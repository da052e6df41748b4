// The result file that clash-cad-worker writes and ImportIsolated reads (internal to clash_cad).
//
// Version 1 layout, all integers and doubles little-endian:
//   "CLSHMSH1"  8 bytes magic
//   u32 version (1), u32 kind (0 = mesh, 1 = error)
//   error: u32 absl::StatusCode, u32 message length, message bytes
//   mesh:  i32 faces_total, faces_meshed, faces_reversed, roots_total, roots_transferred,
//          load_failures, load_warnings; f64 deflection_mm; u64 vertex count V; u64 triangle
//          count T; f64 xyz[3V]; u32 triangles[3T]; u32 face_ids[T]
// The file must end right after the last field. The reader treats the file as untrusted.
#ifndef CLASH_CAD_SRC_WORKER_FORMAT_H_
#define CLASH_CAD_SRC_WORKER_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clash/cad/tessellate.h"

namespace clash::cad::internal {

/// The file's first 8 bytes.
inline constexpr std::string_view kWorkerOutputMagic = "CLSHMSH1";
/// The only format version written and read.
inline constexpr uint32_t kWorkerOutputVersion = 1;
/// Longest error message accepted from a worker.
inline constexpr std::size_t kMaxWorkerMessageBytes = 64 * 1024;
/// Largest accepted |coordinate| in mm (a million km; finite values beyond it are corrupt).
inline constexpr double kMaxAbsCoordinateMm = 1e12;

/// Exit code of a worker that wrote its result file (mesh or error).
inline constexpr int kWorkerExitOk = 0;
/// Exit code of a worker called with bad arguments.
inline constexpr int kWorkerExitUsage = 64;
/// Exit code of a worker that could not write its result file.
inline constexpr int kWorkerExitIoError = 74;

/// Size in bytes of the encoded mesh record for `mesh`.
[[nodiscard]] std::size_t EncodedMeshSize(const MeshBuffers& mesh);

/// Encodes `result` (a mesh, or an error status that must not be OK) as one result file.
[[nodiscard]] std::string EncodeWorkerOutput(const absl::StatusOr<MeshBuffers>& result);

/// Writes EncodeWorkerOutput(result) to `path` (created or truncated); streams the mesh in chunks.
/// Returns INTERNAL when the file cannot be written.
[[nodiscard]] absl::Status WriteWorkerOutput(const std::string& path,
                                             const absl::StatusOr<MeshBuffers>& result);

/// Parses a result file. Returns the mesh, the worker's own error status (never OK or UNKNOWN),
/// or INTERNAL "malformed worker output: ..." when `bytes` breaks any rule of the format: magic,
/// version, kind, sizes (against bytes.size() and max_bytes), consistent counts, finite
/// coordinates within kMaxAbsCoordinateMm, indices below the vertex count, face ids below
/// faces_total.
[[nodiscard]] absl::StatusOr<MeshBuffers> ParseWorkerOutput(std::string_view bytes,
                                                            std::size_t max_bytes);

/// Reads a whole file in this format (a worker's result or a cache entry) without trusting it:
/// INTERNAL "malformed worker output: ..." when it is missing, not a regular file, larger than
/// `max_bytes` or shorter than it claimed.
[[nodiscard]] absl::StatusOr<std::string> ReadEncodedFile(const std::string& path,
                                                          std::size_t max_bytes);

}  // namespace clash::cad::internal

#endif  // CLASH_CAD_SRC_WORKER_FORMAT_H_
