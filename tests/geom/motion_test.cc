#include "clash/geom/motion.h"

#include <gtest/gtest.h>

#include <Eigen/Geometry>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "testing/geom_matchers.h"
#include "testing/random_geometry.h"
#include "testing/status_matchers.h"

namespace clash::geom {
namespace {

using testing::AxisAngle;
using testing::RandomMotion;
using testing::RandomPoint;
using testing::RandomPose;
using testing::RandomRotation;
using testing::SeededRng;
using testing::StatusIs;
using testing::Trials;
using testing::Uniform;

constexpr double kPi = std::numbers::pi;
constexpr MotionKind kKinds[] = {MotionKind::kLinear, MotionKind::kRotation, MotionKind::kScrew,
                                 MotionKind::kKeyframes};
constexpr double kInf = std::numeric_limits<double>::infinity();
// Poses are products of a few rotations and translations of size <= 1e2: rounding ~1e-13.
constexpr double kPoseTol = 1e-9;

RigidTransform At(const Vec3& t) { return RigidTransform::Translation(t); }

Motion Ok(absl::StatusOr<Motion> m) { return testing::ValueOrDie(std::move(m)); }

// The largest travel between the poses of `m` at a or b and at a, b, every keyframe inside
// (a, b) and `per_segment` - 1 points between each two, of `points`: a brute-force lower bound
// of MaxTravel over [a, b] for a body holding them.
double SampledTravel(const Motion& m, const std::vector<Keyframe>& keys, double a, double b,
                     const std::vector<Vec3>& points, int per_segment) {
  std::vector<double> ts = {a, b};
  for (std::size_t i = 0; i + 1 < keys.size(); ++i) {
    for (int k = 0; k < per_segment; ++k) {
      const double t = keys[i].t + (keys[i + 1].t - keys[i].t) * k / per_segment;
      if (t > a && t < b) ts.push_back(t);
    }
  }
  double sampled = 0.0;
  for (const double ref : {a, b}) {
    const RigidTransform X_ref = m.PoseAt(ref);
    for (const double t : ts) {
      const RigidTransform X_t = m.PoseAt(t);
      for (const Vec3& p : points) sampled = std::max(sampled, (X_t * p - X_ref * p).norm());
    }
  }
  return sampled;
}

void ExpectPoseNear(const RigidTransform& got, const RigidTransform& want, const char* what) {
  testing::ExpectPoseNear(got, want, kPoseTol, what);
}

TEST(Motion, FactoriesRejectBadInput) {
  const RigidTransform I = RigidTransform::Identity();
  const double nan = std::nan("");
  EXPECT_THAT(Motion::Linear(I, Vec3(1, 1, 0), 5),
              StatusIs(absl::StatusCode::kInvalidArgument, "unit"));
  EXPECT_THAT(Motion::Linear(I, Vec3::Zero(), 5),
              StatusIs(absl::StatusCode::kInvalidArgument, "unit"));
  EXPECT_THAT(Motion::Linear(I, Vec3::UnitX(), nan),
              StatusIs(absl::StatusCode::kInvalidArgument, "finite"));
  EXPECT_THAT(Motion::Linear(I, Vec3::UnitX(), -1),
              StatusIs(absl::StatusCode::kInvalidArgument, ">= 0"));
  RigidTransform skew = I;
  skew.R(0, 1) = 0.1;
  EXPECT_THAT(Motion::Linear(skew, Vec3::UnitX(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "start pose"));
  EXPECT_THAT(Motion::Rotation(I, Vec3::Zero(), Vec3(0, 0, 2), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "axis"));
  EXPECT_THAT(Motion::Rotation(I, Vec3::Zero(), Vec3::Zero(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "axis"));
  EXPECT_THAT(Motion::Rotation(I, Vec3(nan, 0, 0), Vec3::UnitZ(), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, "axis point"));
  EXPECT_THAT(Motion::Rotation(I, Vec3::Zero(), Vec3::UnitZ(), kInf),
              StatusIs(absl::StatusCode::kInvalidArgument, "angle"));
  EXPECT_THAT(Motion::Screw(I, Vec3::Zero(), Vec3::UnitZ(), 1, nan),
              StatusIs(absl::StatusCode::kInvalidArgument, "pitch"));

  std::vector<Keyframe> one = {{0.0, I}};
  EXPECT_THAT(Motion::Keyframes(one), StatusIs(absl::StatusCode::kInvalidArgument, "at least 2"));
  std::vector<Keyframe> flat = {{0.0, I}, {0.5, I}, {0.5, I}, {1.0, I}};
  EXPECT_THAT(Motion::Keyframes(flat), StatusIs(absl::StatusCode::kInvalidArgument, "increase"));
  std::vector<Keyframe> back = {{0.0, I}, {0.7, I}, {0.3, I}, {1.0, I}};
  EXPECT_THAT(Motion::Keyframes(back), StatusIs(absl::StatusCode::kInvalidArgument, "increase"));
  std::vector<Keyframe> short_range = {{0.0, I}, {0.9, I}};
  EXPECT_THAT(Motion::Keyframes(short_range),
              StatusIs(absl::StatusCode::kInvalidArgument, "0 to 1"));
  std::vector<Keyframe> nan_t = {{0.0, I}, {nan, I}, {1.0, I}};
  EXPECT_THAT(Motion::Keyframes(nan_t), StatusIs(absl::StatusCode::kInvalidArgument, "parameter"));
  std::vector<Keyframe> bad_pose = {{0.0, I}, {1.0, skew}};
  EXPECT_THAT(Motion::Keyframes(bad_pose),
              StatusIs(absl::StatusCode::kInvalidArgument, "keyframe 1 pose"));
}

TEST(Motion, PoseAtEndpointsAndMidpoints) {
  std::mt19937 rng = SeededRng(501);
  const RigidTransform X0 = RandomPose(rng, 50);
  const Vec3 p_P(3, -2, 7);  // a point of the part

  // Linear.
  const Vec3 d = Vec3(1, 2, -2).normalized();
  const Motion lin = Ok(Motion::Linear(X0, d, 30));
  EXPECT_EQ(lin.kind(), MotionKind::kLinear);
  ExpectPoseNear(lin.PoseAt(0), X0, "linear t=0");
  ExpectPoseNear(lin.PoseAt(0.5), At(15 * d) * X0, "linear t=0.5");
  ExpectPoseNear(lin.PoseAt(1), At(30 * d) * X0, "linear t=1");
  ExpectPoseNear(lin.PoseAt(1.5), lin.PoseAt(1), "linear clamps t");
  EXPECT_EQ(lin.AxialTravel(), 30);

  // Rotation about the z axis through c by 90 degrees: a point goes c + Rz(φ)(x - c).
  const Vec3 c(1, 2, 3);
  const Motion rot = Ok(Motion::Rotation(X0, c, Vec3::UnitZ(), kPi / 2));
  for (double t : {0.0, 0.5, 1.0}) {
    const Vec3 want = c + AxisAngle(t * kPi / 2, Vec3::UnitZ()) * (X0 * p_P - c);
    EXPECT_LE((rot.PoseAt(t) * p_P - want).norm(), kPoseTol) << "rotation t=" << t;
  }
  // At t = 1 a point straight beside the axis has turned a quarter.
  const Vec3 beside = X0.Inverse() * (c + Vec3(10, 0, 0));
  EXPECT_LE((rot.PoseAt(1) * beside - (c + Vec3(0, 10, 0))).norm(), kPoseTol);
  EXPECT_EQ(rot.AxialTravel(), 0);

  // Screw: two turns with pitch 3 advance 6 along the axis; each whole turn returns the
  // rotation.
  const Motion screw = Ok(Motion::Screw(X0, c, Vec3::UnitZ(), 4 * kPi, 3));
  ExpectPoseNear(screw.PoseAt(0.5), At(Vec3(0, 0, 3)) * X0, "screw one turn");
  ExpectPoseNear(screw.PoseAt(1), At(Vec3(0, 0, 6)) * X0, "screw two turns");
  EXPECT_NEAR(screw.AxialTravel(), 6, 1e-12);
  // A left-hand thread (negative pitch), and a turn backwards, advance against the axis.
  EXPECT_NEAR(Ok(Motion::Screw(X0, c, Vec3::UnitZ(), 4 * kPi, -3)).AxialTravel(), -6, 1e-12);
  EXPECT_NEAR(Ok(Motion::Screw(X0, c, Vec3::UnitZ(), -kPi, 3)).AxialTravel(), -1.5, 1e-12);
  {
    const Vec3 want = c + AxisAngle(kPi, Vec3::UnitZ()) * (X0 * p_P - c) + Vec3(0, 0, 1.5);
    EXPECT_LE((screw.PoseAt(0.25) * p_P - want).norm(), kPoseTol) << "screw half turn";
  }

  // Keyframes: the poses at their parameters; between, linear translation and slerp.
  const RigidTransform K1 = RandomPose(rng, 50), K2 = RandomPose(rng, 50);
  const std::vector<Keyframe> keys = {{0.0, X0}, {0.3, K1}, {1.0, K2}};
  const Motion path = Ok(Motion::Keyframes(keys));
  ExpectPoseNear(path.PoseAt(0), X0, "keyframe 0");
  ExpectPoseNear(path.PoseAt(0.3), K1, "keyframe 1");
  ExpectPoseNear(path.PoseAt(1), K2, "keyframe 2");
  EXPECT_EQ(path.AxialTravel(), 0);
  for (double s : {0.25, 0.5, 0.8}) {
    const double t = 0.3 + s * 0.7;
    const RigidTransform X = path.PoseAt(t);
    EXPECT_LE((X.t - ((1 - s) * K1.t + s * K2.t)).norm(), kPoseTol);
    // Eigen's slerp takes the shorter arc too.
    const Mat3 R = Eigen::Quaterniond(K1.R).slerp(s, Eigen::Quaterniond(K2.R)).toRotationMatrix();
    EXPECT_LE((X.R - R).cwiseAbs().maxCoeff(), kPoseTol) << "slerp s=" << s;
  }
}

TEST(Motion, KeyframeSlerpTakesTheShorterArc) {
  // 0 and 350 degrees about z: the short way passes -5 degrees at the middle, not 175.
  const RigidTransform A = RigidTransform::Identity();
  const RigidTransform B{AxisAngle(350.0 / 180 * kPi, Vec3::UnitZ()), Vec3::Zero()};
  const Motion path = Ok(Motion::Keyframes(std::vector<Keyframe>{{0.0, A}, {1.0, B}}));
  const Mat3 want = AxisAngle(-5.0 / 180 * kPi, Vec3::UnitZ());
  EXPECT_LE((path.PoseAt(0.5).R - want).cwiseAbs().maxCoeff(), kPoseTol);
  // The whole path turns 10 degrees: a point 10 from the axis travels at most 10 * 10°.
  const Sphere s{Vec3(10, 0, 0), 0.0};
  EXPECT_NEAR(path.MaxTravel(0, 1, s), 10.0 * 10.0 / 180 * kPi, 1e-12);
}

TEST(Motion, MaxTravelBoundsSampledTravelAndIsNotLoose) {
  std::mt19937 rng = SeededRng(502);
  const int trials = Trials(400);
  // Sampling finds at most the true maximum; for linear, rotation and screw motions the bound
  // is at most 1.19x the truth (min(Δ, 2) against 2 sin(Δ/2)), and the sampling of 64 points
  // x 257 parameters loses a few percent more: 2x is the stated limit. Keyframe bounds add a
  // translation and a rotation term that the true motion can cancel (a turn about a point far
  // from the part origin), so they are only checked to be bounds.
  constexpr double kMaxLooseness = 2.0;
  double worst_ratio[4] = {0, 0, 0, 0};
  for (int trial = 0; trial < trials; ++trial) {
    const MotionKind kind = kKinds[trial % 4];
    Motion m = RandomMotion(rng, kind);
    // Every third motion carries its part for another (a member of a moving group).
    if (trial % 3 == 1) m = Ok(m.Carrying(RandomPose(rng, 30)));
    const Sphere sphere{RandomPoint(rng, 10), Uniform(rng, 0, 10)};
    double t0 = Uniform(rng, 0, 1), t1 = Uniform(rng, 0, 1);
    if (trial % 8 == 0) t0 = 0, t1 = 1;
    const double bound = m.MaxTravel(t0, t1, sphere);
    EXPECT_DOUBLE_EQ(bound, m.MaxTravel(t1, t0, sphere)) << "symmetric";
    // Points of the sphere: its surface holds the maximum (the displacement of a rigid motion
    // is a convex function of the point); include the point farthest from a rotation axis.
    std::vector<Vec3> pts;
    std::normal_distribution<double> g;
    for (int k = 0; k < 64; ++k) {
      pts.push_back(sphere.center + sphere.radius * Vec3(g(rng), g(rng), g(rng)).normalized());
    }
    if (kind == MotionKind::kRotation || kind == MotionKind::kScrew) {
      const Vec3 q = m.start() * sphere.center - m.center();
      Vec3 radial = q - q.dot(m.direction()) * m.direction();
      if (radial.norm() > 0)
        pts.push_back(m.start().Inverse() *
                      (m.start() * sphere.center + sphere.radius * radial.normalized()));
    }
    double sampled = 0.0;
    const double a = std::min(t0, t1), b = std::max(t0, t1);
    for (const double ref : {t0, t1}) {
      const RigidTransform X_ref = m.PoseAt(ref);
      for (int k = 0; k <= 256; ++k) {
        const RigidTransform X = m.PoseAt(a + (b - a) * k / 256);
        for (const Vec3& p : pts) sampled = std::max(sampled, (X * p - X_ref * p).norm());
      }
    }
    EXPECT_LE(sampled, bound * (1 + 1e-12) + 1e-9)
        << MotionKindName(kind) << " trial " << trial << " t " << t0 << ".." << t1;
    if (sampled > 1e-6) {
      const double ratio = bound / sampled;
      worst_ratio[trial % 4] = std::max(worst_ratio[trial % 4], ratio);
      if (kind != MotionKind::kKeyframes) {
        EXPECT_LE(ratio, kMaxLooseness) << MotionKindName(kind) << " trial " << trial;
      }
    }
  }
  for (int k = 0; k < 4; ++k) {
    ::testing::Test::RecordProperty(std::string("worst_ratio_") + MotionKindName(kKinds[k]),
                                    std::to_string(worst_ratio[k]));
  }
}

// Long keyframe paths: MaxTravel adds the whole segments inside a span of more than 32 from
// prefix sums (a sweep asks MaxTravel(t, 1) at every step, which cost O(segments) each: 4 s
// for a sweep along 50k keyframes). The bound must still cover the sampled travel, and lie
// between the per-segment sum (the bound before, reimplemented here from the keyframes) and
// that sum with every segment's distance from its axis raised to |c| + r.
TEST(Motion, MaxTravelOfLongKeyframePathsBoundsTheTravelAndStaysTight) {
  std::mt19937 rng = SeededRng(505);
  const int trials = Trials(40);
  int long_spans = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const int n = std::uniform_int_distribution<int>(40, 300)(rng);
    std::vector<Keyframe> keys;
    RigidTransform X = RandomPose(rng, 20);
    for (int i = 0; i <= n; ++i) {
      keys.push_back({i == n ? 1.0 : static_cast<double>(i) / n, X});
      // Small steps, and now and then a turn beyond 2 rad (where the chord bound caps).
      const double turn = i % 17 == 5 ? Uniform(rng, 2.0, 3.0) : Uniform(rng, 0.0, 0.3);
      X = RigidTransform{AxisAngle(turn, RandomRotation(rng).col(0)) * X.R,
                         X.t + RandomPoint(rng, 2.0)};
    }
    const Motion m = Ok(Motion::Keyframes(keys));
    const Sphere sphere{RandomPoint(rng, 10), Uniform(rng, 0, 10)};
    double t0 = Uniform(rng, 0, 1), t1 = Uniform(rng, 0, 1);
    if (trial % 4 == 0) t0 = 0, t1 = 1;
    if (trial % 4 == 1) t1 = std::min(1.0, t0 + Uniform(rng, 0, 20.0 / n));  // short span
    const double a = std::min(t0, t1), b = std::max(t0, t1);
    const double bound = m.MaxTravel(t0, t1, sphere);
    EXPECT_EQ(bound, m.MaxTravel(t1, t0, sphere)) << "symmetric";
    // The per-segment sum, and the same with |c| + r as every segment's radius.
    double exact = 0.0, loose = 0.0;
    int spanned = 0;
    for (int i = 0; i < n; ++i) {
      const double s0 = keys[i].t, s1 = keys[i + 1].t;
      const double f = (std::min(b, s1) - std::max(a, s0)) / (s1 - s0);
      if (!(s0 < b) || f <= 0.0) continue;
      ++spanned;
      Eigen::Quaterniond q(keys[i].X_WP.R.transpose() * keys[i + 1].X_WP.R);
      if (q.w() < 0) q.coeffs() = -q.coeffs();
      const double angle = 2.0 * std::atan2(q.vec().norm(), q.w());
      const Vec3 axis = q.vec().norm() > 0 ? Vec3(q.vec().normalized()) : Vec3::UnitX();
      const Vec3& c = sphere.center;
      const double rho = (c - c.dot(axis) * axis).norm() + sphere.radius;
      const double moved = f * (keys[i + 1].X_WP.t - keys[i].X_WP.t).norm();
      exact += moved + std::min(f * angle, 2.0) * rho;
      loose += moved + std::min(f * angle, 2.0) * (c.norm() + sphere.radius);
    }
    long_spans += spanned > 34;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " t " << a << ".." << b << " over "
                                      << spanned << " of " << n << " segments");
    EXPECT_GE(bound, exact * (1 - 1e-12));
    EXPECT_LE(bound, loose * (1 + 1e-9) + 1e-9);
    if (spanned <= 32) {
      EXPECT_NEAR(bound, exact, 1e-12 * exact);
    }
    // Sampled: every keyframe inside the span and three points between, 16 points of the
    // sphere's surface, from both ends.
    std::vector<Vec3> pts;
    std::normal_distribution<double> g;
    for (int k = 0; k < 16; ++k) {
      pts.push_back(sphere.center + sphere.radius * Vec3(g(rng), g(rng), g(rng)).normalized());
    }
    const double sampled = SampledTravel(m, keys, a, b, pts, 4);
    EXPECT_LE(sampled, bound * (1 + 1e-12) + 1e-9);
  }
  EXPECT_GT(long_spans, trials / 3);
}

// A part carried along a long keyframe path (Carrying: its sphere is X_PQ * bound_Q in the
// carrier's frame P), over spans of more than 32 segments, where MaxTravel adds the whole
// segments between the ends from prefix sums with |c| + r as every segment's radius (c the carried
// sphere's centre in P). Against brute force: the carried motion's own poses at every keyframe
// and 7 parameters between (and at the span's ends), applied to 24 points of the sphere's surface
// and its centre, measured from both ends of the span, never travel farther than the bound. The
// bound lies between the per-segment sum (reimplemented here from the keyframes and the carried
// sphere) and that sum with every radius raised to |c| + r; on a path that only translates,
// always onwards, the true travel is the path's length and the bound matches it.
TEST(Motion, MaxTravelOfACarriedPartOverLongKeyframeSpansBoundsItsTravel) {
  std::mt19937 rng = SeededRng(506);
  const int trials = Trials(40);
  int long_spans = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const int n = std::uniform_int_distribution<int>(40, 300)(rng);
    const bool onwards = trial % 5 == 4;  // translation only, always onwards
    const Vec3 heading = RandomRotation(rng).col(0);
    std::vector<Keyframe> keys;
    RigidTransform X = RandomPose(rng, 20);
    for (int i = 0; i <= n; ++i) {
      keys.push_back({i == n ? 1.0 : static_cast<double>(i) / n, X});
      if (onwards) {
        X.t += Uniform(rng, 0.0, 2.0) * heading;
        continue;
      }
      const double turn = i % 13 == 7 ? Uniform(rng, 2.0, 3.0) : Uniform(rng, 0.0, 0.3);
      X = RigidTransform{AxisAngle(turn, RandomRotation(rng).col(0)) * X.R,
                         X.t + RandomPoint(rng, 2.0)};
    }
    const Motion carrier = Ok(Motion::Keyframes(keys));
    const RigidTransform X_PQ = RandomPose(rng, 30);
    const Motion m = Ok(carrier.Carrying(X_PQ));
    const Sphere bound_Q{RandomPoint(rng, 10), Uniform(rng, 0, 10)};
    double t0 = Uniform(rng, 0, 1), t1 = Uniform(rng, 0, 1);
    if (trial % 3 == 0) t0 = 0, t1 = 1;
    if (trial % 3 == 1) t0 = Uniform(rng, 0, 0.4), t1 = t0 + Uniform(rng, 0.2, 0.6);
    const double a = std::min(t0, t1), b = std::max(t0, t1);
    const double bound = m.MaxTravel(t0, t1, bound_Q);
    EXPECT_EQ(bound, m.MaxTravel(t1, t0, bound_Q)) << "symmetric";
    // The per-segment sum for the carried sphere, and the same with |c| + r as every radius.
    const Vec3 c = X_PQ * bound_Q.center;
    const double r = bound_Q.radius;
    double exact = 0.0, loose = 0.0;
    int spanned = 0;
    for (int i = 0; i < n; ++i) {
      const double s0 = keys[i].t, s1 = keys[i + 1].t;
      const double f = (std::min(b, s1) - std::max(a, s0)) / (s1 - s0);
      if (!(s0 < b) || f <= 0.0) continue;
      ++spanned;
      Eigen::Quaterniond q(keys[i].X_WP.R.transpose() * keys[i + 1].X_WP.R);
      if (q.w() < 0) q.coeffs() = -q.coeffs();
      const double angle = 2.0 * std::atan2(q.vec().norm(), q.w());
      const Vec3 axis = q.vec().norm() > 0 ? Vec3(q.vec().normalized()) : Vec3::UnitX();
      const double moved = f * (keys[i + 1].X_WP.t - keys[i].X_WP.t).norm();
      exact += moved + std::min(f * angle, 2.0) * ((c - c.dot(axis) * axis).norm() + r);
      loose += moved + std::min(f * angle, 2.0) * (c.norm() + r);
    }
    long_spans += spanned > 32;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " t " << a << ".." << b << " over "
                                      << spanned << " of " << n << " segments");
    EXPECT_GE(bound, exact * (1 - 1e-12));
    EXPECT_LE(bound, loose * (1 + 1e-9) + 1e-9);
    // Brute force: the carried motion's own poses.
    std::vector<Vec3> pts = {bound_Q.center};
    std::normal_distribution<double> g;
    for (int k = 0; k < 24; ++k) {
      pts.push_back(bound_Q.center + r * Vec3(g(rng), g(rng), g(rng)).normalized());
    }
    const double sampled = SampledTravel(m, keys, a, b, pts, 8);
    EXPECT_LE(sampled, bound * (1 + 1e-12) + 1e-9);
    // Onwards only: every point travels the path's length from a to b; the bound is that sum.
    if (onwards) {
      EXPECT_NEAR(bound, sampled, 1e-9 * sampled);
    }
  }
  EXPECT_GT(long_spans, trials / 2);
}

// A group moves as one rigid body: a carried part keeps its pose relative to its carrier at every
// t, for every kind of motion, and a keyframe path still interpolates the carrier's own pose.
TEST(Motion, ACarriedPartKeepsItsPoseRelativeToItsCarrier) {
  std::mt19937 rng = SeededRng(504);
  for (int trial = 0; trial < Trials(100); ++trial) {
    const Motion lead = RandomMotion(rng, kKinds[trial % 4]);
    const RigidTransform X_PQ = RandomPose(rng, 50);
    const Motion q = Ok(lead.Carrying(X_PQ));
    EXPECT_EQ(q.kind(), lead.kind());
    for (int k = 0; k <= 16; ++k) {
      const RigidTransform rel = lead.PoseAt(k / 16.0).Inverse() * q.PoseAt(k / 16.0);
      EXPECT_LT((rel.R - X_PQ.R).cwiseAbs().maxCoeff(), 1e-9) << trial << " t " << k / 16.0;
      EXPECT_LT((rel.t - X_PQ.t).norm(), 1e-9) << trial << " t " << k / 16.0;
    }
  }
  // Two parts 200 mm apart come back a quarter turn about the world origin: mid-path they are
  // still 200 mm apart (interpolating each part's own pose brought them to 141 mm), and the
  // carrier's origin still moves straight from (0, 100) to (100, 0).
  const RigidTransform A = RigidTransform::Translation(Vec3(100, 0, 0));
  const RigidTransform B = RigidTransform::Translation(Vec3(-100, 0, 0));
  const RigidTransform K{AxisAngle(kPi / 2, Vec3::UnitZ()), Vec3::Zero()};
  const Motion a = Ok(Motion::Keyframes(std::vector<Keyframe>{{0.0, K * A}, {1.0, A}}));
  const Motion b = Ok(a.Carrying(A.Inverse() * B));
  EXPECT_NEAR((b.PoseAt(0.5).t - a.PoseAt(0.5).t).norm(), 200.0, 1e-9);
  EXPECT_NEAR((a.PoseAt(0.5).t - Vec3(50, 50, 0)).norm(), 0.0, 1e-12);
  EXPECT_NEAR((b.start().t - Vec3(0, -100, 0)).norm(), 0.0, 1e-12);
  EXPECT_NEAR((b.PoseAt(1.0).t - B.t).norm(), 0.0, 1e-12);
  EXPECT_NEAR((b.keyframes().front().X_WP.t - Vec3(0, -100, 0)).norm(), 0.0, 1e-12);
  // b's origin swings out to 129 mm from the world origin mid-path: the bound must cover it.
  const double swing = (b.PoseAt(0.5).t - b.start().t).norm();
  EXPECT_GT(swing, 91.0);
  EXPECT_GE(b.MaxTravel(0, 0.5, Sphere{Vec3::Zero(), 0}), swing);
  EXPECT_THAT(a.Carrying({2.0 * Mat3::Identity(), Vec3::Zero()}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "rigid"));
}

TEST(Motion, AdvanceLimitIsTheLargestParameterWithinTheBudget) {
  std::mt19937 rng = SeededRng(503);
  for (int trial = 0; trial < Trials(200); ++trial) {
    const Motion m = RandomMotion(rng, kKinds[trial % 4]);
    const Sphere sphere{RandomPoint(rng, 10), Uniform(rng, 0, 10)};
    const double t = Uniform(rng, 0, 1), budget = Uniform(rng, 0, 20);
    const double next = m.AdvanceLimit(t, budget, sphere);
    ASSERT_GE(next, t);
    EXPECT_LE(m.MaxTravel(t, next, sphere), budget);
    if (next < 1.0) {
      EXPECT_GT(m.MaxTravel(t, next + 1e-9, sphere), budget);
    }
  }
  const Motion lin = Ok(Motion::Linear(RigidTransform::Identity(), Vec3::UnitX(), 100));
  EXPECT_NEAR(lin.AdvanceLimit(0.2, 10, {}), 0.3, 1e-15);
  EXPECT_EQ(lin.AdvanceLimit(0.2, 0, {}), 0.2);
  EXPECT_EQ(lin.AdvanceLimit(0.2, 1e9, {}), 1.0);
}

}  // namespace
}  // namespace clash::geom
