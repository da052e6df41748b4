#include "clash/geom/interference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "interference_internal.h"
#include "testing/brute_force.h"
#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::AxisAngle;
using testing::BruteDistance;
using testing::MakeBlob;
using testing::MakeBox;
using testing::MakeBoxWithSliver;
using testing::MakeCylinder;
using testing::MakeSubdividedBox;
using testing::MakeTube;
using testing::RandomPoint;
using testing::RandomPose;
using testing::RandomRotation;
using testing::RawMesh;
using testing::SeededRng;
using testing::Trials;
using testing::Uniform;

using PartPtr = std::shared_ptr<const Part>;

constexpr double kInf = std::numeric_limits<double>::infinity();
// Depths and distances of the hand-built cases are exact up to the rounding of coordinates of
// size ~100 moved by one pose (~1e-14); 1e-9 leaves room for the rigid motions below.
constexpr double kExact = 1e-9;
// Witness points on a surface: ClosestPointOnTriangle of a posed point, rounding only.
constexpr double kOnSurface = 1e-8;

RigidTransform At(const Vec3& t) { return RigidTransform::Translation(t); }

PairTolerances Tol(double contact, double clearance = 0.0) {
  PairTolerances t;
  t.contact_mm = contact;
  t.clearance_mm = clearance;
  return t;
}

// Distance from a world point to a posed part's surface (over all triangles).
double SurfaceDistance(const Part& p, const RigidTransform& X_WP, const Vec3& p_W) {
  return testing::BruteClosestPoint(p.mesh(), X_WP.Inverse() * p_W).first;
}

void ExpectNearOrBothInf(double got, double want, double tol, const char* what) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, tol) << what;
  }
}

// For crossing surfaces with a depth found (beyond rounding): the deeper witness lies inside
// the other (closed) solid by its winding number, and the depth is that witness's brute-force
// distance to the other surface, so the reported closest point is the nearest one. The other
// witness lies on the other surface, at most the depth from the first witness's surface, so
// of the witnesses inside, the one farther from the other surface is the deeper.
// The depth is also at most the separating travel along any direction u: the ball of radius
// depth about the deeper witness lies inside the other solid, so moving its part by less than
// that along u keeps one of its points inside, and the projections on u still overlap.
void ExpectDepthWitnessesValid(const Part& a, const RigidTransform& X_WA, const Part& b,
                               const RigidTransform& X_WB, const PairClassification& r) {
  // Distances from the same triangles as ClassifyPair's, in a frame moved by one pose:
  // rounding of coordinates of size ~300, far below 1e-9 relative to the depth or 1 mm.
  const double tol = kExact * std::max(1.0, r.depth_mm);
  double inside_depth = -1.0;  // the largest surface distance of a witness inside
  if (b.mesh().IsClosed() && testing::BruteWindingNumber(b.mesh(), X_WB.Inverse() * r.p_WA) > 0.5) {
    inside_depth = std::max(inside_depth, SurfaceDistance(b, X_WB, r.p_WA));
  }
  if (a.mesh().IsClosed() && testing::BruteWindingNumber(a.mesh(), X_WA.Inverse() * r.p_WB) > 0.5) {
    inside_depth = std::max(inside_depth, SurfaceDistance(a, X_WA, r.p_WB));
  }
  EXPECT_GE(inside_depth, 0.0) << "no witness inside the other solid, depth " << r.depth_mm;
  if (inside_depth >= 0.0) {
    EXPECT_NEAR(inside_depth, r.depth_mm, tol) << "the deeper witness's nearest surface point";
  }
  std::vector<Vec3> directions = {(r.p_WB - r.p_WA).normalized()};
  const Vec3 centres = X_WB * b.bounds().Center() - X_WA * a.bounds().Center();
  if (centres.norm() > 1e-9) directions.push_back(centres.normalized());
  for (int k = 0; k < 3; ++k) {
    directions.push_back(Vec3::Unit(k));
    directions.push_back(X_WA.R.col(k));
    directions.push_back(X_WB.R.col(k));
  }
  for (const Vec3& d :
       {Vec3(1, 1, 0), Vec3(1, -1, 0), Vec3(1, 0, 1), Vec3(1, 0, -1), Vec3(0, 1, 1), Vec3(0, 1, -1),
        Vec3(1, 1, 1), Vec3(1, 1, -1), Vec3(1, -1, 1), Vec3(-1, 1, 1)}) {
    directions.push_back(X_WA.R * d.normalized());
    directions.push_back(X_WB.R * d.normalized());
  }
  double upper = kInf;
  for (const Vec3& u : directions) {
    upper = std::min(upper, testing::BruteSeparatingTravel(a, X_WA, b, X_WB, u));
  }
  EXPECT_LE(r.depth_mm, upper + tol) << "deeper than the parts' overlap along some direction";
}

// Witnesses that are meaningful: on their surfaces (world), apart by the depth (crossing,
// when a depth was found) or by the distance (apart or contained, when within the bound).
void ExpectWitnessesValid(const Part& a, const RigidTransform& X_WA, const Part& b,
                          const RigidTransform& X_WB, const PairClassification& r) {
  const bool crossing = r.intersecting_pairs > 0 || r.intersections_truncated;
  const double gap = crossing ? r.depth_mm : r.distance_mm;
  if (std::isinf(gap)) return;
  EXPECT_LT(SurfaceDistance(a, X_WA, r.p_WA), kOnSurface);
  EXPECT_LT(SurfaceDistance(b, X_WB, r.p_WB), kOnSurface);
  EXPECT_NEAR((r.p_WA - r.p_WB).norm(), gap, kExact);
  const Vec3 p_A = X_WA.Inverse() * r.p_WA, p_B = X_WB.Inverse() * r.p_WB;
  EXPECT_LT((ClosestPointOnTriangle(p_A, a.mesh().triangle(r.tri_a)) - p_A).norm(), kOnSurface);
  EXPECT_LT((ClosestPointOnTriangle(p_B, b.mesh().triangle(r.tri_b)) - p_B).norm(), kOnSurface);
  if (crossing && r.depth_mm > kOnSurface) ExpectDepthWitnessesValid(a, X_WA, b, X_WB, r);
}

// Oracle: the vertices in a box, each once with the smallest triangle that holds it, against
// every corner of every triangle; listed in triangle order (the walk's leaf order). Parts of
// every kind of node (blobs, soups, boxes of flat faces; inner OBB nodes, tested by their
// spheres, in most), rotated, some 1e6 from the origin, and boxes from a single vertex (zero
// size: the vertex's first-use leaf is reached only through the inner nodes' margins) to the
// whole part.
TEST(VerticesInBox, AgreesWithEveryCorner) {
  auto rng = SeededRng(77);
  int single = 0, partial = 0, inner_obb = 0;
  const int trials = Trials(120, 24);
  for (int i = 0; i < trials; ++i) {
    RawMesh raw = i % 3 == 0   ? MakeBlob(rng, 8, 10, 14, 0.3)
                  : i % 3 == 1 ? testing::MakeSoup(rng, 200, 20, 3)
                               : MakeSubdividedBox(Vec3(5, 3, 2), 6);
    raw = raw.Transformed({RandomRotation(rng), RandomPoint(rng, i % 4 == 3 ? 1e6 : 50)});
    const PartPtr part = raw.Part();
    inner_obb += std::any_of(part->nodes().begin(), part->nodes().end(),
                             [](const BvhNode& n) { return !n.IsLeaf() && n.IsObb(); });
    const TriangleMesh& m = part->mesh();
    const Vec3 c = m.vertices()[static_cast<std::size_t>(Uniform(rng, 0, 0.999) *
                                                         static_cast<double>(m.vertices().size()))];
    const double half = i % 5 == 4 ? 0.0 : part->bounds().Diagonal() * Uniform(rng, 0.0, 0.6);
    const Aabb box = Aabb::FromCenterHalf(
        c, Vec3(Uniform(rng, 0, half), Uniform(rng, 0, half), Uniform(rng, 0, half)));
    std::vector<std::tuple<uint32_t, double, double, double>> want;
    std::vector<bool> seen(m.vertices().size(), false);
    for (uint32_t t = 0; t < m.num_triangles(); ++t) {
      for (uint32_t v : m.triangles()[t]) {
        if (seen[v] || !box.Contains(m.vertices()[v])) continue;
        seen[v] = true;
        want.emplace_back(t, m.vertices()[v].x(), m.vertices()[v].y(), m.vertices()[v].z());
      }
    }
    std::vector<internal::DepthCandidate> out;
    internal::VerticesInBox(*part, box, &out);
    std::vector<std::tuple<uint32_t, double, double, double>> got;
    for (const auto& d : out) got.emplace_back(d.tri, d.p_P.x(), d.p_P.y(), d.p_P.z());
    SCOPED_TRACE(::testing::Message() << "trial " << i);
    EXPECT_TRUE(std::is_sorted(got.begin(), got.end(), [](const auto& a, const auto& b) {
      return std::get<0>(a) < std::get<0>(b);
    }));
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want);
    if (half == 0.0) {
      EXPECT_EQ(got.size(), 1u);  // the vertex itself, and no other at the same place
      ++single;
    }
    partial += !want.empty() && want.size() < m.vertices().size();
  }
  EXPECT_GE(single, trials / 6);
  EXPECT_GT(partial, trials / 2);
  EXPECT_GT(inner_obb, trials / 2);
}

// Every vertex has exactly one first-use corner, on the smallest triangle that uses it.
TEST(Part, FirstUsesMarkEachVertexOnce) {
  auto rng = SeededRng(78);
  for (int i = 0; i < 6; ++i) {
    const PartPtr part =
        (i % 2 ? MakeBlob(rng, 8, 10, 14, 0.3) : testing::MakeSoup(rng, 300, 20, 3))
            .Transformed({RandomRotation(rng), RandomPoint(rng, 50)})
            .Part();
    const TriangleMesh& m = part->mesh();
    ASSERT_EQ(part->first_uses().size(), m.num_triangles());
    std::vector<int> marks(m.vertices().size(), 0);
    std::vector<uint32_t> first(m.vertices().size(), std::numeric_limits<uint32_t>::max());
    for (uint32_t t = 0; t < m.num_triangles(); ++t) {
      for (int c = 0; c < 3; ++c) {
        const uint32_t v = m.triangles()[t][c];
        first[v] = std::min(first[v], t);
        if (part->first_uses()[t] >> c & 1u) {
          ++marks[v];
          EXPECT_EQ(first[v], t) << "vertex " << v;
        }
      }
    }
    EXPECT_EQ(std::count(marks.begin(), marks.end(), 1), static_cast<long>(marks.size()));
  }
}

// Swapping the parts gives the same answer, witnesses swapped, also when the crossing pairs
// are more than max_witness_pairs: the pairs collected (and with them the lattice and
// beside-crossing candidates) must not depend on which part comes first. Two fine '+'-crossed
// bars, the same part for both (their hierarchies tie at every level), no vertex inside the
// other: only the crossing's candidates show the depth.
TEST(ClassifyPair, SwappingTruncatedCrossingsGivesTheSameAnswer) {
  const PartPtr bar = MakeSubdividedBox(Vec3(50, 5, 5), 12).Part();
  auto rng = SeededRng(303);
  int truncated = 0;
  for (int i = 0; i < testing::Trials(20, 6); ++i) {
    const Vec3 offset(Uniform(rng, -40, 40), Uniform(rng, -40, 40), Uniform(rng, -7, 7));
    const RigidTransform X_WA = RandomPose(rng, 100);
    const RigidTransform X_WB = X_WA * RigidTransform{AxisAngle(M_PI / 2, Vec3::UnitZ()), offset};
    const PairClassification r = ClassifyPair(*bar, X_WA, *bar, X_WB, Tol(0.1));
    const PairClassification s = ClassifyPair(*bar, X_WB, *bar, X_WA, Tol(0.1));
    SCOPED_TRACE(::testing::Message() << "trial " << i << " offset " << offset.transpose());
    truncated += r.intersections_truncated;
    EXPECT_EQ(s.cls, r.cls);
    EXPECT_EQ(s.uncertain, r.uncertain);
    EXPECT_EQ(s.intersecting_pairs, r.intersecting_pairs);
    EXPECT_EQ(s.depth_mm, r.depth_mm);
    EXPECT_EQ(s.p_WA, r.p_WB);
    EXPECT_EQ(s.p_WB, r.p_WA);
    EXPECT_EQ(s.tri_a, r.tri_b);
    EXPECT_EQ(s.tri_b, r.tri_a);
  }
  EXPECT_GE(truncated, 3);
}

// The answer for (a, b) again after one rigid motion of both, and with a and b swapped: the
// same class, flags and values; witnesses moved along or swapped when `unique_witness` (where
// the nearest or deepest point is not unique, any valid pair of witnesses will do).
void ExpectInvariant(const Part& a, const RigidTransform& X_WA, const Part& b,
                     const RigidTransform& X_WB, const PairTolerances& tol,
                     const PairClassification& r, bool unique_witness, std::mt19937& rng) {
  ExpectWitnessesValid(a, X_WA, b, X_WB, r);
  const RigidTransform M = RandomPose(rng, 200);
  const PairClassification m = ClassifyPair(a, M * X_WA, b, M * X_WB, tol);
  EXPECT_EQ(m.cls, r.cls) << "moved";
  EXPECT_EQ(m.uncertain, r.uncertain) << "moved";
  EXPECT_EQ(m.containment, r.containment) << "moved";
  EXPECT_NEAR(m.depth_mm, r.depth_mm, kExact) << "moved";
  ExpectNearOrBothInf(m.distance_mm, r.distance_mm, kExact, "moved distance");
  ExpectWitnessesValid(a, M * X_WA, b, M * X_WB, m);
  const PairClassification s = ClassifyPair(b, X_WB, a, X_WA, tol);
  EXPECT_EQ(s.cls, r.cls) << "swapped";
  EXPECT_EQ(s.uncertain, r.uncertain) << "swapped";
  EXPECT_EQ(s.containment, Swapped(r.containment)) << "swapped";
  EXPECT_NEAR(s.depth_mm, r.depth_mm, kExact) << "swapped";
  ExpectNearOrBothInf(s.distance_mm, r.distance_mm, kExact, "swapped distance");
  ExpectWitnessesValid(b, X_WB, a, X_WA, s);
  if (unique_witness) {
    EXPECT_LT((m.p_WA - M * r.p_WA).norm(), 1e-6) << "moved witness";
    EXPECT_LT((m.p_WB - M * r.p_WB).norm(), 1e-6) << "moved witness";
    EXPECT_LT((s.p_WA - r.p_WB).norm(), kExact) << "swapped witness";
    EXPECT_LT((s.p_WB - r.p_WA).norm(), kExact) << "swapped witness";
    EXPECT_EQ(s.tri_a, r.tri_b);
    EXPECT_EQ(s.tri_b, r.tri_a);
  }
}

struct Case {
  std::string name;
  PartPtr a;
  RigidTransform X_WA;
  PartPtr b;
  RigidTransform X_WB;
  PairTolerances tol;
  ClashClass cls;
  double value;         // depth (crossing or contained) or distance (apart)
  double value_tol;     // how close the value must be
  bool uncertain;       // expected flag
  bool unique_witness;  // the deepest or nearest point is unique
};

TEST(ClassifyPair, KnownCases) {
  const PartPtr cube = MakeBox(Vec3(10, 10, 10)).Part();  // 20 mm cube
  const PartPtr bar = MakeBox(Vec3(5, 3, 3)).Part();      // 10 x 6 x 6
  const PartPtr small = MakeBox(Vec3(1, 1.5, 2)).Part();
  const PartPtr long_x = MakeBox(Vec3(50, 5, 5)).Part();
  const PartPtr long_y = MakeBox(Vec3(5, 50, 5)).Part();
  // The bar's -x face at x = 10 + gap (its centre 5 mm beyond that).
  auto bar_at_gap = [](double gap) { return At(Vec3(15 + gap, 1, -0.5)); };
  // The bar turned so that one corner leads, that corner 1.5 mm inside the cube's +x face.
  RigidTransform X_corner{AxisAngle(0.5, Vec3(0, 1, 1)), Vec3::Zero()};
  double lead = kInf;
  for (const Vec3& v : MakeBox(Vec3(5, 3, 3)).v) lead = std::min(lead, (X_corner * v).x());
  X_corner.t = Vec3(8.5 - lead, 0.7, -1.1);
  const RigidTransform X_small{AxisAngle(0.3, Vec3(1, 2, 3)), Vec3(2, -1, 0.5)};
  const double small_gap = BruteDistance(*small, X_small, *cube, {});

  // A faceted pin in a faceted hole of the same nominal radius r: both polygons have their
  // vertices on r, so each is inside the true circle by its chordal deflection δ. Turned by half
  // a segment against each other, every vertex of the pin crosses a facet of the hole by δ.
  constexpr double kR = 10.0;
  constexpr int kSegments = 32;
  const double deflection = kR * (1.0 - std::cos(M_PI / kSegments));
  const PartPtr pin = MakeCylinder(kR, 30, kSegments).Part();
  const PartPtr hole = MakeTube(kR, 25, 20, kSegments).Part();
  const PartPtr hole_turned =
      MakeTube(kR, 25, 20, kSegments)
          .Transformed({AxisAngle(M_PI / kSegments, Vec3::UnitZ()), Vec3::Zero()})
          .Part();
  ASSERT_TRUE(hole->mesh().IsClosed());
  ASSERT_TRUE(pin->mesh().IsClosed());
  const PairTolerances pin_tol = Tol(2 * deflection);

  RawMesh open_raw = MakeBox(Vec3(10, 10, 10));
  open_raw.t.pop_back();
  const PartPtr open_cube = open_raw.Part();
  ASSERT_FALSE(open_cube->mesh().IsClosed());

  const RigidTransform I = RigidTransform::Identity();
  const std::vector<Case> cases = {
      {"face to face", cube, I, cube, At(Vec3(20, 3, -4)), Tol(0.1), ClashClass::kContact, 0.0,
       kExact, false, false},
      {"overlapping by 2 mm", cube, I, bar, bar_at_gap(-2), Tol(0.1), ClashClass::kHard, 2.0,
       kExact, false, false},
      {"corner pushed 1.5 mm in", cube, I, bar, X_corner, Tol(0.1), ClashClass::kHard, 1.5, kExact,
       false, true},
      {"crossed like a plus", long_x, I, long_y, At(Vec3(12.3, -7.1, 4)), Tol(0.1),
       ClashClass::kHard, 4.5, 1.5, false, false},
      {"small inside big", small, X_small, cube, I, Tol(0.1), ClashClass::kContained, small_gap,
       kExact, false, true},
      {"gap 0.5, clearance 1", cube, I, bar, bar_at_gap(0.5), Tol(0.1, 1.0), ClashClass::kClearance,
       0.5, kExact, false, false},
      {"gap 2, clearance 1", cube, I, bar, bar_at_gap(2), Tol(0.1, 1.0), ClashClass::kClear, kInf,
       0, false, false},
      {"gap 0.05, contact 0.1", cube, I, bar, bar_at_gap(0.05), Tol(0.1), ClashClass::kContact,
       0.05, kExact, false, false},
      {"gap 0.11, contact 0.1: uncertain", cube, I, bar, bar_at_gap(0.11), Tol(0.1),
       ClashClass::kClear, 0.11, kExact, true, false},
      {"gap 0.09, contact 0.1: uncertain", cube, I, bar, bar_at_gap(0.09), Tol(0.1),
       ClashClass::kContact, 0.09, kExact, true, false},
      {"overlap 0.11, contact 0.1: uncertain", cube, I, bar, bar_at_gap(-0.11), Tol(0.1),
       ClashClass::kHard, 0.11, kExact, true, false},
      {"overlap 0.5, contact 0.1", cube, I, bar, bar_at_gap(-0.5), Tol(0.1), ClashClass::kHard, 0.5,
       kExact, false, false},
      // Depth δ: each pin vertex crosses a hole facet by δ (τ = 2δ).
      {"pin in hole, facets turned", pin, I, hole_turned, I, pin_tol, ClashClass::kContact,
       deflection, kExact, false, false},
      {"pin in hole, facets aligned", pin, I, hole, I, pin_tol, ClashClass::kContact, 0.0, kExact,
       false, false},
      {"pin pushed 1 mm into the wall", pin, At(Vec3(1, 0, 0)), hole_turned, I, pin_tol,
       ClashClass::kHard, 1.0, 2 * deflection, false, false},
      // Only the closed bar can hold points of the other part: the depth comes from that side.
      {"open mesh crossing", open_cube, I, bar, bar_at_gap(-2), Tol(0.1), ClashClass::kHard, 1.0,
       1.0 + kExact, true, false},
  };
  auto rng = SeededRng(301);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const PairClassification r = ClassifyPair(*c.a, c.X_WA, *c.b, c.X_WB, c.tol);
    EXPECT_EQ(r.cls, c.cls) << ClashClassName(r.cls) << " depth " << r.depth_mm << " distance "
                            << r.distance_mm;
    EXPECT_EQ(r.uncertain, c.uncertain);
    const bool crossing = r.intersecting_pairs > 0 || r.intersections_truncated;
    switch (c.cls) {
      case ClashClass::kHard:
        EXPECT_TRUE(crossing);
        EXPECT_NEAR(r.depth_mm, c.value, c.value_tol);
        EXPECT_EQ(r.distance_mm, 0.0);
        break;
      case ClashClass::kContained:
        EXPECT_FALSE(crossing);
        EXPECT_NEAR(r.depth_mm, c.value, c.value_tol);
        EXPECT_EQ(r.distance_mm, r.depth_mm);
        EXPECT_NE(r.containment, Containment::kNone);
        break;
      default:
        if (crossing) {
          EXPECT_NEAR(r.depth_mm, c.value, c.value_tol);
        } else {
          ExpectNearOrBothInf(r.distance_mm, c.value, c.value_tol, "distance");
          EXPECT_EQ(r.depth_mm, 0.0);
        }
        EXPECT_EQ(r.containment, Containment::kNone);
    }
    ExpectInvariant(*c.a, c.X_WA, *c.b, c.X_WB, c.tol, r, c.unique_witness, rng);
  }
  EXPECT_EQ(ClassifyPair(*small, X_small, *cube, {}, Tol(0.1)).containment, Containment::kAInsideB);
}

// Two long boxes crossed like a '+': no vertex of either lies inside the other, so only the
// points sampled on the crossing triangles can show the depth.
TEST(ClassifyPair, CrossingWithoutVerticesInside) {
  const RawMesh rx = MakeBox(Vec3(50, 5, 5)), ry = MakeBox(Vec3(5, 50, 5));
  const PartPtr long_x = rx.Part(), long_y = ry.Part();
  auto rng = SeededRng(302);
  for (int i = 0; i < testing::Trials(40, 10); ++i) {
    const Vec3 offset(Uniform(rng, -40, 40), Uniform(rng, -40, 40), Uniform(rng, -7, 7));
    const RigidTransform X_WB = At(offset);
    for (const Vec3& v : rx.v) ASSERT_FALSE(ContainsPoint(*long_y, X_WB.Inverse() * v));
    for (const Vec3& v : ry.v) ASSERT_FALSE(ContainsPoint(*long_x, X_WB * v));
    // The translational penetration depth: the overlap along z (x and y cannot separate them).
    const double overlap_z = 10 - std::abs(offset.z());
    const PairClassification r = ClassifyPair(*long_x, {}, *long_y, X_WB, Tol(0.1));
    SCOPED_TRACE(::testing::Message() << "offset " << offset.transpose());
    EXPECT_EQ(r.cls, ClashClass::kHard);
    EXPECT_LE(r.depth_mm, overlap_z + kExact);
    // The overlap is a box of 10 x 10 x overlap_z: its centre is at least min(5, overlap_z / 2)
    // from both surfaces, and the samples beside the crossings get within a quarter of that.
    EXPECT_GE(r.depth_mm, 0.75 * std::min(5.0, overlap_z / 2)) << "depth " << r.depth_mm;
  }
}

// A lower bound of ClassifyPair's depth for crossing surfaces, from its candidates that brute
// force can list: the vertices of each part (every one inside the other part is inside its
// box), and when no crossing pair was left out, the lattice points (i, j, k) / 4 of every
// triangle in `crossing_pairs` (all of them, (tri_a, tri_b)). The depth of each point inside the
// other solid (by its winding number) is its brute-force distance to that surface.
double BruteCandidateDepth(const Part& a, const RigidTransform& X_WA, const Part& b,
                           const RigidTransform& X_WB,
                           const std::vector<std::pair<uint32_t, uint32_t>>& crossing_pairs,
                           bool with_lattice) {
  double depth = 0.0;
  // Points of one part (its frame) against the other part q, X_QP the first's pose in q's.
  auto deepest = [&depth](const RigidTransform& X_QP, const Part& q, const std::vector<Vec3>& p_P) {
    for (const Vec3& v : p_P) {
      const Vec3 v_Q = X_QP * v;
      if (!q.bounds().Contains(v_Q) || testing::BruteWindingNumber(q.mesh(), v_Q) <= 0.5) continue;
      depth = std::max(depth, testing::BruteClosestPoint(q.mesh(), v_Q).first);
    }
  };
  std::vector<Vec3> lattice_a, lattice_b;
  if (with_lattice) {
    auto lattice = [](const Triangle& t, std::vector<Vec3>* out) {
      for (int i = 0; i <= 4; ++i) {
        for (int j = 0; i + j <= 4; ++j) {
          out->push_back((i * t.a + j * t.b + (4 - i - j) * t.c) / 4);
        }
      }
    };
    std::set<uint32_t> crossing_a, crossing_b;
    for (const auto& [ta, tb] : crossing_pairs) {
      crossing_a.insert(ta);
      crossing_b.insert(tb);
    }
    for (uint32_t t : crossing_a) lattice(a.mesh().triangle(t), &lattice_a);
    for (uint32_t t : crossing_b) lattice(b.mesh().triangle(t), &lattice_b);
  }
  const RigidTransform X_BA = X_WB.Inverse() * X_WA, X_AB = X_BA.Inverse();
  deepest(X_BA, b, a.mesh().vertices());
  deepest(X_AB, a, b.mesh().vertices());
  deepest(X_BA, b, lattice_a);
  deepest(X_AB, a, lattice_b);
  return depth;
}

// Against brute-force oracles on random pairs of blobs. Crossing surfaces (some triangle pair
// intersects) are HARD or CONTACT, with the depth at least the brute-force depth of the
// candidates brute force can list and at most the separating travel along a few directions
// (see ExpectDepthWitnessesValid): HARD where the first exceeds τ, CONTACT where the second
// does not (the class being the depth's against τ). Otherwise one blob inside the other (the
// winding number of one vertex of each about the other) is CONTAINED, and apart blobs are
// classified by their brute-force distance.
TEST(ClassifyPair, AgreesWithBruteForce) {
  auto rng = SeededRng(303);
  int counts[5] = {0, 0, 0, 0, 0};
  int crossing = 0, hard_by_brute_depth = 0, contact_apart = 0;
  const int trials = testing::Trials(150, 15);
  for (int i = 0; i < trials; ++i) {
    const PartPtr a = MakeBlob(rng, 8, 10, 14, 0.25).Part();
    const PartPtr b = MakeBlob(rng, Uniform(rng, 1, 6), 9, 12, 0.3).Part();
    ASSERT_TRUE(a->mesh().IsClosed() && b->mesh().IsClosed());
    const RigidTransform X_WA = RandomPose(rng, 50);
    // One pair in three close together, so that containment occurs.
    const double spread = i % 3 == 0 ? 3 : 14;
    const RigidTransform X_WB =
        X_WA * RigidTransform{RandomRotation(rng), RandomPoint(rng, spread)};
    PairTolerances tol = Tol(Uniform(rng, 0, 0.5), Uniform(rng, 0, 6));
    const auto crossing_pairs = testing::BruteIntersectingPairs(*a, X_WA, *b, X_WB);
    const bool crosses = !crossing_pairs.empty();
    const double d = crosses ? 0.0 : BruteDistance(*a, X_WA, *b, X_WB);
    // One pair in eight apart gets a τ beyond its distance, so that CONTACT of apart surfaces
    // occurs (within a quarter of τ of it in half of them: uncertain).
    if (i % 8 == 7 && d > 0) tol.contact_mm = d * Uniform(rng, 1.01, 1.6);
    const PairClassification r = ClassifyPair(*a, X_WA, *b, X_WB, tol);
    SCOPED_TRACE(::testing::Message() << "trial " << i << ": " << ClashClassName(r.cls));
    ++counts[static_cast<int>(r.cls)];
    if (crosses) {
      ++crossing;
      EXPECT_TRUE(r.cls == ClashClass::kHard || r.cls == ClashClass::kContact);
      EXPECT_GT(r.intersecting_pairs, 0u);
      EXPECT_EQ(r.distance_mm, 0.0);
      EXPECT_EQ(r.containment, Containment::kNone);
      // Every candidate counts: the blobs' vertices and 12 lattice and at most 40 beside-crossing
      // points per collected pair stay within the cap.
      ASSERT_LE(a->mesh().vertices().size() + tol.max_witness_pairs * 52, tol.max_depth_samples);
      const double lower =
          BruteCandidateDepth(*a, X_WA, *b, X_WB, crossing_pairs, !r.intersections_truncated);
      EXPECT_GE(r.depth_mm, lower - kExact);
      if (lower > tol.contact_mm) {
        ++hard_by_brute_depth;
        EXPECT_EQ(r.cls, ClashClass::kHard) << "brute-force depth " << lower;
      }
      // The class is the depth's against τ (the upper bound by separating travel is checked in
      // ExpectInvariant).
      EXPECT_EQ(r.cls == ClashClass::kHard, r.depth_mm > tol.contact_mm);
    } else {
      const std::vector<double> a_in_b = testing::BruteShellWindings(*a, X_WA, *b, X_WB);
      const std::vector<double> b_in_a = testing::BruteShellWindings(*b, X_WB, *a, X_WA);
      ASSERT_EQ(a_in_b.size(), 1u);
      ASSERT_EQ(b_in_a.size(), 1u);
      const Containment want_containment = a_in_b[0] > 0.5   ? Containment::kAInsideB
                                           : b_in_a[0] > 0.5 ? Containment::kBInsideA
                                                             : Containment::kNone;
      EXPECT_EQ(r.containment, want_containment);
      if (want_containment != Containment::kNone) {
        EXPECT_EQ(r.cls, ClashClass::kContained);
        EXPECT_NEAR(r.distance_mm, d, kExact);
        EXPECT_EQ(r.depth_mm, r.distance_mm);
      } else {
        const ClashClass want = d <= tol.contact_mm    ? ClashClass::kContact
                                : d < tol.clearance_mm ? ClashClass::kClearance
                                                       : ClashClass::kClear;
        EXPECT_EQ(r.cls, want) << "distance " << d;
        contact_apart += want == ClashClass::kContact;
        if (d <= std::max(1.25 * tol.contact_mm, tol.clearance_mm)) {
          EXPECT_NEAR(r.distance_mm, d, kExact);
        } else {
          EXPECT_EQ(r.distance_mm, kInf);
        }
        EXPECT_EQ(r.depth_mm, 0.0);
        EXPECT_EQ(r.uncertain, std::abs(d - tol.contact_mm) <= 0.25 * tol.contact_mm);
      }
    }
    ExpectInvariant(*a, X_WA, *b, X_WB, tol, r, false, rng);
  }
  for (int k = 0; k < 5; ++k) {
    RecordProperty(ClashClassName(static_cast<ClashClass>(k)), counts[k]);
  }
  RecordProperty("crossing", crossing);
  RecordProperty("hard_by_brute_force_depth", hard_by_brute_depth);
  RecordProperty("contact_apart", contact_apart);
  // Hit-rate windows: every branch of the oracle occurs often enough.
  for (ClashClass c :
       {ClashClass::kClear, ClashClass::kHard, ClashClass::kClearance, ClashClass::kContained}) {
    EXPECT_GT(counts[static_cast<int>(c)], trials / 20) << ClashClassName(c);
  }
  EXPECT_GT(crossing, trials / 5);
  EXPECT_LT(crossing, trials * 4 / 5);
  EXPECT_GT(hard_by_brute_depth, crossing / 2);
  EXPECT_GE(contact_apart, std::max(1, trials / 30));
}

// Where a pair sits does not change its answer: the classification works in a frame at the
// first part's origin. Before, the depth search's on-surface distance grew with the world
// translation (1e-12 of it), so that at 3e11 mm a depth of 0.5 mm was not seen and a HARD pair
// was CONTACT. The translations are multiples of 2^-13 mm, so that moving both parts by up to
// 1e12 mm is exact and the answers must be the same but for the witnesses' rounding there.
TEST(ClassifyPair, FarFromTheOriginTheAnswerIsTheOnesAtTheOrigin) {
  auto rng = SeededRng(311);
  const auto on_grid = [](RigidTransform X) {
    for (int i = 0; i < 3; ++i) X.t[i] = std::ldexp(std::round(std::ldexp(X.t[i], 13)), -13);
    return X;
  };
  int hard = 0;
  const int trials = testing::Trials(60, 10);
  for (int i = 0; i < trials; ++i) {
    const PartPtr a = MakeBlob(rng, 8, 10, 14, 0.25).Part();
    const PartPtr b = MakeBlob(rng, Uniform(rng, 1, 6), 9, 12, 0.3).Part();
    const RigidTransform X_WA = on_grid(RandomPose(rng, 50));
    const RigidTransform X_WB =
        on_grid(X_WA * RigidTransform{RandomRotation(rng), RandomPoint(rng, i % 3 == 0 ? 3 : 8)});
    const PairTolerances tol = Tol(Uniform(rng, 0.01, 0.5), Uniform(rng, 0, 6));
    const PairClassification home = ClassifyPair(*a, X_WA, *b, X_WB, tol);
    hard += home.cls == ClashClass::kHard;
    for (const double scale : {1e6, 1e9, 1e12}) {
      const Vec3 offset(i % 2 == 0 ? scale : -scale, scale, i % 4 < 2 ? -scale : scale);
      const RigidTransform to = RigidTransform::Translation(offset);
      const PairClassification far = ClassifyPair(*a, to * X_WA, *b, to * X_WB, tol);
      SCOPED_TRACE(::testing::Message()
                   << "trial " << i << " at " << scale << ": " << ClashClassName(home.cls)
                   << " there " << ClashClassName(far.cls));
      EXPECT_EQ(far.cls, home.cls);
      EXPECT_EQ(far.depth_mm, home.depth_mm);
      EXPECT_EQ(far.distance_mm, home.distance_mm);
      EXPECT_EQ(far.uncertain, home.uncertain);
      EXPECT_EQ(far.containment, home.containment);
      EXPECT_EQ(far.tri_a, home.tri_a);
      EXPECT_EQ(far.tri_b, home.tri_b);
      if (home.cls == ClashClass::kClear && home.distance_mm == kInf) {
        EXPECT_EQ(far.p_WA, Vec3::Zero());  // no witnesses
        EXPECT_EQ(far.p_WB, Vec3::Zero());
      } else {
        // The witnesses, moved there, are rounded to the doubles near the offset.
        const double ulp = std::ldexp(1.0, -12);
        EXPECT_LE(((far.p_WA - offset) - home.p_WA).cwiseAbs().maxCoeff(), ulp);
        EXPECT_LE(((far.p_WB - offset) - home.p_WB).cwiseAbs().maxCoeff(), ulp);
      }
    }
  }
  EXPECT_GT(hard, trials / 10);
}

// So do meshes tessellated far from their origin (a plugin that tessellates in world
// coordinates): the depth search's on-surface allowance scales with the mesh's own coordinates
// too, and at 1e-12 of them it was 1 mm at 5e11 mm, so that a cube sunk 0.5 mm into another was
// CONTACT. Cubes of 10 mm at up to 9.9e11 mm (exact: multiples of 2^-13).
TEST(ClassifyPair, MeshesTessellatedFarOutGiveTheAnswersAtTheOrigin) {
  const RigidTransform I = RigidTransform::Identity();
  PairTolerances tol = Tol(0.1);
  for (const double x : {0.0, 2e11, 5e11, 9.9e11}) {
    SCOPED_TRACE(::testing::Message() << "at " << x);
    const Vec3 at(x, -x, 0.5 * x);
    const PartPtr a = MakeBox(Vec3(5, 5, 5), at).Part();
    const PartPtr sunk = MakeBox(Vec3(5, 5, 5), at + Vec3(9.5, 1, 2)).Part();
    const PairClassification hard = ClassifyPair(*a, I, *sunk, I, tol);
    EXPECT_EQ(hard.cls, ClashClass::kHard);
    EXPECT_NEAR(hard.depth_mm, 0.5, 1e-3);
    EXPECT_LT((hard.p_WA - at).cwiseAbs().maxCoeff(), 5 + 1e-3);  // on a
    const PartPtr touching = MakeBox(Vec3(5, 5, 5), at + Vec3(10, 1, 2)).Part();
    const PairClassification contact = ClassifyPair(*a, I, *touching, I, tol);
    EXPECT_EQ(contact.cls, ClashClass::kContact);
    EXPECT_LT(contact.depth_mm, 1e-3);
  }
}

// The depth estimate takes points beside each intersection segment, and lattice points of the
// crossing triangles, only on the side that enters the other part. Taking both sides gives the
// same answers: the other side leaves the other part there.
TEST(ClassifyPair, EnteringSideCandidatesGiveTheDepthOfBothSides) {
  auto rng = SeededRng(707);
  const int trials = Trials(240, 24);
  int crossing = 0, hard = 0;
  for (int i = 0; i < trials; ++i) {
    PartPtr a, b;
    const RigidTransform X_WA = RandomPose(rng, 50);
    RigidTransform X_WB;
    if (i % 2 == 0) {  // blobs
      a = MakeBlob(rng, 8, 10, 14, 0.25).Part();
      b = MakeBlob(rng, Uniform(rng, 1, 6), 9, 12, 0.3).Part();
      X_WB = X_WA * RigidTransform{RandomRotation(rng), RandomPoint(rng, 10)};
    } else {  // thin walls: tubes and plates against cylinders and boxes
      a = (i % 4 == 1 ? MakeTube(4, 5, 10, 24) : testing::MakeSubdividedBox(Vec3(5, 3, 0.5), 4))
              .Part();
      b = (i % 3 != 0 ? MakeCylinder(Uniform(rng, 0.5, 4.5), 12, 20) : MakeBox(Vec3(1, 2, 6)))
              .Part();
      X_WB = X_WA * RigidTransform{RandomRotation(rng), RandomPoint(rng, 5)};
    }
    const PairTolerances tol = Tol(Uniform(rng, 0.01, 0.5));
    const PairClassification got = ClassifyPair(*a, X_WA, *b, X_WB, tol);
    const PairClassification all =
        internal::ClassifyPairWith(*a, X_WA, *b, X_WB, tol, {.both_sides = true});
    SCOPED_TRACE(::testing::Message() << "trial " << i);
    ASSERT_EQ(got.intersecting_pairs, all.intersecting_pairs);
    if (all.intersecting_pairs == 0) continue;
    ++crossing;
    hard += all.cls == ClashClass::kHard;
    // The same class, depth, witness triangles and points, to the bit.
    EXPECT_EQ(std::tie(got.cls, got.depth_mm, got.uncertain, got.tri_a, got.tri_b),
              std::tie(all.cls, all.depth_mm, all.uncertain, all.tri_a, all.tri_b));
    EXPECT_TRUE(got.p_WA == all.p_WA && got.p_WB == all.p_WB);
  }
  // Not vacuous: most pairs cross, and many of them deeply (contact within τ is rarer at
  // random, and may not occur at all in a scaled-down run).
  EXPECT_GT(crossing, trials / 3);
  EXPECT_GT(hard, crossing / 4);
}

// The depth for the class only (a finite depth_cap_mm) against the full search, on blobs and
// thin walls at tolerances from 0.01 to 3 mm: the same class, uncertain flag and crossing
// pairs (but for a vertex deeper than the limit, which decides at the first pair); the same depth
// and witnesses, to the bit, when the full depth lies within [0.75 τ, max(1.25 τ, cap)]; a depth
// above that limit and at most the full one (witnesses valid) when the full depth is above it; 0
// when it is below 0.75 τ. Pairs apart or contained are answered as before.
TEST(ClassifyPair, DepthForTheClassOnlyKeepsTheClassAndTheDepthsThatMatter) {
  auto rng = SeededRng(909);
  const int trials = Trials(300, 30);
  int below = 0, within = 0, above = 0, above_cap = 0, not_crossing = 0, decided_by_vertex = 0;
  int sampled_crossing = 0;
  for (int i = 0; i < trials; ++i) {
    PartPtr a, b;
    const RigidTransform X_WA = RandomPose(rng, 50);
    RigidTransform X_WB = X_WA;
    if (i % 2 == 0) {
      a = MakeBlob(rng, 8, 10, 14, 0.25).Part();
      b = MakeBlob(rng, Uniform(rng, 1, 6), 9, 12, 0.3).Part();
      X_WB = X_WA * RigidTransform{RandomRotation(rng), RandomPoint(rng, 12)};
    } else {
      a = (i % 4 == 1 ? MakeTube(4, 5, 10, 24) : MakeSubdividedBox(Vec3(5, 3, 0.5), 4)).Part();
      b = (i % 3 != 0 ? MakeCylinder(Uniform(rng, 0.5, 4.5), 12, 20) : MakeBox(Vec3(1, 2, 6)))
              .Part();
      X_WB = X_WA * RigidTransform{RandomRotation(rng), RandomPoint(rng, 5)};
    }
    PairTolerances tol = Tol(std::pow(10.0, Uniform(rng, -2, 0.5)), i % 5 == 0 ? 2.0 : 0.0);
    // Few samples (11-47): both searches sample their candidates, and must keep the same ones.
    if (i % 4 == 3) tol.max_depth_samples = 8 + i % 40;
    const PairClassification full = ClassifyPair(*a, X_WA, *b, X_WB, tol);
    sampled_crossing += i % 4 == 3 && full.intersecting_pairs > 0;
    // No cap, a cap near the full depth (either side of it), or one anywhere up to 4 mm.
    const double cap = i % 3 == 0   ? 0.0
                       : i % 3 == 1 ? full.depth_mm * Uniform(rng, 0.7, 1.3)
                                    : Uniform(rng, 0, 4);
    tol.depth_cap_mm = cap;
    const PairClassification got = ClassifyPair(*a, X_WA, *b, X_WB, tol);
    SCOPED_TRACE(::testing::Message()
                 << "trial " << i << ": " << ClashClassName(full.cls) << ", full depth "
                 << full.depth_mm << ", τ " << tol.contact_mm << ", cap " << cap);
    EXPECT_EQ(got.cls, full.cls);
    EXPECT_EQ(got.uncertain, full.uncertain);
    EXPECT_EQ(got.containment, full.containment);
    EXPECT_EQ(got.distance_mm, full.distance_mm);
    const bool crossing = full.intersecting_pairs > 0;
    const double limit = std::max(1.25 * tol.contact_mm, cap) * (1 + 1e-9);
    // A vertex deeper than the limit decides before the crossing pairs are collected: then
    // only the first pair is counted, and the others are said to exist.
    if (got.intersecting_pairs == 1 && full.intersecting_pairs > 1) {
      ++decided_by_vertex;
      EXPECT_GT(got.depth_mm, limit);
      EXPECT_TRUE(got.intersections_truncated);
    } else {
      EXPECT_EQ(got.intersecting_pairs, full.intersecting_pairs);
      EXPECT_EQ(got.intersections_truncated, full.intersections_truncated);
    }
    if (!crossing || (full.depth_mm >= 0.75 * tol.contact_mm && full.depth_mm <= limit)) {
      not_crossing += !crossing;
      within += crossing;
      EXPECT_EQ(std::tie(got.depth_mm, got.tri_a, got.tri_b),
                std::tie(full.depth_mm, full.tri_a, full.tri_b));
      EXPECT_TRUE(got.p_WA == full.p_WA && got.p_WB == full.p_WB);
    } else if (full.depth_mm > limit) {
      ++above;
      above_cap += cap > 1.25 * tol.contact_mm;
      EXPECT_GT(got.depth_mm, limit);
      EXPECT_LE(got.depth_mm, full.depth_mm);
    } else {
      ++below;
      EXPECT_EQ(got.depth_mm, 0.0);
    }
    ExpectWitnessesValid(*a, X_WA, *b, X_WB, got);
    // The order of the arguments does not matter either.
    const PairClassification swapped = ClassifyPair(*b, X_WB, *a, X_WA, tol);
    EXPECT_EQ(std::tie(swapped.cls, swapped.uncertain, swapped.depth_mm),
              std::tie(got.cls, got.uncertain, got.depth_mm));
  }
  RecordProperty("below", below);
  RecordProperty("within", within);
  RecordProperty("above", above);
  RecordProperty("above_cap", above_cap);
  RecordProperty("not_crossing", not_crossing);
  RecordProperty("decided_by_vertex", decided_by_vertex);
  RecordProperty("sampled_crossing", sampled_crossing);
  // Not vacuous: every regime occurs.
  EXPECT_GE(decided_by_vertex, std::max(1, trials / 30));
  EXPECT_GE(below, std::max(1, trials / 30));
  EXPECT_GE(within, std::max(1, trials / 30));
  EXPECT_GE(above, trials / 5);
  EXPECT_GE(above_cap, std::max(1, trials / 30));
  EXPECT_GE(not_crossing, std::max(1, trials / 30));
  EXPECT_GE(sampled_crossing, std::max(1, trials / 10));
}

// A part of two solids, the small one given inside out, classifies like the part given
// outward: its shell is turned at creation (the inside test by the closest face's pseudo-normal
// trusts the winding). The block dips 0.5 mm into the small solid (τ 0.3): HARD.
TEST(ClassifyPair, ASolidGivenInsideOutBesideAnotherClassifiesLikeOutward) {
  const RawMesh big = MakeBox(Vec3(5, 5, 5)), small = MakeBox(Vec3(1, 1, 1), Vec3(20, 0, 0));
  const PartPtr good = big.Plus(small).Part(), mixed = big.Plus(small.Reversed()).Part();
  EXPECT_EQ(mixed->mesh().stats().shells_turned, 1u);
  const PartPtr block = MakeBox(Vec3(0.2, 0.2, 1), Vec3(20, 0, 1.5)).Part();
  const PairClassification want = ClassifyPair(*good, {}, *block, {}, Tol(0.3));
  const PairClassification got = ClassifyPair(*mixed, {}, *block, {}, Tol(0.3));
  EXPECT_EQ(want.cls, ClashClass::kHard);
  EXPECT_NEAR(want.depth_mm, 0.5, kExact);
  EXPECT_EQ(got.cls, want.cls);
  EXPECT_EQ(got.depth_mm, want.depth_mm);
}

// A small cube wholly inside a box whose tessellation closes a T-junction with a zero-area
// sliver is CONTAINED, as in the plain box. Creation once dropped the sliver before counting
// edges, so the box was open, had no inside, and the pair was CLEAR: a missed collision.
TEST(ClassifyPair, APartInsideAMeshWithATJunctionSliverIsContained) {
  const PartPtr box = MakeBoxWithSliver(Vec3(10, 10, 10)).Part();
  const PartPtr plain = MakeBox(Vec3(10, 10, 10)).Part();
  const PartPtr small = MakeBox(Vec3(1, 1, 1)).Part();
  EXPECT_TRUE(box->mesh().IsClosed());
  const RigidTransform X_small = At(Vec3(2, -3, 1));
  const PairClassification want = ClassifyPair(*small, X_small, *plain, {}, Tol(0.01));
  const PairClassification got = ClassifyPair(*small, X_small, *box, {}, Tol(0.01));
  EXPECT_EQ(want.cls, ClashClass::kContained);
  EXPECT_EQ(got.cls, ClashClass::kContained);
  EXPECT_EQ(got.containment, Containment::kAInsideB);
  EXPECT_NEAR(got.depth_mm, want.depth_mm, kExact);
  EXPECT_NEAR(got.depth_mm, 6.0, kExact);  // the cube's -y face (y = -4) to the wall (-10)
}

// A closed mesh given inside out (every triangle wound the other way) is turned outward at
// creation, so it classifies exactly like the same mesh given outward.
TEST(ClassifyPair, InsideOutMeshesClassifyLikeOutwardOnes) {
  auto rng = SeededRng(909);
  const int trials = Trials(40, 8);
  int crossing = 0;
  for (int i = 0; i < trials; ++i) {
    RawMesh raw = MakeBlob(rng, 8, 10, 14, 0.25);
    RawMesh inside_out = raw;
    for (auto& t : inside_out.t) std::swap(t[1], t[2]);
    const PartPtr a = raw.Part(), a_flipped = inside_out.Part();
    ASSERT_TRUE(a_flipped->mesh().stats().turned_outward);
    const PartPtr b = MakeBlob(rng, Uniform(rng, 1, 6), 9, 12, 0.3).Part();
    const RigidTransform X_WA = RandomPose(rng, 50);
    const RigidTransform X_WB = X_WA * RigidTransform{RandomRotation(rng), RandomPoint(rng, 10)};
    const PairTolerances tol = Tol(Uniform(rng, 0.01, 0.5), Uniform(rng, 0, 3));
    const PairClassification want = ClassifyPair(*a, X_WA, *b, X_WB, tol);
    const PairClassification got = ClassifyPair(*a_flipped, X_WA, *b, X_WB, tol);
    SCOPED_TRACE(::testing::Message() << "trial " << i);
    EXPECT_EQ(std::tie(got.cls, got.depth_mm, got.distance_mm, got.tri_a, got.tri_b),
              std::tie(want.cls, want.depth_mm, want.distance_mm, want.tri_a, want.tri_b));
    crossing += want.intersecting_pairs > 0;
  }
  EXPECT_GT(crossing, trials / 4);
}

TEST(ClassifyPair, CapsAndLimits) {
  const PartPtr cube = MakeBox(Vec3(10, 10, 10)).Part();
  const PartPtr bar = MakeBox(Vec3(5, 3, 3)).Part();
  const RigidTransform X_WB = At(Vec3(13, 1, -0.5));  // 2 mm deep
  PairTolerances tol = Tol(0.1);
  tol.max_witness_pairs = 1;
  PairClassification r = ClassifyPair(*cube, {}, *bar, X_WB, tol);
  EXPECT_EQ(r.intersecting_pairs, 1u);
  EXPECT_TRUE(r.intersections_truncated);
  EXPECT_EQ(r.cls, ClashClass::kHard);
  EXPECT_NEAR(r.depth_mm, 2.0, kExact);  // the bar's vertices inside the cube decide
  tol.max_witness_pairs = 0;  // crossing known, no pairs collected: the vertices still decide
  r = ClassifyPair(*cube, {}, *bar, X_WB, tol);
  EXPECT_EQ(r.intersecting_pairs, 0u);
  EXPECT_TRUE(r.intersections_truncated);
  EXPECT_NEAR(r.depth_mm, 2.0, kExact);
  tol.max_depth_samples = 1;  // one candidate per side, chosen by stride
  r = ClassifyPair(*cube, {}, *bar, X_WB, tol);
  EXPECT_LE(r.depth_mm, 2.0 + kExact);
  tol.max_depth_samples = 0;  // no estimate: hard, uncertain
  r = ClassifyPair(*cube, {}, *bar, X_WB, tol);
  EXPECT_EQ(r.cls, ClashClass::kHard);
  EXPECT_TRUE(r.uncertain);
  EXPECT_EQ(r.depth_mm, 0.0);
  EXPECT_STREQ(ClashClassName(ClashClass::kClearance), "clearance");
}

// A CONTACT whose depth came from a sample of the candidates is uncertain: a fine plate lying
// 0.05 mm into a block (τ 0.1), with one vertex of its underside pushed 3 mm down. With every
// candidate the spike decides (HARD); capped by stride, the spike may be left out, and a
// CONTACT then says it is uncertain. Without the cap the shallow overlap alone is a certain
// CONTACT.
TEST(ClassifyPair, AContactFromSampledCandidatesIsUncertain) {
  const PartPtr block = MakeBox(Vec3(6, 6, 5), Vec3(0, 0, -5.95)).Part();
  auto plate = MakeSubdividedBox(Vec3(5, 5, 1), 20);
  PairTolerances tol = Tol(0.1);
  const PairClassification flat = ClassifyPair(*plate.Part(), {}, *block, {}, tol);
  EXPECT_EQ(flat.cls, ClashClass::kContact);
  EXPECT_NEAR(flat.depth_mm, 0.05, 1e-9);
  EXPECT_FALSE(flat.uncertain);
  int spikes = 0, missed = 0;
  for (std::size_t i = 0; i < plate.v.size(); i += 37) {
    if (plate.v[i].z() != -1 || std::abs(plate.v[i].x()) > 4 || std::abs(plate.v[i].y()) > 4) {
      continue;
    }
    auto spiked = plate;
    spiked.v[i].z() = -4;
    const PartPtr part = spiked.Part();
    ++spikes;
    tol.max_depth_samples = 4096;
    const PairClassification all = ClassifyPair(*part, {}, *block, {}, tol);
    EXPECT_EQ(all.cls, ClashClass::kHard) << i;
    EXPECT_GT(all.depth_mm, 1.9) << i;  // the spike's distance to the block's nearest face
    tol.max_depth_samples = 16;
    const PairClassification few = ClassifyPair(*part, {}, *block, {}, tol);
    EXPECT_TRUE(few.cls == ClashClass::kHard || few.uncertain) << i;
    missed += few.cls == ClashClass::kContact;
  }
  EXPECT_GE(spikes, 5);
  EXPECT_GE(missed, 1);  // the cap did leave the spike out somewhere
}

}  // namespace
}  // namespace clash::geom

namespace clash::geom {
namespace {

// The depth search's pruning (candidates' own bounds, the anchor's bound, the empty ball about
// an outside anchor) against a search of every candidate without bounds, with the same inside
// decision: the same deepest point, bit for bit. Candidates come in runs of near neighbours
// about random centres near a random closed blob, as ClassifyPair makes them, half of them with
// an upper bound of their distance (some exactly tight, to meet the rounding).
TEST(DeepestInside, EqualsAnUnprunedSearchOfEveryCandidate) {
  using internal::DeepestPoint;
  using internal::DepthCandidate;
  auto rng = SeededRng(4242);
  const int trials = Trials(120, 24);
  long inside = 0, asked = 0;
  for (int i = 0; i < trials; ++i) {
    const PartPtr q = MakeBlob(rng, 10, 10, 14, 0.35).Part();
    ASSERT_TRUE(q->mesh().IsClosed());
    const RigidTransform X_WQ = RandomPose(rng, 20), X_WP = RandomPose(rng, 20);
    const RigidTransform X_QP = X_WQ.Inverse() * X_WP, X_PQ = X_QP.Inverse();
    std::vector<DepthCandidate> candidates;
    for (int run = 0; run < 12; ++run) {
      const Vec3 centre_Q = RandomPoint(rng, 11, q->bounds().Center());
      const double spread = Uniform(rng, 0.02, 3.0);
      for (int k = 0; k < 12; ++k) {
        const Vec3 p_Q = RandomPoint(rng, spread, centre_Q);
        double bound = kInf;
        if (rng() % 2 == 0) {
          const double d = ClosestPoint(*q, p_Q).distance;
          bound = rng() % 3 == 0 ? d : d * Uniform(rng, 1.0, 2.0) + Uniform(rng, 0.0, 0.5);
        }
        candidates.push_back({X_PQ * p_Q, static_cast<uint32_t>(candidates.size()), bound});
      }
    }
    DeepestPoint expected;
    const double on_surface = internal::OnSurfaceDistance(*q, X_WP, X_WQ);
    for (const DepthCandidate& c : candidates) {
      const Vec3 p_Q = X_QP * c.p_P;
      if (!q->bounds().Contains(p_Q)) continue;
      ++asked;
      const PointDistanceResult d = ClosestPoint(*q, p_Q);
      if (!(d.distance > on_surface)) continue;
      const std::optional<bool> side = InsideFromClosestFace(*q, p_Q, d);
      if (!(side ? *side : ContainsPoint(*q, p_Q))) continue;
      ++inside;
      const Vec3 p_W = X_WP * c.p_P;
      const bool lex_less = std::lexicographical_compare(
          p_W.data(), p_W.data() + 3, expected.p_WP.data(), expected.p_WP.data() + 3);
      if (d.distance > expected.depth ||
          (expected.found && d.distance == expected.depth && lex_less)) {
        expected = {d.distance, true, p_W, X_WQ * d.p_PC, c.tri, d.triangle};
      }
    }
    const DeepestPoint got = internal::DeepestInside(candidates, X_WP, *q, X_WQ);
    ASSERT_EQ(got.found, expected.found) << "trial " << i;
    EXPECT_EQ(got.depth, expected.depth) << "trial " << i;
    EXPECT_EQ(got.p_WP, expected.p_WP) << "trial " << i;
    EXPECT_EQ(got.p_WQ, expected.p_WQ) << "trial " << i;
    EXPECT_EQ(got.tri_p, expected.tri_p) << "trial " << i;
    EXPECT_EQ(got.tri_q, expected.tri_q) << "trial " << i;
    if (!expected.found) continue;
    // A point to beat (the other side's deepest, in ClassifyPair): shallower, deeper, or as
    // deep and lexicographically just before or after the answer. The search gives the
    // answer when it beats that point, else nothing.
    for (int k = 0; k < 4; ++k) {
      DeepestPoint seed = expected;
      seed.depth *= k == 0 ? 0.5 : (k == 1 ? 1.5 : 1.0);
      if (k >= 2) seed.p_WP.x() = std::nextafter(seed.p_WP.x(), k == 2 ? -kInf : kInf);
      const bool beats = expected.depth > seed.depth ||
                         (expected.depth == seed.depth && expected.p_WP.x() < seed.p_WP.x());
      const DeepestPoint seeded = internal::DeepestInside(candidates, X_WP, *q, X_WQ, &seed);
      ASSERT_EQ(seeded.found, beats) << "trial " << i << " seed " << k;
      if (!beats) continue;
      EXPECT_EQ(seeded.depth, expected.depth) << "trial " << i << " seed " << k;
      EXPECT_EQ(seeded.p_WP, expected.p_WP) << "trial " << i << " seed " << k;
      EXPECT_EQ(seeded.p_WQ, expected.p_WQ) << "trial " << i << " seed " << k;
      EXPECT_EQ(seeded.tri_p, expected.tri_p) << "trial " << i << " seed " << k;
      EXPECT_EQ(seeded.tri_q, expected.tri_q) << "trial " << i << " seed " << k;
    }
  }
  // Neither side dominates, so both the skips of outside points and of shallow inside points
  // are exercised.
  EXPECT_GT(inside, asked / 5);
  EXPECT_LT(inside, asked * 4 / 5);
}

}  // namespace
}  // namespace clash::geom
