// The sequence engine on scenes built in process (no server): how a step reports a group of
// movers that one of them stops, and a sweep that reaches its cap of checked poses.
#include "sequence_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "convert.h"
#include "scene_builder.h"
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
    AddInstance(*scene_, path, MakeBox(half), at);
  }
  [[nodiscard]] const Scene* scene() const { return scene_.get(); }
  // Runs a sequence, collecting its step results.
  std::vector<v1::StepResult> Run(const v1::ValidateSequenceRequest& req,
                                  const SequenceLimits& limits = {}) {
    std::vector<v1::StepResult> steps;
    EXPECT_THAT(RunStatus(req, &steps, limits), IsOk());
    return steps;
  }
  absl::Status RunStatus(const v1::ValidateSequenceRequest& req, std::vector<v1::StepResult>* steps,
                         const SequenceLimits& limits = {}) {
    return RunSequence(
        *scene_, req, [] { return absl::OkStatus(); },
        [&](const v1::ValidateSequenceEvent& e) {
          if (e.has_step()) steps->push_back(e.step());
        },
        limits);
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

// Allowed pairs leave a step's sweeps mover by mover: a rule naming one mover's pairs leaves
// the others blocked, and a rule naming every pair lists the first kMaxSuppressedListed of them
// and counts them all (40 movers, each placed inside each of 40 standing boxes' row: 1600
// pairs). Before, each mover copied every standing instance, and every pair a rule named gave
// a line: memory of movers times standing instances.
TEST(SequenceEngine, AllowedPairsAreLeftOutMoverByMoverAndListedUpToACap) {
  BoxScene scene;
  for (int i = 0; i < 40; ++i) {
    scene.Add("m/" + std::to_string(i), Vec3(1, 1, 1), Vec3(3.0 * i, 0, 0));
    scene.Add("s/" + std::to_string(i), Vec3(1, 1, 1), Vec3(3.0 * i, 0.5, 0));
  }
  v1::ValidateSequenceRequest req = InstallAlongX("m", 1);
  std::vector<v1::StepResult> steps = scene.Run(req);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_FALSE(steps[0].ok());
  EXPECT_EQ(steps[0].blocked_t(), 0.0);
  EXPECT_EQ(steps[0].blockers_size(), 40);  // each mover in its own standing box
  EXPECT_EQ(steps[0].suppressed_pairs(), 0);

  // m/0 with every standing box allowed: the other 39 still blocked, m/0 listed by none.
  v1::AllowedInterference* one = req.add_allowed();
  one->set_name("first");
  one->mutable_a()->add_path_prefixes("m/0");
  one->mutable_b()->add_path_prefixes("s");
  steps = scene.Run(req);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_FALSE(steps[0].ok());
  ASSERT_EQ(steps[0].blockers_size(), 39);
  for (const v1::Blocker& b : steps[0].blockers()) EXPECT_NE(b.moving_path(), "m/0");
  EXPECT_EQ(steps[0].suppressed_pairs(), 40);
  ASSERT_EQ(steps[0].suppressed_size(), 40);
  EXPECT_EQ(steps[0].suppressed(0), "m/0 / s/0 (first)");

  // Every pair allowed: the step is free; 1600 pairs counted, the first 1000 listed.
  req.clear_allowed();
  req.add_allowed()->set_name("all");
  steps = scene.Run(req);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].ok());
  EXPECT_EQ(steps[0].suppressed_pairs(), 1600);
  ASSERT_EQ(steps[0].suppressed_size(), kMaxSuppressedListed);
  EXPECT_EQ(steps[0].suppressed(0), "m/0 / s/0 (all)");
  EXPECT_EQ(steps[0].suppressed(kMaxSuppressedListed - 1), "m/24 / s/39 (all)");
}

// Every step is checked before any runs: a bad motion or rule in a later step fails the call
// even when an earlier step is blocked and the sequence would stop there. Before, step 2's zero
// direction went unnoticed (OK) after a blocked step 1, and failed after step 1 had been
// streamed when asked to go on.
TEST(SequenceEngine, EveryStepIsCheckedBeforeAnyRuns) {
  BoxScene scene;
  scene.Add("a", Vec3(1, 1, 1), Vec3(0, 0, 0));
  scene.Add("b", Vec3(1, 1, 1), Vec3(10, 0, 0));
  scene.Add("wall", Vec3(1, 10, 10), Vec3(-5, 0, 0));
  v1::ValidateSequenceRequest req = InstallAlongX("a", 20);  // through the wall: blocked
  v1::SequenceStep* second = req.add_steps();
  second->mutable_moving()->add_path_prefixes("b");
  second->mutable_motion()->mutable_linear()->set_distance_mm(5);  // no direction
  for (bool go_on : {false, true}) {
    req.set_continue_after_blocked(go_on);
    std::vector<v1::StepResult> steps;
    EXPECT_THAT(scene.RunStatus(req, &steps),
                testing::StatusIs(absl::StatusCode::kInvalidArgument, "step 2"));
    EXPECT_TRUE(steps.empty());
  }
  second->mutable_motion()->mutable_linear()->mutable_direction()->set_x(1e-170);  // tiny: fine
  second->add_allowed()->mutable_a()->add_groups("no such group");
  std::vector<v1::StepResult> steps;
  EXPECT_THAT(scene.RunStatus(req, &steps),
              testing::StatusIs(absl::StatusCode::kNotFound, "no such group"));
  EXPECT_TRUE(steps.empty());
  second->clear_allowed();
  req.set_continue_after_blocked(true);
  steps = scene.Run(req);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_FALSE(steps[0].ok());
  EXPECT_TRUE(steps[1].ok());
}

// A step reports the τ its sweeps used, which a long travel raises (to 1e-9 of it); a free
// step's blocked_pose is the installed pose (blocked_t = 1).
TEST(SequenceEngine, AStepReportsTheContactToleranceItUsedAndAFreeStepItsInstalledPose) {
  BoxScene scene;
  scene.Add("a", Vec3(1, 1, 1), Vec3(3, 4, 5));
  v1::ValidateSequenceRequest req = InstallAlongX("a", 20);
  std::vector<v1::StepResult> steps = scene.Run(req);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_TRUE(steps[0].ok());
  EXPECT_EQ(steps[0].contact_tolerance_mm(), 0.01);
  ASSERT_TRUE(steps[0].has_blocked_pose());
  const absl::StatusOr<RigidTransform> X = PoseFromProto(steps[0].blocked_pose(), "pose");
  ASSERT_THAT(X.status(), IsOk());
  EXPECT_EQ(X->t, Vec3(3, 4, 5));
  req.mutable_steps(0)->mutable_motion()->mutable_linear()->set_distance_mm(1e11);
  steps = scene.Run(req);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_NEAR(steps[0].contact_tolerance_mm(), 100.0, 1e-6);
}

// A sequence at the edge of the scene's reach (a translation of about 1e12 mm, exact for these
// boxes) gives the answers it gives at the origin: the same blockers and classes, and the same
// parameters within τ's share of the travel (the bisection resolves a quarter of it; a double
// resolves 1.2e-4 mm at 1e12 mm).
TEST(SequenceEngine, AtTheEdgeOfReachASequenceIsAnsweredAsAtTheOrigin) {
  const auto run = [](const Vec3& origin) {
    BoxScene scene;
    scene.Add("group/b", Vec3(1, 1, 1), origin + Vec3(100, 20, 0));
    scene.Add("group/a", Vec3(1, 1, 1), origin + Vec3(100, 0, 0));
    scene.Add("wall", Vec3(1, 10, 10), origin + Vec3(96, 0, 0));
    scene.Add("post", Vec3(1, 1, 1), origin + Vec3(97, 23, 0));
    v1::ValidateSequenceRequest req = InstallAlongX("group", 100);
    req.mutable_tolerances()->set_clearance_mm(2);
    req.set_clearance_profile(true);
    const std::vector<v1::StepResult> steps = scene.Run(req);
    EXPECT_EQ(steps.size(), 1u);
    return steps.empty() ? v1::StepResult() : steps[0];
  };
  const v1::StepResult home = run(Vec3::Zero());
  EXPECT_NEAR(home.blocked_t(), 0.94, 0.001);
  for (const Vec3& origin : {Vec3(0.998e12, -0.998e12, 0.5e12), Vec3(-0.998e12, 0, 0.998e12)}) {
    SCOPED_TRACE(origin.transpose());
    const v1::StepResult far = run(origin);
    EXPECT_EQ(far.ok(), home.ok());
    EXPECT_EQ(far.undecided(), home.undecided());
    EXPECT_NEAR(far.blocked_t(), home.blocked_t(), 0.01 / 100);
    EXPECT_NEAR(far.first_contact_t(), home.first_contact_t(), 0.01 / 100);
    ASSERT_EQ(far.blockers_size(), home.blockers_size());
    for (int i = 0; i < far.blockers_size(); ++i) {
      EXPECT_EQ(far.blockers(i).path(), home.blockers(i).path());
      EXPECT_EQ(far.blockers(i).moving_path(), home.blockers(i).moving_path());
    }
    EXPECT_NEAR(far.min_clearance_mm(), home.min_clearance_mm(), 1e-3);
    EXPECT_EQ(far.min_clearance_path(), home.min_clearance_path());
    EXPECT_EQ(far.clearance_violated(), home.clearance_violated());
    EXPECT_NEAR(far.profile_size(), home.profile_size(), 2);
  }
}

// A motion that carries its parts beyond the scene's reach (±1e12 mm) is INVALID_ARGUMENT before
// any step runs, as a pose there is: a travel of 1e200 mm passed through an obstacle with τ
// infinite and answered ok. So is a keyframe offset or a staged pose out there; 1e6 mm is fine.
TEST(SequenceEngine, MotionsAndStagedPosesBeyondReachAreRefused) {
  BoxScene scene;
  scene.Add("a", Vec3(1, 1, 1), Vec3(0, 0, 0));
  scene.Add("wall", Vec3(1, 10, 10), Vec3(-5, 0, 0));
  scene.Add("later", Vec3(1, 1, 1), Vec3(0, 50, 0));
  v1::ValidateSequenceRequest req = InstallAlongX("a", 1.001e12);
  std::vector<v1::StepResult> steps;
  EXPECT_THAT(scene.RunStatus(req, &steps),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "the motion carries its parts beyond the scene's reach"));
  EXPECT_TRUE(steps.empty());
  req.mutable_steps(0)->mutable_motion()->mutable_linear()->set_distance_mm(1e6);
  steps = scene.Run(req);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_FALSE(steps[0].ok());  // through the wall
  v1::Motion* m = req.mutable_steps(0)->mutable_motion();
  m->clear_linear();
  for (double t : {0.0, 1.0}) {
    v1::KeyframePath::Keyframe* k = m->mutable_path()->add_keyframes();
    k->set_t(t);
    ToProto(RigidTransform::Translation(Vec3(t == 0 ? -1.001e12 : 0, 0, 0)), k->mutable_offset());
  }
  EXPECT_THAT(scene.RunStatus(req, &steps),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "step 1 (a): the motion carries its parts beyond"));
  m->mutable_path()->mutable_keyframes(0)->mutable_offset()->mutable_translation_mm()->set_x(-20);
  v1::StagedInstance* staged = req.add_staged();
  staged->mutable_instances()->add_path_prefixes("later");
  ToProto(RigidTransform::Translation(Vec3(0, 1.001e12, 0)), staged->mutable_pose());
  EXPECT_THAT(scene.RunStatus(req, &steps),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, "staged[0] (later)"));
  req.clear_staged();
  steps.clear();
  EXPECT_THAT(scene.RunStatus(req, &steps), IsOk());
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_FALSE(steps[0].ok());
}

// A keyframe path is bounded (each moving instance's motion shares it, but one path may not
// hold millions of poses), and a very long direction vector is still a direction.
TEST(SequenceEngine, KeyframePathsAreBoundedAndDirectionsAnyLength) {
  v1::Motion m;
  for (int i = 0; i <= kMaxKeyframes; ++i) {
    v1::KeyframePath::Keyframe* k = m.mutable_path()->add_keyframes();
    k->set_t(static_cast<double>(i) / kMaxKeyframes);
    ToProto(RigidTransform::Translation(Vec3(kMaxKeyframes - i, 0, 0)), k->mutable_offset());
  }
  EXPECT_THAT(MotionToInstall(m, RigidTransform::Identity(), "m").status(),
              testing::StatusIs(absl::StatusCode::kResourceExhausted, "at most"));
  m.mutable_path()->mutable_keyframes()->DeleteSubrange(1, 1);  // kMaxKeyframes: fine
  EXPECT_THAT(MotionToInstall(m, RigidTransform::Identity(), "m").status(), IsOk());
  v1::Motion line;
  line.mutable_linear()->mutable_direction()->set_y(1e200);
  line.mutable_linear()->set_distance_mm(2);
  const absl::StatusOr<geom::Motion> motion =
      MotionToInstall(line, RigidTransform::Identity(), "l");
  ASSERT_THAT(motion.status(), IsOk());
  EXPECT_NEAR((motion->start().t - Vec3(0, -2, 0)).norm(), 0.0, 1e-12);
}

// A long step reports progress while its sweep runs, not only at its start and end (a review
// found a 50,000-pose step showing t = 0 until it ended): with no least interval, every free
// pose checked sends an event, in increasing t, between the step's start (t = 0) and end (1).
TEST(SequenceEngine, ProgressComesWhileAStepRuns) {
  BoxScene scene;
  scene.Add("peg", Vec3(1, 1, 1), Vec3(0, 0, 0));
  scene.Add("rail", Vec3(100, 1, 1), Vec3(0, 2.5, 0));  // 0.5 mm beside the whole path
  v1::ValidateSequenceRequest req = InstallAlongX("peg", 100);
  // Closer than the clearance, the path is sampled every C/4 (about 400 poses here).
  req.mutable_tolerances()->set_clearance_mm(1);
  std::vector<double> ts;
  SequenceLimits limits;
  limits.progress_interval = absl::ZeroDuration();
  ASSERT_THAT(RunSequence(
                  *scene.scene(), req, [] { return absl::OkStatus(); },
                  [&](const v1::ValidateSequenceEvent& e) {
                    if (e.has_progress()) ts.push_back(e.progress().t());
                  },
                  limits),
              IsOk());
  ASSERT_GT(ts.size(), 20u);
  EXPECT_EQ(ts.front(), 0.0);
  EXPECT_EQ(ts.back(), 1.0);
  EXPECT_TRUE(std::is_sorted(ts.begin(), ts.end()));
  EXPECT_GT(std::count_if(ts.begin(), ts.end(), [](double t) { return t > 0.25 && t < 0.75; }), 5);
  // With an interval longer than the step, it sends only its start and end.
  ts.clear();
  limits.progress_interval = absl::Hours(1);
  ASSERT_THAT(RunSequence(
                  *scene.scene(), req, [] { return absl::OkStatus(); },
                  [&](const v1::ValidateSequenceEvent& e) {
                    if (e.has_progress()) ts.push_back(e.progress().t());
                  },
                  limits),
              IsOk());
  EXPECT_EQ(ts, (std::vector<double>{0.0, 1.0}));
}

// The staged entries name at most kMaxStagedInstances instances in all: an empty selector names
// every instance, so a small request repeating it could otherwise keep a query slot and the
// scene's lock for minutes (a review's 6 MB request ran 87 s past a 5 s deadline). The stop
// check is asked between entries, so a call's deadline ends the work too.
TEST(SequenceEngine, StagedEntriesAreBoundedAndStopWhenAsked) {
  BoxScene scene;
  constexpr int kBoxes = 100;
  for (int i = 0; i < kBoxes; ++i)
    scene.Add("b" + std::to_string(i), Vec3(1, 1, 1), Vec3(3.0 * i, 0, 0));
  v1::ValidateSequenceRequest req = InstallAlongX("b0", 10);
  const auto stage_all = [&](int entries) {
    req.clear_staged();
    for (int i = 0; i < entries; ++i) {
      ToProto(RigidTransform::Identity(), req.add_staged()->mutable_pose());
    }
  };
  std::vector<v1::StepResult> steps;
  stage_all(static_cast<int>(kMaxStagedInstances / kBoxes));  // exactly the budget: runs
  EXPECT_THAT(scene.RunStatus(req, &steps), IsOk());
  EXPECT_EQ(steps.size(), 1u);
  stage_all(static_cast<int>(kMaxStagedInstances / kBoxes) + 1);
  EXPECT_THAT(scene.RunStatus(req, &steps),
              testing::StatusIs(absl::StatusCode::kResourceExhausted, "staged"));
  // A stop that comes while the staged entries are resolved ends the call there.
  int asked = 0;
  const absl::Status stopped = RunSequence(
      *scene.scene(), req,
      [&] { return ++asked > 1000 ? absl::DeadlineExceededError("late") : absl::OkStatus(); },
      [](const v1::ValidateSequenceEvent&) {});
  EXPECT_THAT(stopped, testing::StatusIs(absl::StatusCode::kDeadlineExceeded, "late"));
  EXPECT_EQ(asked, 1001);
}

}  // namespace
}  // namespace clash::server
