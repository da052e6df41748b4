// clashd's core in its three node-volume modes: every pair query, hierarchy build and rays.
#include <malloc.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "answers.h"
#include "clash/geom/query.h"

namespace clash::bench {
namespace {

using geom::BvMode;
using geom::RigidTransform;

// FindIntersections limit: far above any pair of these workloads; truncation fails the check.
constexpr std::size_t kMaxPairs = 100000;

absl::StatusOr<Answers> ComputePairAnswers(Query q, BvMode mode, const std::string& dataset) {
  auto ds_or = LoadPairs(dataset);
  if (!ds_or.ok()) return ds_or.status();
  const PairDataset& ds = **ds_or;
  const geom::Part& a = ds.a->Get(mode);
  const geom::Part& b = ds.b->Get(mode);
  const RigidTransform I = RigidTransform::Identity();
  Answers out;
  for (uint32_t i : CaseIndices(q, ds)) {
    const RigidTransform& X_WB = ds.pairs[i].X_WB;
    switch (q) {
      case Query::kCollide: {
        const bool yes = geom::SurfacesIntersect(a, I, b, X_WB);
        out.values.push_back(yes ? 1.0 : 0.0);
        auto& witness = out.tri_pairs.emplace_back();  // for a yes, one crossing triangle pair
        const geom::IntersectionResult r = geom::FindIntersections(a, I, b, X_WB, 1);
        if (yes && !r.pairs.empty()) witness.emplace_back(r.pairs[0].tri_a, r.pairs[0].tri_b);
        break;
      }
      case Query::kContacts: {
        const geom::IntersectionResult r = geom::FindIntersections(a, I, b, X_WB, kMaxPairs);
        if (r.truncated) return absl::ResourceExhaustedError("more than 100000 triangle pairs");
        out.values.push_back(static_cast<double>(r.pairs.size()));
        auto& pairs = out.tri_pairs.emplace_back();
        for (const geom::TrianglePairHit& h : r.pairs) pairs.emplace_back(h.tri_a, h.tri_b);
        break;
      }
      default:
        out.values.push_back(geom::Distance(a, I, b, X_WB).distance);
        break;
    }
  }
  return out;
}

absl::StatusOr<Answers> ComputeRayAnswers(BvMode mode, const std::string& part_name) {
  auto part = LoadPart(part_name);
  if (!part.ok()) return part.status();
  auto rays = LoadRays(part_name);
  if (!rays.ok()) return rays.status();
  const geom::Part& p = (*part)->Get(mode);
  Answers out;
  for (const geom::Ray& r : (*rays)->rays) {
    auto hit = geom::CastRay(p, RigidTransform::Identity(), r);
    out.values.push_back(hit ? hit->t : -1.0);
  }
  return out;
}

void PairBench(benchmark::State& state, Query q, BvMode mode, const std::string& dataset) {
  const std::string label = ModeLabel(mode);
  const Prepared& p = PrepareOnce(BenchName(q, label, dataset), [&] {
    return PrepareChecked(q, dataset, ClashAnswers(q, mode, dataset), label.c_str(),
                          FclReferenceAnswers(q, dataset), "fcl-obbrss");
  });
  if (!p.error.empty()) {
    state.SkipWithError(p.error.c_str());
    return;
  }
  const PairDataset& ds = **LoadPairs(dataset);
  const geom::Part& a = ds.a->Get(mode);
  const geom::Part& b = ds.b->Get(mode);
  const RigidTransform I = RigidTransform::Identity();
  const std::vector<uint32_t> cases = CaseIndices(q, ds);
  TimedLoop(state, p, [&](std::size_t i) -> double {
    const RigidTransform& X_WB = ds.pairs[cases[i]].X_WB;
    switch (q) {
      case Query::kCollide:
        return geom::SurfacesIntersect(a, I, b, X_WB) ? 1.0 : 0.0;
      case Query::kContacts:
        return static_cast<double>(geom::FindIntersections(a, I, b, X_WB, kMaxPairs).pairs.size());
      default:
        return geom::Distance(a, I, b, X_WB).distance;
    }
  });
}

void RayBench(benchmark::State& state, BvMode mode, const std::string& part_name) {
  const std::string label = ModeLabel(mode);
  const Prepared& p = PrepareOnce(BenchName(Query::kRay, label, part_name), [&] {
    Prepared out =
        PrepareChecked(Query::kRay, part_name, ClashAnswers(Query::kRay, mode, part_name),
                       label.c_str(), EmbreeReferenceAnswers(part_name), "embree");
    if (out.error.empty()) {
      out.counters["hit_fraction"] = (*LoadRays(part_name))->hits / double(kRaysPerPart);
    }
    return out;
  });
  if (!p.error.empty()) {
    state.SkipWithError(p.error.c_str());
    return;
  }
  const geom::Part& part = (*LoadPart(part_name))->Get(mode);
  const std::vector<geom::Ray>& rays = (*LoadRays(part_name))->rays;
  TimedLoop(state, p, [&](std::size_t i) -> double {
    auto hit = geom::CastRay(part, RigidTransform::Identity(), rays[i]);
    return hit ? hit->t : -1.0;
  });
  state.counters["rays_per_s"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
}

// Heap bytes in use (main arena and mmapped blocks).
std::size_t HeapInUse() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

void BuildBench(benchmark::State& state, BvMode mode, const std::string& part_name) {
  const std::string label = ModeLabel(mode);
  const Prepared& p = PrepareOnce(BenchName(Query::kBuild, label, part_name), [&] {
    Prepared out;
    auto part = LoadPart(part_name);
    if (!part.ok()) {
      out.error = std::string(part.status().message());
      return out;
    }
    const PartData& pd = **part;
    geom::PartOptions options;
    options.bv.mode = mode;
    const std::size_t before = HeapInUse();
    auto built = geom::Part::Create(pd.mesh, options);  // the mesh copy is part of the cost
    const std::size_t after = HeapInUse();
    if (!built.ok()) {
      out.error = std::string(built.status().message());
      return out;
    }
    const geom::PartStats& st = (*built)->stats();
    if (st.nodes != pd.Get(mode).stats().nodes) {
      out.error = "a rebuild gave a different node count";
      return out;
    }
    const double n = static_cast<double>(pd.mesh.num_triangles());
    out.values = {static_cast<double>(st.nodes)};
    out.counters["triangles"] = n;
    out.counters["bytes_per_tri"] = static_cast<double>(st.memory_bytes) / n;
    out.counters["heap_bytes_per_tri"] = static_cast<double>(after - before) / n;
    out.counters["nodes"] = static_cast<double>(st.nodes);
    out.counters["aabb_nodes"] = static_cast<double>(st.aabb_nodes);
    out.counters["obb_nodes"] = static_cast<double>(st.obb_nodes);
    out.counters["volume_saved"] = st.VolumeSaved();
    out.counters["sah_cost"] = st.sah_cost;  // the tree's quality (lower is better)
    return out;
  });
  const PartData* pd = p.error.empty() ? *LoadPart(part_name) : nullptr;
  geom::PartOptions options;
  options.bv.mode = mode;
  TimedLoop(state, p, [&](std::size_t) -> double {
    auto built = geom::Part::Create(pd->mesh, options);
    return static_cast<double>((*built)->stats().nodes);
  });
  if (pd) {
    state.counters["time_per_tri"] = benchmark::Counter(
        static_cast<double>(pd->mesh.num_triangles()),
        benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  }
}

}  // namespace

absl::StatusOr<const Answers*> ClashAnswers(Query q, BvMode mode, const std::string& dataset) {
  const std::string key = BenchName(q, ModeLabel(mode), dataset);
  return CachedAnswers(key, [&]() -> absl::StatusOr<Answers> {
    if (q == Query::kRay) return ComputeRayAnswers(mode, dataset);
    if (q == Query::kBuild) return absl::InvalidArgumentError("build has no answers");
    return ComputePairAnswers(q, mode, dataset);
  });
}

void RegisterClash(Query q, const std::string& dataset) {
  for (BvMode mode : kModes) {
    const std::string name = BenchName(q, ModeLabel(mode), dataset);
    benchmark::internal::Benchmark* b = nullptr;
    switch (q) {
      case Query::kBuild:
        b = benchmark::RegisterBenchmark(name.c_str(), BuildBench, mode, dataset);
        break;
      case Query::kRay:
        b = benchmark::RegisterBenchmark(name.c_str(), RayBench, mode, dataset);
        break;
      default:
        b = benchmark::RegisterBenchmark(name.c_str(), PairBench, q, mode, dataset);
        break;
    }
    b->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace clash::bench
