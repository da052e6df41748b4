// clashctl's parsers and formatters (client/src/clashctl/args.h, format.h), without a server.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "clash/client/client.h"
#include "clashctl/args.h"
#include "clashctl/format.h"
#include "google/protobuf/text_format.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace clash::clashctl {
namespace {

using ::clash::testing::IsOk;
using ::clash::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
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
      {"path:as1/plate_1/",
       "ends with '/' (a prefix matches whole path segments: write "
       "path:as1/plate_1)"},
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

// A side left empty by a stray '/' or ':' would be every instance, and the rule would suppress
// the other side's clashes with everything (a real HARD clash reported as suppressed, and
// check's exit code 0): every side must be written, `all` for every instance.
TEST(ParseAllowRule, RejectsEmptySides) {
  for (const char* text : {"x=", "x= ", "x=:hard", "x=1/", "x=/2", "x=1/:hard", "x=/"}) {
    EXPECT_THAT(ParseAllowRule(text), StatusIs(absl::StatusCode::kInvalidArgument, "allow rule"))
        << text;
  }
  EXPECT_THAT(ParseAllowRule("fit=path:as1/plate_1/"),
              StatusIs(absl::StatusCode::kInvalidArgument, "ends with '/'"));
  EXPECT_THAT(ParseAllowRule("x=:hard"),
              StatusIs(absl::StatusCode::kInvalidArgument, "':hard' is not an instance id"));
  EXPECT_THAT(ParseAllowRule("x="), StatusIs(absl::StatusCode::kInvalidArgument, "write all"));
  absl::StatusOr<v1::AllowedInterference> r = ParseAllowRule("x=1/all");
  ASSERT_THAT(r, IsOk());
  EXPECT_THAT(r->a().instance_ids(), ElementsAre(1u));
  ASSERT_TRUE(r->has_b());
  EXPECT_EQ(r->b().ByteSizeLong(), 0u);
}

// "fit=group:bolts/group:nuts" names no classes, but the text after its last ':' was taken for
// them: "unknown clash class 'nuts'". When that text is no class list and the part before the
// ':' reads as one selector ("group:bolts/group"), the whole text read as two selectors wins.
TEST(ParseAllowRule, TwoSelectorsWithoutClasses) {
  for (const auto& [text, rule] : {
           std::pair{"fit=group:bolts/group:nuts",
                     R"(name: "fit" a { groups: "bolts" } b { groups: "nuts" })"},
           {"fit=path:left/path:right",
            R"(name: "fit" a { path_prefixes: "left" } b { path_prefixes: "right" })"},
           {"fit=path:a/5/path:c",
            R"(name: "fit" a { path_prefixes: "a/5" } b { path_prefixes: "c" })"},
       }) {
    const absl::StatusOr<v1::AllowedInterference> r = ParseAllowRule(text);
    ASSERT_THAT(r, IsOk()) << text;
    EXPECT_EQ(r->ShortDebugString(), rule) << text;
  }
  // A mistyped class is still refused, after one selector or two.
  EXPECT_THAT(ParseAllowRule("x=group:bolts:hardd"),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown clash class 'hardd'"));
  EXPECT_THAT(ParseAllowRule("x=group:bolts/group:nuts:hardd"),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown clash class 'hardd'"));
}

// "path:motor/4711" was path:motor against instance 4711 (the first '/' where both sides
// parse), though 4711 may as well be a segment of the path: a rule meant for the path
// motor/4711 silently suppressed motor's clashes with instance 4711. An id or `all` right after
// a path item's '/' is refused, saying how to write either reading.
TEST(ParseAllowRule, AnIdOrAllAfterAPathsSlashIsAmbiguous) {
  for (const char* text : {"fit=path:motor/4711", "fit=path:motor/all", "fit=path:motor/4711:hard",
                           "fit=group:g,path:motor/12,group:h", "fit=path:a:2/5"}) {
    EXPECT_THAT(ParseAllowRule(text), StatusIs(absl::StatusCode::kInvalidArgument, "is ambiguous"))
        << text;
  }
  EXPECT_THAT(ParseAllowRule("fit=path:motor/4711"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "write '4711/path:motor' for path:motor against 4711 (the sides swapped), "
                       "or 'path:motor/4711/path:motor/4711' for any two instances"));
  // Both readings, written as the message says; an id after a group's '/' is not ambiguous (a
  // group name never holds a selector).
  for (const auto& [text, rule] : {
           std::pair{"fit=4711/path:motor",
                     R"(name: "fit" a { instance_ids: 4711 } b { path_prefixes: "motor" })"},
           {"fit=path:motor/4711/path:motor/4711",
            R"(name: "fit" a { path_prefixes: "motor/4711" } b { path_prefixes: "motor/4711" })"},
           {"fit=all/path:motor:hard",
            R"(name: "fit" a { } b { path_prefixes: "motor" } classes: HARD)"},
           {"fit=group:g/5", R"(name: "fit" a { groups: "g" } b { instance_ids: 5 })"},
       }) {
    const absl::StatusOr<v1::AllowedInterference> r = ParseAllowRule(text);
    ASSERT_THAT(r, IsOk()) << text;
    EXPECT_EQ(r->ShortDebugString(), rule) << text;
  }
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

// ---------------------------------------------------------------------------------------------
// Interference answers: exit code, table, JUnit

v1::Clash MakeClash(v1::ClashClass c, const std::string& a, const std::string& b) {
  v1::Clash clash;
  clash.set_clash_id("c" + a.substr(0, 1) + b.substr(0, 1));
  clash.set_instance_a(1);
  clash.set_instance_b(2);
  clash.set_path_a(a);
  clash.set_path_b(b);
  clash.set_part_a("p1");
  clash.set_part_b("p2");
  clash.set_clash_class(c);
  clash.set_contact_tolerance_mm(0.02);
  return clash;
}

// A response whose summary agrees with its clashes.
v1::InterferenceResponse Response(std::vector<v1::Clash> clashes) {
  v1::InterferenceResponse r;
  r.set_scene_version(7);
  for (v1::Clash& c : clashes) {
    v1::InterferenceSummary* s = r.mutable_summary();
    if (c.suppressed()) {
      s->set_suppressed(s->suppressed() + 1);
    } else if (c.clash_class() == v1::HARD) {
      s->set_hard(s->hard() + 1);
    } else if (c.clash_class() == v1::CONTAINED) {
      s->set_contained(s->contained() + 1);
    } else if (c.clash_class() == v1::CONTACT) {
      s->set_contact(s->contact() + 1);
    } else if (c.clash_class() == v1::CLEARANCE) {
      s->set_clearance(s->clearance() + 1);
    }
    *r.add_clashes() = std::move(c);
  }
  return r;
}

v1::Clash Suppressed(v1::Clash c, const std::string& by) {
  c.set_suppressed(true);
  c.set_suppressed_by(by);
  return c;
}

TEST(CheckExitCode, HardAndContainedFailSuppressedAndContactsPass) {
  EXPECT_EQ(CheckExitCode(Response({})), kExitOk);
  EXPECT_EQ(CheckExitCode(Response({MakeClash(v1::HARD, "a", "b")})), kExitFound);
  EXPECT_EQ(CheckExitCode(Response({Suppressed(MakeClash(v1::HARD, "a", "b"), "fit")})), kExitOk);
  EXPECT_EQ(CheckExitCode(Response({MakeClash(v1::CONTAINED, "a", "b")})), kExitFound);
  EXPECT_EQ(CheckExitCode(
                Response({MakeClash(v1::CONTACT, "a", "b"), MakeClash(v1::CLEARANCE, "c", "d")})),
            kExitOk);
  // The summary alone is enough (a listing cut short must not hide a hard clash).
  v1::InterferenceResponse counted_only;
  counted_only.mutable_summary()->set_hard(1);
  EXPECT_EQ(CheckExitCode(counted_only), kExitFound);
}

// The column at which `needle` starts in `line`, in code points.
std::size_t ColumnOf(const std::string& line, const std::string& needle) {
  const std::size_t at = line.find(needle);
  if (at == std::string::npos) return std::string::npos;
  std::size_t column = 0;
  for (std::size_t i = 0; i < at; ++i) column += (line[i] & 0xC0) != 0x80;
  return column;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  if (start < text.size()) lines.push_back(text.substr(start));
  return lines;
}

v1::InterferenceResponse SampleResponse() {
  v1::Clash hard = MakeClash(v1::HARD, "as1/bolt:1", "as1/plate");
  hard.set_depth_mm(0.5);
  hard.mutable_point_a_mm()->set_x(1);
  hard.mutable_point_a_mm()->set_y(2);
  hard.mutable_point_a_mm()->set_z(3);
  hard.set_uncertain(true);
  v1::Clash fit = Suppressed(MakeClash(v1::HARD, "as1/nut", "as1/bolt:2"), "bolts");
  fit.set_depth_mm(0.25);
  v1::Clash contained = MakeClash(v1::CONTAINED, "as1/pin", "as1/sleeve");
  v1::Clash contact = MakeClash(v1::CONTACT, "as1/l-bracket", "as1/plate");
  contact.set_distance_mm(0.01);
  v1::Clash near = MakeClash(v1::CLEARANCE, "as1/rod", "as1/plate");
  near.set_distance_mm(0.125);
  v1::InterferenceResponse r = Response({hard, contained, contact, near, fit});
  r.mutable_tolerances()->set_clearance_mm(0.2);
  r.mutable_summary()->set_instances(18);
  r.mutable_summary()->set_candidate_pairs(31);
  r.mutable_summary()->set_cached_pairs(4);
  return r;
}

TEST(FormatInterference, TableRowsMarksAndSummary) {
  const std::vector<std::string> lines = Lines(FormatInterference(SampleResponse(), false));
  // Header, HARD, CONTAINED, CLEARANCE, suppressed HARD; the CONTACT row is only counted.
  ASSERT_EQ(lines.size(), 7u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], HasSubstr("class"));
  EXPECT_THAT(lines[1], HasSubstr("HARD"));
  EXPECT_THAT(lines[1], HasSubstr("as1/bolt:1"));
  EXPECT_THAT(lines[1], HasSubstr("0.500"));
  EXPECT_THAT(lines[1], HasSubstr("(1.000, 2.000, 3.000)"));
  EXPECT_THAT(lines[1], HasSubstr("uncertain"));
  EXPECT_THAT(lines[2], HasSubstr("CONTAINED"));
  EXPECT_THAT(lines[3], HasSubstr("CLEARANCE"));
  EXPECT_THAT(lines[3], HasSubstr("0.125"));
  EXPECT_THAT(lines[4], HasSubstr("suppressed by bolts"));
  EXPECT_EQ(lines[5], "(1 CONTACT row not shown; --all-classes lists them)");
  EXPECT_THAT(lines[6], HasSubstr("HARD 1, CONTAINED 1, CONTACT 1, CLEARANCE 1, suppressed 1"));
  EXPECT_THAT(lines[6], HasSubstr("contact tolerance per pair 0.020 mm"));
  EXPECT_THAT(lines[6], HasSubstr("clearance 0.200 mm"));
  EXPECT_THAT(lines[6], HasSubstr("18 instances, 31 candidate pairs (4 cached), scene version 7"));
  // Columns line up: "path b" starts at the same column on every row.
  const std::size_t column = ColumnOf(lines[0], "path b");
  EXPECT_EQ(ColumnOf(lines[1], "as1/plate"), column);
  EXPECT_EQ(ColumnOf(lines[2], "as1/sleeve"), column);
  EXPECT_EQ(ColumnOf(lines[4], "as1/bolt:2"), column);
  // Right-aligned numbers end at the header's end.
  EXPECT_EQ(ColumnOf(lines[1], "0.500") + 5, ColumnOf(lines[0], "depth mm") + 8);
}

TEST(FormatInterference, AllClassesListsContacts) {
  const std::string text = FormatInterference(SampleResponse(), true);
  EXPECT_THAT(text, ::testing::ContainsRegex("\nCONTACT +as1/l-bracket +as1/plate +- +0\\.010 "));
  EXPECT_THAT(text, Not(HasSubstr("not shown")));
  EXPECT_EQ(Lines(text).size(), 7u);
}

TEST(FormatInterference, ExplicitContactToleranceIsEchoed) {
  v1::InterferenceResponse r = Response({});
  r.mutable_tolerances()->set_contact_tolerance_mm(0.05);
  const std::string text = FormatInterference(r, false);
  EXPECT_THAT(text, HasSubstr("no clashes to show"));
  EXPECT_THAT(text, HasSubstr("contact tolerance 0.050 mm, clearance not checked"));
}

TEST(Table, PadsByCodePointsAndAlignsRight) {
  Table t({"name", "n"}, "lr");
  t.AddRow({"größe", "7"});
  t.AddRow({"x", "1234"});
  EXPECT_EQ(t.Render(), "name      n\ngröße     7\nx      1234\n");
}

TEST(XmlEscape, SpecialAndControlCharacters) {
  EXPECT_EQ(XmlEscape("a<b>&\"c'\n\x01"), "a&lt;b&gt;&amp;&quot;c&apos;&#10;?");
}

// U+FFFE and U+FFFF are no XML 1.0 characters (a strict parser rejects the report); before, they
// went through. U+FFFD and other characters stay.
TEST(XmlEscape, NonCharactersFffeAndFfff) {
  EXPECT_EQ(XmlEscape("a\xef\xbf\xbe"
                      "b\xef\xbf\xbf"
                      "c\xef\xbf\xbd\xc3\xa4\xf0\x9f\x94\xa9"),
            "a?b?c\xef\xbf\xbd\xc3\xa4\xf0\x9f\x94\xa9");
}

// The report says UTF-8, so bytes that are not (a Latin-1 step name or file name, a truncated
// sequence, overlong forms, surrogates) become U+FFFD; before, they went through and a JUnit
// reader refused the whole report.
TEST(XmlEscape, InvalidUtf8BecomesReplacementCharacters) {
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(XmlEscape("gr\xf6\xdf"
                      "e"),
            "gr" + fffd + fffd + "e");                                  // Latin-1
  EXPECT_EQ(XmlEscape("a\xc3"), "a" + fffd);                            // truncated
  EXPECT_EQ(XmlEscape("\xbf<"), fffd + "&lt;");                         // stray
  EXPECT_EQ(XmlEscape("\xc0\xbc"), fffd + fffd);                        // overlong '<'
  EXPECT_EQ(XmlEscape("\xed\xa0\x80"), fffd + fffd + fffd);             // surrogate
  EXPECT_EQ(XmlEscape("\xf4\x90\x80\x80"), fffd + fffd + fffd + fffd);  // > U+10FFFF
  EXPECT_EQ(XmlEscape("\xe0\xa0\x80\xf4\x8f\xbf\xbf"), "\xe0\xa0\x80\xf4\x8f\xbf\xbf");  // edges
}

// Runs python3's XML parser on `xml` and returns one line per element of interest, or
// "UNAVAILABLE" when python3 cannot run.
std::string ParseWithPython(const std::string& xml) {
  // Per process and test: ctest runs tests in parallel processes.
  const std::string stem =
      absl::StrCat(::testing::TempDir(), "clashctl_", getpid(), "_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string path = stem + ".xml";
  std::ofstream(path, std::ios::binary) << xml;
  const std::string script =
      "import sys, xml.dom.minidom as m\n"
      "d = m.parse(sys.argv[1])\n"
      "for s in d.getElementsByTagName('testsuite'):\n"
      "  print('suite', s.getAttribute('name'), s.getAttribute('tests'),\n"
      "        s.getAttribute('failures'), s.getAttribute('skipped'))\n"
      "  for c in s.getElementsByTagName('testcase'):\n"
      "    f = c.getElementsByTagName('failure')\n"
      "    k = c.getElementsByTagName('skipped')\n"
      "    o = 'failure:' + f[0].getAttribute('type') if f else ('skipped' if k else 'passed')\n"
      "    print('case', c.getAttribute('name'), '|', o)\n";
  const std::string script_path = stem + ".py";
  std::ofstream(script_path) << script;
  FILE* pipe = popen(("python3 " + script_path + " " + path + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "UNAVAILABLE";
  std::string out;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  const int status = pclose(pipe);
  std::remove(path.c_str());
  std::remove(script_path.c_str());
  if (status != 0 && out.find("not found") != std::string::npos) return "UNAVAILABLE";
  return status == 0 ? out : "python3 failed: " + out;
}

TEST(JunitReport, WellFormedWithOneCasePerClashAndAVerdict) {
  v1::InterferenceResponse r = SampleResponse();
  // Paths with every character XML needs escaped.
  r.mutable_clashes(0)->set_path_a("as1/<bolt> & \"nut\" 'x'");
  const std::string xml = JunitReport("s<1>", r);
  EXPECT_THAT(xml, HasSubstr("name=\"interference s&lt;1&gt;\""));
  EXPECT_THAT(xml, HasSubstr("as1/&lt;bolt&gt; &amp; &quot;nut&quot; &apos;x&apos;"));
  EXPECT_THAT(xml, Not(HasSubstr("<bolt>")));

  const std::string parsed = ParseWithPython(xml);
  if (parsed == "UNAVAILABLE") GTEST_SKIP() << "python3 is not available";
  // 5 clashes + the verdict; failures: HARD, CONTAINED and the verdict; skipped: the suppressed.
  EXPECT_EQ(parsed,
            "suite interference s<1> 6 3 1\n"
            "case caa: as1/<bolt> & \"nut\" 'x' <-> as1/plate | failure:HARD\n"
            "case caa: as1/pin <-> as1/sleeve | failure:CONTAINED\n"
            "case caa: as1/l-bracket <-> as1/plate | passed\n"
            "case caa: as1/rod <-> as1/plate | passed\n"
            "case caa: as1/nut <-> as1/bolt:2 | skipped\n"
            "case no hard clashes | failure:HARD\n");
}

TEST(JunitReport, NoHardClashesPasses) {
  const std::string xml =
      JunitReport("s1", Response({Suppressed(MakeClash(v1::HARD, "a", "b"), "fit"),
                                  MakeClash(v1::CONTACT, "c", "d")}));
  const std::string parsed = ParseWithPython(xml);
  if (parsed == "UNAVAILABLE") GTEST_SKIP() << "python3 is not available";
  EXPECT_EQ(parsed,
            "suite interference s1 3 0 1\n"
            "case cab: a <-> b | skipped\n"
            "case ccd: c <-> d | passed\n"
            "case no hard clashes | passed\n");
}

// ---------------------------------------------------------------------------------------------
// Other output

TEST(ErrorLine, CodeNameAndMessage) {
  EXPECT_EQ(ErrorLine(absl::NotFoundError("no scene s1")), "clashctl: NOT_FOUND: no scene s1");
  EXPECT_EQ(ErrorLine(absl::UnavailableError("down")), "clashctl: UNAVAILABLE: down");
}

// A server's message is one line: a line break in it (an id echoed back) cannot fake a line.
TEST(ErrorLine, MessageWithoutControlCharacters) {
  EXPECT_EQ(ErrorLine(absl::NotFoundError("no scene s1\nclashctl: ok\r\x1b[2J")),
            "clashctl: NOT_FOUND: no scene s1?clashctl: ok??[2J");
}

TEST(ToJson, ProtoFieldNamesAndZeroValues) {
  const nlohmann::ordered_json j = ToJsonValue(SampleResponse());
  EXPECT_EQ(j["summary"]["candidate_pairs"], "31");  // uint64 is a string in proto3 JSON
  EXPECT_EQ(j["summary"]["contact"], "1");
  EXPECT_EQ(j["clashes"][0]["clash_class"], "HARD");
  EXPECT_EQ(j["clashes"][0]["path_a"], "as1/bolt:1");
  EXPECT_EQ(j["clashes"][2]["depth_mm"], 0);                       // printed although zero
  EXPECT_FALSE(j["tolerances"].contains("contact_tolerance_mm"));  // unset optional stays out
}

// --json escapes every character outside printable ASCII, so names from CAD files (DEL, and
// C1 controls such as U+0092, which a CP1252 right quote becomes) pass stdout's control filter
// unchanged and parse back as they were; before, nlohmann's dump wrote them raw and the filter
// turned them into '?'.
TEST(DumpJson, EscapesWhatTheControlFilterWouldReplace) {
  v1::Instance instance;
  const std::string path = "as1/nut\xc2\x92s\x7f/b\xc3\xa4r\x1b[2J";
  instance.set_path(path);
  const std::string text =
      DumpJson(nlohmann::ordered_json{{"instances", {ToJsonValue(instance)}}, {"n", path}});
  EXPECT_EQ(WithoutControls(text, "\n"), text);
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    EXPECT_TRUE(c == '\n' || (u >= 0x20 && u < 0x7f)) << static_cast<int>(u);
  }
  const nlohmann::ordered_json back = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(back["instances"][0]["path"], path);
  EXPECT_EQ(back["n"], path);
}

// A step the sweep could not decide (its iteration cap) is counted as blocked by the server,
// but it is not blocked by anything: the table and the JUnit report say UNDECIDED / undecided
// and why, instead of BLOCKED with no blocker, which sent users looking for a collision.
TEST(FormatSequence, OkBlockedAndUndecidedSteps) {
  std::vector<v1::StepResult> steps(3);
  steps[0].set_step_index(0);
  steps[0].set_name("insert pin");
  steps[0].set_ok(true);
  steps[0].set_first_contact_t(-1);
  steps[0].set_min_clearance_mm(0.25);
  steps[0].set_min_clearance_path("as1/plate");
  steps[1].set_step_index(1);
  steps[1].set_name("insert bolt");
  steps[1].set_blocked_t(0.5);
  v1::Blocker* b = steps[1].add_blockers();
  b->set_path("as1/nut");
  b->set_clash_class(v1::HARD);
  steps[2].set_step_index(2);
  steps[2].set_blocked_t(0.75);
  steps[2].set_undecided(true);
  v1::SequenceSummary summary;
  summary.set_steps(3);
  summary.set_steps_ok(1);
  summary.set_steps_blocked(2);
  summary.set_first_blocked_step(1);
  const std::string table = FormatSequence(steps, summary);
  EXPECT_THAT(table, HasSubstr("insert pin"));
  EXPECT_THAT(table, HasSubstr("BLOCKED     0.5000"));
  EXPECT_THAT(table, HasSubstr("as1/nut (HARD)"));
  EXPECT_THAT(table, HasSubstr("step 3                       UNDECIDED    0.7500"));
  EXPECT_THAT(table, HasSubstr("not decided: the sweep reached its iteration cap"));
  EXPECT_THAT(table, HasSubstr("3 steps: 1 ok, 2 blocked, 0 not run; first blocked: step 2"));
  EXPECT_THAT(table, Not(HasSubstr("allowed pair")));
  steps[0].set_suppressed_pairs(1201);  // counted below its step's line
  EXPECT_THAT(FormatSequence(steps, summary),
              HasSubstr("as1/plate\n       1201 allowed pairs left out of the sweep\n2 "));
  steps[0].set_suppressed_pairs(0);
  // A step whose contact tolerance the server raised above the requested one (1e-9 of a huge
  // travel) says so below its line; one at the requested tolerance does not.
  summary.mutable_tolerances()->set_contact_tolerance_mm(0.05);
  steps[0].set_contact_tolerance_mm(0.05);
  steps[1].set_contact_tolerance_mm(1000);
  steps[2].set_contact_tolerance_mm(0.05);
  const std::string raised = FormatSequence(steps, summary);
  EXPECT_THAT(raised, HasSubstr("as1/nut (HARD)\n       contact tolerance raised to 1000 mm"));
  EXPECT_EQ(raised.find("raised"), raised.rfind("raised"));
  const std::string junit = SequenceJunitReport("s1", steps, summary);
  EXPECT_THAT(junit, HasSubstr("<failure message=\"blocked at t=0.5\">as1/nut (HARD)</failure>"));
  EXPECT_THAT(
      junit,
      HasSubstr("<failure message=\"undecided at t=0.75\">not decided: the sweep "
                "reached its iteration cap (the path is proven free only up to its t)</failure>"));
}

TEST(FormatAssembly, IndentedTreeByPath) {
  v1::Assembly a;
  a.set_assembly_id("a1");
  for (const char* path : {"as1/rod-assembly/nut", "as1/rod-assembly/bolt", "as1/plate"}) {
    v1::AssemblyInstance* i = a.add_instances();
    i->set_path(path);
    i->set_part_id("p9");
  }
  const std::string text = FormatAssembly(a);
  EXPECT_THAT(text, HasSubstr("instances (3):\n"
                              "  as1\n"
                              "    rod-assembly\n"
                              "      nut  p9  at (0.000, 0.000, 0.000)\n"
                              "      bolt  p9  at (0.000, 0.000, 0.000)\n"
                              "    plate  p9  at (0.000, 0.000, 0.000)\n"));
}

// Outside tables too, names from CAD files and the server reach the output without control
// characters: a "\n" or "\r" in an instance path, a warning, a step name, a blocker's path or
// an escape direction cannot fake a line (before, they were printed raw).
TEST(FormatAssembly, NamesWithoutControlCharacters) {
  v1::Assembly a;
  a.mutable_report()->add_warnings("face 7\nFAKE WARNING\r");
  v1::AssemblyInstance* i = a.add_instances();
  i->set_path("as1/bolt\nFAKE LINE\r\x1b[2J");
  i->set_part_id("p9\n");
  const std::string text = FormatAssembly(a);
  EXPECT_THAT(text, HasSubstr("  - face 7?FAKE WARNING?\n"));
  EXPECT_THAT(text, HasSubstr("    bolt?FAKE LINE??[2J  p9?  at "));
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  for (const std::string& line : Lines(text)) EXPECT_FALSE(line.starts_with("FAKE")) << line;

  v1::ImportCadResponse imported;
  *imported.mutable_assembly() = a;
  EXPECT_THAT(FormatImport(imported), HasSubstr("  - face 7?FAKE WARNING?\n"));
}

TEST(FormatSequence, NamesWithoutControlCharacters) {
  std::vector<v1::StepResult> steps(2);
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(step_index: 0
           name: "insert\nFAKE STEP"
           blocked_t: 0.5
           blockers { path: "as1/nut\rFAKE" clash_class: HARD }
           free_directions { name: "+x\nFAKE" })pb",
      &steps[0]));
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(step_index: 1 ok: true min_clearance_path: "as1/plate\n\x1b[2J")pb", &steps[1]));
  const std::string table = FormatSequence(steps, v1::SequenceSummary());
  for (const char* shown :
       {"insert?FAKE STEP", "as1/nut?FAKE (HARD)", "escape +x?FAKE", "as1/plate??[2J"}) {
    EXPECT_THAT(table, HasSubstr(shown));
  }
  EXPECT_EQ(table.find('\r'), std::string::npos);
  EXPECT_EQ(table.find('\x1b'), std::string::npos);
  // The header, a step line and its escape direction, a step line, the summary.
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 5);
}

TEST(FormatPicks, HitsAndMisses) {
  v1::PickResponse r;
  v1::PickHit* hit = r.add_hits();
  hit->set_hit(true);
  hit->set_instance_id(4);
  hit->set_path("as1/plate");
  hit->set_distance_mm(12.5);
  r.add_hits();
  const std::vector<std::string> lines = Lines(FormatPicks(r));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[1], HasSubstr("yes"));
  EXPECT_THAT(lines[1], HasSubstr("as1/plate"));
  EXPECT_THAT(lines[1], HasSubstr("12.500"));
  EXPECT_THAT(lines[2], HasSubstr("no"));
}

TEST(ProgressLine, PercentBarAndRate) {
  EXPECT_EQ(ProgressLine(5'000'000, 10'000'000, 2.0),
            "[###############---------------]  50%  5.0/10.0 MB  2.5 MB/s");
  EXPECT_THAT(ProgressLine(0, 0, 0), HasSubstr("100%"));
}

// Names and paths come from CAD files: an escape sequence or a line break in one reaches the
// terminal neither through a table (where a line break would fake a row) nor through anything
// else clashctl prints (its stdout and stderr filters).
TEST(Terminal, ControlCharactersFromNamesNeverReachIt) {
  Table t({"path", "class"});
  t.AddRow({"bolt\x1b]52;c;ZWNobyBoaQ==\x07\nFAKE ROW", "HARD"});
  const std::string table = t.Render();
  EXPECT_EQ(table.find('\x1b'), std::string::npos);
  EXPECT_EQ(table.find('\x07'), std::string::npos);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2);  // the header and one row
  EXPECT_THAT(table, HasSubstr("bolt?]52;c;ZWNobyBoaQ==??FAKE ROW"));

  std::ostringstream sink;
  ControlFilter filter(sink, "\n\t");
  std::ostream out(&filter);
  out << "scene \x1b[2J(name)\r\x7f\tok\n" << '\x1b' << 'x' << std::flush;
  EXPECT_EQ(sink.str(), "scene ?[2J(name)??\tok\n?x");
  // C1 controls as UTF-8 (CSI is C2 9B), also split between two writes; other characters whole.
  out << "\xc2\x9b"
         "31m \xc2"
      << '\x9d' << "0;t \xc3\xa9\xc2\xa0\xc2" << std::flush;
  EXPECT_EQ(sink.str().substr(sink.str().find("?x") + 2), "?31m ?0;t \xc3\xa9\xc2\xa0\xc2");
  EXPECT_EQ(WithoutControls("a\xc2\x85"
                            "b\xc2\xa9"),
            "a?b\xc2\xa9");
}

// A plaintext token to a loopback server never goes through a proxy from the environment (gRPC
// would send the call, token and all, to $http_proxy, loopback target or not).
TEST(Client, APlaintextTokenNeverGoesThroughAProxy) {
  const int proxy = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(proxy, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(proxy, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(proxy, 4), 0);
  ASSERT_EQ(getsockname(proxy, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string proxy_url = absl::StrCat("http://127.0.0.1:", ntohs(addr.sin_port));
  testing::ScopedEnv http_proxy("http_proxy", proxy_url);
  testing::ScopedEnv grpc_proxy("grpc_proxy", proxy_url);
  testing::ScopedEnv no_proxy("no_proxy", "");
  testing::ScopedEnv no_grpc_proxy("no_grpc_proxy", "");
  client::ClientOptions options;
  options.target = "127.0.0.1:1";  // nothing listens: the call fails either way
  options.token = "secret";
  options.health_timeout = std::chrono::milliseconds(500);
  auto client = client::Client::Connect(options);
  ASSERT_THAT(client.status(), IsOk());
  EXPECT_FALSE((*client)->CheckHealth().ok());
  const int accepted = accept(proxy, nullptr, nullptr);
  EXPECT_LT(accepted, 0) << "the call went to the proxy";
  if (accepted >= 0) close(accepted);
  close(proxy);
}

// A TLS file given while TLS is off is refused, the client key alone too (before, a lone
// --tls-key quietly meant plaintext).
TEST(Client, TlsFilesWithoutTlsAreRefused) {
  for (const auto& set :
       {&client::ClientOptions::tls_ca_file, &client::ClientOptions::tls_cert_file,
        &client::ClientOptions::tls_key_file}) {
    client::ClientOptions options;
    options.target = "127.0.0.1:1";
    options.*set = "file.pem";
    EXPECT_THAT(client::Client::Connect(options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, "TLS is off"));
  }
}

// Input files are read only when regular and only up to a cap: /dev/zero grew memory until
// the process was killed, a FIFO blocked for ever (before, every file was read whole).
TEST(ReadRegularFile, OnlyRegularFilesUpToTheCap) {
  const std::string dir = testing::MakeTempDir(::testing::TempDir(), "clashctl_read_");
  ASSERT_FALSE(dir.empty());
  const std::string file = dir + "/data";
  std::ofstream(file, std::ios::binary) << std::string(1000, 'x');
  EXPECT_THAT(client::ReadRegularFile(file, 1000), IsOk());
  EXPECT_EQ(client::ReadRegularFile(file, 1000)->size(), 1000u);
  EXPECT_THAT(client::ReadRegularFile(file, 999),
              StatusIs(absl::StatusCode::kInvalidArgument, "is larger than 999 bytes"));
  EXPECT_THAT(client::ReadRegularFile("/dev/zero", 1 << 20),
              StatusIs(absl::StatusCode::kInvalidArgument, "/dev/zero is not a regular file"));
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(client::ReadRegularFile(fifo, 1 << 20),
              StatusIs(absl::StatusCode::kInvalidArgument, "is not a regular file"));
  EXPECT_THAT(client::ReadRegularFile(dir, 1 << 20),
              StatusIs(absl::StatusCode::kInvalidArgument, "is not a regular file"));
  EXPECT_THAT(client::ReadRegularFile(dir + "/missing", 1 << 20),
              StatusIs(absl::StatusCode::kInvalidArgument, "cannot read " + dir + "/missing"));
  // A /proc file says it is empty: the read still stops at the cap.
  EXPECT_THAT(client::ReadRegularFile("/proc/self/maps", 16),
              StatusIs(absl::StatusCode::kInvalidArgument, "is larger than 16 bytes"));
  std::filesystem::remove_all(dir);
}

// A token file is read up to 64 KiB, and only when regular.
TEST(FindToken, TheTokenFileIsARegularFileOfAtMost64KiB) {
  testing::ScopedEnv no_token("CLASH_TOKEN", "");
  const std::string dir = testing::MakeTempDir(::testing::TempDir(), "clashctl_token_");
  ASSERT_FALSE(dir.empty());
  const std::string file = dir + "/token";
  std::ofstream(file, std::ios::binary) << "secret \r\n" << std::string((64 << 10) - 9, '#');
  absl::StatusOr<std::string> token = client::FindToken(file);
  ASSERT_THAT(token, IsOk());
  EXPECT_EQ(*token, "secret");
  std::ofstream(file, std::ios::binary | std::ios::app) << "#";
  EXPECT_THAT(client::FindToken(file),
              StatusIs(absl::StatusCode::kInvalidArgument, "is larger than 64 KiB"));
  EXPECT_THAT(client::FindToken("/dev/zero"),
              StatusIs(absl::StatusCode::kInvalidArgument, "/dev/zero is not a regular file"));
  std::filesystem::remove_all(dir);
}

// A token goes without TLS only to targets whose every address is on this machine.
TEST(IsLoopbackTarget, OnlyAddressesOnThisMachine) {
  for (const char* target :
       {"localhost:50051", "localhost", "127.0.0.1:50051", "127.1.2.3:7", "[::1]:50051", "[::1]",
        "dns:///localhost:50051", "dns:///127.0.0.1:50051", "ipv4:127.0.0.1:1,127.0.0.2:2",
        "ipv6:[::1]:50051", "unix:/tmp/clashd.sock", "unix-abstract:clashd"}) {
    EXPECT_TRUE(client::IsLoopbackTarget(target)) << target;
  }
  for (const char* target :
       {"127.0.0.1.evil.example:50051", "127.evil.example:1", "localhost.evil.example:50051",
        "ipv4:127.0.0.1:1,10.0.0.5:50051", "ipv4:10.0.0.5:50051", "10.0.0.5:50051",
        "127.0.0.1,10.0.0.5:50051", "[::2]:50051", "[::1", "[::1]x", "ipv6:[::1]:1,[2001:db8::1]:2",
        "dns://8.8.8.8/localhost:50051", "dns:///", "", "127.0.0.256:1", "127.0.0:1",
        "example.com:443", "ipv4:127.0.0.1:1%2C10.0.0.5:443", "ipv6:[::1]:1%2C[2001:db8::1]:443",
        "127.0.0.1:1x,10.0.0.5:443", "localhost:50051:1", "[::1]:123456", "127.0.0.1:",
        // absl::SimpleAtoi takes a sign and spaces; an octet does not.
        "127.0.0.+1:50051", "127.0.0.-0:50051", "127.+0.0.1", "127.0.0. 1:50051",
        "127.0.0.1 :50051"}) {
    EXPECT_FALSE(client::IsLoopbackTarget(target)) << target;
  }
}

}  // namespace
}  // namespace clash::clashctl
