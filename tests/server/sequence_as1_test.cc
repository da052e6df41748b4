// The as1 assembly through the sequence engine (issue 5, tests with known truth): a valid order
// passes every step; a part installed after the bolt that passes through it, and a bolt
// inserted from the wrong side, are blocked by the right instance at the right place.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "sequence_engine.h"
#include "testing/as1_sequence.h"
#include "testing/random_geometry.h"
#include "testing/status_matchers.h"

extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

namespace clash::testing {
namespace {

// Runs the sequence and collects the step results.
absl::StatusOr<std::vector<v1::StepResult>> RunSteps(const As1& as1,
                                                     const v1::ValidateSequenceRequest& req) {
  std::vector<v1::StepResult> steps;
  std::shared_lock lock(as1.scene->mu);
  absl::Status s = server::RunSequence(
      *as1.scene, req, [] { return absl::OkStatus(); },
      [&](const v1::ValidateSequenceEvent& e) {
        if (e.has_step()) steps.push_back(e.step());
      });
  if (!s.ok()) return s;
  return steps;
}

// Under sanitizers (CLASH_TEST_SCALE < 1) a pose costs about 300 times more (Debug, ASan,
// UBSan), so the tests run less of the assembly.
bool Scaled() { return Trials(10) < 10; }

// Runs `req` completed with the rest of the valid order: the steps of req pass but the last,
// which is blocked (the sequence stops there); *last is its result. Scaled, the steps before
// the last are left out: their instances are moved by no step and stand installed, so the last
// step meets the same obstacles.
void RunUntilBlocked(const As1& a, const v1::ValidateSequenceRequest& req, v1::StepResult* last) {
  v1::ValidateSequenceRequest run = Completed(a, req);
  if (Scaled()) {
    run.mutable_steps()->DeleteSubrange(0, req.steps_size() - 1);
  }
  const int expected = Scaled() ? 1 : req.steps_size();
  auto steps = RunSteps(a, run);
  ASSERT_THAT(steps.status(), IsOk());
  ASSERT_EQ(static_cast<int>(steps->size()), expected);
  for (int k = 0; k + 1 < expected; ++k) EXPECT_TRUE((*steps)[k].ok()) << k;
  *last = steps->back();
  EXPECT_FALSE(last->ok());
}

// Disables every instance but `keep` for its lifetime (disabled instances take no part in a
// sequence).
class OnlyThese {
 public:
  OnlyThese(As1& a, const std::set<std::string>& keep) : a_(a) {
    for (auto& [id, rec] : a_.scene->instances) {
      if (!keep.count(rec.path)) {
        a_.scene->SetEnabled(rec, false);
        off_.push_back(id);
      }
    }
  }
  ~OnlyThese() {
    for (uint64_t id : off_) a_.scene->SetEnabled(*a_.scene->Find(id), true);
  }
  OnlyThese(const OnlyThese&) = delete;
  OnlyThese& operator=(const OnlyThese&) = delete;

 private:
  As1& a_;
  std::vector<uint64_t> off_;
};

class As1SequenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string file = As1File(CLASH_CAD_DATA_DIR);
    auto loaded = LoadAs1(file);
    // Only a missing file skips: any other error (an import that regressed, a role the
    // geometry no longer shows) fails every test of the suite.
    if (loaded.ok()) {
      as1_ = loaded->release();
    } else if (!std::filesystem::exists(file)) {
      skip_ = std::string(loaded.status().message());
    } else {
      error_ = loaded.status().ToString();
    }
  }
  static void TearDownTestSuite() {
    delete as1_;
    as1_ = nullptr;
  }
  void SetUp() override {
    if (!error_.empty()) FAIL() << "as1 does not load: " << error_;
    if (as1_ == nullptr) GTEST_SKIP() << skip_ << " (../shared absent?)";
  }
  static As1* as1_;
  static std::string skip_;
  static std::string error_;
};
As1* As1SequenceTest::as1_ = nullptr;
std::string As1SequenceTest::skip_;
std::string As1SequenceTest::error_;

// Where a shaft's head end lies along u (world).
double HeadAlong(const Shaft& s, const geom::Vec3& u) {
  return (s.axis_point_W + s.head_s * s.tip_dir_W).dot(u);
}
double TipAlong(const Shaft& s, const geom::Vec3& u) {
  return (s.axis_point_W + s.tip_s * s.tip_dir_W).dot(u);
}
// The lowest value of a world box along the axis-aligned unit u.
double MinAlong(const geom::Aabb& box, const geom::Vec3& u) {
  return std::min(box.min.dot(u), box.max.dot(u));
}
double MaxAlong(const geom::Aabb& box, const geom::Vec3& u) {
  return std::max(box.min.dot(u), box.max.dot(u));
}

// The contact tolerance the engine uses for `moving` against what stands (default tolerances:
// the deflections added).
double Tau(const As1& a, const server::InstanceRec& moving) {
  double most = 0;
  for (const auto& [id, rec] : a.scene->instances) most = std::max(most, rec.part->deflection_mm);
  return moving.part->deflection_mm + most;
}

// What the geometry says, checked before the sequences rely on it: 6 bolts and a rod, each nut
// on an axis, the bolts along the plate's normal and through the plate, heads wider than tips.
TEST_F(As1SequenceTest, RolesFollowFromTheGeometry) {
  const As1& a = *as1_;
  const geom::Vec3 up = Up(a);
  std::printf("plate %s, up (%g, %g, %g), %zu brackets\n", a.plate->path.c_str(), up.x(), up.y(),
              up.z(), a.brackets.size());
  for (const Shaft& s : a.shafts) {
    std::printf(
        "%s %s: point (%.3f, %.3f, %.3f) tip (%.3f, %.3f, %.3f) length %.3f head r %.3f "
        "tip r %.3f\n",
        s.is_bolt ? "bolt" : "rod", s.rec->path.c_str(), s.axis_point_W.x(), s.axis_point_W.y(),
        s.axis_point_W.z(), s.tip_dir_W.x(), s.tip_dir_W.y(), s.tip_dir_W.z(), s.tip_s - s.head_s,
        s.head_radius, s.shank_radius);
  }
  for (const NutOnShaft& n : a.nuts) {
    std::printf("nut %s on %s at %.3f, %.3f from the %s end, %.4f off the axis\n",
                n.rec->path.c_str(), a.shafts[static_cast<std::size_t>(n.shaft)].rec->path.c_str(),
                n.s, n.to_end_mm, n.from > 0 ? "tip" : "head", n.distance_to_axis);
  }
  EXPECT_EQ(a.scene->instances.size(), 18u);
  EXPECT_EQ(a.brackets.size(), 2u);
  int bolts = 0;
  for (const Shaft& s : a.shafts) {
    if (!s.is_bolt) continue;
    ++bolts;
    EXPECT_NEAR(std::abs(s.tip_dir_W.dot(up)), 1.0, 1e-9) << s.rec->path;
    EXPECT_LT(s.tip_dir_W.dot(up), 0) << s.rec->path << " goes in from the brackets' side";
    EXPECT_GT(s.head_radius, s.shank_radius + 1.0) << s.rec->path;
    // The shank crosses the plate: the tip beyond its far face, the head above its near face.
    EXPECT_LT(TipAlong(s, up), MinAlong(a.plate->world_box, up)) << s.rec->path;
    EXPECT_GT(HeadAlong(s, up), MaxAlong(a.plate->world_box, up)) << s.rec->path;
  }
  EXPECT_EQ(bolts, 6);
  EXPECT_EQ(a.shafts.size(), 7u);
  EXPECT_EQ(a.nuts.size(), 8u);
  for (const NutOnShaft& n : a.nuts) EXPECT_LT(n.distance_to_axis, 1e-3) << n.rec->path;
  for (const auto* b : a.brackets) EXPECT_EQ(BoltsUnder(a, *b).size(), 3u) << b->path;
}

// Plate, brackets, bolts along their axes, their nuts screwed on, the rod and its nuts: every
// step passes, touching at the end (contact, not clash), the threads reported as suppressed.
TEST_F(As1SequenceTest, ValidOrderPassesEveryStep) {
  As1& a = *as1_;
  v1::ValidateSequenceRequest req = ValidOrder(a);
  ASSERT_EQ(req.steps_size(), 18);
  // Scaled: the plate, the first bracket, its first bolt and that bolt's nut, the rest disabled.
  std::set<std::string> keep;
  for (const auto& [id, rec] : a.scene->instances) keep.insert(rec.path);
  if (Scaled()) {
    const Shaft* bolt = BoltsUnder(a, *a.brackets.front()).front();
    keep = {a.plate->path, a.brackets.front()->path, bolt->rec->path};
    for (const NutOnShaft& n : a.nuts) {
      if (a.shafts[static_cast<std::size_t>(n.shaft)].rec == bolt->rec) keep.insert(n.rec->path);
    }
    v1::ValidateSequenceRequest some = req;
    some.clear_steps();
    for (const v1::SequenceStep& s : req.steps()) {
      if (keep.count(s.moving().path_prefixes(0))) *some.add_steps() = s;
    }
    req = some;
  }
  const OnlyThese only(a, keep);
  auto steps = RunSteps(a, req);
  ASSERT_THAT(steps.status(), IsOk());
  ASSERT_EQ(steps->size(), Scaled() ? 4u : 18u);
  for (const v1::StepResult& r : *steps) {
    SCOPED_TRACE(r.name());
    EXPECT_TRUE(r.ok());
    EXPECT_FALSE(r.undecided());
    EXPECT_EQ(r.blockers_size(), 0);
    EXPECT_EQ(r.blocked_t(), 1.0);
    // Everything but the plate (the first part: nothing stands) ends resting on what stands.
    if (r.step_index() > 0) {
      EXPECT_GT(r.distance_queries(), 0);
      EXPECT_GE(r.first_contact_t(), 0);
    }
    const server::InstanceRec* m = a.scene->Find(a.scene->by_path.at(r.moving_paths(0)));
    const bool nut = m->part->info.name() == "nut";
    EXPECT_EQ(r.suppressed_size(), nut ? 1 : 0);
  }
}

// A bolt inserted from the wrong side (from the nut's side, head first) after the plate and
// brackets: its head meets the plate's far face.
TEST_F(As1SequenceTest, BoltFromTheWrongSideIsBlockedByThePlate) {
  const As1& a = *as1_;
  const Shaft* bolt = FirstBolt(a);
  ASSERT_NE(bolt, nullptr);
  const v1::ValidateSequenceRequest req = WrongSideBoltOrder(a);
  const geom::Vec3 u = -bolt->tip_dir_W;  // the way it moves: head leading
  const double L = WrongSideDistance(*bolt);
  v1::StepResult r;
  ASSERT_NO_FATAL_FAILURE(RunUntilBlocked(a, req, &r));
  ASSERT_EQ(r.blockers_size(), 1) << r.ShortDebugString();
  EXPECT_EQ(r.blockers(0).path(), a.plate->path);
  EXPECT_EQ(r.blockers(0).clash_class(), v1::HARD);
  // The head's end starts L back along u and touches the plate's near face (along u) when
  // head + (t - 1) L = face; the engine reports the first pose deeper than τ, within τ/4 of
  // travel after it.
  const double tau = Tau(a, *bolt->rec);
  const double face = MinAlong(a.plate->world_box, u);
  const double t_touch = 1 - (HeadAlong(*bolt, u) - face) / L;
  std::printf("t_touch %.5f blocked_t %.5f tau %.4f L %.3f\n", t_touch, r.blocked_t(), tau, L);
  EXPECT_GE(r.blocked_t(), t_touch);
  EXPECT_LE(r.blocked_t(), t_touch + 1.5 * tau / L);
  // The witness lies on the plate's face, within the head's radius of the axis.
  const geom::Vec3 p = server::FromProto(r.blockers(0).point_mm());
  EXPECT_NEAR(p.dot(u), face, 1.5 * tau);
  const geom::Vec3 off = p - bolt->axis_point_W;
  EXPECT_LE((off - off.dot(u) * u).norm(), bolt->head_radius + tau);
}

// A bracket lowered after its bolts were put through the plate: its foot comes down on their
// heads, and a bolt of that bracket (no other instance) blocks it.
TEST_F(As1SequenceTest, BracketAfterItsBoltsIsBlockedByABolt) {
  const As1& a = *as1_;
  ASSERT_FALSE(a.brackets.empty());
  const server::InstanceRec& bracket = *a.brackets.front();
  const std::vector<const Shaft*> bolts = BoltsUnder(a, bracket);
  ASSERT_FALSE(bolts.empty());
  const v1::ValidateSequenceRequest req = BracketAfterBoltsOrder(a);
  v1::StepResult r;
  ASSERT_NO_FATAL_FAILURE(RunUntilBlocked(a, req, &r));
  ASSERT_GE(r.blockers_size(), 1) << r.ShortDebugString();
  double head_top = -std::numeric_limits<double>::infinity();
  const geom::Vec3 up = Up(a);
  for (const Shaft* s : bolts) head_top = std::max(head_top, HeadAlong(*s, up));
  for (const v1::Blocker& b : r.blockers()) {
    EXPECT_EQ(b.clash_class(), v1::HARD);
    EXPECT_TRUE(std::any_of(bolts.begin(), bolts.end(),
                            [&](const Shaft* s) { return s->rec->path == b.path(); }))
        << b.path() << " is not a bolt of " << bracket.path;
    // Met at the heads' top.
    EXPECT_NEAR(server::FromProto(b.point_mm()).dot(up), head_top, 1.5 * Tau(a, bracket));
  }
  // The bracket's lowest face (its foot, on the plate when installed) starts D higher and meets
  // the heads' top when bottom + (1 - t) D = head top.
  const double D = ApproachDistance(bracket);
  const double tau = Tau(a, bracket);
  const double t_touch = 1 - (head_top - MinAlong(bracket.world_box, up)) / D;
  std::printf("t_touch %.5f blocked_t %.5f tau %.4f D %.3f\n", t_touch, r.blocked_t(), tau, D);
  EXPECT_GE(r.blocked_t(), t_touch);
  EXPECT_LE(r.blocked_t(), t_touch + 1.5 * tau / D);
}

// The rod crosses the way of the bolts: a bolt put in after the rod, from high enough above to
// start clear of it, is blocked by the rod when its tip reaches the rod's top.
TEST_F(As1SequenceTest, BoltAfterTheRodIsBlockedByTheRod) {
  const As1& a = *as1_;
  const Shaft* rod = nullptr;
  for (const Shaft& s : a.shafts) {
    if (!s.is_bolt) rod = &s;
  }
  ASSERT_NE(rod, nullptr);
  const geom::Vec3 up = Up(a);
  // The bolt whose axis passes nearest to the rod's axis.
  const Shaft* bolt = nullptr;
  double best = std::numeric_limits<double>::infinity();
  for (const Shaft& s : a.shafts) {
    if (!s.is_bolt) continue;
    const geom::Vec3 w = s.axis_point_W - rod->axis_point_W;
    const geom::Vec3 n = s.tip_dir_W.cross(rod->tip_dir_W).normalized();
    if (std::abs(w.dot(n)) < best) {
      best = std::abs(w.dot(n));
      bolt = &s;
    }
  }
  ASSERT_NE(bolt, nullptr);
  ASSERT_LT(best, rod->shank_radius) << "no bolt crosses the rod";
  const v1::ValidateSequenceRequest valid = ValidOrder(a);
  v1::ValidateSequenceRequest req;
  req.set_scene_id(a.scene->id());
  for (int k = 0; k < 1 + static_cast<int>(a.brackets.size()); ++k) {
    *req.add_steps() = valid.steps(k);
  }
  *req.add_steps() =
      LinearStep(rod->rec->path, {rod->rec->path}, rod->tip_dir_W, rod->tip_s - rod->head_s + 5.0);
  // Start with the tip above everything: the tip beyond the top of the brackets' boxes.
  double top = -std::numeric_limits<double>::infinity();
  for (const auto* b : a.brackets) top = std::max(top, MaxAlong(b->world_box, up));
  const double L = top - TipAlong(*bolt, up) + 5.0;
  *req.add_steps() = LinearStep("bolt after rod", {bolt->rec->path}, bolt->tip_dir_W, L);
  v1::StepResult r;
  ASSERT_NO_FATAL_FAILURE(RunUntilBlocked(a, req, &r));
  ASSERT_EQ(r.blockers_size(), 1) << r.ShortDebugString();
  EXPECT_EQ(r.blockers(0).path(), rod->rec->path);
  EXPECT_EQ(r.blockers(0).clash_class(), v1::HARD);
  // The tip (moving along -up) meets the rod's top, at rod axis + radius along up (within the
  // rod's tessellation deflection), when tip + (1 - t) L = rod top.
  const double rod_top = rod->axis_point_W.dot(up) + rod->shank_radius;
  const double tau = Tau(a, *bolt->rec);
  const double t_touch = 1 - (rod_top - TipAlong(*bolt, up)) / L;
  const double slack = rod->rec->part->deflection_mm / L;
  std::printf("t_touch %.5f blocked_t %.5f tau %.4f L %.3f\n", t_touch, r.blocked_t(), tau, L);
  EXPECT_GE(r.blocked_t(), t_touch - 1e-9);
  EXPECT_LE(r.blocked_t(), t_touch + slack + 1.5 * tau / L);
}

}  // namespace
}  // namespace clash::testing
