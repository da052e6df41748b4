// The sequence engine on scenes built in process (no server): how a step reports a group of
// movers that one of them stops, and a sweep that reaches its cap of checked poses.
#include "sequence_engine.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "convert.h"
#include "testing/random_geometry.h"
#include "testing/status_matchers.h"

namespace clash::server {
namespace {

using geom::RigidTransform;
using geom::Vec3;
using testing::IsOk;
using testing::MakeBox;

// A scene of boxes, each placed at its installed pose.
class BoxScene {
 public:
  BoxScene() : scene_(std::make_unique<Scene>("s1")) {}
  void Add(const std::string& path, const Vec3& half, const Vec3& at) {
    auto part = std::make_shared<PartEntry>();
    part->geom = MakeBox(half).Part();
    InstanceRec rec;
    rec.id = scene_->next_instance_id++;
    rec.part = std::move(part);
    rec.path = path;
    rec.name = path;
    rec.X_WP = RigidTransform::Translation(at);
    scene_->Add(std::move(rec));
  }
  // Runs a sequence, collecting its step results.
  std::vector<v1::StepResult> Run(const v1::ValidateSequenceRequest& req,
                                  const SequenceLimits& limits = {}) {
    std::vector<v1::StepResult> steps;
    const absl::Status s = RunSequence(
        *scene_, req, [] { return absl::OkStatus(); },
        [&](const v1::ValidateSequenceEvent& e) {
          if (e.has_step()) steps.push_back(e.step());
        },
        limits);
    EXPECT_THAT(s, IsOk());
    return steps;
  }

 private:
  std::unique_ptr<Scene> scene_;
};

// One step moving the instances under `prefix` into place by `distance` along +x.
v1::ValidateSequenceRequest InstallAlongX(const std::string& prefix, double distance) {
  v1::ValidateSequenceRequest req;
  req.mutable_tolerances()->set_contact_tolerance_mm(0.01);
  v1::SequenceStep* step = req.add_steps();
  step->mutable_moving()->add_path_prefixes(prefix);
  step->mutable_motion()->mutable_linear()->mutable_direction()->set_x(1);
  step->mutable_motion()->mutable_linear()->set_distance_mm(distance);
  return req;
}

// A group of two 2 mm cubes comes 100 mm along +x into place: group/a meets a wall 2 mm short of
// its installed pose, group/b (the first mover) would then pass a post 1 mm away. The group
// stops at the wall, so nothing past it is reported: the profile (the first mover's) ends there,
// and the escape directions (tested over 1.5 times a cube's diagonal, 5.2 mm) are group/a's,
// which the wall blocks backwards. Before, the profile ran to t = 1 beside the post the group
// never reaches, and the escape directions were group/b's, free in every direction.
TEST(SequenceEngine, AGroupStopsWhereOneOfItsMoversIsBlocked) {
  BoxScene scene;
  scene.Add("group/b", Vec3(1, 1, 1), Vec3(100, 20, 0));
  scene.Add("group/a", Vec3(1, 1, 1), Vec3(100, 0, 0));
  scene.Add("wall", Vec3(1, 10, 10), Vec3(96, 0, 0));
  scene.Add("post", Vec3(1, 1, 1), Vec3(97, 23, 0));
  v1::ValidateSequenceRequest req = InstallAlongX("group", 100);
  req.mutable_tolerances()->set_clearance_mm(2);
  req.set_clearance_profile(true);
  req.set_free_directions(true);
  const std::vector<v1::StepResult> steps = scene.Run(req);
  ASSERT_EQ(steps.size(), 1u);
  const v1::StepResult& r = steps[0];
  ASSERT_EQ(r.moving_paths_size(), 2);
  ASSERT_EQ(r.moving_paths(0), "group/b");
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(r.undecided());
  ASSERT_EQ(r.blockers_size(), 1);
  EXPECT_EQ(r.blockers(0).moving_path(), "group/a");
  EXPECT_EQ(r.blockers(0).path(), "wall");
  // a's face at x = 1 reaches the wall's at x = 95 after 94 mm; blocked τ deeper.
  EXPECT_NEAR(r.blocked_t(), 0.94, 0.001);
  ASSERT_FALSE(r.profile().empty());
  for (const v1::ProfileSample& p : r.profile()) EXPECT_LE(p.t(), r.blocked_t()) << p.t();
  EXPECT_LE(r.min_clearance_t(), r.blocked_t());
  EXPECT_GE(r.first_contact_t(), 0.0);
  EXPECT_LE(r.first_contact_t(), r.blocked_t());
  // a, installed at x = 100, cannot go back past the wall: 2 mm free along -x (blocked τ deeper).
  bool saw_minus_x = false;
  for (const v1::FreeDirection& d : r.free_directions()) {
    if (d.name() != "-X") continue;
    saw_minus_x = true;
    EXPECT_FALSE(d.free());
    EXPECT_NEAR(d.distance_mm(), 2.0, 0.02);
  }
  EXPECT_TRUE(saw_minus_x);

  // Without the wall the same group is free, and its profile covers the whole path.
  BoxScene open;
  open.Add("group/b", Vec3(1, 1, 1), Vec3(100, 20, 0));
  open.Add("group/a", Vec3(1, 1, 1), Vec3(100, 0, 0));
  open.Add("post", Vec3(1, 1, 1), Vec3(97, 23, 0));
  const std::vector<v1::StepResult> free = open.Run(req);
  ASSERT_EQ(free.size(), 1u);
  EXPECT_TRUE(free[0].ok());
  ASSERT_FALSE(free[0].profile().empty());
  EXPECT_EQ(free[0].profile().rbegin()->t(), 1.0);
  // b passes 1 mm from the post while its x overlaps the post's (t from 0.95 to 0.99): below
  // the 2 mm clearance.
  EXPECT_NEAR(free[0].min_clearance_mm(), 1.0, 1e-6);
  EXPECT_NEAR(free[0].min_clearance_t(), 0.97, 0.021);
  EXPECT_TRUE(free[0].clearance_violated());
}

// A sweep that reaches its cap of checked poses leaves its step undecided, reported where the
// group was proven free up to, not at t = 1 (which read as a path swept to its end); nothing
// past that is reported. A 10 mm cube (g/slider) slides 10 mm 0.099 mm above a table, within
// τ = 0.1 all along (steps of at most τ: about 100 poses, 10 allowed); the group's other cube
// (g/b, the first mover) passes a post 0.095 mm away from t = 0.75 on (far steps get it there in
// a few poses). Before, the step said t = 1 and reported g/b's 0.095 mm beside the post as its
// minimum clearance.
TEST(SequenceEngine, AnUndecidedStepReportsHowFarItWasProvenFree) {
  BoxScene scene;
  scene.Add("table", Vec3(100, 100, 5), Vec3(0, 0, -5));
  scene.Add("g/b", Vec3(1, 1, 1), Vec3(10, 30, 5));
  scene.Add("g/slider", Vec3(5, 5, 5), Vec3(10, 0, 5.099));
  scene.Add("post", Vec3(1, 1, 1), Vec3(9.5, 32.095, 5));
  v1::ValidateSequenceRequest req = InstallAlongX("g", 10);
  req.mutable_tolerances()->set_contact_tolerance_mm(0.1);
  const std::vector<v1::StepResult> whole = scene.Run(req);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_TRUE(whole[0].ok());
  EXPECT_FALSE(whole[0].undecided());
  EXPECT_NEAR(whole[0].min_clearance_mm(), 0.095, 1e-6);
  EXPECT_EQ(whole[0].min_clearance_path(), "post");

  SequenceLimits limits;
  limits.max_sweep_iterations = 10;
  const std::vector<v1::StepResult> capped = scene.Run(req, limits);
  ASSERT_EQ(capped.size(), 1u);
  const v1::StepResult& r = capped[0];
  ASSERT_EQ(r.moving_paths(0), "g/b");
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.undecided());
  EXPECT_EQ(r.blockers_size(), 0);
  EXPECT_GT(r.blocked_t(), 0.0);
  EXPECT_LT(r.blocked_t(), 0.5);
  // The slider's clearance, not g/b's beside the post it did not reach.
  EXPECT_NEAR(r.min_clearance_mm(), 0.099, 1e-6);
  EXPECT_EQ(r.min_clearance_path(), "table");
  EXPECT_LE(r.min_clearance_t(), r.blocked_t());
  // blocked_pose places g/b where the group got to.
  const absl::StatusOr<RigidTransform> X = PoseFromProto(r.blocked_pose(), "blocked_pose");
  ASSERT_THAT(X.status(), IsOk());
  EXPECT_NEAR(X->t.x(), 10 * r.blocked_t(), 1e-6);
  EXPECT_NEAR(X->t.y(), 30, 1e-9);

  // With a profile (g/b's), it too ends where the group got to.
  req.set_clearance_profile(true);
  const std::vector<v1::StepResult> profiled = scene.Run(req, limits);
  ASSERT_EQ(profiled.size(), 1u);
  EXPECT_TRUE(profiled[0].undecided());
  ASSERT_FALSE(profiled[0].profile().empty());
  for (const v1::ProfileSample& p : profiled[0].profile()) {
    EXPECT_LE(p.t(), profiled[0].blocked_t()) << p.t();
  }
}

}  // namespace
}  // namespace clash::server
