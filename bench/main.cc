// clash_bench: clashd's core against FCL, Embree and OCCT on the same meshes and workloads.
// Benchmarks are named BM_<Query>/<library>/<dataset>; see README.md.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "answers.h"
#include "bench_data.h"
#include "import_bench.h"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  using clash::bench::Query;
  const std::vector<std::string> parts = clash::bench::AvailableParts();
  const std::vector<std::string> pairs = clash::bench::AvailablePairs();
  if (parts.empty()) {
    std::fprintf(stderr, "no CAD files found (set CLASH_BENCH_DATA_DIR)\n");
    return 1;
  }
  for (Query q : clash::bench::kQueries) {
    for (const std::string& dataset : clash::bench::IsPartQuery(q) ? parts : pairs) {
      clash::bench::RegisterClash(q, dataset);
      clash::bench::RegisterFcl(q, dataset);
      clash::bench::RegisterEmbree(q, dataset);
      clash::bench::RegisterOcct(q, dataset);
    }
  }
  for (const std::string& dataset : parts) clash::bench::RegisterImport(dataset);
  benchmark::AddCustomContext("pairs_per_dataset", std::to_string(clash::bench::kPairsPerDataset));
  benchmark::AddCustomContext("rays_per_part", std::to_string(clash::bench::kRaysPerPart));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
