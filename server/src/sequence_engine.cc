#include "sequence_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "clash/geom/motion.h"
#include "clash/geom/status_macros.h"
#include "clash/geom/sweep.h"
#include "convert.h"

namespace clash::server {
namespace {

using geom::RigidTransform;
using geom::Vec3;

// A sweep leaves a pair an allowed-interference rule names out whole (it cannot tell a deep
// clash from a shallow one, or let contacts through and stop clashes, with one τ for all
// obstacles): rules that suppress only some of what blocks a step are refused rather than
// silently applied to the whole pair.
absl::Status CheckWholePairRules(
    const google::protobuf::RepeatedPtrField<v1::AllowedInterference>& rules,
    const std::string& where) {
  for (const v1::AllowedInterference& r : rules) {
    const std::string what = absl::StrCat(where, " allowed interference '", r.name(), "'");
    if (r.max_depth_mm() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       ": max_depth_mm is not supported in sequences (a rule removes the "
                       "pair from the sweep whole)"));
    }
    if (r.classes().empty()) continue;
    bool hard = false, contained = false;
    for (int c : r.classes()) {
      hard |= c == v1::HARD;
      contained |= c == v1::CONTAINED;
    }
    if (!hard || !contained) {
      return absl::InvalidArgumentError(absl::StrCat(
          what,
          ": in sequences a rule must suppress every class that blocks (HARD and CONTAINED; "
          "empty classes: all), as it removes the pair from the sweep whole"));
    }
  }
  return absl::OkStatus();
}

RigidTransform AxisMotion(const Vec3& c, const Vec3& a, double angle, double advance) {
  const geom::Mat3 R = Eigen::AngleAxisd(angle, a).toRotationMatrix();
  // p -> R (p - c) + c + advance a
  return {R, c - R * c + advance * a};
}

absl::StatusOr<Vec3> UnitAxis(const v1::Vec3& v, const std::string& what) {
  const Vec3 a = FromProto(v);
  const double n = a.stableNorm();  // (1e200, 0, 0) and (1e-170, 0, 0) are directions too
  if (!a.allFinite() || !(n > 0) || !std::isfinite(n)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be finite and non-zero"));
  }
  return Vec3(a / n);
}

}  // namespace

absl::StatusOr<geom::Motion> MotionToInstall(const v1::Motion& m, const RigidTransform& X_installed,
                                             const std::string& what) {
  switch (m.kind_case()) {
    case v1::Motion::kLinear: {
      CLASH_ASSIGN_OR_RETURN(Vec3 d, UnitAxis(m.linear().direction(), what + ": direction"));
      const double L = m.linear().distance_mm();
      if (!std::isfinite(L) || L < 0) {
        return absl::InvalidArgumentError(what + ": distance_mm must be finite and >= 0");
      }
      return geom::Motion::Linear(RigidTransform::Translation(-L * d) * X_installed, d, L);
    }
    case v1::Motion::kRotation:
    case v1::Motion::kScrew: {
      const bool screw = m.kind_case() == v1::Motion::kScrew;
      const v1::Vec3& axis = screw ? m.screw().axis() : m.rotation().axis();
      const Vec3 c = FromProto(screw ? m.screw().axis_point_mm() : m.rotation().axis_point_mm());
      const double angle = screw ? m.screw().angle_rad() : m.rotation().angle_rad();
      const double pitch = screw ? m.screw().pitch_mm() : 0.0;
      CLASH_ASSIGN_OR_RETURN(Vec3 a, UnitAxis(axis, what + ": axis"));
      if (!c.allFinite() || !std::isfinite(angle) || !std::isfinite(pitch)) {
        return absl::InvalidArgumentError(what + ": axis point, angle and pitch must be finite");
      }
      const double advance = angle / (2 * std::numbers::pi) * pitch;
      const RigidTransform X0 = AxisMotion(c, a, -angle, -advance) * X_installed;
      if (screw) return geom::Motion::Screw(X0, c, a, angle, pitch);
      return geom::Motion::Rotation(X0, c, a, angle);
    }
    case v1::Motion::kPath: {
      if (m.path().keyframes_size() > kMaxKeyframes) {
        return absl::ResourceExhaustedError(absl::StrCat(what, ": ", m.path().keyframes_size(),
                                                         " keyframes; at most ", kMaxKeyframes));
      }
      std::vector<geom::Keyframe> keys;
      for (int i = 0; i < m.path().keyframes_size(); ++i) {
        const auto& k = m.path().keyframes(i);
        CLASH_ASSIGN_OR_RETURN(RigidTransform K,
                               PoseFromProto(k.offset(), absl::StrCat(what, ": keyframe ", i)));
        keys.push_back({k.t(), K * X_installed});
      }
      if (!keys.empty()) {
        const RigidTransform& last = keys.back().X_WP;
        if ((last.t - X_installed.t).norm() > 1e-6 ||
            (last.R - X_installed.R).cwiseAbs().maxCoeff() > 1e-6) {
          return absl::InvalidArgumentError(
              what + ": the last keyframe must be the installed pose (identity offset)");
        }
      }
      return geom::Motion::Keyframes(keys);
    }
    case v1::Motion::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(what + ": no motion given");
}

absl::Status RunSequence(const Scene& scene, const v1::ValidateSequenceRequest& request,
                         const StopCheck& stop,
                         const std::function<void(const v1::ValidateSequenceEvent&)>& emit,
                         const SequenceLimits& limits) {
  const v1::Tolerances& tol = request.tolerances();
  CLASH_RETURN_IF_ERROR(ValidateTolerances(tol));
  if (request.steps().empty()) return absl::InvalidArgumentError("the sequence has no step");

  // Which step moves each instance, and each step's motion (of its first mover). Every step is
  // checked here, before any runs: a bad step fails the call whatever the steps before it find.
  const int n = request.steps_size();
  std::vector<std::vector<const InstanceRec*>> movers(static_cast<std::size_t>(n));
  absl::flat_hash_map<uint64_t, int> step_of;
  // Each step's motion is made here to check it, and made again when the step runs: a motion
  // takes about 20 times its keyframes' bytes on the wire, so keeping every step's would let
  // one request take gigabytes before its first step.
  const auto motion_of = [&](int k) {
    const InstanceRec* first = movers[k].front();
    return MotionToInstall(request.steps(k).motion(), first->X_WP,
                           absl::StrCat("step ", k + 1, " (", first->path, ")"));
  };
  for (int k = 0; k < n; ++k) {
    CLASH_RETURN_IF_ERROR(stop());
    const v1::SequenceStep& step = request.steps(k);
    if (step.moving().instance_ids().empty() && step.moving().groups().empty() &&
        step.moving().path_prefixes().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("step ", k + 1, " moves nothing"));
    }
    CLASH_ASSIGN_OR_RETURN(movers[k], SelectInstances(scene, step.moving()));
    if (movers[k].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("step ", k + 1, " moves no enabled instance"));
    }
    for (const InstanceRec* rec : movers[k]) {
      if (!step_of.emplace(rec->id, k).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(rec->path, " is moved by steps ", step_of[rec->id] + 1, " and ", k + 1));
      }
    }
    CLASH_ASSIGN_OR_RETURN(const geom::Motion motion, motion_of(k));
    // Everywhere the group goes must be within the scene's reach, as a pose must: beyond it the
    // arithmetic keeps no precision (a motion of 1e200 mm passed through obstacles with τ
    // infinite). The group's box in its first mover's frame, carried along the motion.
    const InstanceRec* first = movers[k].front();
    const RigidTransform X_first_inv = first->X_WP.Inverse();
    geom::Aabb group;
    for (const InstanceRec* rec : movers[k]) {
      group.Add(rec->part->geom->bounds().Transformed(X_first_inv * rec->X_WP));
    }
    const double travel =
        motion.MaxTravel(0, 1, geom::Sphere{group.Center(), 0.5 * group.Diagonal()});
    CLASH_RETURN_IF_ERROR(
        Scene::CheckReach(group.Transformed(motion.start()).Inflated(travel), [&] {
          return absl::StrCat("step ", k + 1, " (", first->path, "): the motion carries its parts");
        }));
  }
  // Staged instances, within a budget: a few bytes of request naming the whole scene many
  // times (an empty selector names every instance) must not take minutes past the deadline.
  absl::flat_hash_map<uint64_t, RigidTransform> staged;
  std::size_t staged_named = 0;
  // The largest coordinate of any part's box in its own frame (computed once, when asked).
  double farthest_part_coordinate = -1;
  const auto part_reach = [&] {
    if (farthest_part_coordinate < 0) {
      farthest_part_coordinate = 0;
      for (const auto& [id, rec] : scene.instances) {
        const geom::Aabb& b = rec.part->geom->bounds();
        farthest_part_coordinate = std::max(
            {farthest_part_coordinate, b.min.cwiseAbs().maxCoeff(), b.max.cwiseAbs().maxCoeff()});
      }
    }
    return farthest_part_coordinate;
  };
  for (int i = 0; i < request.staged_size(); ++i) {
    CLASH_RETURN_IF_ERROR(stop());
    CLASH_ASSIGN_OR_RETURN(
        RigidTransform X, PoseFromProto(request.staged(i).pose(), absl::StrCat("staged[", i, "]")));
    CLASH_ASSIGN_OR_RETURN(auto recs, SelectInstances(scene, request.staged(i).instances()));
    staged_named += recs.size();
    if (staged_named > kMaxStagedInstances) {
      return absl::ResourceExhaustedError(absl::StrCat("the staged entries name more than ",
                                                       kMaxStagedInstances,
                                                       " instances in all (at staged[", i,
                                                       "]); an empty selector names every "
                                                       "instance"));
    }
    // Within reach: an entry may name every instance, and the entries millions of times in
    // all, so an entry whose translation plus the farthest corner of any part is well within
    // reach needs no check per instance (a part's box turned about the origin stays within
    // sqrt(3) times its farthest coordinate).
    const bool surely_within =
        X.t.cwiseAbs().maxCoeff() + std::sqrt(3.0) * part_reach() <= 0.5 * Scene::kMaxCoordinateMm;
    for (const InstanceRec* rec : recs) {
      if (!surely_within) {
        // (The message, with a path of up to 64 KiB, only for a refusal.)
        CLASH_RETURN_IF_ERROR(Scene::CheckReach(rec->part->geom->bounds().Transformed(X), [&] {
          return absl::StrCat("staged[", i, "] (", rec->path, ") places the part");
        }));
      }
      staged[rec->id] = X;
    }
  }
  AllowRules global_rules;
  CLASH_RETURN_IF_ERROR(CheckWholePairRules(request.allowed(), "the sequence's"));
  for (int k = 0; k < n; ++k) {
    CLASH_RETURN_IF_ERROR(
        CheckWholePairRules(request.steps(k).allowed(), absl::StrCat("step ", k + 1, "'s")));
  }
  CLASH_RETURN_IF_ERROR(ResolveAllowRules(scene, request.allowed(), &global_rules));
  for (int k = 0; k < n; ++k) {  // resolved again when the step runs (one step's at a time)
    if (request.steps(k).allowed().empty()) continue;
    CLASH_RETURN_IF_ERROR(stop());
    AllowRules rules;
    CLASH_RETURN_IF_ERROR(ResolveAllowRules(scene, request.steps(k).allowed(), &rules));
  }

  v1::SequenceSummary summary;
  summary.set_steps(n);
  summary.set_first_blocked_step(-1);
  summary.set_scene_version(scene.version);
  *summary.mutable_tolerances() = tol;
  // A progress event: step k has reached t.
  const auto progress = [&](int k, double t) {
    v1::ValidateSequenceEvent e;
    e.mutable_progress()->set_step_index(k);
    e.mutable_progress()->set_step_count(n);
    e.mutable_progress()->set_t(t);
    emit(e);
  };
  for (int k = 0; k < n; ++k) {
    CLASH_RETURN_IF_ERROR(stop());
    const v1::SequenceStep& step = request.steps(k);
    progress(k, 0.0);
    AllowRules rules = global_rules;
    CLASH_RETURN_IF_ERROR(ResolveAllowRules(scene, step.allowed(), &rules));
    // What stands while step k runs: instances no step moves, those of earlier steps, and staged
    // ones of later steps at their staging poses.
    struct Standing {
      const InstanceRec* rec;
      RigidTransform X;
    };
    std::vector<Standing> standing;
    double max_deflection = 0;  // of everything standing: the bound of any mover's τ
    for (const auto& [id, rec] : scene.instances) {
      if (!rec.enabled) continue;
      auto it = step_of.find(id);
      if (it != step_of.end() && it->second == k) continue;
      if (it != step_of.end() && it->second > k) {
        auto st = staged.find(id);
        if (st == staged.end()) continue;
        standing.push_back({&rec, st->second});
      } else {
        standing.push_back({&rec, rec.X_WP});
      }
      max_deflection = std::max(max_deflection, rec.part->deflection_mm);
    }

    // τ of a moving instance against what stands (unless the request gives it): its deflection
    // plus the largest of the obstacles it can come near. One τ serves a whole sweep, so a
    // coarse part that the mover never comes near must not loosen it: an obstacle counts when
    // its box is within the largest τ possible of the region the mover can sweep, its box at
    // X_start grown by `travel` (a bound on how far any of its points moves).
    auto contact_of = [&](const InstanceRec& m, const RigidTransform& X_start, double travel,
                          std::span<const geom::SweepObstacle> obstacles) {
      const geom::Aabb& box = m.part->geom->bounds();
      const double diagonal = box.Diagonal();
      const double widest = ContactTolerance(tol, m.part->deflection_mm + max_deflection, diagonal);
      const geom::Aabb reach = box.Transformed(X_start).Inflated(travel + widest);
      double near = 0;
      for (const geom::SweepObstacle& o : obstacles) {
        if (o.part->bounds().Transformed(o.X_WO).Distance(reach) <= 0) {
          near = std::max(near, scene.Find(o.id)->part->deflection_mm);
        }
      }
      return ContactTolerance(tol, m.part->deflection_mm + near, diagonal);
    };
    v1::StepResult result;
    result.set_step_index(k);
    result.set_name(step.name());
    result.set_ok(true);
    result.set_blocked_t(1.0);
    result.set_first_contact_t(-1);
    result.set_min_clearance_mm(std::numeric_limits<double>::infinity());
    // Each mover is swept on its own, carried by the first mover's motion. The group moves as
    // one body, so it goes no farther than where one of its movers is blocked or its sweep
    // stops undecided (`end`): a mover swept past that is swept again up to it, and nothing
    // past it is reported (clearance, profile, first contact).
    struct MoverSweep {
      const InstanceRec* m;
      geom::Motion motion;
      bool allowed_pairs = false;  // a rule names some pair of it and what stands
      geom::SweepOptions options;
      geom::SweepResult r;
      double reached = -1;  // the parameter its sweep got to (-1: not swept yet)
    };
    // What stands, as obstacles: shared by every mover, and filtered (when a sweep runs, so
    // that a step holds one copy whatever its number of movers) for a mover whose pairs with
    // some of it a rule names: such pairs are no obstacle.
    std::vector<geom::SweepObstacle> all_obstacles;
    all_obstacles.reserve(standing.size());
    for (const Standing& st : standing) {
      all_obstacles.push_back({st.rec->part->geom.get(), st.X, st.rec->id});
    }
    std::vector<geom::SweepObstacle> filtered;
    const auto obstacles_of = [&](const InstanceRec& m, bool allowed_pairs) {
      if (!allowed_pairs) return std::span<const geom::SweepObstacle>(all_obstacles);
      filtered.clear();
      for (const geom::SweepObstacle& o : all_obstacles) {
        if (!rules.FirstCoveringPair(m.id, o.id)) filtered.push_back(o);
      }
      return std::span<const geom::SweepObstacle>(filtered);
    };
    const auto path_of = [&](uint64_t id) {
      const InstanceRec* rec = scene.Find(id);
      return rec != nullptr ? rec->path : std::string();
    };
    // Progress events while the step's sweeps run, at most one per progress_interval: a long
    // step (tens of thousands of poses) would otherwise show its start until it ends. t is
    // the sweep running's (it starts again when a group's movers are swept again).
    auto last_progress = std::chrono::steady_clock::now();
    const auto progress_within_step = [&, k](double t) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last_progress < absl::ToChronoNanoseconds(limits.progress_interval)) return;
      last_progress = now;
      progress(k, t);
    };
    std::vector<MoverSweep> sweeps;
    sweeps.reserve(movers[k].size());
    int64_t suppressed = 0;
    for (const InstanceRec* m : movers[k]) {
      CLASH_RETURN_IF_ERROR(stop());
      result.add_moving_paths(m->path);
      // The group moves as one rigid body: every mover is carried by the first mover's motion
      // (a keyframe path interpolates the first mover's pose; interpolating each mover's own
      // pose would shear the group mid-path).
      CLASH_ASSIGN_OR_RETURN(geom::Motion motion,
                             !sweeps.empty() ? sweeps.front().motion.Carrying(
                                                   movers[k].front()->X_WP.Inverse() * m->X_WP)
                                             : motion_of(k));
      MoverSweep& s = sweeps.emplace_back(MoverSweep{m, std::move(motion), false, {}, {}});
      if (!rules.empty()) {
        for (const Standing& st : standing) {
          const AllowRule* covered = rules.FirstCoveringPair(m->id, st.rec->id);
          if (covered == nullptr) continue;
          s.allowed_pairs = true;
          if (++suppressed <= kMaxSuppressedListed) {
            result.add_suppressed(
                absl::StrCat(m->path, " / ", st.rec->path, " (", covered->name, ")"));
          }
        }
      }
      const geom::Aabb& box = m->part->geom->bounds();
      s.options.contact_mm =
          contact_of(*m, s.motion.start(),
                     s.motion.MaxTravel(0, 1, geom::Sphere{box.Center(), 0.5 * box.Diagonal()}),
                     obstacles_of(*m, s.allowed_pairs));
      s.options.clearance_mm = tol.clearance_mm();
      // (Every mover's sweep samples as a profile asks, at least every 1/64 of the motion, but
      // only the first mover's samples are reported: the others' are dropped after each sweep.)
      s.options.profile = request.clearance_profile();
      s.options.max_iterations = limits.max_sweep_iterations;
      s.options.on_free_pose = progress_within_step;
    }
    double end = 1.0;
    // Each pass lowers `end` or ends the loop; a re-swept mover reaches the new end unless it is
    // blocked or undecided before it, so two or three passes settle it. The cap only bounds
    // work: a group still unsettled after it is reported undecided up to `end`, and the sweeps
    // that went past it are left out of the report.
    bool again = true;
    for (int pass = 0; again && pass < 16; ++pass) {
      again = false;
      for (MoverSweep& s : sweeps) {
        if (s.reached >= 0 && s.reached <= end) continue;
        s.options.t_end = end;
        absl::Status stopped;
        s.r = geom::Sweep(*s.m->part->geom, s.motion, obstacles_of(*s.m, s.allowed_pairs),
                          s.options, [&] {
                            stopped = stop();
                            return !stopped.ok();
                          });
        CLASH_RETURN_IF_ERROR(stopped);
        // (Poses and τ are checked before the sweeps; a sweep refusing its input is a defect.)
        if (!s.r.status.ok()) return absl::InternalError(s.r.status.message());
        if (&s != &sweeps.front()) std::vector<std::pair<double, double>>().swap(s.r.profile);
        result.set_distance_queries(result.distance_queries() + s.r.distance_queries);
        result.set_contact_tolerance_mm(std::max(result.contact_tolerance_mm(), s.r.contact_mm));
        s.reached = s.r.blocked     ? s.r.t_contact
                    : s.r.exhausted ? std::max(s.r.t_last_free, 0.0)
                                    : end;
        if (s.reached < end) {
          end = s.reached;
          again = true;
        }
      }
    }
    double best_blocked = 2.0;
    double undecided_t = 2.0;
    if (again) {
      result.set_undecided(true);
      result.set_ok(false);
      undecided_t = end;
    }
    const InstanceRec* blocked_mover = nullptr;  // the first mover blocked at best_blocked
    const geom::Motion& first_motion = sweeps.front().motion;
    for (const MoverSweep& s : sweeps) {
      if (s.reached > end) continue;  // (only when the passes did not settle)
      const InstanceRec* m = s.m;
      const geom::SweepResult& r = s.r;
      if (r.first_touch_t >= 0 &&
          (result.first_contact_t() < 0 || r.first_touch_t < result.first_contact_t())) {
        result.set_first_contact_t(r.first_touch_t);
      }
      if (r.min_distance < result.min_clearance_mm()) {
        result.set_min_clearance_mm(r.min_distance);
        result.set_min_clearance_t(r.t_min_distance);
        result.set_min_clearance_path(path_of(r.min_distance_id));
      }
      if (r.exhausted && !r.blocked) {
        // Not proven free past where the sweep got to: counted as blocked, and said so.
        result.set_undecided(true);
        result.set_ok(false);
        undecided_t = std::min(undecided_t, s.reached);  // where it got to
      }
      // The earliest block wins; movers blocked at the same t all list their blockers.
      if (r.blocked && r.t_contact <= best_blocked) {
        if (r.t_contact < best_blocked) {
          result.clear_blockers();
          blocked_mover = m;
        }
        best_blocked = r.t_contact;
        result.set_ok(false);
        result.set_blocked_t(r.t_contact);
        // The first mover's pose then, whichever mover is blocked (the proto's promise: a
        // report places the moving group by it).
        ToProto(m == movers[k].front() ? r.X_contact : first_motion.PoseAt(r.t_contact),
                result.mutable_blocked_pose());
        for (std::size_t i = 0; i < r.blocking_ids.size(); ++i) {
          const uint64_t id = r.blocking_ids[i];
          v1::Blocker* b = result.add_blockers();
          b->set_instance_id(id);
          b->set_path(path_of(id));
          b->set_clash_class(i < r.blocking_classes.size() &&
                                     r.blocking_classes[i] == geom::ClashClass::kContained
                                 ? v1::CONTAINED
                                 : v1::HARD);
          ToProto(r.blocking_points_W[i], b->mutable_point_mm());
          b->set_moving_path(m->path);
        }
      }
    }
    // An undecided step reports where its group was proven free up to (its sweeps settle on
    // the same end, so a block, when there is one too, lies there).
    if (undecided_t < result.blocked_t()) {
      result.set_blocked_t(undecided_t);
      ToProto(first_motion.PoseAt(undecided_t), result.mutable_blocked_pose());
    }
    if (!result.has_blocked_pose()) {  // free: the installed pose, at blocked_t = 1
      ToProto(first_motion.PoseAt(1.0), result.mutable_blocked_pose());
    }
    // The first mover's profile, up to blocked_t (a blocked sweep's last sample is the first
    // blocked pose it checked, which its bisection then moved t_contact back from).
    if (request.clearance_profile() && sweeps.front().reached <= end) {
      for (const auto& [t, d] : sweeps.front().r.profile) {
        if (t > result.blocked_t()) break;
        v1::ProfileSample* p = result.add_profile();
        p->set_t(t);
        p->set_distance_mm(d);
      }
    }
    // A block is a contact: the first contact comes no later (a part that starts inside an
    // obstacle, or a block refined between two checked poses, has no earlier checked contact).
    if (best_blocked <= 1.0 &&
        (result.first_contact_t() < 0 || result.first_contact_t() > best_blocked)) {
      result.set_first_contact_t(best_blocked);
    }
    if (request.all_free_directions() || (request.free_directions() && !result.ok())) {
      // Escape directions, from its installed pose, of the mover blocked first (of the first
      // mover when none is), among the obstacles its sweep saw (allowed pairs left out).
      const InstanceRec* m = blocked_mover != nullptr ? blocked_mover : movers[k].front();
      const bool allowed_pairs =
          std::find_if(sweeps.begin(), sweeps.end(), [&](const MoverSweep& s) {
            return s.m == m;
          })->allowed_pairs;
      const std::span<const geom::SweepObstacle> obstacles = obstacles_of(*m, allowed_pairs);
      geom::FreeDirectionOptions fo;
      const double tested =
          fo.distance_mm > 0 ? fo.distance_mm : 1.5 * m->part->geom->bounds().Diagonal();
      // (A request's τ of 0 stays the sweeps' floor, as in the steps: FreeDirections would read
      // 0 as its own default, 1e-3 of the part's diagonal.)
      fo.contact_mm = std::max(contact_of(*m, m->X_WP, tested, obstacles),
                               1e-9 * m->part->geom->bounds().Diagonal());
      absl::Status stopped;
      const auto dirs = geom::FreeDirections(*m->part->geom, m->X_WP, obstacles, fo, [&] {
        stopped = stop();
        return !stopped.ok();
      });
      CLASH_RETURN_IF_ERROR(stopped);
      for (const geom::FreeDirection& d : dirs) {
        v1::FreeDirection* out = result.add_free_directions();
        out->set_name(d.label);
        ToProto(d.direction_W, out->mutable_direction());
        out->set_free(d.free);
        out->set_undecided(d.undecided);
        out->set_distance_mm(d.free ? tested : d.undecided ? 0.0 : d.free_travel_mm);
      }
    }
    result.set_suppressed_pairs(suppressed);
    result.set_clearance_violated(tol.clearance_mm() > 0 &&
                                  result.min_clearance_mm() < tol.clearance_mm());
    progress(k, result.ok() ? 1.0 : result.blocked_t());
    if (result.ok()) {
      summary.set_steps_ok(summary.steps_ok() + 1);
    } else {
      summary.set_steps_blocked(summary.steps_blocked() + 1);
      if (summary.first_blocked_step() < 0) summary.set_first_blocked_step(k);
    }
    const bool stop_here = !result.ok() && !request.continue_after_blocked();
    v1::ValidateSequenceEvent e;
    *e.mutable_step() = std::move(result);
    emit(e);
    if (stop_here) {
      summary.set_steps_skipped(n - k - 1);
      break;
    }
  }
  v1::ValidateSequenceEvent e;
  *e.mutable_summary() = std::move(summary);
  emit(e);
  return absl::OkStatus();
}

}  // namespace clash::server
