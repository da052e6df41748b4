#include "import_bench.h"

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "bench_data.h"
#include "clash/cad/import_cache.h"
#include "clash/cad/isolated_import.h"
#include "clash/cad/tessellate.h"
#include "clash/cad/worker_pool.h"

namespace clash::bench {
namespace {

namespace fs = std::filesystem;

bool SameMesh(const cad::MeshBuffers& a, const cad::MeshBuffers& b) {
  return a.xyz == b.xyz && a.triangles == b.triangles && a.face_ids == b.face_ids;
}

// The pre-started workers of the cold imports, as clashd keeps them (worker_pool.h).
cad::WorkerPool& Pool() {
  static cad::WorkerPool* pool = new cad::WorkerPool({CLASH_CAD_WORKER_PATH, 2});
  return *pool;
}

cad::IsolationLimits Limits() {
  cad::IsolationLimits limits;
  limits.worker_path = CLASH_CAD_WORKER_PATH;
  limits.pool = &Pool();
  return limits;
}

// Waits, untimed, until the pool has replaced the workers earlier imports used.
void WaitForPool(benchmark::State& state) {
  state.PauseTiming();
  if (!Pool().WaitUntilFull(std::chrono::seconds(30))) state.SkipWithError("worker pool not full");
  state.ResumeTiming();
}

// Imports `path` the way `lib` does; nullopt-like error string on failure.
absl::StatusOr<cad::MeshBuffers> Import(const std::string& lib, const std::string& path,
                                        const cad::ImportCache& cache) {
  if (lib == "occt") return cad::ReadAndTessellate(path, {});
  if (lib == "clash-cold") return cad::ImportIsolated(path, {}, Limits());
  auto cached = cad::ImportWithCache(path, {}, Limits(), cache);
  if (!cached.ok()) return cached.status();
  if (!cached->from_cache) return absl::InternalError("the cached import missed the cache");
  return std::move(cached->mesh);
}

void ImportBench(benchmark::State& state, std::string lib, std::string dataset) {
  auto part = LoadPart(dataset);
  if (!part.ok()) {
    state.SkipWithError(std::string(part.status().message()).c_str());
    return;
  }
  const std::string& path = (*part)->path;
  const fs::path dir =
      fs::temp_directory_path() / ("clash_bench_cache_" + std::to_string(getpid()));
  auto cache = cad::ImportCache::Open(dir.string());
  if (!cache.ok()) {
    state.SkipWithError(std::string(cache.status().message()).c_str());
    return;
  }
  // Check before timing: the in-process OCCT result, the worker's and the cache's agree.
  auto reference = cad::ReadAndTessellate(path, {});
  auto cold = cad::ImportWithCache(path, {}, Limits(), *cache);  // also fills the cache
  auto mine = Import(lib, path, *cache);
  if (!reference.ok() || !cold.ok() || !mine.ok() || !SameMesh(*reference, cold->mesh) ||
      !SameMesh(*reference, *mine)) {
    state.SkipWithError("import results disagree (or an import failed)");
    fs::remove_all(dir);
    return;
  }
  std::size_t checksum = 0;
  for (auto _ : state) {
    if (lib == "clash-cold") WaitForPool(state);
    auto r = Import(lib, path, *cache);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      break;
    }
    checksum += r->triangles.size();
    benchmark::DoNotOptimize(checksum);
  }
  if (checksum % reference->triangles.size() != 0) state.SkipWithError("checksum mismatch");
  state.counters["triangles"] = static_cast<double>(reference->triangles.size() / 3);
  fs::remove_all(dir);
}

}  // namespace

void RegisterImport(const std::string& dataset) {
  for (const char* lib : {"clash-cold", "occt", "clash-cached"}) {
    benchmark::RegisterBenchmark(("BM_Import/" + std::string(lib) + "/" + dataset).c_str(),
                                 ImportBench, std::string(lib), dataset)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace clash::bench
