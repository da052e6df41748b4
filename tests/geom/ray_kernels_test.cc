// The two ray leaf kernels (one triangle at a time; four at a time with AVX2) give the same
// answers bit for bit, on random rays and on rays through vertices and edges, where a zero
// edge function sends a lane to the scalar test. The AVX2 box test is not the scalar one (its
// widening is folded into the inverse direction); only the answers must agree.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "clash/geom/query.h"
#include "ray_kernels_internal.h"
#include "testing/random_geometry.h"

namespace clash::geom {
namespace {

using internal::RayKernel;
using testing::MakeBlob;
using testing::MakeSoup;
using testing::MakeSubdividedBox;
using testing::RandomPoint;
using testing::RandomPose;
using testing::RawMesh;
using testing::SeededRng;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Restores the default kernel when a test ends.
struct KernelGuard {
  ~KernelGuard() { internal::SetRayKernel(RayKernel::kAvx2); }
};

struct Answers {
  std::optional<RayHit> hit;
  bool any;
};

Answers Cast(RayKernel kernel, const Part& part, const RigidTransform& X_WP, const Ray& ray) {
  internal::SetRayKernel(kernel);
  return {CastRay(part, X_WP, ray), RayHitsAny(part, X_WP, ray)};
}

TEST(RayKernel, Avx2AndScalarAgreeBitForBit) {
  if (!internal::Avx2Supported()) GTEST_SKIP() << "this processor has no AVX2";
  KernelGuard guard;
  auto rng = SeededRng(311);
  int rays = 0, hits = 0, edge_hits = 0;
  for (int m = 0; m < 6; ++m) {
    RawMesh raw = m % 3 == 0   ? MakeSubdividedBox(Vec3(4, 6, 3), 6)
                  : m % 3 == 1 ? MakeBlob(rng, 10, 16, 24, 0.3)
                               : MakeSoup(rng, 600, 10, 3);
    PartOptions options;
    options.ray_leaf_size = m < 3 ? 12 : 5;  // full and partial groups of four
    const auto part = raw.Part(options);
    const RigidTransform X_WP = m % 2 ? RandomPose(rng, 100) : RigidTransform::Identity();
    const Vec3 c = part->bounds().Center();
    const double r = part->bounds().Diagonal();
    const auto& v = part->mesh().vertices();
    std::vector<Vec3> targets;
    for (int i = 0; i < testing::Trials(600, 200); ++i)
      targets.push_back(RandomPoint(rng, 0.4 * r, c));
    for (const auto& t : part->mesh().triangles()) {  // vertices and edge midpoints
      if (targets.size() > static_cast<std::size_t>(testing::Trials(1800, 600))) break;
      targets.push_back(v[t[0]]);
      targets.push_back(0.5 * (v[t[1]] + v[t[2]]));
    }
    for (std::size_t i = 0; i < targets.size(); ++i) {
      Vec3 origin = RandomPoint(rng, r, c);
      if (m % 3 == 0 && i % 2 == 0) {  // along a coordinate axis: edge functions vanish
        origin = targets[i];
        origin[static_cast<int>(i / 2) % 3] += (i % 4 == 0 ? 2 : -2) * r;
      }
      Ray ray{X_WP * origin, X_WP.R * (targets[i] - origin), 0.0, kInf};
      if (i % 5 == 0) ray.t_max = 0.8;
      if (i % 7 == 3) ray.t_min = 0.4;  // an entry bound above 0 (the AVX2 walk starts there)
      if (ray.direction.norm() == 0) continue;
      const Answers scalar = Cast(RayKernel::kScalar, *part, X_WP, ray);
      const Answers avx2 = Cast(RayKernel::kAvx2, *part, X_WP, ray);
      ASSERT_EQ(internal::ActiveRayKernel(), RayKernel::kAvx2);
      ++rays;
      ASSERT_EQ(scalar.hit.has_value(), avx2.hit.has_value()) << "mesh " << m << " ray " << i;
      EXPECT_EQ(scalar.any, avx2.any) << "mesh " << m << " ray " << i;
      EXPECT_EQ(scalar.any, scalar.hit.has_value());
      if (!scalar.hit) continue;
      ++hits;
      EXPECT_EQ(scalar.hit->t, avx2.hit->t) << "mesh " << m << " ray " << i;
      EXPECT_EQ(scalar.hit->triangle, avx2.hit->triangle) << "mesh " << m << " ray " << i;
      const internal::PreparedRay pr(ray.InFrameOf(X_WP));
      const auto& tri = part->mesh().triangles()[scalar.hit->triangle];
      const auto h = internal::IntersectWatertight(pr, v[tri[0]], v[tri[1]], v[tri[2]]);
      ASSERT_TRUE(h.has_value());
      edge_hits += h->on_edge;
    }
  }
  ::testing::Test::RecordProperty("rays", rays);
  ::testing::Test::RecordProperty("hits", hits);
  ::testing::Test::RecordProperty("edge_hits", edge_hits);
  EXPECT_GT(hits, rays / 4);
  EXPECT_LT(hits, rays * 9 / 10);
  EXPECT_GT(edge_hits, 20);  // the scalar hand-off is exercised
}

// 20000 doubles of random mantissa and exponent in [min_exponent, max_exponent], alternately
// positive and negative (seeded).
std::vector<double> SignedDoublesAcrossExponents(uint32_t seed, int min_exponent,
                                                 int max_exponent) {
  auto rng = SeededRng(seed);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(min_exponent, max_exponent);
  std::vector<double> out;
  for (int i = 0; i < 20000; ++i) {
    out.push_back(std::ldexp(mantissa(rng), exponent(rng)) * (i % 2 ? -1 : 1));
  }
  return out;
}

// RoundDown gives the largest float not above x and RoundUp the smallest not below, on exact
// floats, halfway cases, signed zeros, subnormals and values beyond the float range.
TEST(RayKernel, DirectedRoundingToFloat) {
  constexpr float kFltMax = std::numeric_limits<float>::max();
  std::vector<double> xs = {0.0,          -0.0,    1.0,      -1.0,   1e-45,
                            -1e-45,       1.5e-45, -1.5e-45, 1e-300, -1e-300,
                            3.4028235e38, 3.5e38,  -3.5e38,  kInf,   -kInf};
  for (const double x : SignedDoublesAcrossExponents(312, -160, 140)) {
    xs.push_back(x);
    xs.push_back(static_cast<float>(x));  // exactly a float
    const float f = static_cast<float>(x);
    xs.push_back(0.5 * (static_cast<double>(f) + std::nextafter(f, kInf)));  // halfway
  }
  int moved_down = 0, moved_up = 0;
  for (double x : xs) {
    const float lo = internal::RoundDown(x), hi = internal::RoundUp(x);
    if (std::abs(x) > kFltMax) {  // beyond the float range
      EXPECT_EQ(lo, x > 0 ? kFltMax : -std::numeric_limits<float>::infinity()) << x;
      EXPECT_EQ(hi, x > 0 ? std::numeric_limits<float>::infinity() : -kFltMax) << x;
      continue;
    }
    ASSERT_LE(static_cast<double>(lo), x) << x;
    ASSERT_GT(static_cast<double>(std::nextafter(lo, std::numeric_limits<float>::infinity())), x)
        << x;
    ASSERT_GE(static_cast<double>(hi), x) << x;
    ASSERT_LT(static_cast<double>(std::nextafter(hi, -std::numeric_limits<float>::infinity())), x)
        << x;
    moved_down += static_cast<double>(lo)<x&& static_cast<double>(static_cast<float>(x))> x;
    moved_up += static_cast<double>(hi) > x && static_cast<double>(static_cast<float>(x)) < x;
  }
  EXPECT_GT(moved_down, 5000);  // rounding to nearest went the wrong way often: corrected
  EXPECT_GT(moved_up, 5000);
}

// FloatBelow and FloatAbove (the per-ray bounds of the box test) bound x from below and above
// over their domains, within four float steps of the directed roundings (a few 2^-22 of |x|,
// or 2^-139 near zero); they land exactly on RoundDown / RoundUp's answer only sometimes.
TEST(RayKernel, LooseFloatBoundsBoundAndStayClose) {
  constexpr double kFltMax = std::numeric_limits<float>::max();
  std::vector<double> xs = {0.0,    -0.0,   1.0,     -1.0,    1e-45,
                            -1e-45, 1e-300, -1e-300, kFltMax, -kFltMax};
  for (const double x : SignedDoublesAcrossExponents(313, -160, 127)) {
    if (std::abs(x) > kFltMax) continue;
    xs.push_back(x);
    xs.push_back(static_cast<float>(x));  // exactly a float
  }
  int exact_down = 0, exact_up = 0;
  for (double x : xs) {
    const double lo = internal::FloatBelow(x), hi = internal::FloatAbove(x);
    ASSERT_LE(lo, x) << x;
    ASSERT_GE(hi, x) << x;
    const double slack = std::abs(x) * 0x1p-21 + 0x1p-139;
    // (Within 2^-22 of FLT_MAX the margin leaves the float range: +-inf, still a bound.)
    if (std::abs(x) < kFltMax * (1 - 0x1p-21)) {
      ASSERT_GE(lo, x - slack) << x;
      ASSERT_LE(hi, x + slack) << x;
    }
    // At most four float steps beyond the directed roundings (away from zero's neighbourhood,
    // where the absolute 2^-140 takes over).
    if (std::abs(x) >= 0x1p-116 && std::abs(x) < kFltMax * (1 - 0x1p-21)) {
      float down = internal::RoundDown(x), up = internal::RoundUp(x);
      for (int step = 0; step < 4; ++step) {
        down = std::nextafter(down, -std::numeric_limits<float>::infinity());
        up = std::nextafter(up, std::numeric_limits<float>::infinity());
      }
      ASSERT_GE(lo, static_cast<double>(down)) << x;
      ASSERT_LE(hi, static_cast<double>(up)) << x;
    }
    exact_down += lo == static_cast<double>(internal::RoundDown(x));
    exact_up += hi == static_cast<double>(internal::RoundUp(x));
  }
  // The ends of their domains, where the rounding leaves the float range.
  EXPECT_EQ(internal::FloatBelow(-kInf), -kInf);
  EXPECT_EQ(internal::FloatAbove(kInf), kInf);
  EXPECT_EQ(internal::FloatBelow(-3.5e38), -kInf);
  EXPECT_EQ(internal::FloatAbove(3.5e38), kInf);
  EXPECT_LT(exact_down, static_cast<int>(xs.size()));
  EXPECT_LT(exact_up, static_cast<int>(xs.size()));
}

}  // namespace
}  // namespace clash::geom
