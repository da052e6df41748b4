#include "clash/geom/adaptive_bv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "clash/geom/part.h"
#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::AxisAngle;
using testing::MakeBlob;
using testing::MakeCylinder;
using testing::MakeSoup;
using testing::MakeSubdividedBox;
using testing::RandomPoint;
using testing::RandomRotation;
using testing::RawMesh;
using testing::SeededRng;

bool RootIsObb(const Part& p) { return p.nodes()[0].IsObb(); }

// The covariance formula agrees with dense sampling of a triangle's surface.
TEST(AreaMoments, CovarianceMatchesSampling) {
  auto rng = SeededRng(61);
  Triangle t{RandomPoint(rng, 3), RandomPoint(rng, 3), RandomPoint(rng, 3)};
  AreaMoments m = AreaMoments::Of(t);
  EXPECT_NEAR(m.area, t.Area(), 1e-12);
  const int n = 400;
  Vec3 mean = Vec3::Zero();
  Mat3 second = Mat3::Zero();
  int count = 0;
  for (int u = 0; u < n; ++u) {
    for (int v = 0; u + v < n; ++v) {
      // Centre of each small sub-triangle of a uniform subdivision.
      Vec3 p = t.a + (t.b - t.a) * ((u + 1.0 / 3) / n) + (t.c - t.a) * ((v + 1.0 / 3) / n);
      mean += p;
      second += p * p.transpose();
      ++count;
    }
  }
  mean /= count;
  Mat3 cov = second / count - mean * mean.transpose();
  // Only the upright sub-triangles are sampled: agreement to O(1/n) of the size squared.
  EXPECT_LT((m.Mean() - mean).norm(), 0.05);
  EXPECT_LT((m.Covariance() - cov).cwiseAbs().maxCoeff(), 0.1);
}

TEST(AdaptiveBv, PrincipalAxesOfAnElongatedBox) {
  RawMesh box = MakeSubdividedBox(Vec3(10, 3, 1), 4);
  TriangleMesh mesh = box.Build();
  AreaMoments m;
  for (std::size_t i = 0; i < mesh.num_triangles(); ++i) m.Add(AreaMoments::Of(mesh.triangle(i)));
  PrincipalFrame f = PrincipalAxes(m.Mean(), m.Covariance());
  EXPECT_NEAR(std::abs(f.axes.col(0).x()), 1.0, 1e-9);
  EXPECT_NEAR(std::abs(f.axes.col(1).y()), 1.0, 1e-9);
  EXPECT_NEAR(f.axes.determinant(), 1.0, 1e-12);
  EXPECT_GE(f.eigenvalues(0), f.eigenvalues(1));
  EXPECT_GE(f.eigenvalues(1), f.eigenvalues(2));
  EXPECT_NEAR(MisalignmentAngle(f, 1e-3), 0.0, 1e-9);
  // Rotated by 0.3 rad about z: the misalignment is 0.3.
  RawMesh turned = box.Transformed({AxisAngle(0.3, Vec3::UnitZ()), Vec3(5, 5, 5)});
  mesh = turned.Build();
  m = AreaMoments{};
  for (std::size_t i = 0; i < mesh.num_triangles(); ++i) m.Add(AreaMoments::Of(mesh.triangle(i)));
  EXPECT_NEAR(MisalignmentAngle(PrincipalAxes(m.Mean(), m.Covariance()), 1e-3), 0.3, 1e-9);
}

struct KindCase {
  const char* name;
  RawMesh mesh;
  bool root_obb;
  // Least fraction of AABB nodes for aligned parts. Flat faces of blocks stay aligned all the
  // way down; a cylinder wall splits into strips whose chords turn with the angle, and the
  // flat face patches of a block turned by 1 degree have AABBs far thicker than their OBBs:
  // an OBB is rightly chosen for many of those.
  double min_aabb_fraction = 0.0;
};

TEST(AdaptiveBv, KnownShapesGetTheExpectedKind) {
  const Vec3 oblique = Vec3(1, 2, 3).normalized();
  const KindCase cases[] = {
      {"aligned block", MakeSubdividedBox(Vec3(20, 8, 3), 6), false, 0.9},
      {"aligned plate", MakeSubdividedBox(Vec3(50, 25, 1), 8), false, 0.9},
      {"aligned cylinder (tied cross-section)", MakeCylinder(5, 40, 64), false, 0.4},
      {"short cylinder (tied axis pair)", MakeCylinder(20, 4, 64), false, 0.4},
      {"block turned 1 degree (within eps)",
       MakeSubdividedBox(Vec3(20, 8, 3), 6)
           .Transformed({AxisAngle(0.0175, Vec3::UnitZ()), Vec3::Zero()}),
       false, 0.3},
      {"block turned 30 degrees",
       MakeSubdividedBox(Vec3(20, 8, 3), 6)
           .Transformed({AxisAngle(M_PI / 6, Vec3::UnitZ()), Vec3::Zero()}),
       true},
      {"plate turned 10 degrees about an oblique axis",
       MakeSubdividedBox(Vec3(50, 25, 1), 8)
           .Transformed({AxisAngle(0.1745, oblique), Vec3(3, 4, 5)}),
       true},
      {"cylinder tilted 45 degrees",
       MakeCylinder(5, 40, 64).Transformed({AxisAngle(M_PI / 4, Vec3::UnitX()), Vec3::Zero()}),
       true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto part = c.mesh.Part();
    const PartStats& s = part->stats();
    EXPECT_EQ(RootIsObb(*part), c.root_obb);
    EXPECT_EQ(s.aabb_nodes + s.obb_nodes, s.nodes);
    if (c.root_obb) {
      // Most of the hierarchy follows the part's tilt, and the OBBs save volume.
      EXPECT_GT(s.obb_nodes, s.nodes / 3);
      EXPECT_GT(s.VolumeSaved(), 0.2);
    } else {
      EXPECT_GE(static_cast<double>(s.aabb_nodes), c.min_aabb_fraction * s.nodes);
      // The two children of the root follow the part's axes too.
      EXPECT_FALSE(part->nodes()[1].IsObb());
      EXPECT_FALSE(part->nodes()[2].IsObb());
    }
  }
}

TEST(AdaptiveBv, ModesForceTheKind) {
  RawMesh tilted = MakeSubdividedBox(Vec3(20, 8, 3), 6)
                       .Transformed({AxisAngle(M_PI / 6, Vec3::UnitZ()), Vec3::Zero()});
  PartOptions o;
  o.bv.mode = BvMode::kAabbOnly;
  EXPECT_EQ(tilted.Part(o)->stats().obb_nodes, 0u);
  o.bv.mode = BvMode::kObbOnly;
  auto p = tilted.Part(o);
  EXPECT_EQ(p->stats().obb_nodes, p->stats().nodes);
  // Past the slots a node can refer to (max_obb_nodes stands in for the 2^24 - 1 of the
  // field), nodes take their AABB instead of wrapping the slot number.
  o.max_obb_nodes = 3;
  p = tilted.Part(o);
  EXPECT_EQ(p->stats().obb_nodes, 3u);
  EXPECT_EQ(p->rotations().size(), 3u);
  EXPECT_EQ(p->stats().aabb_nodes, p->stats().nodes - 3);
  for (const BvhNode& n : p->nodes()) {
    if (n.IsObb()) {
      EXPECT_LT(n.ObbSlot(), 3u);
    }
  }
  for (const Vec3& v : p->mesh().vertices()) {
    EXPECT_TRUE(p->NodeBox(p->nodes()[0]).Contains(v));
  }
}

// Property: every vertex lies inside every node volume above it, for every mode.
TEST(AdaptiveBv, EveryVertexInsideEveryEnclosingNode) {
  auto rng = SeededRng(62);
  for (int trial = 0; trial < testing::Trials(12, 4); ++trial) {
    RawMesh raw = trial % 2 ? MakeSoup(rng, 300, 20, 3) : MakeBlob(rng, 10, 12, 16, 0.3);
    raw = raw.Transformed({RandomRotation(rng), RandomPoint(rng, trial % 4 == 3 ? 1e6 : 100)});
    for (BvMode mode : {BvMode::kAdaptive, BvMode::kAabbOnly, BvMode::kObbOnly}) {
      PartOptions o;
      o.bv.mode = mode;
      auto part = raw.Part(o);
      const auto& nodes = part->nodes();
      std::vector<std::pair<uint32_t, std::vector<uint32_t>>> stack = {{0, {}}};
      while (!stack.empty()) {
        auto [i, ancestors] = stack.back();
        stack.pop_back();
        ancestors.push_back(i);
        const BvhNode& n = nodes[i];
        if (!n.IsLeaf()) {
          stack.push_back({n.index, ancestors});
          stack.push_back({n.index + 1, ancestors});
          continue;
        }
        for (uint32_t k = 0; k < n.Count(); ++k) {
          for (uint32_t v : part->mesh().triangles()[n.index + k]) {
            const Vec3& p = part->mesh().vertices()[v];
            for (uint32_t a : ancestors) {
              ASSERT_TRUE(part->NodeBox(nodes[a]).Contains(p))
                  << "node " << a << " trial " << trial;
            }
          }
        }
      }
    }
  }
}

// Property: every node box is tight on its own vertices. Each of its six faces touches a
// vertex of the node's triangles, up to the growth the build adds for rounding; a box fitted
// on vertices of other nodes too would stand off on some face. Its axes are orthonormal to
// double rounding and right-handed (single-precision matrices were off by ~1e-7, and the box
// tests, which assume orthonormal axes, missed overlaps of near-parallel OBB nodes).
TEST(AdaptiveBv, EveryNodeBoxTouchesItsVerticesOnEveryFace) {
  auto rng = SeededRng(64);
  for (int trial = 0; trial < testing::Trials(8, 3); ++trial) {
    RawMesh raw = trial % 2 ? MakeSoup(rng, 300, 20, 3) : MakeBlob(rng, 10, 12, 16, 0.3);
    raw = raw.Transformed({RandomRotation(rng), RandomPoint(rng, 100)});
    for (BvMode mode : {BvMode::kAdaptive, BvMode::kObbOnly}) {
      PartOptions o;
      o.bv.mode = mode;
      auto part = raw.Part(o);
      const auto& nodes = part->nodes();
      const TriangleMesh& m = part->mesh();
      const double slack = 1e-8 * (part->bounds().Diagonal() + 100.0);
      // Triangle ranges bottom-up (children follow their parent).
      std::vector<std::pair<uint32_t, uint32_t>> range(nodes.size());
      for (std::size_t k = nodes.size(); k-- > 0;) {
        const BvhNode& n = nodes[k];
        range[k] = n.IsLeaf() ? std::pair{n.index, n.index + n.Count()}
                              : std::pair{range[n.index].first, range[n.index + 1].second};
      }
      int obb_nodes = 0;
      for (std::size_t k = 0; k < nodes.size(); ++k) {
        const Obb box = part->NodeBox(nodes[k]);
        obb_nodes += nodes[k].IsObb();
        ASSERT_LT((box.axes.transpose() * box.axes - Mat3::Identity()).cwiseAbs().maxCoeff(), 1e-15)
            << "node " << k;
        ASSERT_NEAR(box.axes.determinant(), 1.0, 1e-15) << "node " << k;
        Vec3 lo = Vec3::Constant(std::numeric_limits<double>::infinity()), hi = -lo;
        for (uint32_t s = range[k].first; s < range[k].second; ++s) {
          for (uint32_t v : m.triangles()[s]) {
            const Vec3 q = box.axes.transpose() * (m.vertices()[v] - box.center);
            lo = lo.cwiseMin(q);
            hi = hi.cwiseMax(q);
          }
        }
        const double tol = 1e-12 * box.half.sum() + slack;
        for (int a = 0; a < 3; ++a) {
          ASSERT_NEAR(hi[a], box.half[a], tol) << "node " << k << " axis " << a;
          ASSERT_NEAR(lo[a], -box.half[a], tol) << "node " << k << " axis " << a;
        }
      }
      EXPECT_GT(obb_nodes, static_cast<int>(nodes.size() / 4)) << "trial " << trial;
    }
  }
}

// A part stores its mesh in leaf order: a permutation of the input triangles, each with its
// vertices, tag and source index, and the leaves' ranges cover every triangle once.
TEST(Part, StoresItsMeshInLeafOrder) {
  auto rng = SeededRng(63);
  RawMesh raw = MakeBlob(rng, 10, 12, 16, 0.3);
  std::vector<uint32_t> tags(raw.t.size());
  for (uint32_t i = 0; i < tags.size(); ++i) tags[i] = 5000 + i;
  auto input = TriangleMesh::Create(raw.v, raw.t, tags);
  ASSERT_TRUE(input.ok());
  auto made = Part::Create(*input);
  ASSERT_TRUE(made.ok());
  const TriangleMesh& m = (*made)->mesh();
  ASSERT_EQ(m.num_triangles(), input->num_triangles());
  EXPECT_EQ(m.vertices().size(), input->vertices().size());
  std::vector<int> seen(m.num_triangles(), 0);
  int moved = 0;
  for (uint32_t i = 0; i < m.num_triangles(); ++i) {
    const uint32_t src = m.SourceIndex(i);
    ASSERT_LT(src, input->num_triangles());
    ++seen[src];
    moved += src != i;
    const Triangle a = m.triangle(i), b = input->triangle(src);
    EXPECT_TRUE(a.a == b.a && a.b == b.b && a.c == b.c) << "triangle " << i;
    EXPECT_EQ(m.tags()[i], tags[src]);
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(m.num_triangles()));
  EXPECT_GT(moved, static_cast<int>(m.num_triangles() / 2));  // the order did change
  std::vector<int> covered(m.num_triangles(), 0);
  for (const BvhNode& n : (*made)->nodes()) {
    if (!n.IsLeaf()) continue;
    for (uint32_t k = 0; k < n.Count(); ++k) ++covered[n.index + k];
  }
  EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<long>(m.num_triangles()));
}

}  // namespace
}  // namespace clash::geom
