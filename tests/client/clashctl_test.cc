// clashctl's argument parsers (client/src/clashctl/args.h), without a server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>

#include "clashctl/args.h"
#include "testing/status_matchers.h"

namespace clash::clashctl {
namespace {

using ::clash::testing::IsOk;
using ::clash::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;

// Quaternion arithmetic is exact to a few ulps of 1; 1e-12 leaves room for the trigonometry.
constexpr double kRotationTolerance = 1e-12;

using Vec = std::array<double, 3>;

// v rotated by the unit quaternion q (v' = q v q*).
Vec Rotate(const v1::Quaternion& q, const Vec& v) {
  const Vec u{q.x(), q.y(), q.z()};
  const auto cross = [](const Vec& a, const Vec& b) {
    return Vec{a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
  };
  Vec t = cross(u, v);
  for (double& x : t) x *= 2;
  const Vec ut = cross(u, t);
  return {v[0] + q.w() * t[0] + ut[0], v[1] + q.w() * t[1] + ut[1], v[2] + q.w() * t[2] + ut[2]};
}

using Mat = std::array<std::array<double, 3>, 3>;

Mat Multiply(const Mat& a, const Mat& b) {
  Mat m{};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 3; ++k) m[i][j] += a[i][k] * b[k][j];
    }
  }
  return m;
}

// The elementary rotation about `axis` by `deg` degrees, as a matrix.
Mat AxisMatrix(int axis, double deg) {
  const double r = deg * M_PI / 180.0;
  const double c = std::cos(r);
  const double s = std::sin(r);
  if (axis == 0) return Mat{{{1, 0, 0}, {0, c, -s}, {0, s, c}}};
  if (axis == 1) return Mat{{{c, 0, s}, {0, 1, 0}, {-s, 0, c}}};
  return Mat{{{c, -s, 0}, {s, c, 0}, {0, 0, 1}}};
}

void ExpectVecNear(const Vec& actual, const Vec& expected) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(actual[i], expected[i], kRotationTolerance) << "component " << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Selectors

TEST(ParseSelector, EmptyAndAllChooseEverything) {
  for (const char* text : {"", "all", "  all ", " "}) {
    absl::StatusOr<v1::InstanceSelector> s = ParseSelector(text);
    ASSERT_THAT(s, IsOk()) << text;
    EXPECT_EQ(s->ByteSizeLong(), 0u) << "'" << text << "' should give an empty selector";
  }
}

TEST(ParseSelector, IdsGroupsAndPathPrefixes) {
  absl::StatusOr<v1::InstanceSelector> s =
      ParseSelector(" 1, 22 ,group:bolts,path:as1/nut-bolt-assembly:2,18446744073709551615");
  ASSERT_THAT(s, IsOk());
  EXPECT_THAT(s->instance_ids(), ElementsAre(1u, 22u, 18446744073709551615u));
  EXPECT_THAT(s->groups(), ElementsAre("bolts"));
  EXPECT_THAT(s->path_prefixes(), ElementsAre("as1/nut-bolt-assembly:2"));
}

TEST(ParseSelector, RejectsBadItems) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"abc", "'abc' is not an instance id, group:NAME, path:PREFIX or all"},
      {"-1", "'-1' is not an instance id"},
      {"1.5", "'1.5' is not an instance id"},
      {"0x10", "'0x10' is not an instance id"},
      {"18446744073709551616", "not an instance id (a number up to 2^64-1)"},
      {"1,,2", "empty item"},
      {"1,", "empty item"},
      {"group:", "names no group"},
      {"path:", "names no path prefix"},
      {"all,3", "'all' cannot be combined"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(ParseSelector(c.text), StatusIs(absl::StatusCode::kInvalidArgument, c.message))
        << c.text;
  }
}

TEST(ParseInstanceId, AcceptsOnlyUnsignedDecimals) {
  EXPECT_EQ(*ParseInstanceId("0"), 0u);
  EXPECT_EQ(*ParseInstanceId("42"), 42u);
  for (const char* bad : {"", "+1", "-1", "1e3", "12a", "99999999999999999999"}) {
    EXPECT_THAT(ParseInstanceId(bad), Not(IsOk())) << bad;
  }
}

// ---------------------------------------------------------------------------------------------
// Vectors, rotations, poses

TEST(ParseVec3, ThreeFiniteNumbers) {
  absl::StatusOr<v1::Vec3> v = ParseVec3("-1.5, 2e3,0");
  ASSERT_THAT(v, IsOk());
  EXPECT_EQ(v->x(), -1.5);
  EXPECT_EQ(v->y(), 2000.0);
  EXPECT_EQ(v->z(), 0.0);
}

TEST(ParseVec3, RejectsWrongCountsAndNonFinite) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"1,2", "3 comma-separated numbers"},     {"1,2,3,4", "3 comma-separated numbers"},
      {"", "3 comma-separated numbers"},        {"1,,3", "'' is not a number"},
      {"nan,0,0", "'nan' is not a finite"},     {"0,inf,0", "'inf' is not a finite"},
      {"1,a,3", "'a' is not a number"},         {"1,2,3mm", "'3mm' is not a number"},
      {"1e999,0,0", "'1e999' is not a number"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(ParseVec3(c.text), StatusIs(absl::StatusCode::kInvalidArgument, c.message))
        << c.text;
  }
}

TEST(RotationDeg, ZeroIsIdentity) {
  const v1::Quaternion q = QuaternionFromFixedXyzDeg(0, 0, 0);
  EXPECT_EQ(q.w(), 1.0);
  EXPECT_EQ(q.x(), 0.0);
  EXPECT_EQ(q.y(), 0.0);
  EXPECT_EQ(q.z(), 0.0);
}

TEST(RotationDeg, SingleAxisAngles) {
  const double h = std::sqrt(0.5);
  absl::StatusOr<v1::Quaternion> q = ParseRotationDeg("90,0,0");
  ASSERT_THAT(q, IsOk());
  EXPECT_NEAR(q->w(), h, kRotationTolerance);
  EXPECT_NEAR(q->x(), h, kRotationTolerance);
  EXPECT_NEAR(q->y(), 0, kRotationTolerance);
  EXPECT_NEAR(q->z(), 0, kRotationTolerance);
  q = ParseRotationDeg("0,0,180");
  ASSERT_THAT(q, IsOk());
  EXPECT_NEAR(q->w(), 0, kRotationTolerance);
  EXPECT_NEAR(std::abs(q->z()), 1, kRotationTolerance);
}

TEST(RotationDeg, FixedAxesXThenYThenZ) {
  // X first, then Y, about the fixed axes: x -> (Rx) x -> (Ry) -z. Rotating about moving axes (or
  // in the other order) would take x to +y instead.
  ExpectVecNear(Rotate(QuaternionFromFixedXyzDeg(90, 90, 0), {1, 0, 0}), {0, 0, -1});
  ExpectVecNear(Rotate(QuaternionFromFixedXyzDeg(90, 90, 0), {0, 1, 0}), {1, 0, 0});
  // Rx(90) then Rz(90): x -> y, y -> z, z -> x.
  const v1::Quaternion q = QuaternionFromFixedXyzDeg(90, 0, 90);
  ExpectVecNear(Rotate(q, {1, 0, 0}), {0, 1, 0});
  ExpectVecNear(Rotate(q, {0, 1, 0}), {0, 0, 1});
  ExpectVecNear(Rotate(q, {0, 0, 1}), {1, 0, 0});
}

TEST(RotationDeg, MatchesTheMatrixProductRzRyRx) {
  const std::array<std::array<double, 3>, 5> angles{
      {{30, -45, 60}, {10, 20, 30}, {-170, 85, 5}, {359, 1, -720}, {0.5, 123.25, -33}}};
  for (const auto& [rx, ry, rz] : angles) {
    SCOPED_TRACE(::testing::Message() << rx << "," << ry << "," << rz);
    const Mat r = Multiply(AxisMatrix(2, rz), Multiply(AxisMatrix(1, ry), AxisMatrix(0, rx)));
    const v1::Quaternion q = QuaternionFromFixedXyzDeg(rx, ry, rz);
    EXPECT_NEAR(q.w() * q.w() + q.x() * q.x() + q.y() * q.y() + q.z() * q.z(), 1.0,
                kRotationTolerance);
    for (int col = 0; col < 3; ++col) {
      Vec e{0, 0, 0};
      e[col] = 1;
      ExpectVecNear(Rotate(q, e), {r[0][col], r[1][col], r[2][col]});
    }
  }
}

TEST(RotationDeg, RejectsBadInput) {
  for (const char* bad : {"90,0", "1,2,3,4", "nan,0,0", "0,0,-inf", "x,0,0"}) {
    EXPECT_THAT(ParseRotationDeg(bad), StatusIs(absl::StatusCode::kInvalidArgument, "")) << bad;
  }
}

TEST(ParseQuaternion, NormalisesAndRejectsZero) {
  absl::StatusOr<v1::Quaternion> q = ParseQuaternion("2,0,0,0");
  ASSERT_THAT(q, IsOk());
  EXPECT_EQ(q->w(), 1.0);
  q = ParseQuaternion("1,1,0,0");
  ASSERT_THAT(q, IsOk());
  EXPECT_NEAR(q->w(), std::sqrt(0.5), kRotationTolerance);
  EXPECT_NEAR(q->x(), std::sqrt(0.5), kRotationTolerance);
  EXPECT_THAT(ParseQuaternion("0,0,0,0"), StatusIs(absl::StatusCode::kInvalidArgument, "norm"));
  EXPECT_THAT(ParseQuaternion("1,0,0"), StatusIs(absl::StatusCode::kInvalidArgument, "4 comma"));
  EXPECT_THAT(ParseQuaternion("nan,0,0,1"), StatusIs(absl::StatusCode::kInvalidArgument, "nan"));
}

TEST(ParsePose, CombinesTranslationAndOneRotation) {
  absl::StatusOr<v1::Pose> p = ParsePose("1,2,3", "", "");
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->translation_mm().z(), 3.0);
  EXPECT_EQ(p->rotation_case(), v1::Pose::ROTATION_NOT_SET);
  p = ParsePose("", "0,0,90", "");
  ASSERT_THAT(p, IsOk());
  EXPECT_FALSE(p->has_translation_mm());
  ASSERT_EQ(p->rotation_case(), v1::Pose::kQuaternion);
  ExpectVecNear(Rotate(p->quaternion(), {1, 0, 0}), {0, 1, 0});
  EXPECT_THAT(ParsePose("", "0,0,90", "1,0,0,0"),
              StatusIs(absl::StatusCode::kInvalidArgument, "not both"));
  EXPECT_THAT(ParsePose("1,2", "", ""), StatusIs(absl::StatusCode::kInvalidArgument, "--at: "));
  EXPECT_THAT(ParsePose("", "1,2", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "--rot-deg: "));
}

// ---------------------------------------------------------------------------------------------
// Allowed-interference rules

TEST(ParseAllowRule, TwoSetsAndClasses) {
  absl::StatusOr<v1::AllowedInterference> r =
      ParseAllowRule("bolts=group:bolts/group:nuts:hard,Contact");
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->name(), "bolts");
  EXPECT_THAT(r->a().groups(), ElementsAre("bolts"));
  ASSERT_TRUE(r->has_b());
  EXPECT_THAT(r->b().groups(), ElementsAre("nuts"));
  EXPECT_THAT(r->classes(), ElementsAre(v1::HARD, v1::CONTACT));
}

TEST(ParseAllowRule, OneSetAllClasses) {
  absl::StatusOr<v1::AllowedInterference> r = ParseAllowRule("fasteners=group:fasteners,7");
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->a().groups(), ElementsAre("fasteners"));
  EXPECT_THAT(r->a().instance_ids(), ElementsAre(7u));
  EXPECT_FALSE(r->has_b());
  EXPECT_THAT(r->classes(), IsEmpty());
}

TEST(ParseAllowRule, SlashesAndColonsInsidePaths) {
  // The first '/' where both sides parse splits the sets; ":2" is part of an assembly path.
  absl::StatusOr<v1::AllowedInterference> r =
      ParseAllowRule("fit=path:as1/nut-bolt-assembly:2/path:as1/plate:contained");
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->a().path_prefixes(), ElementsAre("as1/nut-bolt-assembly:2"));
  EXPECT_THAT(r->b().path_prefixes(), ElementsAre("as1/plate"));
  EXPECT_THAT(r->classes(), ElementsAre(v1::CONTAINED));

  r = ParseAllowRule("one=path:as1/rod/nut:3");
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->a().path_prefixes(), ElementsAre("as1/rod/nut:3"));
  EXPECT_FALSE(r->has_b());
  EXPECT_THAT(r->classes(), IsEmpty());

  r = ParseAllowRule("press=3/4");
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->a().instance_ids(), ElementsAre(3u));
  EXPECT_THAT(r->b().instance_ids(), ElementsAre(4u));

  r = ParseAllowRule("touch=all:contact");
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->a().ByteSizeLong(), 0u);
  EXPECT_THAT(r->classes(), ElementsAre(v1::CONTACT));
}

TEST(ParseAllowRule, RejectsMalformedRules) {
  EXPECT_THAT(ParseAllowRule("group:a"),
              StatusIs(absl::StatusCode::kInvalidArgument, "is not NAME=SEL_A[/SEL_B][:CLASSES]"));
  EXPECT_THAT(ParseAllowRule("=1/2"), StatusIs(absl::StatusCode::kInvalidArgument, "NAME="));
  EXPECT_THAT(ParseAllowRule("x=abc"),
              StatusIs(absl::StatusCode::kInvalidArgument, "'abc' is not an instance id"));
  EXPECT_THAT(ParseAllowRule("x=1/2:bogus"),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown clash class 'bogus'"));
}

TEST(ParseClashClass, NamesAnyCase) {
  EXPECT_EQ(*ParseClashClass("CLEARANCE"), v1::CLEARANCE);
  EXPECT_EQ(*ParseClashClass("contained"), v1::CONTAINED);
  EXPECT_THAT(ParseClashClass("clear"), StatusIs(absl::StatusCode::kInvalidArgument, "clear"));
}

// ---------------------------------------------------------------------------------------------
// Rays

TEST(ParseRays, LinesCommentsAndErrors) {
  absl::StatusOr<std::vector<v1::Ray>> rays =
      ParseRays("# ox oy oz dx dy dz\n0 0 10  0 0 -1\n\n\t1 2 3 1 0 0\r\n", 50);
  ASSERT_THAT(rays, IsOk());
  ASSERT_EQ(rays->size(), 2u);
  EXPECT_EQ((*rays)[0].origin_mm().z(), 10.0);
  EXPECT_EQ((*rays)[0].direction().z(), -1.0);
  EXPECT_EQ((*rays)[1].origin_mm().y(), 2.0);
  EXPECT_EQ((*rays)[1].max_distance_mm(), 50.0);
  EXPECT_THAT(ParseRays("0 0 0 1 0 0\n1 2 3 4 5\n", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 2: expected 6 numbers"));
  EXPECT_THAT(ParseRays("0 0 0 0 0 0\n", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 1: the direction is zero"));
  EXPECT_THAT(ParseRays("0 0 nan 1 0 0\n", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 1: 'nan'"));
  EXPECT_THAT(ParseRays("# nothing\n", 0), StatusIs(absl::StatusCode::kInvalidArgument, "no rays"));
  EXPECT_THAT(ParseRay("0,0,0", "0,0,0", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, "--dir: the direction is zero"));
}

TEST(CheckNonNegative, FiniteAndNotNegative) {
  EXPECT_THAT(CheckNonNegative("--max-mm", 0), IsOk());
  EXPECT_THAT(CheckNonNegative("--max-mm", -1),
              StatusIs(absl::StatusCode::kInvalidArgument, "--max-mm"));
  EXPECT_THAT(CheckNonNegative("--max-mm", NAN), Not(IsOk()));
  EXPECT_THAT(CheckNonNegative("--max-mm", INFINITY), Not(IsOk()));
}

}  // namespace
}  // namespace clash::clashctl
