// The query engine at the edges a review of it found (in process, no server): an open part
// inside a closed one, a depth-limited rule on a clash whose depth is unknown, distance over
// instances at one spot, and ray origins and poses beyond the scene's reach.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "convert.h"
#include "query_engine.h"
#include "scene_builder.h"
#include "testing/random_geometry.h"
#include "testing/status_matchers.h"

namespace clash::server {
namespace {

using geom::Vec3;
using testing::IsOk;
using testing::MakeBox;
using testing::RawMesh;
using testing::StatusIs;

class QueryEdgesTest : public ::testing::Test {
 protected:
  QueryEdgesTest() : scene_(std::make_unique<Scene>("s1")) {}

  // Places `mesh` at `at` under `path`; returns its instance id.
  uint64_t Add(const std::string& path, const RawMesh& mesh, const Vec3& at) {
    return AddInstance(*scene_, path, mesh, at);
  }

  v1::InterferenceResponse Check(const v1::InterferenceRequest& request) {
    absl::StatusOr<v1::InterferenceResponse> r =
        RunInterference(*scene_, request, [] { return absl::OkStatus(); });
    EXPECT_THAT(r.status(), IsOk());
    return r.ok() ? *r : v1::InterferenceResponse();
  }

  std::unique_ptr<Scene> scene_;
};

// A box with its last triangle left out: an open mesh.
RawMesh OpenBox(const Vec3& half) {
  RawMesh m = MakeBox(half);
  m.t.pop_back();
  return m;
}

// An open part pushed wholly inside a closed one is CONTAINED, not clear (before, the part
// poking through the face was HARD and the one pushed deeper vanished from the report).
TEST_F(QueryEdgesTest, AnOpenPartInsideAClosedOneIsContained) {
  Add("cube", MakeBox(Vec3(5, 5, 5)), Vec3(0, 0, 0));
  Add("inside", OpenBox(Vec3(1, 1, 1)), Vec3(0, 0, 0));
  Add("through", OpenBox(Vec3(1, 1, 1)), Vec3(5, 0, 0));
  v1::InterferenceRequest request;
  request.mutable_tolerances()->set_contact_tolerance_mm(0.01);
  const v1::InterferenceResponse r = Check(request);
  ASSERT_EQ(r.clashes_size(), 2);
  EXPECT_EQ(r.clashes(0).clash_class(), v1::HARD);
  EXPECT_EQ(r.clashes(1).clash_class(), v1::CONTAINED);
  EXPECT_EQ(std::min(r.clashes(1).path_a(), r.clashes(1).path_b()), "cube");
  EXPECT_EQ(std::max(r.clashes(1).path_a(), r.clashes(1).path_b()), "inside");
}

// A rule with a depth limit does not suppress a HARD clash whose depth could not be estimated
// (an open part: depth 0, uncertain), which it did as if the clash were shallow; a rule without
// a limit still does. Closed parts keep their depth test.
TEST_F(QueryEdgesTest, ADepthLimitedRuleDoesNotCoverAnUnknownDepth) {
  Add("open1", OpenBox(Vec3(5, 5, 5)), Vec3(0, 0, 0));
  Add("open2", OpenBox(Vec3(5, 5, 5)), Vec3(5, 1, 1));
  Add("closed1", MakeBox(Vec3(5, 5, 5)), Vec3(100, 0, 0));
  Add("closed2", MakeBox(Vec3(5, 5, 5)), Vec3(105, 1, 1));
  v1::InterferenceRequest request;
  request.mutable_tolerances()->set_contact_tolerance_mm(0.01);
  v1::AllowedInterference* rule = request.add_allowed();
  rule->set_name("press-fit");
  rule->add_classes(v1::HARD);
  rule->set_max_depth_mm(0.05);
  v1::InterferenceResponse r = Check(request);
  ASSERT_EQ(r.clashes_size(), 2);
  for (const v1::Clash& c : r.clashes()) {
    EXPECT_EQ(c.clash_class(), v1::HARD) << c.path_a();
    EXPECT_FALSE(c.suppressed()) << c.path_a();  // 5 mm deep, and unknown
  }
  rule->set_max_depth_mm(0);  // no limit: both suppressed
  r = Check(request);
  ASSERT_EQ(r.clashes_size(), 2);
  for (const v1::Clash& c : r.clashes()) EXPECT_TRUE(c.suppressed()) << c.path_a();
  rule->set_max_depth_mm(10);  // deeper than the closed pair: it is suppressed, the open not
  r = Check(request);
  ASSERT_EQ(r.clashes_size(), 2);
  for (const v1::Clash& c : r.clashes()) {
    EXPECT_EQ(c.suppressed(), c.path_a().starts_with("closed")) << c.path_a();
  }
}

// Instances at one spot keep every pair within the distance bound: past the candidate limit the
// distance query is RESOURCE_EXHAUSTED instead of holding every pair (300 MB for 3000 cubes);
// within it, the answer is 0.
TEST_F(QueryEdgesTest, DistanceOverInstancesAtOneSpotIsBounded) {
  for (int i = 0; i < 40; ++i) Add("c" + std::to_string(i), MakeBox(Vec3(1, 1, 1)), Vec3(0, 0, 0));
  v1::DistanceRequest request;
  const auto no_stop = [] { return absl::OkStatus(); };
  QueryLimits limits;
  limits.max_candidate_pairs = 100;  // 780 pairs at distance 0
  EXPECT_THAT(RunDistance(*scene_, request, no_stop, limits).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "parts at one spot"));
  limits.max_candidate_pairs = 1000;
  const absl::StatusOr<v1::DistanceResponse> d = RunDistance(*scene_, request, no_stop, limits);
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_TRUE(d->found());
  EXPECT_EQ(d->distance_mm(), 0.0);
}

// A ray origin beyond the scene's reach (as a pose would be) is INVALID_ARGUMENT: at 1e300 mm the
// arithmetic kept no precision and answered a hit 1e300 mm away.
TEST_F(QueryEdgesTest, RayOriginsBeyondReachAreRefused) {
  Add("cube", MakeBox(Vec3(5, 5, 5)), Vec3(0, 0, 0));
  v1::PickRequest request;
  v1::Ray* ray = request.add_rays();
  ToProto(Vec3(0, 0, 1e300), ray->mutable_origin_mm());
  ToProto(Vec3(0, 0, -1), ray->mutable_direction());
  EXPECT_THAT(RunPick(*scene_, request, [] { return absl::OkStatus(); }).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "origin beyond"));
  ToProto(Vec3(0, 0, 1.001e12), ray->mutable_origin_mm());
  EXPECT_THAT(RunPick(*scene_, request, [] { return absl::OkStatus(); }).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "origin beyond the scene's reach"));
  ToProto(Vec3(0, 0, 0.999e12), ray->mutable_origin_mm());
  const auto far_hit = RunPick(*scene_, request, [] { return absl::OkStatus(); });
  ASSERT_THAT(far_hit.status(), IsOk());
  ASSERT_EQ(far_hit->hits_size(), 1);
  EXPECT_TRUE(far_hit->hits(0).hit());
  EXPECT_NEAR(far_hit->hits(0).distance_mm(), 0.999e12 - 5, 1e-3);
  ToProto(Vec3(0, 0, 50), ray->mutable_origin_mm());
  const auto hit = RunPick(*scene_, request, [] { return absl::OkStatus(); });
  ASSERT_THAT(hit.status(), IsOk());
  ASSERT_EQ(hit->hits_size(), 1);
  EXPECT_TRUE(hit->hits(0).hit());
  EXPECT_NEAR(hit->hits(0).distance_mm(), 45.0, 1e-9);
}

// A query's pose overrides are held to the reach a stored pose is (before, two cubes overridden
// to 1e200 mm, where they coincide, were CONTACT, and a distance to one there was not found).
TEST_F(QueryEdgesTest, PoseOverridesBeyondReachAreRefused) {
  const uint64_t a = Add("a", MakeBox(Vec3(5, 5, 5)), Vec3(0, 0, 0));
  Add("b", MakeBox(Vec3(5, 5, 5)), Vec3(5, 0, 0));
  const auto no_stop = [] { return absl::OkStatus(); };
  v1::PoseUpdate far;
  far.set_instance_id(a);
  ToProto(geom::RigidTransform::Translation(Vec3(1e200, 0, 0)), far.mutable_pose());
  v1::InterferenceRequest check;
  *check.add_pose_overrides() = far;
  EXPECT_THAT(RunInterference(*scene_, check, no_stop).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "pose of a places the part beyond"));
  v1::DistanceRequest distance;
  *distance.add_pose_overrides() = far;
  EXPECT_THAT(RunDistance(*scene_, distance, no_stop).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "pose of a places the part beyond"));
  ToProto(geom::RigidTransform::Translation(Vec3(5, 1, 1)), far.mutable_pose());
  *check.mutable_pose_overrides(0) = far;
  const v1::InterferenceResponse r = Check(check);
  ASSERT_EQ(r.clashes_size(), 1);
  EXPECT_EQ(r.clashes(0).clash_class(), v1::HARD);
}

// At the edge of the scene's reach (±1e12 mm, where a double resolves 0.12 µm) pairs get the
// classes, depths and distances they get at the origin; a pose or override just beyond it is
// refused, one just inside is not.
TEST_F(QueryEdgesTest, AtTheEdgeOfReachPairsAreClassedAsAtTheOrigin) {
  const auto no_stop = [] { return absl::OkStatus(); };
  const auto classify = [&](const Vec3& origin) {
    scene_ = std::make_unique<Scene>("s1");
    // Cubes of 10 mm, side by side along x: crossing by 0.5 mm, touching, 0.5 mm apart, 3 mm
    // apart; each pair 100 mm from the next along y.
    const double gaps[] = {-0.5, 0.0, 0.5, 3.0};
    for (int i = 0; i < 4; ++i) {
      const Vec3 at = origin + Vec3(0, 100.0 * i, 0);
      Add("p" + std::to_string(i) + "a", MakeBox(Vec3(5, 5, 5)), at);
      Add("p" + std::to_string(i) + "b", MakeBox(Vec3(5, 5, 5)), at + Vec3(10 + gaps[i], 1, 2));
    }
    v1::InterferenceRequest request;
    request.mutable_tolerances()->set_contact_tolerance_mm(0.01);
    request.mutable_tolerances()->set_clearance_mm(1.0);
    return Check(request);
  };
  const v1::InterferenceResponse home = classify(Vec3::Zero());
  ASSERT_EQ(home.clashes_size(), 3);
  EXPECT_EQ(home.clashes(0).clash_class(), v1::HARD);
  EXPECT_NEAR(home.clashes(0).depth_mm(), 0.5, 1e-9);
  EXPECT_EQ(home.clashes(1).clash_class(), v1::CONTACT);
  EXPECT_EQ(home.clashes(2).clash_class(), v1::CLEARANCE);
  EXPECT_NEAR(home.clashes(2).distance_mm(), 0.5, 1e-9);
  for (const Vec3& origin : {Vec3(0.999e12, -0.999e12, 0.5e12), Vec3(-0.999e12, 3e11, 0.999e12)}) {
    SCOPED_TRACE(origin.transpose());
    const v1::InterferenceResponse far = classify(origin);
    ASSERT_EQ(far.clashes_size(), home.clashes_size());
    for (int i = 0; i < far.clashes_size(); ++i) {
      EXPECT_EQ(far.clashes(i).path_a(), home.clashes(i).path_a());
      EXPECT_EQ(far.clashes(i).clash_class(), home.clashes(i).clash_class());
      EXPECT_EQ(far.clashes(i).uncertain(), home.clashes(i).uncertain());
      EXPECT_NEAR(far.clashes(i).depth_mm(), home.clashes(i).depth_mm(), 1e-3);
      EXPECT_NEAR(far.clashes(i).distance_mm(), home.clashes(i).distance_mm(), 1e-3);
      const Vec3 witness = FromProto(far.clashes(i).point_a_mm()) - origin;
      EXPECT_LT((witness - FromProto(home.clashes(i).point_a_mm())).norm(), 1e-3);
    }
  }
  // An override to just beyond the reach is refused; one just inside it is checked.
  const uint64_t a = scene_->by_path.at("p3a");
  v1::InterferenceRequest check;
  v1::PoseUpdate* move = check.add_pose_overrides();
  move->set_instance_id(a);
  ToProto(geom::RigidTransform::Translation(Vec3(0, 0, 1e12)), move->mutable_pose());
  EXPECT_THAT(RunInterference(*scene_, check, no_stop).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "beyond the scene's reach"));
  ToProto(geom::RigidTransform::Translation(Vec3(0, 0, 1e12 - 6)), move->mutable_pose());
  EXPECT_THAT(RunInterference(*scene_, check, no_stop).status(), IsOk());
}

// A page token of another scene's listing is INVALID_ARGUMENT (another request), not
// FAILED_PRECONDITION (start again), which no retry on this scene could mend.
TEST_F(QueryEdgesTest, APageTokenOfAnotherSceneIsAnotherRequest) {
  for (int i = 0; i < 3; ++i) Add("c" + std::to_string(i), MakeBox(Vec3(1, 1, 1)), Vec3(i, 0, 0));
  v1::InterferenceRequest request;
  request.set_scene_id("s1");
  request.set_page_size(1);
  const absl::StatusOr<v1::InterferenceResponse> first =
      RunInterference(*scene_, request, [] { return absl::OkStatus(); });
  ASSERT_THAT(first.status(), IsOk());
  ASSERT_FALSE(first->next_page_token().empty());
  Scene other("s2");
  other.version = scene_->version + 1;
  AddInstance(other, "x", MakeBox(Vec3(1, 1, 1)), Vec3(0, 0, 0));
  request.set_scene_id("s2");
  request.set_page_token(first->next_page_token());
  EXPECT_THAT(RunInterference(other, request, [] { return absl::OkStatus(); }).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "another request"));
  request.set_scene_id("s1");
  ++scene_->version;  // this scene changed: start again
  EXPECT_THAT(RunInterference(*scene_, request, [] { return absl::OkStatus(); }).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, "start again"));
}

// A page of clashes ends at its byte budget as well as at page_size: instance paths of up to
// 64 KiB times 10000 clashes made a page gRPC could not send, so the query failed at any page
// size the client did not lower. The pages together are the single page's list, in order.
TEST_F(QueryEdgesTest, AnInterferencePageEndsAtItsByteBudget) {
  const std::string long_name(2000, 'x');
  for (int i = 0; i < 12; ++i) {  // a row of cubes, each overlapping the next
    Add(long_name + std::to_string(i + 10), MakeBox(Vec3(1, 1, 1)), Vec3(1.5 * i, 0, 0));
  }
  v1::InterferenceRequest request;
  request.mutable_tolerances()->set_contact_tolerance_mm(0.01);
  request.set_page_size(10000);
  const auto no_stop = [] { return absl::OkStatus(); };
  const absl::StatusOr<v1::InterferenceResponse> whole = RunInterference(*scene_, request, no_stop);
  ASSERT_THAT(whole.status(), IsOk());
  ASSERT_EQ(whole->clashes_size(), 11);
  EXPECT_TRUE(whole->next_page_token().empty());
  QueryLimits limits;
  limits.max_page_bytes = 20000;  // a clash takes about 8 KB here (paths, part ids): 3 a page
  std::vector<std::string> ids;
  int pages = 0;
  do {
    const absl::StatusOr<v1::InterferenceResponse> page =
        RunInterference(*scene_, request, no_stop, limits);
    ASSERT_THAT(page.status(), IsOk());
    ASSERT_GE(page->clashes_size(), 1);
    EXPECT_LE(page->clashes_size(), 3);
    for (const v1::Clash& c : page->clashes()) ids.push_back(c.clash_id());
    request.set_page_token(page->next_page_token());
    ++pages;
  } while (!request.page_token().empty() && pages < 20);
  EXPECT_EQ(pages, 4);
  ASSERT_EQ(ids.size(), 11U);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(ids[i], whole->clashes(i).clash_id()) << i;
  limits.max_page_bytes = 0;  // a page always holds one clash
  request.clear_page_token();
  const absl::StatusOr<v1::InterferenceResponse> one =
      RunInterference(*scene_, request, no_stop, limits);
  ASSERT_THAT(one.status(), IsOk());
  EXPECT_EQ(one->clashes_size(), 1);
  EXPECT_FALSE(one->next_page_token().empty());
}

// A pick whose answer would not fit the message limit (long paths times many rays) is
// RESOURCE_EXHAUSTED before the answer is built, saying what to do; a smaller batch is answered.
TEST_F(QueryEdgesTest, APickAnswerBeyondTheMessageLimitIsRefused) {
  Add(std::string(5000, 'p'), MakeBox(Vec3(5, 5, 5)), Vec3(0, 0, 0));
  v1::PickRequest request;
  for (int i = 0; i < 100; ++i) {
    v1::Ray* ray = request.add_rays();
    ToProto(Vec3(0.01 * i, 0, 50), ray->mutable_origin_mm());
    ToProto(Vec3(0, 0, -1), ray->mutable_direction());
  }
  const auto no_stop = [] { return absl::OkStatus(); };
  QueryLimits limits;
  limits.max_answer_bytes = 500'000;  // 100 hits of about 10 KB each (path and part id)
  EXPECT_THAT(RunPick(*scene_, request, no_stop, limits).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "cast fewer rays"));
  request.mutable_rays()->DeleteSubrange(30, 70);
  const absl::StatusOr<v1::PickResponse> r = RunPick(*scene_, request, no_stop, limits);
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_EQ(r->hits_size(), 30);
  for (const v1::PickHit& h : r->hits()) EXPECT_TRUE(h.hit());
  EXPECT_LE(r->ByteSizeLong(), limits.max_answer_bytes);
}

}  // namespace
}  // namespace clash::server
