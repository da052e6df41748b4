// FCL 0.7 baselines: BVHModel<OBB|OBBRSS|RSS|AABB> collision, exhaustive contacts, distance and
// model build, on the same validated meshes and poses as clash.
//
// FCL semantics that matter here (fcl/narrowphase/detail/...):
//  - collide() with enable_contact = false records one Contact (b1, b2 = triangle ids) per
//    intersecting triangle pair until num_max_contacts is reached, then stops; with 100000 it is
//    exhaustive for these workloads (reaching the limit fails the check).
//  - OBB, OBBRSS and RSS use one relative transform per pair; for AABB (and other BVs) collide()
//    copies both models, moves their vertices to world space and refits them on every call.
//  - distance() with rel_err = abs_err = 0 is exact; OBB has no distance support.
#include <fcl/geometry/bvh/BVH_model.h>
#include <fcl/math/bv/AABB.h>
#include <fcl/math/bv/OBB.h>
#include <fcl/math/bv/OBBRSS.h>
#include <fcl/math/bv/RSS.h>
#include <fcl/narrowphase/collision.h>
#include <fcl/narrowphase/distance.h>
#include <malloc.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "answers.h"

namespace clash::bench {
namespace {

using geom::RigidTransform;

constexpr std::size_t kMaxContacts = 100000;

template <typename BV>
struct BvTraits;
template <>
struct BvTraits<fcl::OBBd> {
  static constexpr const char* kLabel = "fcl-obb";
};
template <>
struct BvTraits<fcl::OBBRSSd> {
  static constexpr const char* kLabel = "fcl-obbrss";
};
template <>
struct BvTraits<fcl::RSSd> {
  static constexpr const char* kLabel = "fcl-rss";
};
template <>
struct BvTraits<fcl::AABBd> {
  static constexpr const char* kLabel = "fcl-aabb";
};

// The mesh in FCL's input form (the vertex type is the same Eigen::Vector3d).
struct FclMesh {
  std::vector<fcl::Vector3d> vertices;
  std::vector<fcl::Triangle> triangles;
};

FclMesh ToFcl(const geom::TriangleMesh& m) {
  FclMesh out;
  out.vertices.assign(m.vertices().begin(), m.vertices().end());
  out.triangles.reserve(m.num_triangles());
  for (const auto& t : m.triangles()) out.triangles.emplace_back(t[0], t[1], t[2]);
  return out;
}

template <typename BV>
std::unique_ptr<fcl::BVHModel<BV>> BuildModel(const FclMesh& m) {
  auto model = std::make_unique<fcl::BVHModel<BV>>();
  if (model->beginModel(static_cast<int>(m.triangles.size()),
                        static_cast<int>(m.vertices.size())) != fcl::BVH_OK ||
      model->addSubModel(m.vertices, m.triangles) != fcl::BVH_OK ||
      model->endModel() != fcl::BVH_OK) {
    return nullptr;
  }
  return model;
}

// Models built once per part and BV type.
template <typename BV>
absl::StatusOr<const fcl::BVHModel<BV>*> Model(const PartData& part) {
  static std::map<std::string, std::unique_ptr<fcl::BVHModel<BV>>> cache;
  auto it = cache.find(part.name);
  if (it == cache.end()) it = cache.emplace(part.name, BuildModel<BV>(ToFcl(part.mesh))).first;
  if (!it->second) return absl::InternalError("FCL BVHModel build failed");
  return it->second.get();
}

fcl::Transform3d ToFcl(const RigidTransform& X) {
  fcl::Transform3d out = fcl::Transform3d::Identity();
  out.linear() = X.R;
  out.translation() = X.t;
  return out;
}

// One FCL query on the models; fills `pairs` for contacts when given.
template <typename BV>
double RunQuery(Query q, const fcl::BVHModel<BV>& a, const fcl::BVHModel<BV>& b,
                const fcl::Transform3d& X_WA, const fcl::Transform3d& X_WB,
                std::vector<std::pair<uint32_t, uint32_t>>* pairs) {
  switch (q) {
    case Query::kCollide: {
      const fcl::CollisionRequestd request(1, false);
      fcl::CollisionResultd result;
      fcl::collide(&a, X_WA, &b, X_WB, request, result);
      if (pairs && result.isCollision()) {  // the witness: the first crossing triangle pair
        const fcl::Contactd& c = result.getContact(0);
        pairs->emplace_back(static_cast<uint32_t>(c.b1), static_cast<uint32_t>(c.b2));
      }
      return result.isCollision() ? 1.0 : 0.0;
    }
    case Query::kContacts: {
      const fcl::CollisionRequestd request(kMaxContacts, false);
      fcl::CollisionResultd result;
      fcl::collide(&a, X_WA, &b, X_WB, request, result);
      if (pairs) {
        for (std::size_t k = 0; k < result.numContacts(); ++k) {
          const fcl::Contactd& c = result.getContact(k);
          pairs->emplace_back(static_cast<uint32_t>(c.b1), static_cast<uint32_t>(c.b2));
        }
      }
      return static_cast<double>(result.numContacts());
    }
    default: {
      // clashd's Distance first looks for a crossing (a yes/no overlap walk) and answers 0 at
      // the first one; FCL's distance has no such shortcut, so it gets the same composition:
      // its own yes/no collision first, the distance walk only for parts apart.
      fcl::CollisionResultd crossing;
      fcl::collide(&a, X_WA, &b, X_WB, fcl::CollisionRequestd(1, false), crossing);
      if (crossing.isCollision()) return 0.0;
      const fcl::DistanceRequestd request;  // exact: rel_err = abs_err = 0
      fcl::DistanceResultd result;
      return fcl::distance(&a, X_WA, &b, X_WB, request, result);
    }
  }
}

template <typename BV>
absl::StatusOr<Answers> ComputeAnswers(Query q, const std::string& dataset) {
  auto ds_or = LoadPairs(dataset);
  if (!ds_or.ok()) return ds_or.status();
  const PairDataset& ds = **ds_or;
  auto a = Model<BV>(*ds.a);
  if (!a.ok()) return a.status();
  auto b = Model<BV>(*ds.b);
  if (!b.ok()) return b.status();
  const fcl::Transform3d I = fcl::Transform3d::Identity();
  Answers out;
  for (uint32_t i : CaseIndices(q, ds)) {
    std::vector<std::pair<uint32_t, uint32_t>> pairs;
    out.values.push_back(RunQuery<BV>(q, **a, **b, I, ToFcl(ds.pairs[i].X_WB), &pairs));
    if (q == Query::kContacts && pairs.size() >= kMaxContacts) {
      return absl::ResourceExhaustedError("num_max_contacts reached");
    }
    if (q == Query::kContacts || q == Query::kCollide) {
      std::sort(pairs.begin(), pairs.end());
      out.tri_pairs.push_back(std::move(pairs));
    }
  }
  return out;
}

template <typename BV>
absl::StatusOr<const Answers*> FclAnswers(Query q, const std::string& dataset) {
  return CachedAnswers(BenchName(q, BvTraits<BV>::kLabel, dataset),
                       [&] { return ComputeAnswers<BV>(q, dataset); });
}

template <typename BV>
void PairBench(benchmark::State& state, Query q, const std::string& dataset) {
  const char* label = BvTraits<BV>::kLabel;
  const Prepared& p = PrepareOnce(BenchName(q, label, dataset), [&] {
    return PrepareChecked(q, dataset, FclAnswers<BV>(q, dataset), label,
                          ClashAnswers(q, geom::BvMode::kAdaptive, dataset), "clash-adaptive");
  });
  if (!p.error.empty()) {
    state.SkipWithError(p.error.c_str());
    return;
  }
  const PairDataset& ds = **LoadPairs(dataset);
  const fcl::BVHModel<BV>& a = **Model<BV>(*ds.a);
  const fcl::BVHModel<BV>& b = **Model<BV>(*ds.b);
  const fcl::Transform3d I = fcl::Transform3d::Identity();
  std::vector<fcl::Transform3d> poses;
  for (uint32_t i : CaseIndices(q, ds)) poses.push_back(ToFcl(ds.pairs[i].X_WB));
  TimedLoop(state, p, [&](std::size_t i) { return RunQuery<BV>(q, a, b, I, poses[i], nullptr); });
}

std::size_t HeapInUse() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

template <typename BV>
void BuildBench(benchmark::State& state, const std::string& part_name) {
  const char* label = BvTraits<BV>::kLabel;
  const Prepared& p = PrepareOnce(BenchName(Query::kBuild, label, part_name), [&] {
    Prepared out;
    auto part = LoadPart(part_name);
    if (!part.ok()) {
      out.error = std::string(part.status().message());
      return out;
    }
    const FclMesh mesh = ToFcl((*part)->mesh);
    const std::size_t before = HeapInUse();
    auto model = BuildModel<BV>(mesh);  // includes FCL's own vertex and triangle copies
    const std::size_t after = HeapInUse();
    if (!model) {
      out.error = "FCL BVHModel build failed";
      return out;
    }
    const double n = static_cast<double>(mesh.triangles.size());
    out.values = {static_cast<double>(model->getNumBVs())};
    out.counters["triangles"] = n;
    out.counters["bytes_per_tri"] = static_cast<double>(after - before) / n;
    out.counters["heap_bytes_per_tri"] = static_cast<double>(after - before) / n;
    out.counters["nodes"] = static_cast<double>(model->getNumBVs());
    return out;
  });
  if (!p.error.empty()) {
    state.SkipWithError(p.error.c_str());
    return;
  }
  const FclMesh mesh = ToFcl((*LoadPart(part_name))->mesh);
  TimedLoop(state, p, [&](std::size_t) -> double {
    auto model = BuildModel<BV>(mesh);
    return model ? static_cast<double>(model->getNumBVs()) : -1.0;
  });
  state.counters["time_per_tri"] = benchmark::Counter(
      static_cast<double>(mesh.triangles.size()),
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

template <typename BV>
void RegisterPair(Query q, const std::string& dataset) {
  benchmark::RegisterBenchmark(BenchName(q, BvTraits<BV>::kLabel, dataset).c_str(), PairBench<BV>,
                               q, dataset)
      ->Unit(benchmark::kMicrosecond);
}

template <typename BV>
void RegisterBuild(const std::string& part_name) {
  benchmark::RegisterBenchmark(BenchName(Query::kBuild, BvTraits<BV>::kLabel, part_name).c_str(),
                               BuildBench<BV>, part_name)
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace

absl::StatusOr<const Answers*> FclReferenceAnswers(Query q, const std::string& dataset) {
  return FclAnswers<fcl::OBBRSSd>(q, dataset);
}

void RegisterFcl(Query q, const std::string& dataset) {
  switch (q) {
    case Query::kCollide:
      RegisterPair<fcl::OBBd>(q, dataset);
      RegisterPair<fcl::OBBRSSd>(q, dataset);
      RegisterPair<fcl::RSSd>(q, dataset);
      RegisterPair<fcl::AABBd>(q, dataset);
      break;
    case Query::kContacts:
      RegisterPair<fcl::OBBd>(q, dataset);
      RegisterPair<fcl::OBBRSSd>(q, dataset);
      break;
    case Query::kDistanceApart:
    case Query::kDistancePushed:
      RegisterPair<fcl::RSSd>(q, dataset);
      RegisterPair<fcl::OBBRSSd>(q, dataset);
      break;
    case Query::kBuild:
      RegisterBuild<fcl::OBBd>(dataset);
      RegisterBuild<fcl::OBBRSSd>(dataset);
      RegisterBuild<fcl::RSSd>(dataset);
      break;
    case Query::kRay:
      break;
  }
}

}  // namespace clash::bench
