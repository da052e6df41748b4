#include "clash/geom/bvh_build.h"

#include <gtest/gtest.h>

#include <vector>

#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::RandomPoint;
using testing::SeededRng;
using testing::Uniform;

struct Prims {
  std::vector<Aabb> boxes;
  std::vector<Vec3> centroids;
};

Prims RandomPrims(std::mt19937& rng, int n, bool clustered) {
  Prims p;
  for (int i = 0; i < n; ++i) {
    Vec3 c = clustered && i % 3 == 0 ? Vec3(5, 5, 5) : RandomPoint(rng, 100);
    Aabb b =
        Aabb::FromCenterHalf(c, Vec3(Uniform(rng, 0, 3), Uniform(rng, 0, 3), Uniform(rng, 0, 3)));
    p.boxes.push_back(b);
    p.centroids.push_back(b.Center());
  }
  return p;
}

void CheckInvariants(const Prims& p, const BvhTopology& t, const BvhBuildOptions& o) {
  const std::size_t n = p.boxes.size();
  ASSERT_LE(t.nodes.size(), 2 * n - 1);
  ASSERT_EQ(t.prims.size(), n);
  std::vector<int> seen(n, 0);
  int max_depth = 0;
  // Walk the tree: every primitive in exactly one leaf, every box contains its content.
  std::vector<std::pair<uint32_t, int>> stack = {{0, 0}};
  std::size_t visited = 0;
  while (!stack.empty()) {
    auto [i, depth] = stack.back();
    stack.pop_back();
    ++visited;
    max_depth = std::max(max_depth, depth);
    const auto& node = t.nodes[i];
    // Every box is exactly the union of what it holds (min and max are exact).
    Aabb tight;
    if (node.IsLeaf()) {
      EXPECT_LE(node.count, static_cast<uint32_t>(o.max_leaf_size));
      for (uint32_t k = node.index; k < node.index + node.count; ++k) {
        ++seen[t.prims[k]];
        tight.Add(p.boxes[t.prims[k]]);
      }
      EXPECT_TRUE(node.box.min == tight.min && node.box.max == tight.max) << "leaf " << i;
    } else {
      ASSERT_LT(node.index + 1, t.nodes.size());
      EXPECT_GT(node.index, i);
      tight.Add(t.nodes[node.index].box);
      tight.Add(t.nodes[node.index + 1].box);
      EXPECT_TRUE(node.box.min == tight.min && node.box.max == tight.max) << "node " << i;
      stack.push_back({node.index, depth + 1});
      stack.push_back({node.index + 1, depth + 1});
    }
  }
  EXPECT_EQ(visited, t.nodes.size());
  for (std::size_t k = 0; k < n; ++k) EXPECT_EQ(seen[k], 1) << "primitive " << k;
  EXPECT_EQ(max_depth, t.depth);
  EXPECT_LE(t.depth, o.max_depth);
}

TEST(BvhBuild, InvariantsOnRandomInputs) {
  auto rng = SeededRng(51);
  for (int n : {1, 2, 3, 5, 17, 100, 1000, 20000}) {
    for (bool clustered : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " clustered=" << clustered);
      Prims p = RandomPrims(rng, n, clustered);
      BvhBuildOptions o;
      BvhTopology t = BuildBvh(p.boxes, p.centroids, o);
      CheckInvariants(p, t, o);
      // SAH quality: a random scene's tree costs far less than testing every primitive.
      if (n >= 1000) {
        EXPECT_LT(t.sah_cost, 0.05 * n);
        EXPECT_LE(t.depth, 40);
      }
    }
  }
}

// The split search runs in single precision relative to the primitives' centre: far from
// the origin (where a float's step exceeds the whole set) the tree is as good as near it.
TEST(BvhBuild, FarFromTheOriginTheTreeIsAsGood) {
  auto rng = SeededRng(52);
  Prims p = RandomPrims(rng, 3000, false);
  BvhBuildOptions o;
  const BvhTopology near = BuildBvh(p.boxes, p.centroids, o);
  const Vec3 shift(1e9, -2e9, 3e9);
  for (std::size_t i = 0; i < p.boxes.size(); ++i) {
    p.boxes[i] = {p.boxes[i].min + shift, p.boxes[i].max + shift};
    p.centroids[i] += shift;
  }
  const BvhTopology far = BuildBvh(p.boxes, p.centroids, o);
  CheckInvariants(p, far, o);
  EXPECT_NEAR(far.sah_cost, near.sah_cost, 0.02 * near.sah_cost);
  EXPECT_LE(far.depth, near.depth + 2);
}

TEST(BvhBuild, IdenticalCentroidsAndDepthCapStillTerminate) {
  Prims p;
  for (int i = 0; i < 5000; ++i) {
    p.boxes.push_back(Aabb::FromCenterHalf(Vec3(1, 2, 3), Vec3(1, 1, 1)));
    p.centroids.push_back(Vec3(1, 2, 3));
  }
  BvhBuildOptions o;
  BvhTopology t = BuildBvh(p.boxes, p.centroids, o);
  CheckInvariants(p, t, o);
  // A chain of ever-smaller clusters would make SAH go deep; the cap holds.
  Prims q;
  for (int i = 0; i < 4000; ++i) {
    double x = std::pow(0.5, i % 60);
    q.boxes.push_back(Aabb::FromCenterHalf(Vec3(x, 0, 0), Vec3::Constant(x * 1e-3)));
    q.centroids.push_back(Vec3(x, 0, 0));
  }
  o.max_depth = 20;
  CheckInvariants(q, BuildBvh(q.boxes, q.centroids, o), o);
  EXPECT_TRUE(BuildBvh({}, {}, o).nodes.empty());
}

}  // namespace
}  // namespace clash::geom
