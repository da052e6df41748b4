// clash_sequence_bench: continuous checking of assembly steps (issue 5) — clashd's sweep (the
// sequence engine's per-step check) beside FCL 0.7's continuousCollide with conservative
// advancement and with its default naive sampling, and beside a sound advancement on FCL's exact
// distance, on the same motions. See bench/README.md.
//
// Datasets (each a list of step checks: a moving part, its motion, fixed obstacles, τ):
//  - as1: the as1 assembly's valid order (tests/testing/as1_sequence.h: plate, brackets, bolts
//    and the rod along their axes, nuts screwed on) plus the blocked step of two wrong orders
//    (a bolt from the wrong side, a bracket lowered onto its bolts): 20 steps. Obstacles and τ
//    are what server::RunSequence gives each step, checked against RunSequence's own answers.
//  - insertion / insertion-tight: a peg (cylinder, 256 sides) pushed 200 mm through a tube of
//    1024 sides (8192 triangles) whose hole is wider than the peg / narrower than the peg.
//  - thinplate: a box crossing a 0.1 mm plate in one 100 mm move, and nine more moves shifted
//    along the plate, the last five beside it.
// Answers are computed before timing: ours (Sweep) is the exact answer, confirmed by a dense scan
// (ClassifyPair every τ/8 of travel) on thinplate, the analytical answer on the insertions and
// RunSequence on as1; every blocked pose of ours is confirmed by ClassifyPair and FCL's collide.
// FCL's answers are counted (misses: blocked steps answered free; late; false collisions and
// touches, told apart by FCL's exact distance at its contact pose). The program fails
// (SkipWithError, exit code 1) if ours is exhausted or refuted: a contact FCL reports before ours
// that ClassifyPair finds blocked, or a blocked pose the sound FCL-distance advancement does
// not reach by our t.
#include <benchmark/benchmark.h>
#include <fcl/geometry/bvh/BVH_model.h>
#include <fcl/math/bv/OBBRSS.h>
#include <fcl/math/motion/screw_motion.h>
#include <fcl/narrowphase/collision.h>
#include <fcl/narrowphase/continuous_collision.h>
#include <fcl/narrowphase/distance.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <numbers>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clash/geom/query.h"
#include "clash/geom/sweep.h"
#include "query_engine.h"
#include "sequence_engine.h"
#include "testing/as1_sequence.h"
#include "testing/random_geometry.h"

namespace clash::bench {
namespace {

using geom::Motion;
using geom::Part;
using geom::RigidTransform;
using geom::Vec3;
using Model = fcl::BVHModel<fcl::OBBRSSd>;

// One step check.
struct Case {
  std::string name;
  const Part* moving = nullptr;
  std::optional<Motion> motion;  // always set
  std::vector<geom::SweepObstacle> obstacles;
  double tau = 0;
  geom::SweepResult exact;  // our sweep, checked
};

struct Dataset {
  std::string name;
  std::vector<Case> cases;
  std::vector<std::shared_ptr<const Part>> owned;
  std::unique_ptr<testing::As1> as1;
  std::string error;  // set when the dataset could not be built or checked
  // Per method: blocked steps answered free (misses), blocked after our first blocked pose
  // (late) or not (on time); contacts reported before ours or on free steps, within τ by FCL's
  // exact distance (touches) or not (false).
  int misses_naive = 0, late_naive = 0, on_time_naive = 0, touches_naive = 0, false_naive = 0;
  int misses_ca = 0, late_ca = 0, on_time_ca = 0, touches_ca = 0, false_ca = 0;
  int touches_dca = 0, false_dca = 0;  // fcl-distance-ca: sound, so never a miss (checked)
  int blocked = 0;
};

// ---------------------------------------------------------------------------------------------
// FCL side.

fcl::Transform3d ToFcl(const RigidTransform& X) {
  fcl::Transform3d out = fcl::Transform3d::Identity();
  out.linear() = X.R;
  out.translation() = X.t;
  return out;
}

const Model& FclModel(const Part& part) {
  static std::map<const Part*, std::unique_ptr<Model>> cache;
  auto& slot = cache[&part];
  if (!slot) {
    std::vector<fcl::Vector3d> v(part.mesh().vertices().begin(), part.mesh().vertices().end());
    std::vector<fcl::Triangle> t;
    for (const auto& tri : part.mesh().triangles()) t.emplace_back(tri[0], tri[1], tri[2]);
    slot = std::make_unique<Model>();
    slot->beginModel(static_cast<int>(t.size()), static_cast<int>(v.size()));
    slot->addSubModel(v, t);
    slot->endModel();
  }
  return *slot;
}

// kCa: FCL's conservative advancement; kNaive: FCL's default (10 samples); kDistanceCa: the
// far mode of our sweep (steps of MaxTravel <= d - τ/2, motion.h's bound) with FCL's exact
// distance as its distance engine, stopping at the first pose within τ (FCL has no penetration
// depth for meshes, so it cannot go on through a contact): a sound continuous check built from
// FCL's parts, for the steps that never come within τ.
enum class Fcl { kCa, kNaive, kDistanceCa };

// FCL's exact distance between the moving part at X and the given obstacles (their minimum,
// clamped at 0; +inf without obstacles). As the sweep does, obstacles are taken nearest box
// first, and those whose box is no nearer than the best distance so far are skipped (box
// culling, which FCL's distance itself does not do across objects). *calls counts FCL's.
double FclMinDistance(const Case& c, const std::vector<std::size_t>& which, const RigidTransform& X,
                      int* calls) {
  const geom::Aabb moving_box = c.moving->bounds().Transformed(X);
  std::vector<std::pair<double, std::size_t>> order;
  order.reserve(which.size());
  for (std::size_t i : which) {
    const auto& o = c.obstacles[i];
    order.emplace_back(moving_box.Distance(o.part->bounds().Transformed(o.X_WO)), i);
  }
  std::sort(order.begin(), order.end());
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [lower, i] : order) {
    if (lower >= best) break;
    const auto& o = c.obstacles[i];
    fcl::DistanceRequestd req;
    fcl::DistanceResultd res;
    fcl::distance(&FclModel(*c.moving), ToFcl(X), &FclModel(*o.part), ToFcl(o.X_WO), req, res);
    ++*calls;
    best = std::min(best, std::max(res.min_distance, 0.0));
  }
  return best;
}

// FCL's motion pieces of a case: one for a translation; rotations in pieces of at most π/2
// (FCL's screw is defined by its two end poses, so it takes the shorter rotation).
std::vector<double> Pieces(const Motion& m) {
  int n = 1;
  if (m.kind() == geom::MotionKind::kRotation || m.kind() == geom::MotionKind::kScrew) {
    n = std::max(1, static_cast<int>(std::ceil(std::abs(m.amount()) / (std::numbers::pi / 2))));
  }
  std::vector<double> t;
  for (int i = 0; i <= n; ++i) t.push_back(static_cast<double>(i) / n);
  return t;
}

// Obstacles a case's swept volume can reach: boxes at 16 poses inflated by the travel between.
std::vector<std::size_t> Candidates(const Case& c) {
  const geom::Sphere s = geom::TravelSphere(*c.moving);
  geom::Aabb swept;
  constexpr int kSamples = 16;
  for (int i = 0; i < kSamples; ++i) {
    const double t0 = static_cast<double>(i) / kSamples, t1 = static_cast<double>(i + 1) / kSamples;
    geom::Aabb b = c.moving->bounds().Transformed(c.motion->PoseAt(t0));
    b.Add(c.moving->bounds().Transformed(c.motion->PoseAt(t1)));
    const double grow = c.motion->MaxTravel(t0, t1, s);
    b.min -= Vec3::Constant(grow);
    b.max += Vec3::Constant(grow);
    swept.Add(b);
  }
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < c.obstacles.size(); ++i) {
    const auto& o = c.obstacles[i];
    if (swept.Overlaps(o.part->bounds().Transformed(o.X_WO))) out.push_back(i);
  }
  return out;
}

struct FclAnswer {
  bool collide = false;
  double toc = 1;
  int calls = 0;
};

FclAnswer RunFcl(const Case& c, const std::vector<std::size_t>& candidates, Fcl method) {
  if (method == Fcl::kDistanceCa) {
    const geom::Sphere sphere = geom::TravelSphere(*c.moving);
    FclAnswer out;
    for (double t = 0;;) {
      const double d = FclMinDistance(c, candidates, c.motion->PoseAt(t), &out.calls);
      if (d <= c.tau) {
        out.collide = true;
        out.toc = t;
        return out;
      }
      if (t >= 1) return out;
      t = c.motion->AdvanceLimit(t, d - c.tau / 2, sphere);
    }
  }
  const bool linear = c.motion->kind() == geom::MotionKind::kLinear;
  fcl::ContinuousCollisionRequestd req;  // FCL's default: naive, 10 samples
  req.ccd_motion_type = linear ? fcl::CCDM_LINEAR : fcl::CCDM_SCREW;
  if (method == Fcl::kCa) {
    req.ccd_solver_type = fcl::CCDC_CONSERVATIVE_ADVANCEMENT;
    req.gjk_solver_type = fcl::GST_LIBCCD;
    req.num_max_iterations = 1000;
    req.toc_err = 1e-5;
  }
  const Model& moving = FclModel(*c.moving);
  const std::vector<double> t = Pieces(*c.motion);
  FclAnswer out;
  for (std::size_t p = 0; p + 1 < t.size() && !out.collide; ++p) {
    const fcl::Transform3d a = ToFcl(c.motion->PoseAt(t[p])), b = ToFcl(c.motion->PoseAt(t[p + 1]));
    for (std::size_t i : candidates) {
      const auto& o = c.obstacles[i];
      const fcl::Transform3d X_O = ToFcl(o.X_WO);
      fcl::ContinuousCollisionResultd res;
      fcl::continuousCollide(&moving, a, b, &FclModel(*o.part), X_O, X_O, req, res);
      ++out.calls;
      if (res.is_collide) {
        out.collide = true;
        out.toc = std::min(out.toc, t[p] + res.time_of_contact * (t[p + 1] - t[p]));
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Checks.

// Dense scan: ClassifyPair every τ/8 of travel; the first blocked parameter or -1.
double BruteForce(const Case& c) {
  const geom::Sphere s = geom::TravelSphere(*c.moving);
  const double total = c.motion->MaxTravel(0, 1, s);
  const int n = std::max(2, static_cast<int>(std::ceil(total / (c.tau / 8))));
  geom::PairTolerances tol;
  tol.contact_mm = c.tau;
  for (int i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / n;
    const RigidTransform X = c.motion->PoseAt(t);
    for (const auto& o : c.obstacles) {
      const auto cls = geom::ClassifyPair(*c.moving, X, *o.part, o.X_WO, tol).cls;
      if (cls == geom::ClashClass::kHard || cls == geom::ClashClass::kContained) return t;
    }
  }
  return -1;
}

// FCL's screw from two poses must be our motion: compare at the middle of each piece.
std::string CheckScrewMatches(const Case& c) {
  if (c.motion->kind() == geom::MotionKind::kLinear) return "";
  const std::vector<double> t = Pieces(*c.motion);
  for (std::size_t p = 0; p + 1 < t.size(); ++p) {
    fcl::ScrewMotion<double> m(ToFcl(c.motion->PoseAt(t[p])), ToFcl(c.motion->PoseAt(t[p + 1])));
    m.integrate(0.5);
    fcl::Transform3d X;
    m.getCurrentTransform(X);
    const RigidTransform ours = c.motion->PoseAt(0.5 * (t[p] + t[p + 1]));
    if ((X.translation() - ours.t).norm() > 1e-6 || (X.linear() - ours.R).norm() > 1e-9) {
      return absl::StrCat(c.name,
                          ": FCL's screw differs from ours at t = ", 0.5 * (t[p] + t[p + 1]));
    }
  }
  return "";
}

// Whether some obstacle blocks (kHard or kContained at τ) the moving part at X.
bool BlockedAt(const Case& c, const RigidTransform& X) {
  geom::PairTolerances tol;
  tol.contact_mm = c.tau;
  for (const auto& o : c.obstacles) {
    const auto cls = geom::ClassifyPair(*c.moving, X, *o.part, o.X_WO, tol).cls;
    if (cls == geom::ClashClass::kHard || cls == geom::ClashClass::kContained) return true;
  }
  return false;
}

// FCL's discrete answers at one pose: any triangle pair intersecting; the exact distance.
bool FclCollidesAt(const Case& c, const RigidTransform& X) {
  for (const auto& o : c.obstacles) {
    fcl::CollisionResultd res;
    fcl::collide(&FclModel(*c.moving), ToFcl(X), &FclModel(*o.part), ToFcl(o.X_WO),
                 fcl::CollisionRequestd(1, false), res);
    if (res.isCollision()) return true;
  }
  return false;
}
double FclDistanceAt(const Case& c, const RigidTransform& X) {
  std::vector<std::size_t> all(c.obstacles.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  int calls = 0;
  return FclMinDistance(c, all, X, &calls);
}

// Computes every answer and checks the agreements; fills the dataset's counters.
void Check(Dataset& d, bool brute_force, double expected_t = -2) {
  for (Case& c : d.cases) {
    c.exact = geom::Sweep(*c.moving, *c.motion, c.obstacles, [&] {
      geom::SweepOptions o;
      o.contact_mm = c.tau;
      return o;
    }());
    if (c.exact.exhausted) {
      d.error = c.name + ": our sweep was exhausted";
      return;
    }
    d.blocked += c.exact.blocked;
    if (std::string e = CheckScrewMatches(c); !e.empty()) {
      d.error = e;
      return;
    }
    if (expected_t > -2 && (c.exact.blocked != (expected_t >= 0) ||
                            (expected_t >= 0 && std::abs(c.exact.t_contact - expected_t) > 1e-3))) {
      d.error = absl::StrCat(c.name, ": blocked ", c.exact.blocked, " at t = ", c.exact.t_contact,
                             ", expected ", expected_t);
      return;
    }
    if (brute_force) {
      const double t = BruteForce(c);
      // The scan is sampled: it may see a blocked pose only after ours (never before ours minus
      // the refinement bracket, which is at most τ/4 of travel).
      if ((t >= 0) != c.exact.blocked) {
        d.error = absl::StrCat(c.name, ": our sweep says ", c.exact.blocked ? "blocked" : "free",
                               ", the dense scan ", t >= 0 ? "blocked" : "free");
        return;
      }
    }
    const std::vector<std::size_t> cand = Candidates(c);
    const FclAnswer ca = RunFcl(c, cand, Fcl::kCa);
    const FclAnswer naive = RunFcl(c, cand, Fcl::kNaive);
    const FclAnswer dca = RunFcl(c, cand, Fcl::kDistanceCa);
    // Our blocked pose, confirmed by both libraries' discrete checks.
    if (c.exact.blocked) {
      const RigidTransform X = c.motion->PoseAt(c.exact.t_contact);
      if (!BlockedAt(c, X) || !FclCollidesAt(c, X)) {
        d.error = absl::StrCat(c.name, ": our blocked pose at t = ", c.exact.t_contact,
                               " is not confirmed by ClassifyPair and FCL collide");
        return;
      }
    }
    if (c.exact.blocked) {
      // A miss says free; a late answer reports its first contact after our blocked pose.
      ++*(!naive.collide                  ? &d.misses_naive
          : naive.toc > c.exact.t_contact ? &d.late_naive
                                          : &d.on_time_naive);
      ++*(!ca.collide ? &d.misses_ca : ca.toc > c.exact.t_contact ? &d.late_ca : &d.on_time_ca);
      if (!dca.collide || dca.toc > c.exact.t_contact) {
        d.error = absl::StrCat(c.name, ": the FCL-distance advancement missed our blocked pose");
        return;
      }
    }
    // A contact reported before ours (or where ours is free): our sweep must not have passed a
    // blocked pose there, and FCL's own exact distance says whether it is a touch (within τ,
    // allowed) or a false collision.
    for (const auto& [answer, touches, false_alarms] :
         {std::tuple{ca, &d.touches_ca, &d.false_ca},
          std::tuple{naive, &d.touches_naive, &d.false_naive},
          std::tuple{dca, &d.touches_dca, &d.false_dca}}) {
      if (!answer.collide || (c.exact.blocked && answer.toc >= c.exact.t_contact)) continue;
      const RigidTransform X = c.motion->PoseAt(answer.toc);
      if (BlockedAt(c, X)) {
        d.error = absl::StrCat(c.name, ": FCL's contact at t = ", answer.toc,
                               " is blocked and our sweep passed it");
        return;
      }
      ++*(FclDistanceAt(c, X) <= c.tau ? touches : false_alarms);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Datasets.

std::shared_ptr<const Part> MakePart(const testing::RawMesh& m) {
  auto mesh = geom::TriangleMesh::Create(m.v, m.t, {}, {});
  if (!mesh.ok()) return nullptr;
  auto part = Part::Create(std::move(*mesh));
  if (!part.ok()) return nullptr;
  return std::move(*part);
}

std::unique_ptr<Dataset> Insertion(const std::string& name, double peg_radius) {
  auto d = std::make_unique<Dataset>();
  d->name = name;
  auto tube = MakePart(testing::MakeTube(5.0, 30.0, 20.0, 1024));
  auto peg = MakePart(testing::MakeCylinder(peg_radius, 100.0, 256));
  if (!tube || !peg) {
    d->error = "mesh";
    return d;
  }
  Case c;
  c.name = name;
  c.moving = peg.get();
  // The peg (centred, length 100) starts with its centre at z = 120 (its end 60 mm above the
  // tube's top at z = 10) and moves 200 mm along -z, through the tube and out below it.
  c.motion = *Motion::Linear(RigidTransform::Translation(Vec3(0, 0, 120)), -Vec3::UnitZ(), 200);
  c.obstacles.push_back({tube.get(), RigidTransform::Identity(), 1});
  c.tau = 0.01;
  d->owned = {tube, peg};
  d->cases.push_back(std::move(c));
  // The wide peg's bottom (z = 70 at the start) meets the tube's top (z = 10) after 60 mm.
  Check(*d, /*brute_force=*/false, peg_radius > 5.0 ? 60.0 / 200.0 : -1.0);
  return d;
}

std::unique_ptr<Dataset> ThinPlate() {
  auto d = std::make_unique<Dataset>();
  d->name = "thinplate";
  auto plate = MakePart(testing::MakeBox(Vec3(20, 20, 0.05)));
  auto box = MakePart(testing::MakeBox(Vec3(2, 2, 2)));
  if (!plate || !box) {
    d->error = "mesh";
    return d;
  }
  // Ten 100 mm moves along -z at x = 0, 5, ..., 45: the box (half-width 2) crosses the plate
  // (half-width 20) for x <= 20 and passes beside it from x = 25 on.
  for (int k = 0; k < 10; ++k) {
    Case c;
    c.name = absl::StrCat("thinplate/x", 5 * k);
    c.moving = box.get();
    const double x = 5.0 * k;
    // Start 53 mm above: the plate is met at t = 0.5095, between FCL's samples 4/9 and 5/9.
    c.motion = *Motion::Linear(RigidTransform::Translation(Vec3(x, 0, 53)), -Vec3::UnitZ(), 100);
    c.obstacles.push_back({plate.get(), RigidTransform::Identity(), 1});
    c.tau = 0.01;
    d->cases.push_back(std::move(c));
  }
  d->owned = {plate, box};
  Check(*d, /*brute_force=*/true);
  return d;
}

// The as1 steps, obstacles and τ as RunSequence builds them (checked against it).
std::unique_ptr<Dataset> As1Steps(const std::string& data_dir) {
  auto d = std::make_unique<Dataset>();
  d->name = "as1";
  auto loaded = testing::LoadAs1(testing::As1File(data_dir));
  if (!loaded.ok()) {
    d->error = std::string(loaded.status().message());
    return d;
  }
  d->as1 = std::move(*loaded);
  const testing::As1& as1 = *d->as1;
  const server::Scene& scene = *as1.scene;
  // The valid order (18 steps), then two wrong sequences (the helpers' orders completed with
  // the remaining valid steps), of which the blocked step is taken: 20 step checks.
  const std::vector<v1::ValidateSequenceRequest> requests = {
      testing::ValidOrder(as1), testing::Completed(as1, testing::WrongSideBoltOrder(as1)),
      testing::Completed(as1, testing::BracketAfterBoltsOrder(as1))};
  for (const v1::ValidateSequenceRequest& r : requests) {
    std::vector<v1::StepResult> engine;
    {
      std::shared_lock lock(scene.mu);
      absl::Status s = server::RunSequence(
          scene, r, [] { return absl::OkStatus(); },
          [&](const v1::ValidateSequenceEvent& e) {
            if (e.has_step()) engine.push_back(e.step());
          });
      if (!s.ok()) {
        d->error = std::string(s.message());
        return d;
      }
    }
    // Rebuild each step's sweep like RunSequence: what stands, minus allowed pairs.
    std::map<uint64_t, int> step_of;
    std::vector<const server::InstanceRec*> mover;
    for (int k = 0; k < r.steps_size(); ++k) {
      const std::string& p = r.steps(k).moving().path_prefixes(0);
      const server::InstanceRec* m = scene.Find(scene.by_path.at(p));
      step_of[m->id] = k;
      mover.push_back(m);
    }
    const bool valid = &r == &requests.front();
    if (!valid && (engine.empty() || engine.back().ok())) {
      d->error = "a wrong sequence was not blocked";
      return d;
    }
    for (int k = valid ? 0 : static_cast<int>(engine.size()) - 1;
         k < r.steps_size() && k < static_cast<int>(engine.size()); ++k) {
      const server::InstanceRec& m = *mover[static_cast<std::size_t>(k)];
      Case c;
      c.name = r.steps(k).name();
      c.moving = m.part->geom.get();
      auto motion = server::MotionToInstall(r.steps(k).motion(), m.X_WP, c.name);
      if (!motion.ok()) {
        d->error = std::string(motion.status().message());
        return d;
      }
      c.motion = *motion;
      double max_deflection = 0;
      std::string allowed_b;
      if (r.steps(k).allowed_size() > 0) allowed_b = r.steps(k).allowed(0).b().path_prefixes(0);
      for (const auto& [id, rec] : scene.instances) {
        auto it = step_of.find(id);
        if (it != step_of.end() && it->second >= k) continue;
        max_deflection = std::max(max_deflection, rec.part->deflection_mm);
        if (rec.path == allowed_b) continue;
        c.obstacles.push_back({rec.part->geom.get(), rec.X_WP, id});
      }
      c.tau = server::ContactTolerance(r.tolerances(), m.part->deflection_mm + max_deflection,
                                       m.part->geom->bounds().Diagonal());
      d->cases.push_back(std::move(c));
      // Same answer as the engine, with the same number of distance queries.
      const geom::SweepResult mine = geom::Sweep(*d->cases.back().moving, *d->cases.back().motion,
                                                 d->cases.back().obstacles, [&] {
                                                   geom::SweepOptions o;
                                                   o.contact_mm = d->cases.back().tau;
                                                   return o;
                                                 }());
      const v1::StepResult& e = engine[static_cast<std::size_t>(k)];
      if (mine.blocked == e.ok() || mine.distance_queries != e.distance_queries() ||
          (mine.blocked && mine.t_contact != e.blocked_t())) {
        d->error = absl::StrCat(r.steps(k).name(), ": rebuilt sweep differs from RunSequence");
        return d;
      }
    }
  }
  Check(*d, /*brute_force=*/false);
  return d;
}

const Dataset& Get(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Dataset>> cache;
  auto& slot = cache[name];
  if (!slot) {
    if (name == "as1") {
      const char* env = std::getenv("CLASH_BENCH_DATA_DIR");
      slot = As1Steps(env != nullptr ? env : CLASH_BENCH_DATA_DIR);
    } else if (name == "insertion") {
      slot = Insertion(name, 4.5);
    } else if (name == "insertion-tight") {
      slot = Insertion(name, 5.2);
    } else {
      slot = ThinPlate();
    }
  }
  return *slot;
}

// ---------------------------------------------------------------------------------------------
// Benchmarks: one iteration runs every step of the dataset; times are reported per step.

bool g_failed = false;

void Fail(benchmark::State& state, const std::string& why) {
  g_failed = true;
  std::fprintf(stderr, "error: %s\n", why.c_str());
  state.SkipWithError(why.c_str());
}

void Counters(benchmark::State& state, const Dataset& d, double queries, double calls) {
  const double steps = static_cast<double>(d.cases.size());
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(d.cases.size()));
  state.counters["steps"] = steps;
  state.counters["blocked"] = d.blocked;
  state.counters["us_per_step"] = benchmark::Counter(
      steps, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  if (queries >= 0) state.counters["queries_per_step"] = queries / steps;
  state.counters["calls_per_step"] = calls / steps;
  state.counters["misses_naive"] = d.misses_naive;
  state.counters["misses_ca"] = d.misses_ca;
  state.counters["touches_dca"] = d.touches_dca;
  state.counters["false_dca"] = d.false_dca;
  state.counters["late_naive"] = d.late_naive;
  state.counters["late_ca"] = d.late_ca;
  state.counters["touches_naive"] = d.touches_naive;
  state.counters["false_naive"] = d.false_naive;
  state.counters["touches_ca"] = d.touches_ca;
  state.counters["false_ca"] = d.false_ca;
}

void BM_Clash(benchmark::State& state, const std::string& name) {
  const Dataset& d = Get(name);
  if (!d.error.empty()) {
    Fail(state, d.error);
    return;
  }
  double queries = 0;
  int mismatches = 0;
  for (auto _ : state) {
    queries = 0;
    for (const Case& c : d.cases) {
      geom::SweepOptions o;
      o.contact_mm = c.tau;
      const geom::SweepResult r = geom::Sweep(*c.moving, *c.motion, c.obstacles, o);
      mismatches += r.blocked != c.exact.blocked || r.t_contact != c.exact.t_contact;
      queries += static_cast<double>(r.distance_queries + r.directional_queries);
      benchmark::DoNotOptimize(r.t_contact);
    }
  }
  if (mismatches > 0) Fail(state, "the sweep's answer changed while timing");
  Counters(state, d, queries, queries);
}

void BM_Fcl(benchmark::State& state, const std::string& name, Fcl method) {
  const Dataset& d = Get(name);
  if (!d.error.empty()) {
    Fail(state, d.error);
    return;
  }
  double calls = 0;
  for (auto _ : state) {
    calls = 0;
    for (const Case& c : d.cases) {
      const FclAnswer a = RunFcl(c, Candidates(c), method);
      calls += a.calls;
      benchmark::DoNotOptimize(a.toc);
    }
  }
  // FCL does not expose how many distance queries its conservative advancement makes; the naive
  // solver makes one discrete collide per sample (10) and call; the distance advancement one
  // exact distance per call.
  Counters(state, d,
           method == Fcl::kNaive        ? 10 * calls
           : method == Fcl::kDistanceCa ? calls
                                        : -1,
           calls);
}

}  // namespace
}  // namespace clash::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  using clash::bench::Fcl;
  for (const std::string name : {"as1", "insertion", "insertion-tight", "thinplate"}) {
    benchmark::RegisterBenchmark(("BM_Sequence/clash-adaptive/" + name).c_str(),
                                 clash::bench::BM_Clash, name)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_Sequence/fcl-ca/" + name).c_str(), clash::bench::BM_Fcl, name,
                                 Fcl::kCa)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_Sequence/fcl-naive/" + name).c_str(), clash::bench::BM_Fcl,
                                 name, Fcl::kNaive)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_Sequence/fcl-distance-ca/" + name).c_str(),
                                 clash::bench::BM_Fcl, name, Fcl::kDistanceCa)
        ->Unit(benchmark::kMicrosecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return clash::bench::g_failed ? 1 : 0;
}
