// libFuzzer target: the parser of clash-cad-worker's result file (and of import cache entries),
// which clashd reads as untrusted input. Any bytes must give a payload or a status: no crash,
// no sanitizer report, no allocation beyond what the bytes can hold. The first byte picks the
// kind of file (one mesh or an assembly), so both parsers are reached from one corpus.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "clash/cad/assembly.h"
#include "clash/cad/tessellate.h"
#include "utf8.h"
#include "worker_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  constexpr std::size_t kMaxBytes = std::size_t{1} << 20;
  if (data[0] & 1) {
    auto r =
        clash::cad::internal::ParseWorkerOutput<clash::cad::ImportedAssembly>(bytes, kMaxBytes);
    if (r.ok() && r->instances.size() > 0 && r->parts.empty()) __builtin_trap();
    // A parsed assembly keeps the instance cap, and its strings are UTF-8 (protobuf needs it).
    if (r.ok()) {
      if (r->instances.size() > clash::cad::kMaxAssemblyInstances) __builtin_trap();
      for (const auto& part : r->parts) {
        if (!clash::cad::internal::IsValidUtf8(part.name)) __builtin_trap();
      }
      for (const auto& instance : r->instances) {
        if (!clash::cad::internal::IsValidUtf8(instance.path) ||
            !clash::cad::internal::IsValidUtf8(instance.name)) {
          __builtin_trap();
        }
      }
    } else if (!clash::cad::internal::IsValidUtf8(std::string(r.status().message()))) {
      __builtin_trap();
    }
  } else {
    auto r = clash::cad::internal::ParseWorkerOutput<clash::cad::MeshBuffers>(bytes, kMaxBytes);
    // A parsed mesh keeps the format's promises.
    if (r.ok()) {
      if (r->xyz.size() % 3 != 0 || r->triangles.size() % 3 != 0) __builtin_trap();
      for (uint32_t i : r->triangles) {
        if (i >= r->xyz.size() / 3) __builtin_trap();
      }
    }
  }
  return 0;
}
