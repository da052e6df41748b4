// The result file that clash-cad-worker writes and ImportIsolated / ImportAssemblyIsolated read,
// also the payload of import cache entries (internal to clash_cad).
//
// Layout, all integers and doubles little-endian:
//   8 bytes magic: "CLSHMSH1" (the payload is one mesh) or "CLSHASM1" (an assembly)
//   u32 version (2), u32 kind (0 = payload, 1 = error)
//   error:    u32 absl::StatusCode (one of IsWorkerErrorCode), u32 message length
//             (<= kMaxWorkerMessageBytes), message bytes (UTF-8: the writer replaces ill-formed
//             bytes with U+FFFD and cuts on a character boundary)
//   mesh:     <mesh>
//   assembly: i32 roots_total, roots_transferred, load_failures, load_warnings, empty_parts;
//             u32 part count P; u32 instance count I (<= kMaxAssemblyInstances);
//             P x { <string> name; u64 byte length L of the part's <mesh>; <mesh> (L bytes) }
//             I x { <string> path; <string> name; u32 part (< P); f64 rotation[9] (row-major);
//                   f64 translation_mm[3]; u8 has_color (0 or 1); f32 rgb[3] (in [0, 1]; all 0
//                   when has_color is 0) }
//             u32 warning count W (<= kMaxWorkerWarnings); W x <string> warning
//   <mesh>:   i32 faces_total, faces_meshed, faces_reversed, roots_total, roots_transferred,
//             load_failures, load_warnings; f64 deflection_mm; u64 vertex count V; u64 triangle
//             count T; f64 xyz[3V]; u32 triangles[3T]; u32 face_ids[T]
//   <string>: u32 length (<= kMaxWorkerStringBytes; longer names are cut on a character boundary
//             when encoding), bytes: well-formed UTF-8 (utf8.h), or the file is refused
// The file, and each part's <mesh>, must end right after its last field. The reader treats the
// file as untrusted: every count is checked against the bytes left before anything is allocated.
#ifndef CLASH_CAD_SRC_WORKER_FORMAT_H_
#define CLASH_CAD_SRC_WORKER_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clash/cad/assembly.h"
#include "clash/cad/tessellate.h"

namespace clash::cad::internal {

/// The first 8 bytes of a file whose payload is one mesh.
inline constexpr std::string_view kWorkerOutputMagic = "CLSHMSH1";
/// The first 8 bytes of a file whose payload is an assembly.
inline constexpr std::string_view kAssemblyOutputMagic = "CLSHASM1";
/// The only format version written and read (of both kinds of file). Version 2: assemblies end
/// with their warnings. An import cache entry of an older version fails to parse, so it is
/// dropped and imported again under the same key.
inline constexpr uint32_t kWorkerOutputVersion = 2;
/// Longest error message accepted from a worker.
inline constexpr std::size_t kMaxWorkerMessageBytes = 64 * 1024;
/// Longest part name, instance path, instance name or warning accepted from a worker.
inline constexpr std::size_t kMaxWorkerStringBytes = 64 * 1024;
/// Most warnings of an assembly a result holds; the encoder keeps the first ones (ReadAssembly
/// gives at most two).
inline constexpr std::size_t kMaxWorkerWarnings = 16;
/// Largest accepted |coordinate| or |translation| in mm (a million km; finite values beyond it
/// are corrupt).
inline constexpr double kMaxAbsCoordinateMm = 1e12;
/// Largest accepted |entry| of a placement's rotation matrix (it may carry a scale factor).
inline constexpr double kMaxAbsRotationEntry = 1e6;

/// Exit code of a worker that wrote its result file (payload or error).
inline constexpr int kWorkerExitOk = 0;
/// Exit code of a worker called with bad arguments.
inline constexpr int kWorkerExitUsage = 64;
/// Exit code of a worker that could not write its result file.
inline constexpr int kWorkerExitIoError = 74;

/// True for the status codes that a result file's error record may carry: those the readers
/// return on purpose (tessellate.h, assembly.h), NOT_FOUND, INVALID_ARGUMENT, RESOURCE_EXHAUSTED
/// and INTERNAL. Any other code is refused as malformed output: passed through, a code such as
/// UNAVAILABLE or DEADLINE_EXCEEDED would tell a client to retry a file that fails every time.
[[nodiscard]] bool IsWorkerErrorCode(absl::StatusCode code);

/// True when every rotation entry is finite with |entry| <= kMaxAbsRotationEntry and every
/// translation is finite with |t| <= kMaxAbsCoordinateMm.
[[nodiscard]] bool IsValidPlacement(const Placement& placement);

// The templates below are defined for T = MeshBuffers and T = ImportedAssembly only.

/// Size in bytes of the encoded file holding `payload`.
template <typename T>
[[nodiscard]] std::size_t EncodedSize(const T& payload);

/// Encodes `result` (a payload, or an error status that must not be OK) as one result file.
template <typename T>
[[nodiscard]] std::string EncodeWorkerOutput(const absl::StatusOr<T>& result);

/// Writes EncodeWorkerOutput(result) to `path` (created or truncated), streaming it in chunks.
/// Returns INTERNAL when the file cannot be written.
template <typename T>
[[nodiscard]] absl::Status WriteWorkerOutput(const std::string& path,
                                             const absl::StatusOr<T>& result);

/// Parses a result file. Returns the payload, the worker's own error status (a code for which
/// IsWorkerErrorCode holds), or INTERNAL "malformed worker output: ..." when `bytes` breaks any
/// rule of the format: magic (of the kind T), version, kind, error code, sizes (against
/// bytes.size() and max_bytes), consistent counts, finite coordinates within kMaxAbsCoordinateMm,
/// indices below the vertex count, face ids below faces_total, string lengths, strings (names,
/// paths, warnings, the error message) that are well-formed UTF-8, at most kMaxAssemblyInstances
/// instances and kMaxWorkerWarnings warnings, part indices below the part count, valid placements
/// (IsValidPlacement), colours in [0, 1].
template <typename T = MeshBuffers>
[[nodiscard]] absl::StatusOr<T> ParseWorkerOutput(std::string_view bytes, std::size_t max_bytes);

/// Reads a whole worker result file without trusting it:
/// INTERNAL "malformed worker output: ..." when it is missing, not a regular file, larger than
/// `max_bytes` or shorter than it claimed.
[[nodiscard]] absl::StatusOr<std::string> ReadEncodedFile(const std::string& path,
                                                          std::size_t max_bytes);

}  // namespace clash::cad::internal

#endif  // CLASH_CAD_SRC_WORKER_FORMAT_H_
