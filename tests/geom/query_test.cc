#include "clash/geom/query.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "clash/geom/interference.h"
#include "interference_internal.h"
#include "testing/brute_force.h"
#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using testing::AxisAngle;
using testing::BruteDistance;
using testing::BruteIntersectingPairs;
using testing::BruteRayCast;
using testing::BruteWindingNumber;
using testing::MakeBlob;
using testing::MakeBox;
using testing::MakeSoup;
using testing::RandomPoint;
using testing::RandomPose;
using testing::RandomRotation;
using testing::RawMesh;
using testing::SeededRng;
using testing::Uniform;

using PartPtr = std::shared_ptr<const Part>;

PartOptions Mode(BvMode m) {
  PartOptions o;
  o.bv.mode = m;
  return o;
}

// A random scenario: two parts (closed blobs or open soups) and two poses whose overlap rate
// is set by `spread`.
struct Scenario {
  PartPtr a, b;
  RigidTransform X_WA, X_WB;
};

Scenario MakeScenario(std::mt19937& rng, BvMode mode, double spread, bool translation_only) {
  const bool soup = Uniform(rng, 0, 1) < 0.3;
  RawMesh ra = soup ? MakeSoup(rng, 150, 8, 3) : MakeBlob(rng, 8, 10, 14, 0.25);
  RawMesh rb = MakeBlob(rng, Uniform(rng, 3, 8), 9, 12, 0.3);
  // Lay the parts off-axis half of the time so both box kinds occur.
  if (Uniform(rng, 0, 1) < 0.5) ra = ra.Transformed({RandomRotation(rng), Vec3::Zero()});
  Scenario s{ra.Part(Mode(mode)), rb.Part(Mode(mode)), RandomPose(rng, 50), {}};
  s.X_WB = s.X_WA * RigidTransform{translation_only ? Mat3::Identity() : RandomRotation(rng),
                                   RandomPoint(rng, spread)};
  if (translation_only) s.X_WA.R = Mat3::Identity(), s.X_WB.R = Mat3::Identity();
  return s;
}

class QueryOracle : public ::testing::TestWithParam<BvMode> {};

TEST_P(QueryOracle, IntersectionAgreesWithAllPairs) {
  auto rng = SeededRng(71 + static_cast<int>(GetParam()));
  int hits = 0;
  const int trials = testing::Trials(120, 30);
  for (int i = 0; i < trials; ++i) {
    Scenario s = MakeScenario(rng, GetParam(), 16, i % 3 == 0);
    auto expected = BruteIntersectingPairs(*s.a, s.X_WA, *s.b, s.X_WB);
    ASSERT_EQ(SurfacesIntersect(*s.a, s.X_WA, *s.b, s.X_WB), !expected.empty()) << "trial " << i;
    IntersectionResult r = FindIntersections(*s.a, s.X_WA, *s.b, s.X_WB, 1'000'000);
    EXPECT_FALSE(r.truncated);
    ASSERT_EQ(r.pairs.size(), expected.size()) << "trial " << i;
    for (std::size_t k = 0; k < expected.size(); ++k) {
      EXPECT_EQ(r.pairs[k].tri_a, expected[k].first);
      EXPECT_EQ(r.pairs[k].tri_b, expected[k].second);
    }
    // Witness points lie on both posed surfaces.
    for (const auto& h : r.pairs) {
      const Triangle ta = s.a->mesh().triangle(h.tri_a), tb = s.b->mesh().triangle(h.tri_b);
      const Vec3 p_A = s.X_WA.Inverse() * h.p0_W, p_B = s.X_WB.Inverse() * h.p0_W;
      EXPECT_LT((ClosestPointOnTriangle(p_A, ta) - p_A).norm(), 1e-8);
      EXPECT_LT((ClosestPointOnTriangle(p_B, tb) - p_B).norm(), 1e-8);
    }
    if (expected.size() > 3) {
      IntersectionResult few = FindIntersections(*s.a, s.X_WA, *s.b, s.X_WB, 3);
      EXPECT_EQ(few.pairs.size(), 3u);
      EXPECT_TRUE(few.truncated);
    }
    hits += !expected.empty();
  }
  EXPECT_GT(hits, trials / 4);
  EXPECT_LT(hits, trials * 3 / 4);
}

// Parts whose meshes share a rotation built into them (as a plugin that tessellates in world
// coordinates gives them) get OBB nodes with parallel axes. Those axes were single-precision
// matrices, orthonormal only to ~1e-7, and the separating-axis test of two such nodes answered
// "apart" for boxes that overlap: a review found a box sunk 1.7 mm into another classed CONTACT
// with no crossing pair. Here a box sinks into another's top face, its footprint within it: the
// crossings are the brute force's and the depth is the sink, in every mode.
TEST_P(QueryOracle, PartsSharingABuiltInRotationMissNoCrossing) {
  auto rng = SeededRng(97 + static_cast<int>(GetParam()));
  const RigidTransform I = RigidTransform::Identity();
  const int trials = testing::Trials(40, 10);
  for (int i = 0; i < trials; ++i) {
    const Mat3 Q = RandomRotation(rng);
    const Vec3 ha(Uniform(rng, 50, 400), Uniform(rng, 50, 400), Uniform(rng, 50, 400));
    const Vec3 hb(Uniform(rng, 0.1, 0.5) * ha.x(), Uniform(rng, 0.1, 0.5) * ha.y(),
                  Uniform(rng, 10, 200));
    const double sink = Uniform(rng, 0.2, 3);
    const Vec3 c(Uniform(rng, -1, 1) * (ha.x() - hb.x() - 5),
                 Uniform(rng, -1, 1) * (ha.y() - hb.y() - 5), ha.z() + hb.z() - sink);
    const PartPtr a =
        testing::MakeSubdividedBox(ha, 2).Transformed({Q, Vec3::Zero()}).Part(Mode(GetParam()));
    const PartPtr b =
        testing::MakeSubdividedBox(hb, 3).Transformed({Q, Q * c}).Part(Mode(GetParam()));
    SCOPED_TRACE(::testing::Message() << "trial " << i << ", OBB nodes " << a->stats().obb_nodes
                                      << " and " << b->stats().obb_nodes);
    const auto expected = BruteIntersectingPairs(*a, I, *b, I);
    ASSERT_FALSE(expected.empty());
    EXPECT_TRUE(SurfacesIntersect(*a, I, *b, I));
    EXPECT_EQ(FindIntersections(*a, I, *b, I, 1'000'000).pairs.size(), expected.size());
    PairTolerances tol;
    tol.contact_mm = 0.1;
    const PairClassification r = ClassifyPair(*a, I, *b, I, tol);
    EXPECT_EQ(r.cls, ClashClass::kHard);
    EXPECT_NEAR(r.depth_mm, sink, 1e-9 * ha.norm());
  }
}

TEST_P(QueryOracle, DistanceAgreesWithAllPairs) {
  auto rng = SeededRng(81 + static_cast<int>(GetParam()));
  int separated = 0, within_checked = 0;
  const int trials = testing::Trials(100);
  for (int i = 0; i < trials; ++i) {
    Scenario s = MakeScenario(rng, GetParam(), 20, i % 3 == 0);
    const double expected = BruteDistance(*s.a, s.X_WA, *s.b, s.X_WB);
    DistanceResult r = Distance(*s.a, s.X_WA, *s.b, s.X_WB);
    ASSERT_NEAR(r.distance, expected, 1e-12) << "trial " << i;
    EXPECT_NEAR((r.p_WA - r.p_WB).norm(), r.distance, 1e-9);
    // Witnesses lie on the reported triangles.
    const Vec3 p_A = s.X_WA.Inverse() * r.p_WA, p_B = s.X_WB.Inverse() * r.p_WB;
    EXPECT_LT((ClosestPointOnTriangle(p_A, s.a->mesh().triangle(r.tri_a)) - p_A).norm(), 1e-8);
    EXPECT_LT((ClosestPointOnTriangle(p_B, s.b->mesh().triangle(r.tri_b)) - p_B).norm(), 1e-8);
    separated += expected > 0;
    // Upper bounds: below the answer nothing is found; above it the answer is.
    if (expected > 1e-6) {
      EXPECT_EQ(Distance(*s.a, s.X_WA, *s.b, s.X_WB, expected * 0.999).distance,
                std::numeric_limits<double>::infinity());
      EXPECT_NEAR(Distance(*s.a, s.X_WA, *s.b, s.X_WB, expected * 1.001).distance, expected, 1e-12);
    }
    // "Closer than d?" for thresholds on both sides of the answer.
    for (double d : {expected * 0.5, expected * 0.99, expected * 1.01, expected + 1.0}) {
      if (std::abs(d - expected) < 1e-9) continue;
      EXPECT_EQ(WithinDistance(*s.a, s.X_WA, *s.b, s.X_WB, d), expected <= d) << "d=" << d;
      ++within_checked;
    }
  }
  EXPECT_GT(separated, trials / 4);
  EXPECT_LT(separated, trials * 9 / 10);
  EXPECT_GT(within_checked, trials);
}

// The side wall of a cylinder along z (open, centred at the origin), `segments` around and
// `bands` along its height.
RawMesh MakeCylinderWall(double r, double h, int segments, int bands) {
  RawMesh m;
  for (int k = 0; k <= bands; ++k) {
    for (int i = 0; i < segments; ++i) {
      const double a = 2.0 * M_PI * i / segments;
      m.v.push_back({r * std::cos(a), r * std::sin(a), -h / 2 + h * k / bands});
    }
  }
  const auto at = [&](int k, int i) { return static_cast<uint32_t>(k * segments + i % segments); };
  for (int k = 0; k < bands; ++k) {
    for (int i = 0; i < segments; ++i) {
      m.t.push_back({at(k, i), at(k, i + 1), at(k + 1, i + 1)});
      m.t.push_back({at(k, i), at(k + 1, i + 1), at(k + 1, i)});
    }
  }
  return m;
}

// A finely tessellated peg in its hole: many node pairs lie nearer than the answer (the boxes
// of the hole's wall poke towards the peg), so the best-first walk's heap fills up and the walk
// goes on depth first.
TEST_P(QueryOracle, DistanceOfPegInHoleAgreesWithAllPairs) {
  auto rng = SeededRng(97 + static_cast<int>(GetParam()));
  // 1024 triangles each: enough to fill the heap (a temporary print showed the switch in 4 of
  // 6 queries), few enough for the all-pairs oracle under the sanitizers.
  const PartPtr hole = MakeCylinderWall(5.0, 20.0, 128, 4).Part(Mode(GetParam()));
  const PartPtr peg = MakeCylinderWall(4.9, 30.0, 128, 4).Part(Mode(GetParam()));
  const int poses = testing::Trials(2, 1);
  for (int i = 0; i < poses; ++i) {
    const RigidTransform X_WH = RandomPose(rng, 50);
    // Tilted by at most 3 mrad (0.045 mm at the peg's ends) and shifted by at most 0.03 mm:
    // the peg stays clear of the 0.1 mm radial gap.
    const Vec3 axis = RandomPoint(rng, 1.0).normalized();
    const RigidTransform X_WP =
        X_WH * RigidTransform{AxisAngle(Uniform(rng, 0.0, 3e-3), axis), RandomPoint(rng, 0.03)};
    const double expected = BruteDistance(*hole, X_WH, *peg, X_WP);
    ASSERT_GT(expected, 0.0);
    const DistanceResult r = Distance(*hole, X_WH, *peg, X_WP);
    ASSERT_NEAR(r.distance, expected, 1e-12) << "pose " << i;
    EXPECT_NEAR((r.p_WA - r.p_WB).norm(), r.distance, 1e-9);
    EXPECT_TRUE(WithinDistance(*hole, X_WH, *peg, X_WP, expected * 1.01));
    EXPECT_FALSE(WithinDistance(*hole, X_WH, *peg, X_WP, expected * 0.99));
  }
}

TEST_P(QueryOracle, RayCastAgreesWithAllTriangles) {
  auto rng = SeededRng(91 + static_cast<int>(GetParam()));
  int hits = 0;
  const int trials = testing::Trials(3000, 1000);
  PartPtr part;
  RigidTransform X_WP;
  for (int i = 0; i < trials; ++i) {
    if (i % 500 == 0) {
      RawMesh raw = i % 1000 == 0 ? MakeBlob(rng, 10, 16, 24, 0.3) : MakeSoup(rng, 400, 10, 3);
      part = raw.Transformed({RandomRotation(rng), Vec3::Zero()}).Part(Mode(GetParam()));
      X_WP = RandomPose(rng, 100);
    }
    Vec3 origin = X_WP * RandomPoint(rng, 25);
    Vec3 target = X_WP * RandomPoint(rng, 10);
    Ray ray_W{origin, (target - origin) * Uniform(rng, 0.1, 3), 0.0,
              i % 4 == 0 ? Uniform(rng, 0.1, 1.0) : std::numeric_limits<double>::infinity()};
    if (i % 7 == 0) ray_W.direction[i % 3] = 0.0;
    if (ray_W.direction.norm() == 0) continue;
    auto expected = BruteRayCast(part->mesh(), ray_W.InFrameOf(X_WP));
    auto got = CastRay(*part, X_WP, ray_W);
    ASSERT_EQ(got.has_value(), expected.has_value()) << "trial " << i;
    EXPECT_EQ(RayHitsAny(*part, X_WP, ray_W), expected.has_value());
    if (!got) continue;
    ++hits;
    EXPECT_EQ(got->t, expected->first);
    EXPECT_EQ(got->tag, part->mesh().tags()[got->triangle]);
    EXPECT_LT((got->p_W - ray_W.At(got->t)).norm(), 1e-12);
    EXPECT_NEAR(got->normal_W.norm(), 1.0, 1e-12);
    const Vec3 p_P = X_WP.Inverse() * got->p_W;
    EXPECT_LT((ClosestPointOnTriangle(p_P, part->mesh().triangle(got->triangle)) - p_P).norm(),
              1e-8);
  }
  EXPECT_GT(hits, trials / 5);
  EXPECT_LT(hits, trials * 4 / 5);
}

TEST_P(QueryOracle, ClosestPointAgreesWithAllTriangles) {
  auto rng = SeededRng(96 + static_cast<int>(GetParam()));
  const int trials = testing::Trials(2000, 400);
  int bounded = 0, found_within = 0, stopped = 0, not_stopped = 0;
  PartPtr part;
  for (int i = 0; i < trials; ++i) {
    if (i % 250 == 0) {
      RawMesh raw = i % 500 == 0 ? MakeBlob(rng, 10, 14, 20, 0.3) : MakeSoup(rng, 300, 10, 3);
      part = raw.Transformed({RandomRotation(rng), RandomPoint(rng, 50)}).Part(Mode(GetParam()));
    }
    // Points inside, near and far from the part.
    const Vec3 p = RandomPoint(rng, i % 3 == 0 ? 40 : 14, part->bounds().Center());
    const auto [expected, expected_tri] = testing::BruteClosestPoint(part->mesh(), p);
    const PointDistanceResult r = ClosestPoint(*part, p);
    ASSERT_EQ(r.distance, expected) << "trial " << i;
    EXPECT_NEAR((r.p_PC - p).norm(), r.distance, 1e-12 * (1 + r.distance));
    EXPECT_LT((ClosestPointOnTriangle(r.p_PC, part->mesh().triangle(r.triangle)) - r.p_PC).norm(),
              1e-9);
    if (r.triangle != expected_tri) {  // a tie: the reported triangle is as near
      EXPECT_EQ((p - ClosestPointOnTriangle(p, part->mesh().triangle(r.triangle))).norm(),
                expected);
    }
    // upper_bound: a triangle exactly at the bound counts; below it nothing is found.
    EXPECT_EQ(ClosestPoint(*part, p, expected).distance, expected);
    EXPECT_EQ(ClosestPoint(*part, p, std::nextafter(expected, 0.0)).distance,
              std::numeric_limits<double>::infinity());
    const double bound = Uniform(rng, 0, 2 * expected);
    const PointDistanceResult b = ClosestPoint(*part, p, bound);
    ++bounded;
    if (expected <= bound) {
      ++found_within;
      EXPECT_EQ(b.distance, expected);
    } else {
      EXPECT_EQ(b.distance, std::numeric_limits<double>::infinity());
    }
    // Some surface point strictly within a radius (any, not the closest), or none.
    const PointDistanceResult w = internal::SurfacePointWithin(*part, p, bound);
    ASSERT_EQ(std::isfinite(w.distance), expected < bound) << "trial " << i;
    if (std::isfinite(w.distance)) {
      EXPECT_LT(w.distance, bound);
      EXPECT_GE(w.distance, expected);
      EXPECT_EQ(w.distance, (w.p_PC - p).norm());
      EXPECT_LT((ClosestPointOnTriangle(w.p_PC, part->mesh().triangle(w.triangle)) - w.p_PC).norm(),
                1e-9);
    }
    EXPECT_EQ(internal::SurfacePointWithin(*part, p, expected).distance,
              std::numeric_limits<double>::infinity());
    // The closest point within a bound unless surface strictly nearer than `stop` turns up
    // first: then that surface point (any), else exactly ClosestPoint's answer.
    const double upper = Uniform(rng, 0, 2 * expected) + (i % 2 == 0 ? expected : 0.0);
    const double stop = Uniform(rng, 0, 2 * expected);
    const PointDistanceResult u = internal::ClosestPointUnlessWithin(*part, p, upper, stop);
    const PointDistanceResult c = ClosestPoint(*part, p, upper);
    if (expected < stop && expected <= upper) {
      ++stopped;
      ASSERT_LT(u.distance, stop) << "trial " << i;
      EXPECT_LE(u.distance, upper);
      EXPECT_GE(u.distance, expected);
      EXPECT_EQ(u.distance, (u.p_PC - p).norm());
      EXPECT_LT((ClosestPointOnTriangle(u.p_PC, part->mesh().triangle(u.triangle)) - u.p_PC).norm(),
                1e-9);
    } else {
      ++not_stopped;
      EXPECT_EQ(u.distance, c.distance) << "trial " << i;
      EXPECT_EQ(u.triangle, c.triangle);
      EXPECT_EQ(u.p_PC, c.p_PC);
    }
  }
  EXPECT_GT(found_within, bounded / 4);
  EXPECT_LT(found_within, bounded * 3 / 4);
  EXPECT_GT(stopped, trials / 5);
  EXPECT_GT(not_stopped, trials / 5);
  // A negative or NaN bound finds nothing.
  EXPECT_EQ(ClosestPoint(*part, Vec3::Zero(), -1.0).distance,
            std::numeric_limits<double>::infinity());
  EXPECT_EQ(ClosestPoint(*part, Vec3::Zero(), std::nan("")).distance,
            std::numeric_limits<double>::infinity());
}

TEST_P(QueryOracle, FreeTranslationAgreesWithAllPairs) {
  auto rng = SeededRng(91 + static_cast<int>(GetParam()));
  constexpr double kMaxTravel = 20;
  int zero = 0, capped = 0, between = 0, exact = 0;
  const int trials = testing::Trials(60, 30);
  for (int i = 0; i < trials; ++i) {
    // Every fourth pair overlaps or nearly so (the answer 0).
    Scenario s = MakeScenario(rng, GetParam(), i % 4 == 1 ? 6 : 22, i % 3 == 0);
    // a moves roughly towards b; some pass it by.
    const Vec3 c_a = s.X_WA * s.a->bounds().Center(), c_b = s.X_WB * s.b->bounds().Center();
    const Vec3 u = (c_b - c_a + RandomPoint(rng, 25)).normalized();
    const double margin = i % 2 == 0 ? 0.0 : Uniform(rng, 0.0, 1.0);
    // The oracle: every triangle pair, b's triangles in a's frame, b moving by -u there; with
    // the margin asked and with 0 (then each pair's bound is its exact travel to contact).
    const RigidTransform X_AB = s.X_WA.Inverse() * s.X_WB;
    const Vec3 w_A = -(s.X_WA.R.transpose() * u);
    double pairs_min = kMaxTravel, contact = kMaxTravel;
    for (std::size_t p = 0; p < s.a->mesh().num_triangles(); ++p) {
      const Triangle ta = s.a->mesh().triangle(p);
      for (std::size_t q = 0; q < s.b->mesh().num_triangles(); ++q) {
        const Triangle tb = s.b->mesh().triangle(q);
        const Triangle tb_A = {X_AB * tb.a, X_AB * tb.b, X_AB * tb.c};
        pairs_min = std::min(pairs_min, TriangleSeparationTravel(ta, tb_A, w_A, margin));
        contact = std::min(contact, TriangleSeparationTravel(ta, tb_A, w_A, 0.0));
      }
    }
    const double got = FreeTranslation(*s.a, s.X_WA, *s.b, s.X_WB, u, margin, kMaxTravel);
    // Never below the pairs' bounds (pruning by boxes only skips pairs that cannot come within
    // the margin sooner), never beyond contact; at the margin 0 exactly the contact travel.
    EXPECT_GE(got, pairs_min - 1e-12 * (1 + pairs_min)) << "trial " << i;
    EXPECT_LE(got, contact + 1e-12 * (1 + contact)) << "trial " << i;
    if (margin == 0.0) {
      ASSERT_NEAR(got, contact, 1e-12 * (1 + contact)) << "trial " << i;
      ++exact;
    }
    // Sound: a translated by less than that stays more than the margin from b, and at the
    // margin 0 it touches b at the answer.
    for (int k = 0; k < 8 && got > 0; ++k) {
      const RigidTransform X = RigidTransform::Translation(got * k / 8.0 * u) * s.X_WA;
      EXPECT_GT(Distance(*s.a, X, *s.b, s.X_WB).distance, margin - 1e-9) << "trial " << i;
    }
    if (margin == 0.0 && got > 0 && got < kMaxTravel) {
      const RigidTransform X = RigidTransform::Translation(got * u) * s.X_WA;
      EXPECT_LT(Distance(*s.a, X, *s.b, s.X_WB).distance, 1e-9) << "trial " << i;
    }
    // The early stop: a bound not above min_travel gives 0, one above it is unchanged.
    if (got > 0) {
      EXPECT_EQ(FreeTranslation(*s.a, s.X_WA, *s.b, s.X_WB, u, margin, kMaxTravel, got), 0.0);
      EXPECT_EQ(FreeTranslation(*s.a, s.X_WA, *s.b, s.X_WB, u, margin, kMaxTravel, 0.5 * got), got);
    }
    ++*(got == 0 ? &zero : got == kMaxTravel ? &capped : &between);
  }
  ::testing::Test::RecordProperty("zero", zero);
  ::testing::Test::RecordProperty("capped", capped);
  ::testing::Test::RecordProperty("between", between);
  EXPECT_GT(zero, trials / 8);
  EXPECT_GT(capped, trials / 8);
  EXPECT_GT(between, trials / 8);
  EXPECT_GE(exact, trials / 2);
}

INSTANTIATE_TEST_SUITE_P(AllModes, QueryOracle,
                         ::testing::Values(BvMode::kAdaptive, BvMode::kAabbOnly, BvMode::kObbOnly),
                         [](const ::testing::TestParamInfo<BvMode>& param_info) {
                           switch (param_info.param) {
                             case BvMode::kAdaptive:
                               return std::string("Adaptive");
                             case BvMode::kAabbOnly:
                               return std::string("AabbOnly");
                             case BvMode::kObbOnly:
                               return std::string("ObbOnly");
                           }
                           return std::string("Unknown");
                         });

// Random points about random closed blobs (a new blob every 300 trials), with their winding
// number; points near the surface (winding neither near 0 nor 1) are not asked, their answer
// being either. `check(part, p, i, w)` runs for the others.
template <class Check>
void ForPointsWithClearWinding(uint32_t seed, int trials, Check&& check) {
  auto rng = SeededRng(seed);
  PartPtr part;
  for (int i = 0; i < trials; ++i) {
    if (i % 300 == 0) {
      part = MakeBlob(rng, 10, 14, 20, 0.35)
                 .Transformed({RandomRotation(rng), RandomPoint(rng, 5)})
                 .Part();
      ASSERT_TRUE(part->mesh().IsClosed());
    }
    const Vec3 p = RandomPoint(rng, 12, part->bounds().Center());
    const double w = BruteWindingNumber(part->mesh(), p);
    if (std::abs(w - 0.5) < 0.45) continue;
    check(*part, p, i, w);
  }
}

TEST(ContainsPoint, AgreesWithWindingNumber) {
  int inside = 0;
  const int trials = testing::Trials(1500, 600);
  ForPointsWithClearWinding(101, trials, [&](const Part& part, const Vec3& p, int i, double w) {
    const bool expected = w > 0.5;
    EXPECT_EQ(ContainsPoint(part, p), expected) << "trial " << i << " winding " << w;
    inside += expected;
  });
  EXPECT_GT(inside, trials / 5);
  EXPECT_LT(inside, trials * 4 / 5);
  // Points exactly in line with edges and vertices of an axis-aligned box.
  auto box = MakeBox(Vec3(1, 1, 1)).Part();
  EXPECT_TRUE(ContainsPoint(*box, Vec3(0, 0, 0)));
  EXPECT_TRUE(ContainsPoint(*box, Vec3(0.5, 0.5, 0.5)));
  EXPECT_FALSE(ContainsPoint(*box, Vec3(1.5, 0, 0)));
  // Open meshes have no inside.
  RawMesh open = MakeBox(Vec3(1, 1, 1));
  open.t.pop_back();
  EXPECT_FALSE(ContainsPoint(*open.Part(), Vec3(0, 0, 0)));
}

// The inside test from the closest feature (used by the depth estimate instead of rays)
// against the winding number; it must decide nearly all points, and never differently.
TEST(InsideFromClosestFace, AgreesWithWindingNumber) {
  int decided = 0, inside = 0, asked = 0, off_face = 0;
  const int trials = testing::Trials(3000, 600);
  ForPointsWithClearWinding(202, trials, [&](const Part& part, const Vec3& p, int i, double w) {
    ++asked;
    const PointDistanceResult d = ClosestPoint(part, p);
    const std::optional<bool> side = InsideFromClosestFace(part, p, d);
    // Far points are mostly nearest to an edge or a vertex: decided by its pseudo-normal.
    const Vec3 n = part.mesh().triangle(d.triangle).RawNormal();
    off_face += std::abs((p - d.p_PC).dot(n)) < 0.999 * d.distance * n.norm();
    if (!side) return;
    ++decided;
    inside += *side;
    EXPECT_EQ(*side, w > 0.5) << "trial " << i << " winding " << w << " distance " << d.distance;
  });
  EXPECT_GT(off_face, asked / 2);
  EXPECT_GT(decided, asked * 99 / 100);
  EXPECT_GT(inside, decided / 10);
  // The box [-1, 1]^3: on the surface, left to the rays; nearest to a box edge, a box vertex,
  // the diagonal edge of the top face (from inside and outside), a face.
  auto box = MakeBox(Vec3(1, 1, 1)).Part();
  auto ask = [&](const Part& part, const Vec3& p) {
    return InsideFromClosestFace(part, p, ClosestPoint(part, p));
  };
  EXPECT_EQ(ask(*box, Vec3(1, 0.5, 0.5)), std::nullopt);
  EXPECT_EQ(ask(*box, Vec3(2, 2, 0.3)), false);
  EXPECT_EQ(ask(*box, Vec3(3, 3, 3)), false);
  EXPECT_EQ(ask(*box, Vec3(-3, 3, -3)), false);
  EXPECT_EQ(ask(*box, Vec3(0.3, -0.3, 0.6)), true);
  EXPECT_EQ(ask(*box, Vec3(0.3, -0.3, 1.4)), false);
  EXPECT_EQ(ask(*box, Vec3(0.2, 0.1, 0.7)), true);
  EXPECT_EQ(ask(*box, Vec3(0.3, -0.2, 1.5)), false);
}

// Two tetrahedra meeting at one vertex O (closed: every edge has two triangles), and a point
// whose closest point is O: the pseudo-normal of a pinched vertex does not tell the side, so
// the test leaves it to the rays; one tetrahedron alone is decided.
TEST(InsideFromClosestFace, LeavesAPinchedVertexToTheRays) {
  auto tetra = [](RawMesh* m, const std::array<Vec3, 4>& p) {
    const auto base = static_cast<uint32_t>(m->v.size());
    m->v.insert(m->v.end(), p.begin(), p.end());
    const Vec3 centroid = (p[0] + p[1] + p[2] + p[3]) / 4;
    for (std::array<uint32_t, 3> f :
         {std::array<uint32_t, 3>{0, 1, 2}, {0, 1, 3}, {0, 2, 3}, {1, 2, 3}}) {
      if ((p[f[1]] - p[f[0]]).cross(p[f[2]] - p[f[0]]).dot(p[f[0]] - centroid) < 0) {
        std::swap(f[1], f[2]);  // outward
      }
      m->t.push_back({base + f[0], base + f[1], base + f[2]});
    }
  };
  RawMesh one, two;
  const std::array<Vec3, 4> up = {Vec3(0, 0, 0), Vec3(1, -0.2, 0.3), Vec3(1, 0.2, 0.3),
                                  Vec3(1, 0, 0.6)};
  const std::array<Vec3, 4> down = {Vec3(0, 0, 0), Vec3(1, -0.2, -0.3), Vec3(1, 0.2, -0.3),
                                    Vec3(1, 0, -0.6)};
  tetra(&one, up);
  tetra(&two, up);
  tetra(&two, down);
  two.v.erase(two.v.begin() + 4);  // the second O is the first
  for (auto& t : two.t) {
    for (uint32_t& i : t) i = i == 4 ? 0 : i > 4 ? i - 1 : i;
  }
  auto single = one.Part();
  auto pinched = two.Part();
  ASSERT_TRUE(single->mesh().IsClosed());
  ASSERT_TRUE(pinched->mesh().IsClosed());
  const Vec3 p(-1, 0, 0);
  const PointDistanceResult d = ClosestPoint(*pinched, p);
  ASSERT_EQ(d.p_PC, Vec3::Zero());
  EXPECT_EQ(InsideFromClosestFace(*pinched, p, d), std::nullopt);
  EXPECT_FALSE(ContainsPoint(*pinched, p));
  EXPECT_EQ(InsideFromClosestFace(*single, p, ClosestPoint(*single, p)), false);
}

// A closed sheet of no thickness (two triangles back to back): at its rim the two faces' normals
// cancel, so the edge's pseudo-normal tells nothing and the test leaves the point to the rays.
TEST(InsideFromClosestFace, LeavesAFlatFoldToTheRays) {
  RawMesh sheet;
  sheet.v = {Vec3(0, 0, 0), Vec3(4, 0, 0), Vec3(0, 4, 0)};
  sheet.t = {{0, 1, 2}, {0, 2, 1}};
  auto part = sheet.Part();
  ASSERT_TRUE(part->mesh().IsClosed());
  const Vec3 p(3, 3, 0);  // beyond the rim (1, 0) - (0, 1) direction, in the sheet's plane
  const PointDistanceResult d = ClosestPoint(*part, p);
  ASSERT_NEAR(d.distance, (p - Vec3(2, 2, 0)).norm(), 1e-12);
  EXPECT_EQ(InsideFromClosestFace(*part, p, d), std::nullopt);
}

TEST(Containment, FindsWhichPartIsInside) {
  auto rng = SeededRng(102);
  auto big = MakeBlob(rng, 20, 12, 16, 0.1).Part();
  auto small = MakeBox(Vec3(2, 3, 1)).Part();
  const RigidTransform X_W1 = RandomPose(rng, 100);
  const RigidTransform X_1S{RandomRotation(rng), Vec3(1, -2, 3)};
  const RigidTransform X_WS = X_W1 * X_1S;
  ASSERT_FALSE(SurfacesIntersect(*big, X_W1, *small, X_WS));
  EXPECT_EQ(FindContainment(*small, X_WS, *big, X_W1), Containment::kAInsideB);
  EXPECT_EQ(FindContainment(*big, X_W1, *small, X_WS), Containment::kBInsideA);
  // Far apart: neither.
  const RigidTransform X_far = X_W1 * RigidTransform::Translation(Vec3(100, 0, 0));
  EXPECT_EQ(FindContainment(*small, X_far, *big, X_W1), Containment::kNone);
  // An open shell has no inside.
  RawMesh open = MakeBlob(rng, 20, 12, 16, 0.1);
  open.t.pop_back();
  EXPECT_EQ(FindContainment(*small, X_WS, *open.Part(), X_W1), Containment::kNone);
  // But an open part can lie inside a closed one (a sheet, a solid with tessellation gaps): it
  // is CONTAINED, however it is given. Before, a part pushed wholly inside was reported clear.
  RawMesh open_box = MakeBox(Vec3(2, 3, 1));
  open_box.t.pop_back();
  const auto open_small = open_box.Part();
  ASSERT_FALSE(open_small->mesh().IsClosed());
  EXPECT_EQ(FindContainment(*open_small, X_WS, *big, X_W1), Containment::kAInsideB);
  EXPECT_EQ(FindContainment(*big, X_W1, *open_small, X_WS), Containment::kBInsideA);
  EXPECT_EQ(FindContainment(*open_small, X_far, *big, X_W1), Containment::kNone);
  const PairClassification c = ClassifyPair(*open_small, X_WS, *big, X_W1, {0.1, 0, 64, 4096});
  EXPECT_EQ(c.cls, ClashClass::kContained);
  EXPECT_EQ(c.containment, Containment::kAInsideB);
  EXPECT_GT(c.depth_mm, 0.0);
}

// A part of two solids with one of them inside another part, the other outside that part's
// box, is inside: its bounds as a whole do not fit, so a test of the whole part's bounds and
// one vertex called a buried solid clear. The witness is a vertex of the buried solid.
TEST(Containment, FindsOneSolidOfAPartInside) {
  auto rng = SeededRng(103);
  const auto two = MakeBox(Vec3(0.5, 0.5, 0.5))
                       .Plus(MakeBox(Vec3(0.5, 0.5, 0.5), Vec3(20, 0, 0)))
                       .Plus(MakeBox(Vec3(0.5, 0.5, 0.5), Vec3(-30, 0, 0)))
                       .Part();
  ASSERT_EQ(two->mesh().shells().size(), 3u);
  const auto housing = MakeBox(Vec3(5, 5, 5)).Part();
  for (int trial = 0; trial < 10; ++trial) {
    const RigidTransform X_WH = RandomPose(rng, 100);
    for (const Vec3& at : {Vec3(0, 0, 0), Vec3(-20, 1, 0), Vec3(30, 0, -1)}) {
      // Each solid in turn buried in the housing, the others outside it.
      const RigidTransform X_WT = X_WH * RigidTransform::Translation(at);
      ASSERT_FALSE(SurfacesIntersect(*two, X_WT, *housing, X_WH));
      Vec3 p_W;
      EXPECT_EQ(FindContainment(*two, X_WT, *housing, X_WH, &p_W), Containment::kAInsideB);
      EXPECT_LT((X_WH.Inverse() * p_W).cwiseAbs().maxCoeff(), 5.0);  // in the housing
      EXPECT_EQ(FindContainment(*housing, X_WH, *two, X_WT, &p_W), Containment::kBInsideA);
      EXPECT_LT((X_WH.Inverse() * p_W).cwiseAbs().maxCoeff(), 5.0);
      const PairClassification c = ClassifyPair(*two, X_WT, *housing, X_WH, {0.1, 0, 64, 4096});
      EXPECT_EQ(c.cls, ClashClass::kContained);
      EXPECT_EQ(c.containment, Containment::kAInsideB);
    }
    // Every solid outside: none.
    const RigidTransform X_out = X_WH * RigidTransform::Translation(Vec3(10, 0, 0));
    EXPECT_EQ(FindContainment(*two, X_out, *housing, X_WH), Containment::kNone);
  }
  // A solid 4.5 mm inside the housing's walls beside one 0.2 mm outside them: the CONTAINED
  // answer measures and shows the solid inside (the nearest surface of the whole part is the
  // other one's, 0.2 mm away), in both argument orders.
  const auto near =
      MakeBox(Vec3(0.5, 0.5, 0.5)).Plus(MakeBox(Vec3(0.5, 0.5, 0.5), Vec3(5.7, 0, 0))).Part();
  for (int trial = 0; trial < 5; ++trial) {
    const RigidTransform X_WH = RandomPose(rng, 100);
    const PairTolerances tol{0.1, 0, 64, 4096};
    const PairClassification c = ClassifyPair(*near, X_WH, *housing, X_WH, tol);
    ASSERT_EQ(c.cls, ClashClass::kContained);
    EXPECT_NEAR(c.depth_mm, 4.5, 1e-9);
    EXPECT_NEAR(c.distance_mm, 4.5, 1e-9);
    EXPECT_LT((X_WH.Inverse() * c.p_WA).cwiseAbs().maxCoeff(), 0.5 + 1e-9);   // the inner solid
    EXPECT_NEAR((X_WH.Inverse() * c.p_WB).cwiseAbs().maxCoeff(), 5.0, 1e-9);  // a housing wall
    EXPECT_NEAR((c.p_WA - c.p_WB).norm(), 4.5, 1e-9);
    const Vec3 p_A = X_WH.Inverse() * c.p_WA;
    EXPECT_LT((ClosestPointOnTriangle(p_A, near->mesh().triangle(c.tri_a)) - p_A).norm(), 1e-9);
    const PairClassification s = ClassifyPair(*housing, X_WH, *near, X_WH, tol);
    EXPECT_EQ(s.containment, Containment::kBInsideA);
    EXPECT_EQ(s.depth_mm, c.depth_mm);
    EXPECT_EQ(s.p_WA, c.p_WB);
    EXPECT_EQ(s.tri_b, c.tri_a);
  }
}

// A random closed part for the containment oracle, about the origin: a blob or a box, or two or
// three of them side by side in one mesh (spaced so that they do not meet). Each solid is within
// 3.5 s of its centre, s = 1 mm for a `small` part and 6 mm otherwise.
RawMesh RandomClosedPart(std::mt19937& rng, bool small) {
  const double s = small ? 1.0 : 6.0;
  auto solid = [&]() {
    return rng() % 2 ? MakeBlob(rng, s * Uniform(rng, 1, 2.5), 7, 9, 0.3)
                     : MakeBox(s * Vec3(Uniform(rng, 0.4, 2), Uniform(rng, 0.4, 2),
                                        Uniform(rng, 0.4, 2)));
  };
  const int kind = static_cast<int>(rng() % 4);
  if (kind < 2) return solid();
  RawMesh m = solid();
  // The next solids along a random direction, 8 s to 20 s apart (each is at most 3.5 s
  // across from its centre), turned at random.
  const Vec3 dir = RandomRotation(rng).col(0);
  for (int k = 1; k <= kind - 1; ++k) {
    const RigidTransform X{RandomRotation(rng), k * s * Uniform(rng, 8, 20) * dir};
    m = m.Plus(solid().Transformed(X));
  }
  return m;
}

// FindContainment against the winding number of one vertex of each solid (edge-connected
// shell, found by brute force) of each part about the other: a part is inside when any of its
// solids is (query.h), a checked first. Random closed parts: small ones placed at random in a
// large blob, box, hollow box or part of two solids (nested: some or all of their solids inside,
// or in the void), or near other parts, only where no triangle pair crosses. The witness is a
// vertex of the part inside, inside the other.
TEST(Containment, AgreesWithWindingNumbers) {
  auto rng = SeededRng(104);
  const int trials = testing::Trials(300, 40);
  int outcomes[3] = {0, 0, 0}, run = 0, some_solids_inside = 0, in_void = 0;
  for (int i = 0; i < trials; ++i) {
    const bool nested = i % 4 != 3;
    RawMesh big_raw =
        rng() % 3 ? MakeBlob(rng, 25, 12, 16, 0.1)
                  : MakeBox(Vec3(Uniform(rng, 15, 25), Uniform(rng, 15, 25), Uniform(rng, 15, 25)));
    if (i % 8 == 1) {  // a second solid far away: a large part of two solids
      big_raw = big_raw.Plus(
          MakeBlob(rng, 10, 8, 10, 0.2).Transformed(RigidTransform::Translation(Vec3(80, 0, 0))));
    } else if (i % 8 == 5) {  // a hollow box, walls 6 mm thick: a part in the void is outside
      RawMesh void_raw = MakeBox(Vec3(14, 14, 14));
      for (auto& t : void_raw.t) std::swap(t[1], t[2]);
      big_raw = MakeBox(Vec3(20, 20, 20)).Plus(void_raw);
    }
    const PartPtr first = (nested ? big_raw : RandomClosedPart(rng, false)).Part();
    const PartPtr second = RandomClosedPart(rng, nested).Part();
    ASSERT_TRUE(first->mesh().IsClosed() && second->mesh().IsClosed()) << "trial " << i;
    // Nested: the small part about a random point of [-22, 22]^3 about the centre of the large
    // part's first solid (inside it, across its surface, or outside it); otherwise about a
    // random point near the first part.
    const RigidTransform X_W1 = RandomPose(rng, 100);
    const RigidTransform X_W2 =
        X_W1 * RigidTransform{RandomRotation(rng), RandomPoint(rng, nested ? 22 : 15)};
    const bool swap = rng() % 2;  // either part first
    const Part& a = swap ? *second : *first;
    const Part& b = swap ? *first : *second;
    const RigidTransform& X_WA = swap ? X_W2 : X_W1;
    const RigidTransform& X_WB = swap ? X_W1 : X_W2;
    if (!BruteIntersectingPairs(a, X_WA, b, X_WB).empty()) continue;
    const std::vector<double> a_in_b = testing::BruteShellWindings(a, X_WA, b, X_WB);
    const std::vector<double> b_in_a = testing::BruteShellWindings(b, X_WB, a, X_WA);
    auto clear = [](double w) { return std::abs(w - 0.5) > 0.45; };
    // Surfaces that do not cross: every winding number is clearly 0 or 1 (a vertex within
    // rounding of the other surface would be touching it: not drawn at random).
    ASSERT_TRUE(std::all_of(a_in_b.begin(), a_in_b.end(), clear)) << "trial " << i;
    ASSERT_TRUE(std::all_of(b_in_a.begin(), b_in_a.end(), clear)) << "trial " << i;
    ++run;
    auto any_inside = [](const std::vector<double>& w) {
      return std::any_of(w.begin(), w.end(), [](double x) { return x > 0.5; });
    };
    auto all_inside = [](const std::vector<double>& w) {
      return std::all_of(w.begin(), w.end(), [](double x) { return x > 0.5; });
    };
    const Containment want = any_inside(a_in_b)   ? Containment::kAInsideB
                             : any_inside(b_in_a) ? Containment::kBInsideA
                                                  : Containment::kNone;
    // The small part in the void of the hollow box: within its outer box, inside no solid.
    in_void += i % 8 == 5 && want == Containment::kNone &&
               ((X_W1.Inverse() * X_W2) * second->AnyVertex()).cwiseAbs().maxCoeff() < 20;
    some_solids_inside +=
        (any_inside(a_in_b) && !all_inside(a_in_b)) || (any_inside(b_in_a) && !all_inside(b_in_a));
    Vec3 p_W = Vec3::Constant(std::numeric_limits<double>::quiet_NaN());
    const Containment got = FindContainment(a, X_WA, b, X_WB, &p_W);
    ++outcomes[static_cast<int>(got)];
    SCOPED_TRACE(::testing::Message()
                 << "trial " << i << " shells " << a_in_b.size() << " + " << b_in_a.size());
    EXPECT_EQ(got, want);
    EXPECT_EQ(FindContainment(b, X_WB, a, X_WA), Swapped(want)) << "swapped";
    if (got == Containment::kNone) continue;
    // The witness: a vertex of the part inside, inside the other part.
    const bool a_inside = got == Containment::kAInsideB;
    const Part& inner = a_inside ? a : b;
    const Part& outer = a_inside ? b : a;
    const RigidTransform& X_WI = a_inside ? X_WA : X_WB;
    const RigidTransform& X_WO = a_inside ? X_WB : X_WA;
    double nearest_vertex = std::numeric_limits<double>::infinity();
    for (const Vec3& v : inner.mesh().vertices()) {
      nearest_vertex = std::min(nearest_vertex, (X_WI * v - p_W).norm());
    }
    EXPECT_LT(nearest_vertex, 1e-9) << "witness not a vertex of the part inside";
    EXPECT_GT(BruteWindingNumber(outer.mesh(), X_WO.Inverse() * p_W), 0.5)
        << "witness not inside the other part";
  }
  RecordProperty("run", run);
  RecordProperty("none", outcomes[0]);
  RecordProperty("a_inside_b", outcomes[1]);
  RecordProperty("b_inside_a", outcomes[2]);
  RecordProperty("some_solids_inside", some_solids_inside);
  RecordProperty("in_void", in_void);
  // Hit-rate windows: each answer at least a tenth of the cases run, and a part with some of
  // its solids inside and some outside (the case a test of one vertex of the part misses).
  EXPECT_GE(run, trials / 3);
  for (int k = 0; k < 3; ++k) EXPECT_GE(outcomes[k], std::max(1, run / 10)) << "outcome " << k;
  EXPECT_GE(some_solids_inside, std::max(1, run / 20));
  EXPECT_GE(in_void, run >= 100 ? 1 : 0);  // a scaled-down run may have none
}

// The same rigid motion applied to both parts leaves every answer unchanged; swapping the
// parts swaps the witnesses.
TEST(QueryMetamorphic, RigidMotionAndSwap) {
  auto rng = SeededRng(111);
  const int trials = testing::Trials(40);
  int apart = 0;  // trials whose witnesses are compared
  for (int i = 0; i < trials; ++i) {
    Scenario s = MakeScenario(rng, BvMode::kAdaptive, 20, false);
    const RigidTransform M = RandomPose(rng, 1000);
    const RigidTransform X_WA2 = M * s.X_WA, X_WB2 = M * s.X_WB;
    auto p1 = FindIntersections(*s.a, s.X_WA, *s.b, s.X_WB, 100000);
    auto p2 = FindIntersections(*s.a, X_WA2, *s.b, X_WB2, 100000);
    std::set<std::pair<uint32_t, uint32_t>> s1, s2;
    for (const auto& h : p1.pairs) s1.insert({h.tri_a, h.tri_b});
    for (const auto& h : p2.pairs) s2.insert({h.tri_a, h.tri_b});
    // Rounding of the moved poses may only flip pairs that touch within ~1e-12.
    EXPECT_EQ(s1.empty(), s2.empty());
    EXPECT_LE(std::abs(static_cast<long>(s1.size()) - static_cast<long>(s2.size())), 1);
    DistanceResult d1 = Distance(*s.a, s.X_WA, *s.b, s.X_WB);
    DistanceResult d2 = Distance(*s.a, X_WA2, *s.b, X_WB2);
    EXPECT_NEAR(d1.distance, d2.distance, 1e-9);
    if (d1.distance > 1e-6) {
      ++apart;
      EXPECT_LT((M * d1.p_WA - d2.p_WA).norm(), 1e-6);
      DistanceResult sw = Distance(*s.b, s.X_WB, *s.a, s.X_WA);
      EXPECT_NEAR(sw.distance, d1.distance, 1e-12);
      EXPECT_LT((sw.p_WA - d1.p_WB).norm(), 1e-9);
      EXPECT_LT((sw.p_WB - d1.p_WA).norm(), 1e-9);
      // The triangle id may differ on ties (a witness on a shared edge); it must hold the point.
      const Vec3 p_B = s.X_WB.Inverse() * sw.p_WA;
      EXPECT_LT((ClosestPointOnTriangle(p_B, s.b->mesh().triangle(sw.tri_a)) - p_B).norm(), 1e-8);
    }
    EXPECT_EQ(SurfacesIntersect(*s.b, s.X_WB, *s.a, s.X_WA), !s1.empty());
  }
  // 70-87 % of the trials are apart (CLASH_TEST_SCALE 0.1 to 2).
  EXPECT_GE(apart * 3, trials);
}

// Scaling the geometry and the poses by s scales distances by s.
TEST(QueryMetamorphic, ScalingScalesDistance) {
  auto rng = SeededRng(112);
  RawMesh ra = MakeBlob(rng, 5, 8, 10, 0.2), rb = MakeBlob(rng, 4, 8, 10, 0.2);
  const RigidTransform X_WB{RandomRotation(rng), Vec3(14, 3, -2)};
  const double d = Distance(*ra.Part(), {}, *rb.Part(), X_WB).distance;
  ASSERT_GT(d, 0.5);
  for (double s : {1e-3, 7.0, 1e3}) {
    RawMesh sa = ra, sb = rb;
    for (Vec3& p : sa.v) p *= s;
    for (Vec3& p : sb.v) p *= s;
    RigidTransform X = X_WB;
    X.t *= s;
    EXPECT_NEAR(Distance(*sa.Part(), {}, *sb.Part(), X).distance, s * d, 1e-9 * s * d);
  }
}

// A triangle whose tip stops 1e-13 short of another's face touches it (IntersectTriangles snaps
// plane distances below 1e-12 of the triangles' size), and the leaves' pre-filter of triangle
// boxes leaves that to it: before, it dropped the pair, whose boxes are 1e-13 apart, so that
// FindIntersections found fewer pairs than the brute force over all pairs.
TEST(QueryDegenerate, ATipWithinTheSnapOfAFaceTouchesIt) {
  RawMesh face;
  face.v = {Vec3(0, 0, 0), Vec3(4, 0, 0), Vec3(0, 4, 0)};
  face.t = {{0, 1, 2}};
  RawMesh tip;
  tip.v = {Vec3(1, 1, 1e-13), Vec3(3, 1, 2), Vec3(1, 3, 2)};
  tip.t = {{0, 1, 2}};
  const PartPtr a = face.Part(), b = tip.Part();
  const RigidTransform I = RigidTransform::Identity();
  ASSERT_TRUE(IntersectTriangles(a->mesh().triangle(0), b->mesh().triangle(0)).intersects);
  EXPECT_EQ(BruteIntersectingPairs(*a, I, *b, I).size(), 1u);
  EXPECT_EQ(FindIntersections(*a, I, *b, I).pairs.size(), 1u);
  EXPECT_TRUE(SurfacesIntersect(*a, I, *b, I));
}

TEST(QueryDegenerate, TouchingBoxes) {
  auto box = MakeBox(Vec3(1, 1, 1)).Part();
  struct Case {
    const char* name;
    Vec3 offset;
    bool touch;
    double distance;
  };
  const Case cases[] = {
      {"face to face", Vec3(2, 0, 0), true, 0.0},
      {"face to face, shifted", Vec3(2, 0.5, -0.25), true, 0.0},
      {"edge to edge", Vec3(2, 2, 0), true, 0.0},
      {"vertex to vertex", Vec3(2, 2, 2), true, 0.0},
      {"gap of 1e-6", Vec3(2 + 1e-6, 0, 0), false, 1e-6},
      {"overlapping by 1e-6", Vec3(2 - 1e-6, 0, 0), true, 0.0},
      {"apart", Vec3(5, 4, 2), false, std::sqrt(9.0 + 4.0)},
  };
  for (const Vec3& base : {Vec3(0, 0, 0), Vec3(1e6, -1e6, 1e6)}) {
    for (const auto& c : cases) {
      SCOPED_TRACE(::testing::Message() << c.name << " at " << base.transpose());
      const RigidTransform X_WA = RigidTransform::Translation(base);
      const RigidTransform X_WB = RigidTransform::Translation(base + c.offset);
      EXPECT_EQ(SurfacesIntersect(*box, X_WA, *box, X_WB), c.touch);
      // Coordinates near 1e6 carry ~1e-10 of rounding.
      EXPECT_NEAR(Distance(*box, X_WA, *box, X_WB).distance, c.distance, 1e-9);
      // The general (rotated) path agrees with the fast path for a quarter turn.
      const RigidTransform X_WB_turned{AxisAngle(M_PI / 2, Vec3::UnitZ()), X_WB.t};
      EXPECT_EQ(SurfacesIntersect(*box, X_WA, *box, X_WB_turned), c.touch);
    }
  }
}

// Distance 0 is not beyond an upper bound of 0: crossing surfaces are found (the walk alone
// prunes every pair at a bound of 0).
TEST(QueryDegenerate, ZeroUpperBoundFindsCrossingSurfaces) {
  const auto box = MakeBox(Vec3(1, 1, 1)).Part();
  const DistanceResult d =
      Distance(*box, {}, *box, RigidTransform::Translation(Vec3(1.5, 0.3, 0.2)), 0.0);
  EXPECT_EQ(d.distance, 0.0);
  EXPECT_LT((d.p_WA - d.p_WB).norm(), 1e-12);
}

// A NaN bound counts as no bound: Distance finds crossing surfaces (it used to skip the crossing
// check and return +inf) and the true distance of parts apart; WithinDistance answers true at
// once, as for +inf (it used to test every triangle pair and answer false).
TEST(QueryDegenerate, NanBoundCountsAsNoBound) {
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  const auto box = MakeBox(Vec3(1, 1, 1)).Part();
  const RigidTransform crossing = RigidTransform::Translation(Vec3(1.5, 0.3, 0.2));
  const RigidTransform apart = RigidTransform::Translation(Vec3(5, 4, 2));
  EXPECT_EQ(Distance(*box, {}, *box, crossing, kNan).distance, 0.0);
  const DistanceResult d = Distance(*box, {}, *box, apart, kNan);
  const DistanceResult unbounded = Distance(*box, {}, *box, apart);
  EXPECT_EQ(d.distance, unbounded.distance);
  EXPECT_NEAR(d.distance, std::sqrt(9.0 + 4.0), 1e-12);
  EXPECT_EQ(d.p_WA, unbounded.p_WA);
  EXPECT_EQ(d.p_WB, unbounded.p_WB);
  EXPECT_TRUE(WithinDistance(*box, {}, *box, crossing, kNan));
  EXPECT_TRUE(WithinDistance(*box, {}, *box, apart, kNan));
  EXPECT_EQ(WithinDistance(*box, {}, *box, apart, kNan),
            WithinDistance(*box, {}, *box, apart, std::numeric_limits<double>::infinity()));
}

TEST(QueryDegenerate, CoplanarAndSharedEdgeContacts) {
  // Two thin plates stacked exactly: coplanar contact of their faces.
  auto plate = MakeBox(Vec3(10, 10, 0.5)).Part();
  EXPECT_TRUE(SurfacesIntersect(*plate, {}, *plate, RigidTransform::Translation(Vec3(3, 4, 1))));
  EXPECT_FALSE(
      SurfacesIntersect(*plate, {}, *plate, RigidTransform::Translation(Vec3(3, 4, 1.001))));
  // A box standing on another's edge line: shared edge contact.
  auto box = MakeBox(Vec3(1, 1, 1)).Part();
  const RigidTransform X{AxisAngle(M_PI / 4, Vec3::UnitY()), Vec3(0, 0, 1 + std::sqrt(2.0))};
  EXPECT_NEAR(Distance(*box, {}, *box, X).distance, 0.0, 1e-12);
}

}  // namespace
}  // namespace clash::geom

namespace clash::geom {
namespace {

// Parts are immutable after creation: queries from several threads on the same parts give
// the serial answers (run under the sanitizer build too).
TEST(QueryThreads, SharedPartsGiveSerialAnswers) {
  auto rng = SeededRng(121);
  auto a = MakeBlob(rng, 8, 12, 16, 0.25).Part();
  auto b = MakeBlob(rng, 6, 12, 16, 0.25).Part();
  std::vector<RigidTransform> poses;
  for (int i = 0; i < testing::Trials(64, 16); ++i) poses.push_back(RandomPose(rng, 16));
  struct Answer {
    bool hit;
    double distance;
    std::optional<RayHit> ray;
  };
  auto answer = [&](const RigidTransform& X_WB) {
    const Ray ray{X_WB.t + Vec3(30, 1, 2), Vec3(-1, 0, 0)};
    return Answer{SurfacesIntersect(*a, {}, *b, X_WB), Distance(*a, {}, *b, X_WB).distance,
                  CastRay(*b, X_WB, ray)};
  };
  std::vector<Answer> serial;
  for (const auto& X : poses) serial.push_back(answer(X));
  constexpr int kThreads = 4;
  std::vector<std::vector<Answer>> got(kThreads);
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back([&, k] {
      for (std::size_t i = 0; i < poses.size(); ++i) {
        got[k].push_back(answer(poses[(i + k * 7) % poses.size()]));
      }
    });
  }
  for (auto& t : threads) t.join();
  int hits = 0;
  for (int k = 0; k < kThreads; ++k) {
    for (std::size_t i = 0; i < poses.size(); ++i) {
      const Answer& want = serial[(i + k * 7) % poses.size()];
      EXPECT_EQ(got[k][i].hit, want.hit);
      EXPECT_EQ(got[k][i].distance, want.distance);
      ASSERT_EQ(got[k][i].ray.has_value(), want.ray.has_value());
      if (want.ray) {
        EXPECT_EQ(got[k][i].ray->t, want.ray->t);
      }
      hits += want.hit;
    }
  }
  EXPECT_GT(hits, 0);
  EXPECT_LT(hits, kThreads * static_cast<int>(poses.size()));
}

}  // namespace
}  // namespace clash::geom
