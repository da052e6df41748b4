// What every benchmark checks before timing: each library's answers on a dataset, the
// agreement rules between two libraries, and a timing loop whose checksum is verified.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench_data.h"

namespace clash::bench {

/// The compared queries.
enum class Query : uint8_t {
  kCollide,         ///< Interference yes/no on all pairs.
  kContacts,        ///< All intersecting triangle pairs, on all pairs.
  kDistanceApart,   ///< Surface distance, pulled-apart pairs.
  kDistancePushed,  ///< Surface distance, pushed-in pairs.
  kBuild,           ///< Hierarchy construction, per part.
  kRay,             ///< Closest ray hit, per part.
};

/// All queries, in report order.
inline constexpr Query kQueries[] = {Query::kCollide,       Query::kContacts,
                                     Query::kDistanceApart, Query::kDistancePushed,
                                     Query::kBuild,         Query::kRay};

/// Name in benchmark names: "Collide", "Contacts", "DistanceApart", ...
[[nodiscard]] const char* QueryName(Query q);

/// True for queries whose datasets are single parts (build, rays), false for pair datasets.
[[nodiscard]] bool IsPartQuery(Query q);

/// "BM_<Query>/<lib>/<dataset>", the name a script parses.
[[nodiscard]] std::string BenchName(Query q, const std::string& lib, const std::string& dataset);

/// Pair indices a pair query runs on (all, apart or pushed-in pairs).
[[nodiscard]] std::vector<uint32_t> CaseIndices(Query q, const PairDataset& ds);

/// One library's answers on a whole dataset, one value per case.
struct Answers {
  /// 0/1 (collide), intersecting triangle pairs (contacts), distance, or ray t (-1: miss).
  std::vector<double> values;
  /// Contacts: the sorted (triangle of a, triangle of b) pairs of each case. Collide (where
  /// the library tells): for a yes, one crossing pair, its witness; empty for a no.
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> tri_pairs;
};

/// Answers cached by key; `make` runs on the first request only.
[[nodiscard]] absl::StatusOr<const Answers*> CachedAnswers(
    const std::string& key, const std::function<absl::StatusOr<Answers>()>& make);

/// Outcome of comparing two libraries' answers.
struct Agreement {
  std::string error;  ///< Empty when they agree.
  int excused = 0;    ///< Differences explained by contact within rounding.
};

/// Applies the agreement rule of query q to two libraries' answers on `dataset`:
///  - yes/no: identical, except pairs whose contact is within rounding (clash reports a
///    distance <= the touch tolerance, or its answer flips when b moves by the tolerance);
///  - contacts: the same triangle pairs, except triangle pairs touching within rounding;
///  - distances: within 1e-6 relative (plus the touch tolerance, the rounding floor);
///  - rays: same hit/miss and t within 1e-6 relative.
[[nodiscard]] Agreement Compare(Query q, const std::string& dataset, const Answers& ours,
                                const char* ours_label, const Answers& theirs,
                                const char* theirs_label);

/// Clash's answers (part datasets for kRay, pair datasets otherwise).
[[nodiscard]] absl::StatusOr<const Answers*> ClashAnswers(Query q, geom::BvMode mode,
                                                          const std::string& dataset);
/// FCL's answers with BVHModel<OBBRSS>, the FCL reference clash is checked against.
[[nodiscard]] absl::StatusOr<const Answers*> FclReferenceAnswers(Query q,
                                                                 const std::string& dataset);
/// Embree's answers (kRay only).
[[nodiscard]] absl::StatusOr<const Answers*> EmbreeReferenceAnswers(const std::string& part);

/// What a benchmark establishes once, before its first timing run.
struct Prepared {
  std::string error;                       ///< Non-empty: skip with this message.
  std::vector<double> values;              ///< Expected result of each case, in timing order.
  std::map<std::string, double> counters;  ///< Reported with every run.
};

/// Runs `make` once per key (Google Benchmark calls a benchmark function several times).
[[nodiscard]] const Prepared& PrepareOnce(const std::string& key,
                                          const std::function<Prepared()>& make);

/// Prepared from one library's answers checked against another's.
[[nodiscard]] Prepared PrepareChecked(Query q, const std::string& dataset,
                                      const absl::StatusOr<const Answers*>& ours,
                                      const char* ours_label,
                                      const absl::StatusOr<const Answers*>& theirs,
                                      const char* theirs_label);

/// The timing loop: iteration k runs case k mod n and adds its result to a checksum; after the
/// loop the checksum must equal the prepared values summed in the same order, so the timed work
/// is the checked work and cannot be optimised away.
template <typename Fn>
void TimedLoop(benchmark::State& state, const Prepared& p, Fn&& run) {
  if (!p.error.empty()) {
    state.SkipWithError(p.error.c_str());
    return;
  }
  const std::size_t n = p.values.size();
  if (n == 0) {
    state.SkipWithError("no cases");
    return;
  }
  double checksum = 0;
  std::size_t i = 0, iterations = 0;
  for (auto _ : state) {
    double v = run(i);
    benchmark::DoNotOptimize(v);
    checksum += v;
    if (++i == n) i = 0;
    ++iterations;
  }
  double expected = 0;
  for (std::size_t k = 0, j = 0; k < iterations; ++k) {
    expected += p.values[j];
    if (++j == n) j = 0;
  }
  if (checksum != expected) {
    state.SkipWithError("checksum of timed results differs from the checked results");
    return;
  }
  for (const auto& [name, value] : p.counters) state.counters[name] = value;
}

/// Registration of each library's benchmarks for one query and dataset (may add nothing).
void RegisterClash(Query q, const std::string& dataset);
void RegisterFcl(Query q, const std::string& dataset);
void RegisterEmbree(Query q, const std::string& dataset);
void RegisterOcct(Query q, const std::string& dataset);

}  // namespace clash::bench
