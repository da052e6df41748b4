#include "clash/geom/sweep.h"

#include <gtest/gtest.h>

#include <Eigen/Geometry>
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "clash/geom/motion.h"
#include "clash/geom/query.h"
#include "testing/geom_matchers.h"
#include "testing/random_geometry.h"
#include "testing/status_matchers.h"

namespace clash::geom {
namespace {

using testing::AxisAngle;
using testing::MakeBlob;
using testing::MakeBox;
using testing::MakeCellSolid;
using testing::MakeCylinder;
using testing::MakeTube;
using testing::RandomMotion;
using testing::RandomPose;
using testing::RandomRotation;
using testing::RawMesh;
using testing::SeededRng;
using testing::Trials;
using testing::Uniform;

using PartPtr = std::shared_ptr<const Part>;

constexpr double kPi = std::numbers::pi;
constexpr double kInf = std::numeric_limits<double>::infinity();
// Poses are products of a few rotations and translations of size <= 1e3: rounding ~1e-13.
constexpr double kPoseTol = 1e-9;
// Parameters found by bisection or recomputed analytically: rounding only.
constexpr double kParamTol = 1e-9;

RigidTransform At(const Vec3& t) { return RigidTransform::Translation(t); }

Motion Ok(absl::StatusOr<Motion> m) { return testing::ValueOrDie(std::move(m)); }

void ExpectPoseNear(const RigidTransform& got, const RigidTransform& want, const char* what) {
  testing::ExpectPoseNear(got, want, kPoseTol, what);
}

SweepOptions Contact(double tau) {
  SweepOptions o;
  o.contact_mm = tau;
  return o;
}

// A square plate [-half, half]^2 x [-thick/2, thick/2] with a square through-hole of half-width
// hole along z.
RawMesh PlateWithSquareHole(double half, double hole, double thick) {
  return MakeCellSolid({-half, -hole, hole, half}, {-half, -hole, hole, half},
                       {-thick / 2, thick / 2},
                       [](int i, int j, int) { return !(i == 1 && j == 1); });
}

// ---------------------------------------------------------------------------------------------
// Sweep: analytical cases

// A square peg of half-width w and length 40 moved along -z through a 5 mm plate with a
// square hole of half-width h, starting 10 mm above it and ending 10 mm below.
struct PegThroughHole {
  static constexpr double kPegHalfLength = 20, kPlateThick = 5, kGap = 10;
  PartPtr plate, peg;
  RigidTransform X0;
  double travel = 2 * kPegHalfLength + kPlateThick + 2 * kGap;

  PegThroughHole(double w, double h) {
    plate = PlateWithSquareHole(60, h, kPlateThick).Part();
    peg = MakeBox(Vec3(w, w, kPegHalfLength)).Part();
    X0 = At(Vec3(0, 0, kPlateThick / 2 + kGap + kPegHalfLength));
  }
  SweepResult Run(double tau) const { return Run(Contact(tau)); }
  SweepResult Run(const SweepOptions& options) const {
    const Motion m = Ok(Motion::Linear(X0, -Vec3::UnitZ(), travel));
    const SweepObstacle obstacles[] = {{plate.get(), RigidTransform::Identity(), 7}};
    return Sweep(*peg, m, obstacles, options);
  }
};

TEST(Sweep, PegPassesThroughAHoleWithClearance) {
  constexpr double kTau = 0.1;
  const PegThroughHole clear(5.0, 5.0 + 0.15);  // clearance 0.15 > τ: never touches
  ASSERT_TRUE(clear.plate->mesh().IsClosed());
  const SweepResult r = clear.Run(kTau);
  EXPECT_FALSE(r.blocked);
  EXPECT_FALSE(r.exhausted);
  EXPECT_EQ(r.t_contact, 1.0);
  EXPECT_EQ(r.first_touch_t, -1.0);
  // The walls of the hole do not approach the peg's sides: one directional step takes the peg
  // from the mouth of the hole through it (distance steps of at most 0.15 would take 300).
  EXPECT_GE(r.directional_steps, 1);
  EXPECT_LE(r.iterations, 6);
  // Checked where it entered, at most twice the true minimum; the bound says at least τ/2 and
  // half the distance at the start of the directional step.
  EXPECT_GE(r.min_distance, 0.15 - 1e-9);
  EXPECT_LE(r.min_distance, 0.30);
  EXPECT_EQ(r.min_distance_id, 7u);
  EXPECT_LE(r.min_distance_lower_bound, 0.15);
  EXPECT_GE(r.min_distance_lower_bound, kTau / 2 - 1e-12);  // far mode keeps τ/2
  ExpectPoseNear(r.X_contact, At(Vec3(0, 0, -(2.5 + 10 + 20))), "end pose");

  // With a clearance of 0.5 the approach below it is sampled finely: the minimum is exact.
  SweepOptions with_clearance = Contact(kTau);
  with_clearance.clearance_mm = 0.5;
  const SweepResult c = clear.Run(with_clearance);
  EXPECT_FALSE(c.blocked);
  EXPECT_NEAR(c.min_distance, 0.15, 1e-9);
  EXPECT_GE(c.min_distance_lower_bound, 0.15 - 0.125 - 1e-9);  // resolution C/4
  EXPECT_GT(c.iterations, 45 / 0.125);

  // The same path with the directional steps' answer checked against a dense scan of exact
  // distances: nowhere between the checked poses does the peg come closer than τ/2.
  const Motion m = Ok(Motion::Linear(clear.X0, -Vec3::UnitZ(), clear.travel));
  for (int i = 0; i <= 900; ++i) {
    const double d =
        Distance(*clear.peg, m.PoseAt(i / 900.0), *clear.plate, RigidTransform::Identity())
            .distance;
    EXPECT_GE(d, r.min_distance_lower_bound - 1e-12) << i;
  }

  // Clearance 0.05 < τ: the peg slides through touching the walls (near mode), not blocked.
  const PegThroughHole tight(5.0, 5.0 + 0.05);
  const SweepResult s = tight.Run(kTau);
  EXPECT_FALSE(s.blocked);
  EXPECT_FALSE(s.exhausted);
  EXPECT_GT(s.first_touch_t, 0.0);
  EXPECT_NEAR(s.min_distance, 0.05, 1e-9);
  ::testing::Test::RecordProperty("tight_iterations", s.iterations);
}

TEST(Sweep, PegBlockedByANarrowerHoleAtTheComputedParameter) {
  constexpr double kTau = 0.1;
  const PegThroughHole narrow(5.0, 3.0);
  const SweepResult r = narrow.Run(kTau);
  ASSERT_TRUE(r.blocked);
  EXPECT_EQ(r.blocking_ids, std::vector<uint64_t>{7});
  EXPECT_EQ(r.blocking_classes, std::vector<ClashClass>{ClashClass::kHard});
  // The peg's bottom reaches the plate's top after kGap and is τ deep after kGap + τ; the
  // bisection stops with a free pose at most τ/4 of travel before the blocked one.
  const double t_hard = (PegThroughHole::kGap + kTau) / narrow.travel;
  EXPECT_GE(r.t_contact, t_hard - kParamTol);
  EXPECT_LE(r.t_contact, t_hard + kTau / 4 / narrow.travel + kParamTol);
  EXPECT_LE(r.t_last_free, t_hard + kParamTol);
  EXPECT_LE((r.t_contact - r.t_last_free) * narrow.travel, kTau / 4 + 1e-9);
  EXPECT_GT(r.blocking_depth_mm, kTau);
  EXPECT_NEAR(r.first_touch_t, PegThroughHole::kGap / narrow.travel, kTau / narrow.travel);
  // The witness is on the peg's bottom, inside the plate.
  EXPECT_NEAR(r.p_contact_W.z(), 2.5 - (r.t_contact * narrow.travel - 10), 1e-6);
}

// A scan limited to t_end stops there: short of the block it is free with t_last_free = t_end,
// its profile ends at t_end and its minimum distance is that of the poses it reached; past the
// block it is blocked as the full scan is.
TEST(Sweep, TEndLimitsTheScan) {
  constexpr double kTau = 0.1;
  const PegThroughHole narrow(5.0, 3.0);
  const double t_hard = (PegThroughHole::kGap + kTau) / narrow.travel;
  SweepOptions opt = Contact(kTau);
  opt.profile = true;
  const SweepResult full = narrow.Run(opt);
  ASSERT_TRUE(full.blocked);
  // A blocked scan's path ends at t_contact: its last sample is taken there (the scan checked
  // a blocked pose past it, which the bisection then moved back from), and nothing later.
  ASSERT_FALSE(full.profile.empty());
  EXPECT_EQ(full.profile.back().first, full.t_contact);
  EXPECT_EQ(full.profile.back().second, 0.0);  // crossing, τ deep or more
  EXPECT_LE(full.t_min_distance, full.t_contact);
  EXPECT_LE(full.first_touch_t, full.t_contact);

  opt.t_end = 0.5 * t_hard;  // the peg's bottom 5 mm above the plate there
  const SweepResult early = narrow.Run(opt);
  EXPECT_FALSE(early.blocked);
  EXPECT_FALSE(early.exhausted);
  EXPECT_EQ(early.t_last_free, opt.t_end);
  EXPECT_EQ(early.first_touch_t, -1.0);
  ASSERT_FALSE(early.profile.empty());
  EXPECT_EQ(early.profile.back().first, opt.t_end);
  for (const auto& [t, d] : early.profile) EXPECT_LE(t, opt.t_end);
  const double gap_at_end = PegThroughHole::kGap - opt.t_end * narrow.travel;
  EXPECT_NEAR(early.min_distance, gap_at_end, 1e-9);
  EXPECT_NEAR(early.t_min_distance, opt.t_end, kParamTol);

  opt.t_end = 0.5 * (1 + t_hard);
  const SweepResult past = narrow.Run(opt);
  ASSERT_TRUE(past.blocked);
  EXPECT_NEAR(past.t_contact, full.t_contact, kParamTol);
  EXPECT_EQ(past.blocking_ids, full.blocking_ids);

  opt.t_end = 0.0;  // the start pose only
  const SweepResult start = narrow.Run(opt);
  EXPECT_FALSE(start.blocked);
  EXPECT_EQ(start.iterations, 1);
  EXPECT_EQ(start.t_last_free, 0.0);
}

// A τ below the step floor (1e-9 of the larger of the part's diagonal and its travel) is
// raised to it for the classification too: the steps, of that size, can pass a pose that deep
// between two checked ones, so a smaller τ would call HARD at the checked poses what it cannot
// see between them. A 10 mm cube (diagonal 17.3 mm: floor 1.73e-8 mm) pressed into a table is
// lifted 10 mm off it: 5e-9 mm deep touches, 1e-6 mm deep blocks.
TEST(Sweep, AContactToleranceBelowTheStepFloorIsRaisedToIt) {
  const PartPtr table = MakeBox(Vec3(50, 50, 5), Vec3(0, 0, -5)).Part();
  const PartPtr cube = MakeBox(Vec3(5, 5, 5)).Part();
  const SweepObstacle o[] = {{table.get(), RigidTransform::Identity(), 1}};
  const auto lift = [&](double depth) {
    const Motion m = Ok(Motion::Linear(At(Vec3(0, 0, 5 - depth)), Vec3::UnitZ(), 10));
    return Sweep(*cube, m, o, Contact(1e-12));
  };
  const SweepResult shallow = lift(5e-9);
  EXPECT_FALSE(shallow.blocked);
  EXPECT_FALSE(shallow.exhausted);
  EXPECT_EQ(shallow.first_touch_t, 0.0);
  const SweepResult deep = lift(1e-6);
  EXPECT_TRUE(deep.blocked);
  EXPECT_EQ(deep.t_contact, 0.0);
}

TEST(Sweep, RoundPegAndHole) {
  // Coaxial 32-gons with vertices at the same angles: the gap between parallel facets is
  // (r_hole - r_peg) cos(π/32).
  constexpr double kTau = 0.1;
  constexpr int kSegments = 32;
  const PartPtr peg = MakeCylinder(5.0, 40, kSegments).Part();
  const SweepObstacle plate_at_origin = {nullptr, RigidTransform::Identity(), 3};
  const RigidTransform X0 = At(Vec3(0, 0, 2.5 + 10 + 20));
  const Motion m = Ok(Motion::Linear(X0, -Vec3::UnitZ(), 65));
  {
    const PartPtr plate = MakeTube(5.2, 30, 5, kSegments).Part();
    SweepObstacle o = plate_at_origin;
    o.part = plate.get();
    SweepOptions options = Contact(kTau);
    options.clearance_mm = 1.0;  // so that the minimum inside the hole is sampled
    const SweepResult r = Sweep(*peg, m, {&o, 1}, options);
    EXPECT_FALSE(r.blocked);
    EXPECT_NEAR(r.min_distance, 0.2 * std::cos(kPi / kSegments), 1e-9);
  }
  {
    const PartPtr plate = MakeTube(3.0, 30, 5, kSegments).Part();
    SweepObstacle o = plate_at_origin;
    o.part = plate.get();
    const SweepResult r = Sweep(*peg, m, {&o, 1}, Contact(kTau));
    ASSERT_TRUE(r.blocked);
    EXPECT_EQ(r.blocking_ids, std::vector<uint64_t>{3});
    const double t_hard = (10 + kTau) / 65;
    EXPECT_GE(r.t_contact, t_hard - kParamTol);
    EXPECT_LE(r.t_contact, t_hard + kTau / 4 / 65 + kParamTol);
  }
}

TEST(Sweep, ThinPlateCrossedByAFastMoveIsCaught) {
  // A blade 1 mm thick (x) moves 1000 mm along +x through a plate 0.1 mm thick at
  // x in [500.9, 501.0].
  constexpr double kTau = 0.01;
  constexpr double kTravel = 1000;
  const PartPtr blade = MakeBox(Vec3(0.5, 20, 20)).Part();
  const PartPtr plate = MakeBox(Vec3(0.05, 100, 100), Vec3(500.95, 0, 0)).Part();
  const Motion m = Ok(Motion::Linear(RigidTransform::Identity(), Vec3::UnitX(), kTravel));
  const SweepObstacle obstacles[] = {{plate.get(), RigidTransform::Identity(), 42}};

  // Sampling misses it: at 10 poses, and every 2 mm, the surfaces never meet.
  for (int k = 0; k < 10; ++k) {
    EXPECT_FALSE(SurfacesIntersect(*blade, m.PoseAt(k / 9.0), *plate, obstacles[0].X_WO))
        << "10 samples, k=" << k;
  }
  for (int k = 0; k <= 500; ++k) {
    EXPECT_FALSE(SurfacesIntersect(*blade, m.PoseAt(2.0 * k / kTravel), *plate, obstacles[0].X_WO))
        << "every 2 mm, k=" << k;
  }

  const SweepResult r = Sweep(*blade, m, obstacles, Contact(kTau));
  ASSERT_TRUE(r.blocked);
  EXPECT_EQ(r.blocking_ids, std::vector<uint64_t>{42});
  // The blade's front face (x + 0.5) is τ deep in the plate's near face.
  const double t_hard = (500.9 + kTau - 0.5) / kTravel;
  EXPECT_GE(r.t_contact, t_hard - kParamTol);
  EXPECT_LE(r.t_contact, t_hard + kTau / 4 / kTravel + kParamTol);
  // Few queries: one long step to the plate, a few short ones, then the bisection.
  EXPECT_LT(r.distance_queries, 20);
  ::testing::Test::RecordProperty("iterations", r.iterations);
}

TEST(Sweep, ScrewMotion) {
  // A 24-sided bolt of radius 5 and length 20 screwed two turns (pitch -3: 6 mm down) about
  // its own axis.
  constexpr double kTau = 0.1;
  const PartPtr bolt = MakeCylinder(5.0, 20, 24).Part();
  const RigidTransform X0 = At(Vec3(0, 0, 10 + 3));  // bottom at z = 3
  const Motion m = Ok(Motion::Screw(X0, Vec3(0, 0, 13), Vec3::UnitZ(), 4 * kPi, -3));
  ExpectPoseNear(m.PoseAt(0.5), At(Vec3(0, 0, 10)), "one turn");
  ExpectPoseNear(m.PoseAt(1), At(Vec3(0, 0, 7)), "two turns");
  {
    // Through a coaxial clearance hole (a 24-gon nut of radius 6 at the bolt's height): free.
    const PartPtr nut = MakeTube(6.0, 12, 8, 24).Part();
    const SweepObstacle o[] = {{nut.get(), At(Vec3(0, 0, 8)), 1}};
    const SweepResult r = Sweep(*bolt, m, o, Contact(kTau));
    EXPECT_FALSE(r.blocked);
    EXPECT_FALSE(r.exhausted);
    // The bolt's vertices sweep a circle of radius 5, the nut's facets are 6 cos(7.5°) away.
    // The bound is positive (the directional step keeps its margin) and not above the true
    // minimum, at most 1 (a nut vertex at radius 6 passes a bolt vertex at radius 5).
    EXPECT_GT(r.min_distance_lower_bound, 0.0);
    EXPECT_LE(r.min_distance_lower_bound, 1.0 + 1e-9);
    EXPECT_GE(r.min_distance, 6 * std::cos(kPi / 24) - 5 - 1e-9);
    // The footprints about the axis never meet: one step (distance steps of at most 0.9 mm
    // on a bolt of radius 11 would take ~50).
    EXPECT_EQ(r.directional_steps, 1);
    EXPECT_EQ(r.iterations, 2);
    // Checked against exact distances along the path: never closer than the lower bound.
    for (int i = 0; i <= 400; ++i) {
      EXPECT_GE(Distance(*bolt, m.PoseAt(i / 400.0), *nut, At(Vec3(0, 0, 8))).distance,
                r.min_distance_lower_bound - 1e-12);
    }
  }
  {
    // Onto a plate whose top is at z = 0: the bottom is τ deep after (3 + τ) / 6.
    const PartPtr plate = MakeBox(Vec3(50, 50, 5), Vec3(0, 0, -5)).Part();
    const SweepObstacle o[] = {{plate.get(), RigidTransform::Identity(), 2}};
    const SweepResult r = Sweep(*bolt, m, o, Contact(kTau));
    ASSERT_TRUE(r.blocked);
    EXPECT_EQ(r.blocking_ids, std::vector<uint64_t>{2});
    const double t_hard = (3 + kTau) / 6;
    EXPECT_GE(r.t_contact, t_hard - kParamTol);
    // The bracket is τ/4 of travel of the whole bound (rotation and advance), which is at
    // least the advance, so the bracket in t is at most (τ/4) / (advance rate).
    EXPECT_LE(r.t_contact, t_hard + kTau / 4 / 6 + kParamTol);
    const Sphere s = TravelSphere(*bolt);
    EXPECT_LE(m.MaxTravel(r.t_last_free, r.t_contact, s), kTau / 4 + 1e-12);
  }
}

TEST(Sweep, RotatingArmBlockedAtTheComputedAngle) {
  // An arm [0, 100] x [-2, 2] x [-2, 2] turning about the z axis by 1 rad towards a block
  // whose lower face is y = 30 over x in [50, 150]. The arm's far top corner (100, 2) rises
  // first: 100 sin φ + 2 cos φ = 30 + τ when it is τ deep.
  constexpr double kTau = 0.05;
  const PartPtr arm = MakeBox(Vec3(50, 2, 2), Vec3(50, 0, 0)).Part();
  const PartPtr block = MakeBox(Vec3(50, 20, 10), Vec3(100, 50, 0)).Part();
  const Motion m =
      Ok(Motion::Rotation(RigidTransform::Identity(), Vec3::Zero(), Vec3::UnitZ(), 1.0));
  const SweepObstacle o[] = {{block.get(), RigidTransform::Identity(), 9}};
  const SweepResult r = Sweep(*arm, m, o, Contact(kTau));
  ASSERT_TRUE(r.blocked);
  EXPECT_EQ(r.blocking_ids, std::vector<uint64_t>{9});
  const double radius = std::hypot(100.0, 2.0);
  const double phi_hard = std::asin((30 + kTau) / radius) - std::atan2(2.0, 100.0);
  EXPECT_LE(r.t_last_free, phi_hard + kParamTol);
  EXPECT_GE(r.t_contact, phi_hard - kParamTol);
  // The tip moves at most τ/4 over the bracket, and it is 100 from the axis.
  EXPECT_LE(r.t_contact - phi_hard, kTau / 4 / 100 + kParamTol);
  EXPECT_NEAR(r.p_contact_W.y(), 30 + kTau, kTau / 4 + 1e-9);  // the corner, just over τ deep

  // A block beyond the arm's reach (its near face 110 from the axis): free in one step.
  const PartPtr far_block = MakeBox(Vec3(20, 20, 10), Vec3(140, 0, 0)).Part();
  const SweepObstacle far[] = {{far_block.get(), RigidTransform::Identity(), 10}};
  const SweepResult f = Sweep(*arm, m, far, Contact(kTau));
  EXPECT_FALSE(f.blocked);
  EXPECT_FALSE(f.exhausted);
  EXPECT_EQ(f.iterations, 2);
  EXPECT_EQ(f.directional_steps, 1);
}

TEST(Sweep, FinalSeatInFaceContactIsNotBlocked) {
  constexpr double kTau = 0.01;
  const PartPtr table = MakeBox(Vec3(50, 50, 5), Vec3(0, 0, -5)).Part();
  const PartPtr box = MakeBox(Vec3(5, 5, 5)).Part();
  const SweepObstacle o[] = {{table.get(), RigidTransform::Identity(), 1}};
  // From 20 above down onto the table: ends with the bottom face on the table's top face.
  const Motion seat = Ok(Motion::Linear(At(Vec3(0, 0, 25)), -Vec3::UnitZ(), 20));
  const SweepResult r = Sweep(*box, seat, o, Contact(kTau));
  EXPECT_FALSE(r.blocked);
  EXPECT_FALSE(r.exhausted);
  EXPECT_GE(r.first_touch_t, 1 - kTau / 20);
  EXPECT_LE(r.first_touch_t, 1.0);
  EXPECT_EQ(r.min_distance, 0.0);
  EXPECT_EQ(r.t_min_distance, 1.0);

  // Pressed 1 mm into the table instead: blocked τ past the touch.
  const Motion press = Ok(Motion::Linear(At(Vec3(0, 0, 25)), -Vec3::UnitZ(), 21));
  const SweepResult p = Sweep(*box, press, o, Contact(kTau));
  ASSERT_TRUE(p.blocked);
  EXPECT_NEAR(p.t_contact * 21, 20 + kTau, kTau / 4 + 1e-9);
}

TEST(Sweep, StartPoseInsideAnObstacleIsBlockedAtZero) {
  const PartPtr big = MakeBox(Vec3(50, 50, 50)).Part();
  const PartPtr small = MakeBox(Vec3(1, 1, 1)).Part();
  const SweepObstacle o[] = {{big.get(), RigidTransform::Identity(), 5}};
  const Motion m = Ok(Motion::Linear(RigidTransform::Identity(), Vec3::UnitX(), 10));
  const SweepResult r = Sweep(*small, m, o, Contact(0.01));
  ASSERT_TRUE(r.blocked);
  EXPECT_EQ(r.t_contact, 0.0);
  EXPECT_EQ(r.t_last_free, -1.0);
  EXPECT_EQ(r.blocking_classes, std::vector<ClashClass>{ClashClass::kContained});
}

// A cube swept through a wall of half size X / 100 centred at X, for X up to 1e100: blocked
// where it meets the wall. From X = 1e80 the separating-axis travel bound overflowed to NaN and
// counted as "never within the margin", so the sweep stepped over the wall and reported the
// path free while the pose halfway is inside it.
TEST(Sweep, HugeCoordinatesAreStillBlocked) {
  const PartPtr cube = MakeBox(Vec3(1, 1, 1)).Part();
  for (double X : {1e10, 1e80, 1e100}) {
    SCOPED_TRACE(::testing::Message() << "X " << X);
    const double H = X / 100;
    const PartPtr wall = MakeBox(Vec3(H, H, H)).Part();
    const SweepObstacle o[] = {{wall.get(), RigidTransform::Translation(Vec3(X, 0, 0)), 7}};
    const Motion m = Ok(Motion::Linear(RigidTransform::Identity(), Vec3::UnitX(), 2 * X));
    const SweepResult r = Sweep(*cube, m, o, Contact(0.1));
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_TRUE(r.blocked);
    // It meets the wall's face at X - H = 0.99 X, a parameter of 0.495 (τ is ~1e-9 X here).
    EXPECT_NEAR(r.t_contact, 0.495, 1e-6);
  }
}

// A τ that is not finite is refused: with +inf every penetration would count as contact, and a
// peg pushed through a plate would come out free; NaN compares false everywhere.
TEST(Sweep, ANonFiniteContactToleranceIsRefused) {
  const PartPtr plate = MakeBox(Vec3(10, 10, 0.5)).Part();
  const PartPtr peg = MakeBox(Vec3(1, 1, 2)).Part();
  const SweepObstacle o[] = {{plate.get(), RigidTransform::Identity(), 1}};
  const Motion m = Ok(Motion::Linear(At(Vec3(0, 0, 10)), -Vec3::UnitZ(), 20));
  // A finite τ blocks where the peg is τ into the plate: 7.5 mm of travel, plus τ.
  const SweepResult finite = Sweep(*peg, m, o, Contact(0.01));
  EXPECT_THAT(finite.status, testing::IsOk());
  ASSERT_TRUE(finite.blocked);
  EXPECT_NEAR(finite.t_contact * 20, 7.5 + 0.01, 0.01 / 4 + 1e-9);
  for (const double tau : {kInf, -kInf, std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(tau);
    const SweepResult r = Sweep(*peg, m, o, Contact(tau));
    EXPECT_THAT(r.status, testing::StatusIs(absl::StatusCode::kInvalidArgument, "contact_mm"));
    // Never free: not blocked, but nothing was checked.
    EXPECT_FALSE(r.blocked);
    EXPECT_TRUE(r.exhausted);
    EXPECT_EQ(r.t_last_free, -1.0);
    EXPECT_EQ(r.iterations, 0);
    EXPECT_EQ(r.distance_queries, 0);
  }
}

// An obstacle pose with a non-finite entry (or a world box that overflows) is refused before
// any obstacle is ordered by box distance: NaN distances would break std::sort's ordering.
TEST(Sweep, ANonFiniteObstaclePoseIsRefused) {
  const PartPtr plate = MakeBox(Vec3(10, 10, 0.5)).Part();
  const PartPtr peg = MakeBox(Vec3(1, 1, 2)).Part();
  const Motion m = Ok(Motion::Linear(At(Vec3(0, 0, 10)), -Vec3::UnitZ(), 20));
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  RigidTransform nan_rotation;
  nan_rotation.R(1, 2) = kNan;
  // Finite entries, but far from rigid: the world box's extents overflow.
  const RigidTransform overflowing{1e308 * Mat3::Identity(), Vec3::Zero()};
  struct Case {
    const char* name;
    RigidTransform X_WO;
    const char* message;
  };
  const Case cases[] = {
      {"NaN translation", At(Vec3(0, kNan, 0)), "non-finite"},
      {"infinite translation", At(Vec3(kInf, 0, 0)), "non-finite"},
      {"NaN rotation", nan_rotation, "non-finite"},
      {"overflowing box", overflowing, "world box"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // Many obstacles, so that the sort would have work to do; the bad one in the middle.
    std::vector<SweepObstacle> o;
    for (int i = 0; i < 40; ++i) {
      o.push_back({plate.get(), At(Vec3(30.0 * (i % 7), 30.0 * (i / 7), 0)), uint64_t(i)});
    }
    o[17].X_WO = c.X_WO;
    const SweepResult r = Sweep(*peg, m, o, Contact(0.01));
    EXPECT_THAT(r.status, testing::StatusIs(absl::StatusCode::kInvalidArgument, c.message));
    EXPECT_THAT(r.status, testing::StatusIs(absl::StatusCode::kInvalidArgument, "id 17"));
    EXPECT_FALSE(r.blocked);
    EXPECT_TRUE(r.exhausted);
    EXPECT_EQ(r.iterations, 0);
  }
  // A missing part is refused too (it was an assert only).
  const SweepObstacle none[] = {{nullptr, RigidTransform::Identity(), 3}};
  EXPECT_THAT(Sweep(*peg, m, none, Contact(0.01)).status,
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "no part"));
}

TEST(Sweep, OptionsProfileStopAndCap) {
  const PartPtr table = MakeBox(Vec3(50, 50, 5), Vec3(0, 0, -5)).Part();
  const PartPtr box = MakeBox(Vec3(5, 5, 5)).Part();
  const SweepObstacle o[] = {{table.get(), RigidTransform::Identity(), 1}};
  // Sliding 10 mm along the table's face in contact: many near-mode poses.
  const Motion slide = Ok(Motion::Linear(At(Vec3(0, 0, 5)), Vec3::UnitX(), 10));
  SweepOptions opt = Contact(0.1);
  opt.profile = true;
  const SweepResult full = Sweep(*box, slide, o, opt);
  EXPECT_FALSE(full.blocked);
  EXPECT_FALSE(full.exhausted);
  ASSERT_EQ(static_cast<int>(full.profile.size()), full.iterations);
  EXPECT_EQ(full.profile.front().first, 0.0);
  EXPECT_EQ(full.profile.back().first, 1.0);
  for (std::size_t i = 1; i < full.profile.size(); ++i) {
    EXPECT_GT(full.profile[i].first, full.profile[i - 1].first);
    EXPECT_EQ(full.profile[i].second, 0.0);  // face contact all along
  }
  // Near mode: steps of at most τ - depth of travel, so at least 10 / τ poses.
  EXPECT_GE(full.iterations, 10 / 0.1);

  opt.max_iterations = 10;
  const SweepResult capped = Sweep(*box, slide, o, opt);
  EXPECT_TRUE(capped.exhausted);
  EXPECT_FALSE(capped.blocked);
  EXPECT_EQ(capped.iterations, 10);

  int calls = 0;
  const SweepResult stopped = Sweep(*box, slide, o, Contact(0.1), [&calls] { return ++calls > 3; });
  EXPECT_TRUE(stopped.stopped);
  EXPECT_EQ(stopped.iterations, 3);

  // No obstacles: two poses, the start and the end.
  const SweepResult empty = Sweep(*box, slide, {}, Contact(0.1));
  EXPECT_FALSE(empty.blocked);
  EXPECT_EQ(empty.iterations, 2);
  EXPECT_EQ(empty.distance_queries, 0);
}

// A clearance profile has a sample at least every 1/64 of the parameter however far the
// obstacles are: before, far steps (distance steps, not only directional ones) took a 200 mm pass
// 10 mm beside a block in 7 samples, the first covering t from 0 to 0.5.
TEST(Sweep, AProfileSamplesAtLeastEvery64thOfThePath) {
  const PartPtr block = MakeBox(Vec3(5, 5, 5)).Part();
  const PartPtr box = MakeBox(Vec3(5, 5, 5)).Part();
  for (const double gap : {10.0, 30.0, 300.0}) {
    const SweepObstacle o[] = {{block.get(), At(Vec3(0, 10 + gap, 0)), 1}};
    const Motion pass = Ok(Motion::Linear(At(Vec3(-100, 0, 0)), Vec3::UnitX(), 200));
    SweepOptions opt = Contact(0.1);
    opt.profile = true;
    const SweepResult r = Sweep(*box, pass, o, opt);
    EXPECT_FALSE(r.blocked);
    ASSERT_GE(r.profile.size(), 65u) << gap;
    EXPECT_EQ(r.profile.front().first, 0.0);
    EXPECT_EQ(r.profile.back().first, 1.0);
    for (std::size_t i = 1; i < r.profile.size(); ++i) {
      EXPECT_LE(r.profile[i].first - r.profile[i - 1].first, 1.0 / 64 + 1e-12) << gap;
      EXPECT_GE(r.profile[i].second, gap - 1e-9) << gap;
    }
    EXPECT_NEAR(r.min_distance, gap, 1e-9);  // the closest pose, t = 0.5, is a sample
  }
}

TEST(Sweep, ClearanceResolvesTheMinimumOfAPassBy) {
  // Two squares turned 45 degrees (diamonds of half-diagonal 5) pass corner to corner, 3 apart
  // at the closest. Far steps alone may land anywhere near the closest pose and certify little
  // about the path between; with a clearance of 5 the approach is sampled every C/4 of travel.
  const double a = 5 / std::sqrt(2.0);
  const Mat3 R45 = AxisAngle(kPi / 4, Vec3::UnitZ());
  const PartPtr square = MakeBox(Vec3(a, a, 5)).Part();
  const SweepObstacle o[] = {{square.get(), {R45, Vec3(0, 13, 0)}, 4}};
  const Motion pass = Ok(Motion::Linear({R45, Vec3(-100, 0, 0)}, Vec3::UnitX(), 200));
  SweepOptions opt = Contact(0.01);
  const SweepResult coarse = Sweep(*square, pass, o, opt);
  EXPECT_FALSE(coarse.blocked);
  EXPECT_GE(coarse.min_distance, 3.0 - 1e-9);
  EXPECT_LE(coarse.min_distance_lower_bound, 3.0 + 1e-9);

  opt.clearance_mm = 5;
  const double resolution = opt.clearance_mm / 4;
  const SweepResult fine = Sweep(*square, pass, o, opt);
  EXPECT_FALSE(fine.blocked);
  EXPECT_EQ(fine.min_distance_id, 4u);
  // Some checked pose is within resolution / 2 of the closest one, where the corners are at
  // most sqrt(3^2 + (resolution / 2)^2) apart.
  EXPECT_GE(fine.min_distance, 3.0 - 1e-9);
  EXPECT_LE(fine.min_distance, std::hypot(3.0, resolution / 2) + 1e-9);
  EXPECT_NEAR(fine.t_min_distance, 0.5, resolution / 2 / 200 + 1e-9);
  EXPECT_LE(fine.min_distance_lower_bound, 3.0 + 1e-9);
  EXPECT_GE(fine.min_distance_lower_bound, 3.0 - resolution - 1e-9);
  EXPECT_GT(fine.min_distance_lower_bound, coarse.min_distance_lower_bound);
  ::testing::Test::RecordProperty("coarse_lower_bound",
                                  std::to_string(coarse.min_distance_lower_bound));
}

// ---------------------------------------------------------------------------------------------
// Sweep against a sampling oracle

// True when some obstacle is kHard or kContained with the moving part at X, with contact
// tolerance tau.
bool AnyBlocking(const Part& moving, const RigidTransform& X,
                 std::span<const SweepObstacle> obstacles, double tau,
                 std::vector<uint64_t>* ids = nullptr) {
  PairTolerances tol;
  tol.contact_mm = tau;
  bool any = false;
  const Aabb box = moving.bounds().Transformed(X);
  for (const SweepObstacle& o : obstacles) {
    if (box.Distance(o.part->bounds().Transformed(o.X_WO)) > tau) continue;
    const ClashClass c = ClassifyPair(moving, X, *o.part, o.X_WO, tol).cls;
    if (c == ClashClass::kHard || c == ClashClass::kContained) {
      any = true;
      if (ids) ids->push_back(o.id);
    }
  }
  return any;
}

// The least surface distance from the moving part at X to the obstacles (0 where surfaces
// cross), exact when at most `bound` (else possibly +inf), with the nearest obstacle's id.
double NearestDistance(const Part& moving, const RigidTransform& X,
                       std::span<const SweepObstacle> obstacles, double bound = kInf,
                       uint64_t* id = nullptr) {
  double best = kInf;
  const Aabb box = moving.bounds().Transformed(X);
  for (const SweepObstacle& o : obstacles) {
    // The boxes' distance bounds the surfaces' from below.
    if (box.Distance(o.part->bounds().Transformed(o.X_WO)) > std::min(bound, best)) continue;
    const double d = Distance(moving, X, *o.part, o.X_WO, std::min(bound, best)).distance;
    if (d < best) {
      best = d;
      if (id) *id = o.id;
    }
  }
  return best;
}

// The distance of the moving part at X from one obstacle, by id.
double DistanceTo(const Part& moving, const RigidTransform& X,
                  std::span<const SweepObstacle> obstacles, uint64_t id) {
  for (const SweepObstacle& o : obstacles) {
    if (o.id == id) return Distance(moving, X, *o.part, o.X_WO).distance;
  }
  ADD_FAILURE() << "no obstacle " << id;
  return kInf;
}

// What sweep.h promises about the distance fields, against distances recomputed at the poses
// they name: min_distance is the distance at t_min_distance (to min_distance_id, the nearest
// there), the least at the checked poses, so at most the distance at t = 0 (always checked)
// and, for a free path, at t = 1; min_distance_lower_bound is at most min_distance;
// first_touch_t is a checked pose with distance <= τ (to first_touch_id, the nearest there),
// and without one no checked pose came within τ.
void ExpectDistanceFieldsConsistent(const Part& moving, const Motion& m,
                                    std::span<const SweepObstacle> obstacles, double tau,
                                    const SweepResult& r) {
  // Distances recomputed at the same pose by the same query: rounding only.
  constexpr double kSame = 1e-9;
  ASSERT_LT(r.min_distance, kInf);
  EXPECT_GE(r.t_min_distance, 0.0);
  EXPECT_LE(r.t_min_distance, 1.0);
  const RigidTransform X_min = m.PoseAt(r.t_min_distance);
  EXPECT_NEAR(NearestDistance(moving, X_min, obstacles), r.min_distance, kSame);
  EXPECT_NEAR(DistanceTo(moving, X_min, obstacles, r.min_distance_id), r.min_distance, kSame);
  EXPECT_LE(r.min_distance, NearestDistance(moving, m.PoseAt(0), obstacles) + kSame);
  if (!r.blocked) {
    EXPECT_LE(r.min_distance, NearestDistance(moving, m.PoseAt(1), obstacles) + kSame);
  }
  EXPECT_LE(r.min_distance_lower_bound, r.min_distance + kSame);
  // A path with no checked pose within τ ran in far mode, whose steps keep τ/2.
  if (!r.blocked && r.first_touch_t < 0 && r.min_distance < kInf) {
    EXPECT_GE(r.min_distance_lower_bound, tau / 2 - kSame);
  }
  if (r.first_touch_t >= 0) {
    const RigidTransform X_touch = m.PoseAt(r.first_touch_t);
    const double d = NearestDistance(moving, X_touch, obstacles);
    EXPECT_LE(d, tau + kSame) << "first touch at " << r.first_touch_t;
    EXPECT_NEAR(DistanceTo(moving, X_touch, obstacles, r.first_touch_id), d, kSame);
    EXPECT_LE(r.min_distance, tau + kSame);
  } else {
    EXPECT_GT(r.min_distance, tau - kSame) << "a checked pose within τ, but no first touch";
  }
}

// A blocked scan's path ends at t_contact, where its last sample is taken, not at the blocked
// pose the scan checked past it. A 10 mm cube comes down onto a 4 mm square plate 1 µm thick:
// from 0.05 mm above it one near step (τ = 0.1) takes the plate wholly inside the cube
// (CONTAINED), and the bisection moves t_contact back from that pose to where the cube's bottom
// has just passed the plate's. Before, the profile's last sample (and so it could be the
// minimum distance's) was the pose past t_contact.
TEST(Sweep, ABlockedScanEndsAtItsContactParameter) {
  const PartPtr plate = MakeBox(Vec3(2, 2, 0.0005)).Part();
  const PartPtr cube = MakeBox(Vec3(5, 5, 5)).Part();
  const SweepObstacle o[] = {{plate.get(), RigidTransform::Identity(), 1}};
  const Motion down = Ok(Motion::Linear(At(Vec3(0, 0, 10.0005)), -Vec3::UnitZ(), 10));
  SweepOptions opt = Contact(0.1);
  opt.profile = true;
  const SweepResult r = Sweep(*cube, down, o, opt);
  ASSERT_TRUE(r.blocked);
  EXPECT_EQ(r.blocking_classes, std::vector<ClashClass>{ClashClass::kContained});
  ASSERT_GE(r.profile.size(), 2u);
  EXPECT_EQ(r.profile.back().first, r.t_contact);
  EXPECT_LT(r.profile[r.profile.size() - 2].first, r.t_contact);
  EXPECT_LE(r.t_min_distance, r.t_contact);
  // The cube's bottom is then below the plate's (t > 0.5 + 1e-4, the plate inside), and it
  // was not at the last free pose, at most τ/4 of travel before.
  EXPECT_GT(r.t_contact, (5 + 0.0005) / 10);
  EXPECT_LE((r.t_contact - r.t_last_free) * 10, 0.025 + 1e-12);
  EXPECT_NEAR(r.profile.back().second, NearestDistance(*cube, down.PoseAt(r.t_contact), o), 1e-9);
}

TEST(Sweep, AgreesWithDenseSampling) {
  std::mt19937 rng = SeededRng(504);
  constexpr double kTau = 0.05;
  // Sweep's guarantee between checked poses (see sweep.h): no unchecked pose is deeper than
  // 1.25 τ. The oracle classifies its samples with that tolerance (plus rounding).
  constexpr double kOracleTau = 1.25 * kTau + 1e-9;
  constexpr int kSamples = 2000;
  const MotionKind kinds[] = {MotionKind::kLinear, MotionKind::kRotation, MotionKind::kScrew,
                              MotionKind::kKeyframes};
  const int trials = Trials(48);
  int run = 0, skipped = 0, blocked = 0, touched = 0, deeper_than_tau = 0, bounded = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const PartPtr moving =
        (trial % 2 ? MakeBlob(rng, 5, 6, 8, 0.3) : MakeBox(Vec3(6, 3, 2))).Part();
    const Motion m = RandomMotion(rng, kinds[trial % 4]);
    const Sphere sphere = TravelSphere(*moving);
    // Two obstacles anywhere; one near a random pose of the path (at 0.7 to 1.5 times the sum
    // of the bounding radii: from in the way to clear); one grazing: moved along the witness
    // direction at the path's closest sampled pose until the distance there is in
    // [-τ/2, 3τ/2] (touching or a little beyond, where the guarantee's slack matters).
    std::vector<PartPtr> parts;
    std::vector<SweepObstacle> obstacles;
    for (int k = 0; k < 4; ++k) {
      parts.push_back(
          (k % 2 ? MakeBlob(rng, Uniform(rng, 3, 8), 6, 8, 0.3)
                 : MakeBox(Vec3(Uniform(rng, 1, 8), Uniform(rng, 1, 8), Uniform(rng, 0.2, 8))))
              .Part());
      const Part& part = *parts.back();
      RigidTransform X_WO = RandomPose(rng, 30);
      if (k >= 2) {
        const Sphere s = TravelSphere(part);
        const Vec3 c_W = m.PoseAt(Uniform(rng, 0, 1)) * sphere.center;
        const double reach = (sphere.radius + s.radius) * Uniform(rng, 0.7, 1.5);
        X_WO.t = c_W + reach * RandomRotation(rng).col(0) - X_WO.R * s.center;
      }
      if (k == 3) {
        DistanceResult closest;
        for (int i = 0; i <= 400; ++i) {
          const DistanceResult d = Distance(*moving, m.PoseAt(i / 400.0), part, X_WO);
          if (d.distance < closest.distance) closest = d;
        }
        if (closest.distance > 0 && closest.distance < kInf) {
          const Vec3 n = (closest.p_WB - closest.p_WA).normalized();
          X_WO.t += (Uniform(rng, -kTau / 2, 1.5 * kTau) - closest.distance) * n;
        }
      }
      obstacles.push_back({&part, X_WO, static_cast<uint64_t>(k + 1)});
    }
    // Only free start poses.
    if (AnyBlocking(*moving, m.start(), obstacles, kTau)) {
      ++skipped;
      continue;
    }
    ++run;
    const SweepResult r = Sweep(*moving, m, obstacles, Contact(kTau));
    ASSERT_FALSE(r.exhausted) << "trial " << trial;
    const double free_until = r.blocked ? r.t_last_free : 1.0;
    if (!r.blocked && r.first_touch_t >= 0) ++touched;
    if (r.blocked) {
      ++blocked;
      std::vector<uint64_t> ids;
      EXPECT_TRUE(AnyBlocking(*moving, r.X_contact, obstacles, kTau, &ids)) << "trial " << trial;
      std::sort(ids.begin(), ids.end());
      EXPECT_EQ(ids, r.blocking_ids) << "trial " << trial;
      EXPECT_LE(m.MaxTravel(r.t_last_free, r.t_contact, TravelSphere(*moving)), kTau / 4 + 1e-12);
    }
    // The same sweep with its checked poses recorded (a profile also caps far steps).
    SweepOptions with_profile = Contact(kTau);
    with_profile.profile = true;
    const SweepResult p = Sweep(*moving, m, obstacles, with_profile);
    ASSERT_FALSE(p.exhausted) << "trial " << trial;
    {
      SCOPED_TRACE(::testing::Message() << "trial " << trial);
      ExpectDistanceFieldsConsistent(*moving, m, obstacles, kTau, r);
      ExpectDistanceFieldsConsistent(*moving, m, obstacles, kTau, p);
      // The profile lists the checked poses of the scan, from t = 0 on, with their distances:
      // min_distance and first_touch_t are read from them.
      ASSERT_FALSE(p.profile.empty());
      EXPECT_EQ(p.profile.front().first, 0.0);
      double min_d = kInf, min_t = -1, touch_t = -1;
      for (std::size_t i = 0; i < p.profile.size(); ++i) {
        const auto [t, d] = p.profile[i];
        if (i > 0) {
          EXPECT_GT(t, p.profile[i - 1].first);
        }
        if (i % 8 == 0) {  // one in eight recomputed, to keep the test fast
          EXPECT_NEAR(d, NearestDistance(*moving, m.PoseAt(t), obstacles), 1e-9) << "t=" << t;
        }
        if (d < min_d) std::tie(min_d, min_t) = std::tie(d, t);
        if (d <= kTau && touch_t < 0) touch_t = t;
      }
      EXPECT_EQ(p.min_distance, min_d);
      EXPECT_EQ(p.t_min_distance, min_t);
      EXPECT_EQ(p.first_touch_t, touch_t);
    }
    // The checked pose before the profile's first touch: up to it the path kept at least τ/2
    // from every obstacle (sweep.h; only a pass within τ/2 is sure to have a checked touch).
    double untouched_until = -1.0;
    for (std::size_t i = 1; i < p.profile.size(); ++i) {
      if (p.profile[i].first == p.first_touch_t) untouched_until = p.profile[i - 1].first;
    }
    // The least distance over the samples of the scanned free path.
    double sampled_min = kInf, t_sampled_min = 0.0;
    for (int k = 0; k <= kSamples; ++k) {
      const double t = free_until * k / kSamples;
      const RigidTransform X = m.PoseAt(t);
      if (k % 2 == 0) {  // distances at every other sample, to keep the test fast
        const double d = NearestDistance(*moving, X, obstacles, std::max(sampled_min, kTau));
        if (d < sampled_min) std::tie(sampled_min, t_sampled_min) = std::tie(d, t);
        if (t <= untouched_until) {
          EXPECT_GE(d, kTau / 2 - 1e-9)
              << "trial " << trial << " t=" << t << ": within τ/2 before the checked pose "
              << untouched_until << " before the first touch " << p.first_touch_t;
        }
      }
      // Deeper than 1.25 τ implies deeper than τ: the second test only where the first hits.
      if (!AnyBlocking(*moving, X, obstacles, kTau)) continue;
      ++deeper_than_tau;
      EXPECT_FALSE(AnyBlocking(*moving, X, obstacles, kOracleTau))
          << "trial " << trial << " (" << MotionKindName(m.kind()) << ") t=" << t
          << " blocked=" << r.blocked << " t_last_free=" << r.t_last_free;
    }
    // The lower bound holds over the scanned path (up to the first blocked pose of the scan,
    // at or after t_contact), of which [0, free_until] is part: at most the least sampled
    // distance. The same for the profiled sweep where its scan covered the samples.
    EXPECT_LE(r.min_distance_lower_bound, sampled_min + 1e-9)
        << "trial " << trial << " sampled at t=" << t_sampled_min;
    if (p.t_contact >= free_until) {
      EXPECT_LE(p.min_distance_lower_bound, sampled_min + 1e-9)
          << "trial " << trial << " sampled at t=" << t_sampled_min << " (profile)";
    }
    bounded += r.min_distance_lower_bound > 0;
  }
  ::testing::Test::RecordProperty("run", run);
  ::testing::Test::RecordProperty("lower_bound_above_zero", bounded);
  ::testing::Test::RecordProperty("skipped", skipped);
  ::testing::Test::RecordProperty("blocked", blocked);
  ::testing::Test::RecordProperty("touched_not_blocked", touched);
  ::testing::Test::RecordProperty("samples_deeper_than_tau", deeper_than_tau);
  // The generator must give both answers often: a hit-rate window, each answer at least a fifth
  // of the runs and at least once (a scaled-down run has only about 7).
  EXPECT_GE(run, trials / 2);
  EXPECT_GE(blocked, std::max(1, run / 5));
  EXPECT_LE(blocked, run - std::max(1, run / 5));
  EXPECT_GE(touched, 1);
  // The lower bound says something (above 0) in a good share of the runs (blocked and touching
  // runs have it near 0; a scaled-down run may have none).
  EXPECT_GE(bounded, run / 8);
}

// ---------------------------------------------------------------------------------------------
// Free directions

TEST(FreeDirections, PegInABlindHoleIsFreeOnlyUpwards) {
  // A block [-20, 20]^2 x [0, 30] with a square blind hole of half-width 5 from z = 10 up; a
  // peg of half-width 4.98 and length 24 resting on the hole's bottom (0.02 side clearance,
  // below τ).
  constexpr double kTau = 0.05;
  const PartPtr block =
      MakeCellSolid({-20, -5, 5, 20}, {-20, -5, 5, 20}, {0, 10, 30}, [](int i, int j, int k) {
        return !(i == 1 && j == 1 && k == 1);
      }).Part();
  ASSERT_TRUE(block->mesh().IsClosed());
  const PartPtr peg = MakeBox(Vec3(4.98, 4.98, 12)).Part();
  const SweepObstacle o[] = {{block.get(), RigidTransform::Identity(), 1}};
  FreeDirectionOptions opt;
  opt.contact_mm = kTau;
  const std::vector<FreeDirection> dirs = FreeDirections(*peg, At(Vec3(0, 0, 22)), o, opt);
  ASSERT_EQ(dirs.size(), 12u);
  for (const FreeDirection& f : dirs) {
    const bool up = f.direction_W.z() > 0.99;
    EXPECT_EQ(f.free, up) << f.label;
    EXPECT_FALSE(f.undecided) << f.label;
    if (!up) {
      // Sideways: 0.02 of clearance plus τ; down: τ (bisection adds at most τ/4). Down, the
      // depth reaches τ at exactly τ of travel, where rounding may put it either side.
      EXPECT_GT(f.blocked_at_mm, kTau - 1e-9) << f.label;
      EXPECT_LE(f.blocked_at_mm, 0.02 + kTau + kTau / 4 + 1e-9) << f.label;
      EXPECT_EQ(f.blocking_ids, std::vector<uint64_t>{1}) << f.label;
      // The travel proven free lies before the block, at most τ/4 of travel before it.
      EXPECT_LT(f.free_travel_mm, f.blocked_at_mm) << f.label;
      EXPECT_GE(f.free_travel_mm, f.blocked_at_mm - kTau / 4 - 1e-9) << f.label;
      EXPECT_LE(f.free_travel_mm, 0.02 + kTau + 1e-9) << f.label;
    }
  }
  EXPECT_EQ(dirs[4].label, "+Z");
  EXPECT_TRUE(dirs[4].free);
}

TEST(FreeDirections, BoxOnATableIsFreeUpAndSidewaysButNotDown) {
  constexpr double kTau = 0.1;
  const PartPtr table = MakeBox(Vec3(50, 50, 5), Vec3(0, 0, -5)).Part();
  // Distinct principal axes (the box's x, y, z), turned 30 degrees about z on the table, so
  // that P1 and P2 are horizontal directions other than the world's.
  const PartPtr box = MakeBox(Vec3(4, 2.5, 1.5)).Part();
  const SweepObstacle o[] = {{table.get(), RigidTransform::Identity(), 1}};
  FreeDirectionOptions opt;
  opt.contact_mm = kTau;
  const RigidTransform X_WP{AxisAngle(kPi / 6, Vec3::UnitZ()), Vec3(0, 0, 1.5)};
  const std::vector<FreeDirection> dirs = FreeDirections(*box, X_WP, o, opt);
  ASSERT_EQ(dirs.size(), 12u);
  for (const FreeDirection& f : dirs) {
    const bool down = f.direction_W.z() < -0.99;
    EXPECT_EQ(f.free, !down) << f.label;
    if (down) {
      EXPECT_NEAR(f.blocked_at_mm, kTau, kTau / 4 + 1e-9) << f.label;
    }
  }
  // Principal axes: P1 along the box's x (the longest side), P3 along z.
  EXPECT_EQ(dirs[6].label, "+P1");
  EXPECT_NEAR(std::abs(dirs[6].direction_W.dot(X_WP.R.col(0))), 1.0, 1e-9);
  EXPECT_NEAR(std::abs(dirs[10].direction_W.z()), 1.0, 1e-9);
}

// With the default options (τ = 0: the default τ, 1e-3 of the diagonal) a box resting on a
// table is decided in every direction, as the header's example says: before, τ fell to 1e-9 of
// the diagonal, and each sideways slide ran into max_iterations (undecided, ~24 s each).
TEST(FreeDirections, DefaultOptionsDecideABoxOnATable) {
  const PartPtr table = MakeBox(Vec3(50, 50, 5), Vec3(0, 0, -5)).Part();
  const PartPtr box = MakeBox(Vec3(4, 2.5, 1.5)).Part();
  const SweepObstacle o[] = {{table.get(), RigidTransform::Identity(), 1}};
  const FreeDirectionOptions opt;
  ASSERT_EQ(opt.contact_mm, 0.0);
  const double tau = FreeDirectionOptions::kDefaultContactRelative * box->bounds().Diagonal();
  const std::vector<FreeDirection> dirs = FreeDirections(*box, At(Vec3(0, 0, 1.5)), o, opt);
  ASSERT_EQ(dirs.size(), 12u);
  for (const FreeDirection& f : dirs) {
    const bool down = f.direction_W.z() < -0.99;
    EXPECT_THAT(f.status, testing::IsOk()) << f.label;
    EXPECT_FALSE(f.undecided) << f.label;
    EXPECT_EQ(f.free, !down) << f.label;
    if (down) {
      EXPECT_NEAR(f.blocked_at_mm, tau, tau / 4 + 1e-9) << f.label;
    }
  }
  // A negative τ is the default too.
  FreeDirectionOptions negative;
  negative.contact_mm = -1;
  negative.principal_axes = false;
  for (const FreeDirection& f : FreeDirections(*box, At(Vec3(0, 0, 1.5)), o, negative)) {
    EXPECT_FALSE(f.undecided) << f.label;
    EXPECT_EQ(f.free, f.direction_W.z() > -0.99) << f.label;
  }
}

// A τ that is not finite, or a pose that is not, leaves every direction undecided, with the
// reason; none is reported free (with τ = +inf every one was).
TEST(FreeDirections, InvalidInputLeavesEveryDirectionUndecided) {
  const PartPtr table = MakeBox(Vec3(50, 50, 5), Vec3(0, 0, -5)).Part();
  const PartPtr box = MakeBox(Vec3(4, 2.5, 1.5)).Part();
  constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
  const SweepObstacle o[] = {{table.get(), RigidTransform::Identity(), 1}};
  const SweepObstacle bad_o[] = {{table.get(), At(Vec3(kNan, 0, 0)), 1}};
  struct Case {
    const char* name;
    double tau;
    RigidTransform X_WP;
    std::span<const SweepObstacle> obstacles;
    const char* message;
  };
  const Case cases[] = {
      {"infinite tau", kInf, At(Vec3(0, 0, 1.5)), o, "contact_mm"},
      {"NaN tau", kNan, At(Vec3(0, 0, 1.5)), o, "contact_mm"},
      {"minus infinite tau", -kInf, At(Vec3(0, 0, 1.5)), o, "contact_mm"},
      {"NaN pose", 0.1, At(Vec3(0, kNan, 1.5)), o, "rigid"},
      {"NaN obstacle pose", 0.1, At(Vec3(0, 0, 1.5)), bad_o, "non-finite"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FreeDirectionOptions opt;
    opt.contact_mm = c.tau;
    const std::vector<FreeDirection> dirs = FreeDirections(*box, c.X_WP, c.obstacles, opt);
    ASSERT_EQ(dirs.size(), 12u);
    for (const FreeDirection& f : dirs) {
      EXPECT_FALSE(f.free) << f.label;
      EXPECT_TRUE(f.undecided) << f.label;
      EXPECT_THAT(f.status, testing::StatusIs(absl::StatusCode::kInvalidArgument, c.message))
          << f.label;
    }
  }
}

}  // namespace
}  // namespace clash::geom
