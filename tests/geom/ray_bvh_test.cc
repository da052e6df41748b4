#include "clash/geom/ray_bvh.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "clash/geom/query.h"
#include "testing/brute_force.h"
#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::BruteRayCast;
using testing::MakeBlob;
using testing::MakeCylinder;
using testing::MakeSoup;
using testing::MakeSubdividedBox;
using testing::RandomPoint;
using testing::RandomPose;
using testing::RandomRotation;
using testing::RawMesh;
using testing::SeededRng;
using testing::Uniform;

using PartPtr = std::shared_ptr<const Part>;

constexpr double kInf = std::numeric_limits<double>::infinity();

PartOptions WithRayLeaves(int leaf_size, BvMode mode = BvMode::kAdaptive) {
  PartOptions o;
  o.ray_leaf_size = leaf_size;
  o.bv.mode = mode;
  return o;
}

// Calls visit(first, count) for every leaf below `ref`, and box(ref_box_owner...) checks.
template <class Visit>
void ForLeaves(const RayBvh& bvh, uint32_t ref, Visit&& visit) {
  if (ref == kRayEmptyRef) return;
  if (RayBvh::IsLeafRef(ref)) {
    visit(RayBvh::LeafFirst(ref), RayBvh::LeafCount(ref));
    return;
  }
  for (uint32_t c : bvh.nodes()[ref].child) ForLeaves(bvh, c, visit);
}

// Random parts of every kind the tests use: closed blobs, open soups, subdivided boxes (flat,
// axis-aligned faces: zero-thickness child boxes) and cylinders.
PartPtr RandomPart(std::mt19937& rng, int i, const PartOptions& options) {
  RawMesh raw;
  switch (i % 4) {
    case 0:
      raw = MakeBlob(rng, 10, 16, 24, 0.3);
      break;
    case 1:
      raw = MakeSoup(rng, 400, 10, 3);
      break;
    case 2:
      raw = MakeSubdividedBox(Vec3(4, 6, 3), 6);
      break;
    default:
      raw = MakeCylinder(5, 12, 48);
      break;
  }
  if (i % 8 >= 4) raw = raw.Transformed({RandomRotation(rng), RandomPoint(rng, 20)});
  return raw.Part(options);
}

TEST(RayBvh, EveryTriangleInExactlyOneLeaf) {
  auto rng = SeededRng(301);
  for (int i = 0; i < 16; ++i) {
    for (int leaf_size : {1, 4, 12, 16}) {
      PartPtr part = RandomPart(rng, i, WithRayLeaves(leaf_size));
      const RayBvh& bvh = part->ray_bvh();
      const std::size_t n = part->mesh().num_triangles();
      std::vector<int> seen(n, 0);
      std::size_t leaves = 0;
      ForLeaves(bvh, bvh.root_ref(), [&](uint32_t first, uint32_t count) {
        ++leaves;
        ASSERT_LE(first + count, n);
        // A leaf is a topology leaf (at most the builder's leaf size, 4) or a subtree of at
        // most leaf_size triangles.
        EXPECT_LE(count, static_cast<uint32_t>(std::max(leaf_size, 4)));
        for (uint32_t s = first; s < first + count; ++s) ++seen[s];
      });
      for (std::size_t t = 0; t < n; ++t) ASSERT_EQ(seen[t], 1) << "triangle " << t;
      EXPECT_EQ(leaves, bvh.leaves());
      EXPECT_EQ(part->stats().ray_leaves, leaves);
      // Four-wide: inner nodes at least (leaves - 1) / 3, at most leaves - 1.
      EXPECT_GE(3 * bvh.nodes().size() + 1, leaves);
      EXPECT_LE(bvh.nodes().size(), std::max<std::size_t>(leaves, 1) - 1 + (leaves == 1));
      EXPECT_GE(part->stats().memory_bytes, bvh.nodes().size() * sizeof(RayNode));
    }
  }
}

// Every decoded child box contains the double-precision vertices of every triangle below it
// (relative to ref(), in double: exactly the comparison the traversal's bound relies on).
TEST(RayBvh, DecodedBoxesContainTheirTriangles) {
  auto rng = SeededRng(302);
  int boxes = 0;
  for (int i = 0; i < 16; ++i) {
    PartPtr part = RandomPart(rng, i, WithRayLeaves(i % 2 ? 4 : 12));
    if (i % 3 == 0) {  // far from the origin: the grids must keep working relative to ref()
      RawMesh raw =
          MakeBlob(rng, 3, 12, 16, 0.3).Transformed({RandomRotation(rng), Vec3(1e6, -2e6, 5e5)});
      part = raw.Part(WithRayLeaves(4));
    }
    const RayBvh& bvh = part->ray_bvh();
    const auto& v = part->mesh().vertices();
    for (const RayNode& node : bvh.nodes()) {
      for (int c = 0; c < 4; ++c) {
        if (node.child[c] == kRayEmptyRef) continue;
        const Aabb box = RayBvh::ChildBox(node, c);
        ++boxes;
        ForLeaves(bvh, node.child[c], [&](uint32_t first, uint32_t count) {
          for (uint32_t s = first; s < first + count; ++s) {
            for (uint32_t k : part->mesh().triangles()[s]) {
              const Vec3 p = v[k] - bvh.ref();
              for (int a = 0; a < 3; ++a) {
                ASSERT_LE(box.min[a], p[a]) << "node child " << c << " axis " << a;
                ASSERT_GE(box.max[a], p[a]) << "node child " << c << " axis " << a;
              }
            }
          }
        });
      }
    }
  }
  EXPECT_GT(boxes, 100);
}

// CastRay (and RayHitsAny) against a loop over all triangles: the same hit, t bit for bit and
// the same (smallest) triangle id. Rays mix: aimed at the part or random, axis-parallel (one
// or two zero components), origins inside the part's boxes, clipped [t_min, t_max]
// (including negative t_min), poses near 1e6.
TEST(RayBvh, CastRayAgreesWithAllTriangles) {
  auto rng = SeededRng(303);
  int hits = 0, clipped_hits = 0;
  const int trials = testing::Trials(8000, 1600);
  PartPtr part;
  RigidTransform X_WP;
  for (int i = 0; i < trials; ++i) {
    if (i % 400 == 0) {
      const int leaf_size = (i / 400) % 3 == 0 ? 1 : ((i / 400) % 3 == 1 ? 4 : 12);
      part = RandomPart(rng, i / 400, WithRayLeaves(leaf_size));
      X_WP = RandomPose(rng, 100);
      if ((i / 400) % 5 == 4) X_WP.t += Vec3(1e6, 1e6, -1e6);
    }
    const Vec3 c = part->bounds().Center();
    const double r = part->bounds().Diagonal();
    // Origins: outside the part, or inside its bounds.
    const Vec3 origin_P = i % 3 == 0 ? RandomPoint(rng, 0.4 * r, c) : RandomPoint(rng, r, c);
    const Vec3 target_P = i % 5 == 0 ? RandomPoint(rng, 2 * r, c) : RandomPoint(rng, 0.4 * r, c);
    Vec3 dir_P = (target_P - origin_P) * Uniform(rng, 0.1, 3);
    if (i % 7 == 0) dir_P[i % 3] = 0.0;
    if (i % 11 == 0) dir_P[(i + 1) % 3] = dir_P[(i + 2) % 3] = 0.0;
    if (dir_P.norm() == 0) continue;
    Ray ray_W{X_WP * origin_P, X_WP.R * dir_P, 0.0, kInf};
    if (i % 4 == 0) {
      ray_W.t_min = Uniform(rng, -0.5, 0.5);
      ray_W.t_max = ray_W.t_min + Uniform(rng, 0.0, 1.0);
    }
    const Ray ray_P = ray_W.InFrameOf(X_WP);
    auto expected = BruteRayCast(part->mesh(), ray_P);
    auto got = CastRay(*part, X_WP, ray_W);
    ASSERT_EQ(got.has_value(), expected.has_value()) << "trial " << i;
    EXPECT_EQ(RayHitsAny(*part, X_WP, ray_W), expected.has_value()) << "trial " << i;
    if (!got) continue;
    ++hits;
    clipped_hits += i % 4 == 0;
    ASSERT_EQ(got->t, expected->first) << "trial " << i;
    EXPECT_EQ(got->triangle, expected->second) << "trial " << i;
    EXPECT_GE(got->t, ray_W.t_min);
    EXPECT_LE(got->t, ray_W.t_max);
  }
  EXPECT_GT(hits, trials / 5);
  EXPECT_LT(hits, trials * 4 / 5);
  EXPECT_GT(clipped_hits, trials / 100);
}

// Rays through the vertices and edge midpoints of closed welded convex meshes, from outside
// toward the centre: they cross the surface there (up to the rounding of the direction), so
// the watertight test reports a hit on a triangle there, and the hierarchy must not cull the
// boxes those points lie on the boundary of. Rays along a
// coordinate axis graze the faces and boxes of axis-aligned models exactly (lying in a face
// plane, they may also miss, as the oracle says): they must agree with the oracle.
TEST(RayBvh, RaysThroughVerticesAndEdgesNeverSlipThrough) {
  auto rng = SeededRng(304);
  int rays = 0, axis_rays = 0, axis_hits = 0;
  for (int m = 0; m < 8; ++m) {
    RawMesh raw = m % 2 ? MakeCylinder(5, 12, 32) : MakeSubdividedBox(Vec3(4, 6, 3), 5);
    if (m >= 4) raw = raw.Transformed({RandomRotation(rng), RandomPoint(rng, 30)});
    PartPtr part = raw.Part(WithRayLeaves(m % 3 == 0 ? 1 : 12));
    ASSERT_TRUE(part->mesh().IsClosed());
    const RigidTransform X_WP = m % 2 ? RandomPose(rng, 50) : RigidTransform::Identity();
    const auto& v = part->mesh().vertices();
    const double r = part->bounds().Diagonal();
    for (const auto& t : part->mesh().triangles()) {
      for (int k = 0; k < 3; ++k) {
        const Vec3 targets[2] = {v[t[k]], 0.5 * (v[t[k]] + v[t[(k + 1) % 3]])};
        for (const Vec3& target_P : targets) {
          const bool along_axis = rays % 3 == 0;
          const Vec3 c = part->bounds().Center();
          Vec3 origin_P = target_P + 2 * r * (target_P - c).normalized();
          if (along_axis) {
            origin_P = target_P;
            origin_P[(rays / 3) % 3] += (rays % 2 ? 2 : -2) * r;
          }
          const Ray ray_W{X_WP * origin_P, X_WP.R * (target_P - origin_P), 0.0, kInf};
          ++rays;
          auto expected = BruteRayCast(part->mesh(), ray_W.InFrameOf(X_WP));
          if (!along_axis) {
            ASSERT_TRUE(expected.has_value()) << "mesh " << m << " ray " << rays;
          }
          auto got = CastRay(*part, X_WP, ray_W);
          ASSERT_EQ(got.has_value(), expected.has_value()) << "mesh " << m << " ray " << rays;
          EXPECT_EQ(RayHitsAny(*part, X_WP, ray_W), expected.has_value());
          axis_rays += along_axis;
          if (!got) continue;
          axis_hits += along_axis;
          if (!along_axis) {  // the entry point is the target
            EXPECT_LT((got->p_W - X_WP * target_P).norm(), 1e-9 * r);
          }
          EXPECT_EQ(got->t, expected->first);
          EXPECT_EQ(got->triangle, expected->second);
        }
      }
    }
  }
  EXPECT_GT(rays, 1000);
  EXPECT_GT(axis_hits, axis_rays / 2);  // most axis rays still hit: the case is exercised
}

// Directions the single-precision test cannot bound (a component below 1e-20 of the largest,
// huge or tiny overall scales) take the double-precision hierarchy: same answers.
TEST(RayBvh, ExtremeDirectionsAgreeWithAllTriangles) {
  auto rng = SeededRng(305);
  PartPtr part = MakeBlob(rng, 10, 16, 24, 0.3).Part();
  int hits = 0, trials = 0;
  for (double scale : {1e-200, 1e-30, 1.0, 1e30, 1e200}) {
    for (int i = 0; i < 200; ++i) {
      const Vec3 origin = RandomPoint(rng, 25);
      Vec3 dir = (RandomPoint(rng, 8) - origin) * scale;
      if (i % 2) dir[i % 3] = dir.cwiseAbs().maxCoeff() * 1e-25;  // (norm() would overflow)
      const Ray ray{origin, dir, 0.0, kInf};
      auto expected = BruteRayCast(part->mesh(), ray);
      auto got = CastRay(*part, RigidTransform::Identity(), ray);
      ++trials;
      ASSERT_EQ(got.has_value(), expected.has_value()) << "scale " << scale << " ray " << i;
      if (!got) continue;
      ++hits;
      EXPECT_EQ(got->t, expected->first);
      EXPECT_EQ(got->triangle, expected->second);
    }
  }
  EXPECT_GT(hits, trials / 5);
  EXPECT_LT(hits, trials * 4 / 5);
}

// A part reaching beyond kRayBvhMaxCoordinate from its centre gets no ray tree; its rays
// take the double-precision hierarchy and still agree with the oracle.
TEST(RayBvh, HugePartsTakeTheDoubleHierarchy) {
  auto rng = SeededRng(306);
  PartPtr huge = MakeSoup(rng, 300, 1e16, 3e15).Part();
  EXPECT_EQ(huge->ray_bvh().root_ref(), kRayEmptyRef);
  EXPECT_TRUE(huge->ray_bvh().nodes().empty());
  PartPtr normal = MakeSoup(rng, 300, 1e14, 3e13).Part();
  EXPECT_NE(normal->ray_bvh().root_ref(), kRayEmptyRef);
  int hits = 0, trials = 0;
  for (const PartPtr& part : {huge, normal}) {
    const double r = part->bounds().Diagonal();
    for (int i = 0; i < 300; ++i) {
      const Vec3 origin = RandomPoint(rng, r, part->bounds().Center());
      const Ray ray{origin, RandomPoint(rng, 0.3 * r, part->bounds().Center()) - origin, 0.0, kInf};
      auto expected = BruteRayCast(part->mesh(), ray);
      auto got = CastRay(*part, RigidTransform::Identity(), ray);
      ++trials;
      ASSERT_EQ(got.has_value(), expected.has_value()) << "ray " << i;
      EXPECT_EQ(RayHitsAny(*part, RigidTransform::Identity(), ray), expected.has_value());
      if (!got) continue;
      ++hits;
      EXPECT_EQ(got->t, expected->first);
      EXPECT_EQ(got->triangle, expected->second);
    }
  }
  EXPECT_GT(hits, trials / 10);
  EXPECT_LT(hits, trials * 9 / 10);
}

}  // namespace
}  // namespace clash::geom
