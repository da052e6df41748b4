// What an ImportCad call stores: the parts and the assembly of a file the CAD worker has read,
// all or nothing when the import is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "clash/cad/assembly.h"
#include "clash/cad/tessellate.h"
#include "clash/v1/parts.pb.h"
#include "part_store.h"

namespace clash::server {

/// The facts of one import besides the assembly read.
struct ImportFacts {
  std::string file_name;    ///< The user's file name (from the header).
  std::string sha256;       ///< Of the uploaded bytes, lowercase hex.
  std::string cache_key;    ///< The import cache's key (the assembly id is made from it).
  bool from_cache = false;  ///< No worker ran.
  bool strict = false;  ///< Refuse an incomplete import (INVALID_ARGUMENT) instead of a warning.
  cad::TessellationOptions options;  ///< The tessellation used.
  absl::Time start;                  ///< When the call started (for import_seconds).
};

/// The largest result file an import worker may write (cad::IsolationLimits::max_output_bytes)
/// for an import of at most `max_triangles` triangles over all its parts, so that what the server
/// reads back and parses is bounded by the import's own triangle cap rather than by the 2 GiB
/// default: 88 bytes per triangle (the worst case of the worker's format: 3 unshared vertices of
/// 24 bytes, 12 bytes of indices and a 4-byte face id) plus 256 MiB for headers, names and up to
/// cad::kMaxAssemblyInstances instances (about 2.6 KiB each). Saturates instead of overflowing.
[[nodiscard]] std::size_t MaxWorkerOutputBytes(std::size_t max_triangles);

/// Fills `response` (parts, assembly with its report) from `assembly` and stores its parts and
/// the assembly in `parts`. Every part is built, and every check that can refuse the import is
/// made, before the first part is written: an import refused (strict and incomplete, a part
/// above the triangle limit, parts whose triangles sum above facts.options.max_triangles
/// (RESOURCE_EXHAUSTED: the worker's cap, checked again on its untrusted output and on cache
/// entries), no usable instance) leaves nothing stored. Only a failing disk can
/// stop it halfway, after which the parts written are whole, content-addressed and reused by
/// the next import of the same file. Without strict, parts whose triangles are all degenerate
/// and instances whose placement is not a rigid motion are left out with a warning.
/// `reserve_storage(bytes)` is called once, after those checks and before the first write,
/// with the bytes the import is about to write (new parts and the assembly); an error from it
/// (the tenant's storage quota) refuses the import with nothing stored.
[[nodiscard]] absl::Status StoreImportedAssembly(
    const cad::ImportedAssembly& assembly, const ImportFacts& facts, PartStore& parts,
    absl::FunctionRef<absl::Status(std::uint64_t bytes)> reserve_storage,
    v1::ImportCadResponse* response);

}  // namespace clash::server
