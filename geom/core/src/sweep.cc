#include "clash/geom/sweep.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "clash/geom/adaptive_bv.h"
#include "clash/geom/query.h"
#include "clash/geom/sphere.h"
#include "footprint_internal.h"
#include "separation_internal.h"

namespace clash::geom {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// With τ = 0 the steps still need a floor to terminate: this fraction of the larger of the
// part's diagonal and its total travel. It is far above the rounding of distances (~1e-15 of
// the coordinates) and far below any tessellation tolerance. A τ below it is raised to it for
// the classification too: steps of that size let a pose between two checked ones go about that
// deep, which a smaller τ would call HARD unseen.
constexpr double kMinStepRelative = 1e-9;
// Bisection of the first blocked parameter stops when the bracket's travel is at most this
// fraction of τ.
constexpr double kRefineFraction = 0.25;
// With a profile requested, directional steps span at most this much of the parameter, so
// that the profile has at least this many samples' worth of resolution.
constexpr double kProfileStep = 1.0 / 64;
// A directional step keeps every obstacle farther than this fraction of the distance at its
// start (and than τ/2 or the clearance).
constexpr double kDirectionalMarginRatio = 0.5;

// Invalid input (SweepResult::status): a τ that is not finite, an obstacle without a part or
// with a non-finite pose (or one so far out that its world box overflows). Such a pose would
// give NaN box distances, which break the ordering of the obstacles.
absl::Status CheckInput(std::span<const SweepObstacle> obstacles, const SweepOptions& options) {
  if (!std::isfinite(options.contact_mm)) {
    return absl::InvalidArgumentError(
        absl::StrCat("contact_mm must be finite, got ", options.contact_mm));
  }
  for (std::size_t i = 0; i < obstacles.size(); ++i) {
    const SweepObstacle& o = obstacles[i];
    if (o.part == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("obstacle ", i, " (id ", o.id, ") has no part"));
    }
    if (!o.X_WO.R.allFinite() || !o.X_WO.t.allFinite()) {
      return absl::InvalidArgumentError(
          absl::StrCat("obstacle ", i, " (id ", o.id, ") has a pose with a non-finite entry"));
    }
    const Aabb box = o.part->bounds().Transformed(o.X_WO);
    if (!box.min.allFinite() || !box.max.allFinite()) {
      return absl::InvalidArgumentError(
          absl::StrCat("obstacle ", i, " (id ", o.id, ") has a world box that is not finite"));
    }
  }
  return absl::OkStatus();
}

bool Blocks(ClashClass c) { return c == ClashClass::kHard || c == ClashClass::kContained; }

// One obstacle blocking at a pose.
struct Blocker {
  std::size_t index = 0;
  ClashClass cls = ClashClass::kHard;
  double depth = 0.0;
  Vec3 p_W = Vec3::Zero();
};

// The sweep's state and the two evaluations of a pose.
class Sweeper {
 public:
  Sweeper(const Part& moving, const Motion& motion, std::span<const SweepObstacle> obstacles,
          const SweepOptions& options, const std::function<bool()>& should_stop)
      : moving_(moving),
        motion_(motion),
        obstacles_(obstacles),
        options_(options),
        should_stop_(should_stop),
        sphere_(TravelSphere(moving)) {
    const double scale = std::max(moving.bounds().Diagonal(), motion.MaxTravel(0, 1, sphere_));
    tau_step_ = std::max(std::max(options.contact_mm, 0.0), kMinStepRelative * scale);
    result_.contact_mm = tau_step_;
    clearance_ = std::max(options.clearance_mm, 0.0);
    resolution_ = options.clearance_resolution_mm > 0 ? options.clearance_resolution_mm
                                                      : std::max(tau_step_ / 2, clearance_ / 4);
    boxes_.reserve(obstacles.size());
    for (const SweepObstacle& o : obstacles) {
      assert(o.part != nullptr);
      boxes_.push_back(o.part->bounds().Transformed(o.X_WO));
    }
    order_.resize(obstacles.size());
  }

  SweepResult Run();

 private:
  // The distances of a pose: the minimum, and the obstacles within τ.
  struct Distances {
    double min = kInf;
    std::size_t min_index = 0;
    std::vector<std::pair<std::size_t, double>> near;  // (obstacle, distance)
  };

  bool StopRequested() {
    if (should_stop_ && should_stop_()) {
      result_.stopped = true;
      return true;
    }
    return false;
  }

  // Obstacles sorted by the distance of their world box to the part's box at X.
  void SortByBoxDistance(const Aabb& box, std::vector<double>* lower) {
    lower->resize(obstacles_.size());
    for (std::size_t i = 0; i < obstacles_.size(); ++i) {
      // The obstacles' boxes are finite (CheckInput); should the moving part's box not be, an
      // unknown distance counts as 0 (measured first), which also keeps the order strict weak.
      const double d = box.Distance(boxes_[i]);
      (*lower)[i] = std::isnan(d) ? 0.0 : d;
    }
    std::iota(order_.begin(), order_.end(), std::size_t{0});
    std::sort(order_.begin(), order_.end(),
              [&](std::size_t a, std::size_t b) { return (*lower)[a] < (*lower)[b]; });
  }

  Distances Measure(const RigidTransform& X) {
    Distances out;
    std::vector<double> lower;
    SortByBoxDistance(moving_.bounds().Transformed(X), &lower);
    for (std::size_t i : order_) {
      const double bound = std::max(out.min, tau_step_);
      if (lower[i] > bound) break;
      const SweepObstacle& o = obstacles_[i];
      const double d = Distance(moving_, X, *o.part, o.X_WO, bound).distance;
      ++result_.distance_queries;
      if (d <= tau_step_) out.near.emplace_back(i, d);
      if (d < out.min) {
        out.min = d;
        out.min_index = i;
      }
    }
    return out;
  }

  // Whether obstacle i lies inside the part or the part inside it at X (their surfaces being
  // apart); `gap` is reported as the depth, as ClassifyPair does for kContained.
  std::optional<Blocker> Contained(const RigidTransform& X, std::size_t i, double gap) {
    const SweepObstacle& o = obstacles_[i];
    ++result_.classify_queries;
    Vec3 p_W;  // the witness: a point of whichever part lies inside the other
    if (FindContainment(moving_, X, *o.part, o.X_WO, &p_W) == Containment::kNone) {
      return std::nullopt;
    }
    return Blocker{i, ClashClass::kContained, gap, p_W};
  }

  // Classifies the given obstacles at X, each with its surface distance (< 0: unknown): the
  // blockers, and the near-mode budget of the others. Surfaces known to be apart (within τ)
  // touch unless one part contains the other, so only FindContainment is asked (ClassifyPair
  // would answer the same after its own distance query); otherwise ClassifyPair decides.
  std::vector<Blocker> Classify(const RigidTransform& X,
                                std::span<const std::pair<std::size_t, double>> which,
                                double* budget) {
    std::vector<Blocker> blockers;
    PairTolerances tol;
    tol.contact_mm = tau_step_;
    for (const auto& [i, distance] : which) {
      double depth = 0.0;
      if (distance > 0) {
        if (std::optional<Blocker> b = Contained(X, i, distance)) {
          blockers.push_back(*b);
          continue;
        }
      } else {
        const SweepObstacle& o = obstacles_[i];
        const PairClassification c = ClassifyPair(moving_, X, *o.part, o.X_WO, tol);
        ++result_.classify_queries;
        if (Blocks(c.cls)) {
          blockers.push_back({i, c.cls, c.depth_mm, c.p_WA});
          continue;
        }
        depth = c.depth_mm;
      }
      if (budget != nullptr) {
        *budget = std::min(*budget, std::max(tau_step_ / 4, tau_step_ - depth));
      }
    }
    return blockers;
  }

  // At the start pose: obstacles whose boxes overlap the part's but which are not near may
  // still contain it or lie inside it.
  std::vector<Blocker> StartContainment(const RigidTransform& X, const Distances& dist) {
    std::vector<Blocker> blockers;
    const Aabb box = moving_.bounds().Transformed(X);
    for (std::size_t i = 0; i < obstacles_.size(); ++i) {
      if (!box.Overlaps(boxes_[i])) continue;
      const bool near = std::any_of(dist.near.begin(), dist.near.end(),
                                    [i](const auto& n) { return n.first == i; });
      if (near) continue;
      if (std::optional<Blocker> b = Contained(X, i, 0.0)) blockers.push_back(*b);
    }
    return blockers;
  }

  // The obstacles whose world box is within τ of the part's box at X (distances unknown).
  std::vector<std::pair<std::size_t, double>> BoxCandidates(const RigidTransform& X) {
    std::vector<std::pair<std::size_t, double>> out;
    const Aabb box = moving_.bounds().Transformed(X);
    for (std::size_t i = 0; i < obstacles_.size(); ++i) {
      if (box.Distance(boxes_[i]) <= tau_step_) out.emplace_back(i, -1.0);
    }
    return out;
  }

  // Far mode of a linear, rotation or screw motion: the parameter up to which the part, moved
  // from X (at t), stays more than `margin` from every obstacle by FreeTranslation's
  // directional bound (linear) or FreeScrew's footprint bound (turning about the motion's axis,
  // advancing along it for a screw). Obstacles are taken in the order Measure left (nearest box
  // first); one whose world box cannot come within the margin before the best bound so far is
  // skipped. Returns t when the bound is not beyond `floor` (a parameter the caller reaches
  // anyway).
  double DirectionalLimit(const RigidTransform& X, double t, double margin, double floor) {
    const bool linear = motion_.kind() == MotionKind::kLinear;
    // Travel (linear) or advance (screw) per unit of t, and its world direction; 0 for a turn
    // without advance, which is free for good as soon as nothing is within the margin now.
    double rate = motion_.AxialTravel();
    Vec3 dir = motion_.direction();
    if (rate < 0) {
      rate = -rate;
      dir = -dir;
    }
    const double floor_travel = rate > 0 ? (floor - t) * rate : 0.0;
    double best = rate > 0 ? (1.0 - t) * rate : 1.0;
    const Aabb box = moving_.bounds().Transformed(X);
    const Vec3 c = box.Center(), h = 0.5 * box.Size();
    const internal::AxisLine axis{motion_.center(), dir};
    const internal::Footprint moving_print =
        linear ? internal::Footprint{} : internal::BoxFootprint(c, Mat3::Identity(), h, axis);
    for (std::size_t i : order_) {
      // The moving part's world box against the obstacle's first.
      const Vec3 oc = boxes_[i].Center(), oh = 0.5 * boxes_[i].Size();
      double box_bound = 0.0;
      if (linear) {
        internal::TravelWindow window;
        for (int k = 0; k < 3; ++k) window.Axis(c[k] - oc[k], h[k] + oh[k], dir[k], margin);
        box_bound = window.First();
      } else {
        box_bound = internal::FootprintAdvance(
            moving_print, internal::BoxFootprint(oc, Mat3::Identity(), oh, axis), margin);
      }
      if (box_bound >= best) continue;
      const SweepObstacle& o = obstacles_[i];
      const double bound =
          linear ? FreeTranslation(moving_, X, *o.part, o.X_WO, dir, margin, best, floor_travel)
                 : FreeScrew(moving_, X, *o.part, o.X_WO, motion_.center(), dir, margin, best,
                             floor_travel);
      best = std::min(best, bound);
      ++result_.directional_queries;
      if (best <= floor_travel) return t;
    }
    if (rate == 0) return 1.0;  // nothing within the margin, and a pure turn keeps it so
    return std::min(1.0, t + best / rate);
  }

  // Bisection between the free lo and the blocked hi (blocked by `blockers`).
  // The minimum distance, the profile and the first touch take the checked pose at t.
  void Record(double t, const Distances& dist) {
    const uint64_t nearest_id = dist.min < kInf ? obstacles_[dist.min_index].id : 0;
    if (dist.min < result_.min_distance) {
      result_.min_distance = dist.min;
      result_.t_min_distance = t;
      result_.min_distance_id = nearest_id;
    }
    if (options_.profile) result_.profile.emplace_back(t, dist.min);
    if (!dist.near.empty() && result_.first_touch_t < 0) {
      result_.first_touch_t = t;
      result_.first_touch_id = nearest_id;
    }
  }

  void Refine(double lo, double hi, std::vector<Blocker> blockers) {
    while (motion_.MaxTravel(lo, hi, sphere_) > kRefineFraction * tau_step_) {
      const double mid = 0.5 * (lo + hi);
      if (mid <= lo || mid >= hi) break;
      if (StopRequested()) break;
      ++result_.iterations;
      const RigidTransform X = motion_.PoseAt(mid);
      std::vector<Blocker> b = Classify(X, BoxCandidates(X), nullptr);
      if (b.empty()) {
        lo = mid;
      } else {
        hi = mid;
        blockers = std::move(b);
      }
    }
    Finish(lo, hi, blockers);
  }

  void Finish(double last_free, double t, std::vector<Blocker>& blockers) {
    std::sort(blockers.begin(), blockers.end(), [&](const Blocker& a, const Blocker& b) {
      return obstacles_[a.index].id < obstacles_[b.index].id;
    });
    result_.blocked = true;
    result_.t_contact = t;
    result_.t_last_free = last_free;
    result_.X_contact = motion_.PoseAt(t);
    for (const Blocker& b : blockers) {
      result_.blocking_ids.push_back(obstacles_[b.index].id);
      result_.blocking_classes.push_back(b.cls);
      result_.blocking_points_W.push_back(b.p_W);
      result_.blocking_depth_mm = std::max(result_.blocking_depth_mm, b.depth);
    }
    const auto deepest =
        std::max_element(blockers.begin(), blockers.end(),
                         [](const Blocker& a, const Blocker& b) { return a.depth < b.depth; });
    if (deepest != blockers.end()) result_.p_contact_W = deepest->p_W;
  }

  const Part& moving_;
  const Motion& motion_;
  std::span<const SweepObstacle> obstacles_;
  const SweepOptions& options_;
  const std::function<bool()>& should_stop_;
  const Sphere sphere_;
  double tau_step_ = 0.0;
  double clearance_ = 0.0;
  double resolution_ = 0.0;
  std::vector<Aabb> boxes_;
  std::vector<std::size_t> order_;
  SweepResult result_;
};

SweepResult Sweeper::Run() {
  // (A NaN t_end scans the start pose only.)
  const double t_end = options_.t_end >= 1.0 ? 1.0 : options_.t_end > 0.0 ? options_.t_end : 0.0;
  double t = 0.0;
  double t_free = -1.0;
  // Distance and travel of the previous step, for the lower bound of the minimum distance.
  // A directional step also guarantees its margin over the step.
  double prev_d = kInf, prev_travel = 0.0, prev_margin = 0.0;
  bool have_prev = false;
  while (true) {
    if (StopRequested()) break;
    if (result_.iterations >= options_.max_iterations) {
      result_.exhausted = true;
      break;
    }
    ++result_.iterations;
    const RigidTransform X = motion_.PoseAt(t);
    const Distances dist = Measure(X);
    // On the step from the previous pose every point moved at most prev_travel, so the
    // distance stayed within prev_travel of both ends' distances.
    const double step_lower =
        have_prev ? std::max(std::max(prev_d, dist.min) - prev_travel, prev_margin) : dist.min;
    result_.min_distance_lower_bound =
        std::min(result_.min_distance_lower_bound, std::max(step_lower, 0.0));

    double budget = kInf;
    std::vector<Blocker> blockers = Classify(X, dist.near, &budget);
    if (t == 0.0) {
      std::vector<Blocker> inside = StartContainment(X, dist);
      blockers.insert(blockers.end(), inside.begin(), inside.end());
    }
    if (!blockers.empty()) {
      if (t_free < 0) {
        Record(t, dist);
        Finish(-1.0, t, blockers);
      } else {
        // The path ends at the refined t_contact, where its last sample is taken (not at the
        // blocked pose t the scan checked past it).
        Refine(t_free, t, std::move(blockers));
        const double tc = result_.t_contact;
        Record(tc, tc == t ? dist : Measure(motion_.PoseAt(tc)));
      }
      return std::move(result_);
    }
    Record(t, dist);
    t_free = t;
    if (options_.on_free_pose) options_.on_free_pose(t);
    if (t >= t_end) break;
    const bool far = dist.near.empty() && dist.min < kInf;
    if (far) {
      // Far mode: the part stays at least τ/2 away from every obstacle over the step.
      budget = dist.min - tau_step_ / 2;
      if (clearance_ > 0) budget = std::min(budget, std::max(dist.min - clearance_, resolution_));
    }
    double next = motion_.AdvanceLimit(t, budget, sphere_);
    const double plain_next = next;
    prev_margin = 0.0;
    if (far && next < t_end && motion_.kind() != MotionKind::kKeyframes && motion_.amount() != 0) {
      // A translation or a turn may go farther: as far as no obstacle can come within the
      // margin the distance step keeps (τ/2, or C while farther than the clearance C), by
      // separating axes or footprints about the axis, and not within half the current distance (so
      // that the path's minimum distance is at least half the smallest distance at the checked
      // poses).
      const double base = clearance_ > 0 ? clearance_ : tau_step_ / 2;
      if (dist.min > base) {
        const double margin = std::max(base, kDirectionalMarginRatio * dist.min);
        const double limit = DirectionalLimit(X, t, margin, next);
        if (limit > next) {
          next = limit;
          prev_margin = margin;
          ++result_.directional_steps;
        }
      }
    }
    // A profile has a sample at least every 1/64 of the parameter, far steps included.
    if (options_.profile && next > t + kProfileStep) {
      // Not counted as directional when the cap takes its gain back (its margin still holds).
      if (prev_margin > 0 && t + kProfileStep <= plain_next) --result_.directional_steps;
      next = t + kProfileStep;
    }
    next = std::min(next, t_end);
    if (!(next > t)) {
      result_.exhausted = true;  // the step fell below the spacing of doubles
      break;
    }
    prev_d = dist.min;
    prev_travel = motion_.MaxTravel(t, next, sphere_);
    have_prev = true;
    t = next;
  }
  result_.t_last_free = t_free;
  result_.X_contact = motion_.PoseAt(result_.t_contact);
  return std::move(result_);
}

}  // namespace

Sphere TravelSphere(const Part& part) { return BoundingSphereRitter(part.mesh().vertices()); }

SweepResult Sweep(const Part& moving, const Motion& motion,
                  std::span<const SweepObstacle> obstacles, const SweepOptions& options,
                  const std::function<bool()>& should_stop) {
  if (absl::Status status = CheckInput(obstacles, options); !status.ok()) {
    SweepResult r;
    r.status = std::move(status);
    r.contact_mm = options.contact_mm;
    r.exhausted = true;  // nothing was checked: not proven free
    r.t_last_free = -1.0;
    r.X_contact = motion.PoseAt(r.t_contact);
    return r;
  }
  Sweeper sweeper(moving, motion, obstacles, options, should_stop);
  return sweeper.Run();
}

std::vector<FreeDirection> FreeDirections(const Part& part, const RigidTransform& X_WP,
                                          std::span<const SweepObstacle> obstacles,
                                          const FreeDirectionOptions& options,
                                          const std::function<bool()>& should_stop) {
  std::vector<std::pair<std::string, Vec3>> directions;
  for (int axis = 0; axis < 3; ++axis) {
    const char* name[] = {"X", "Y", "Z"};
    directions.emplace_back(absl::StrCat("+", name[axis]), Vec3::Unit(axis));
    directions.emplace_back(absl::StrCat("-", name[axis]), -Vec3::Unit(axis));
  }
  if (options.principal_axes) {
    AreaMoments moments;
    for (std::size_t i = 0; i < part.mesh().num_triangles(); ++i) {
      moments.Add(AreaMoments::Of(part.mesh().triangle(i)));
    }
    if (moments.area > 0) {
      const PrincipalFrame frame = PrincipalAxes(moments.Mean(), moments.Covariance());
      for (int k = 0; k < 3; ++k) {
        const Vec3 axis_W = (X_WP.R * frame.axes.col(k)).normalized();
        directions.emplace_back(absl::StrCat("+P", k + 1), axis_W);
        directions.emplace_back(absl::StrCat("-P", k + 1), -axis_W);
      }
    }
  }
  const double distance =
      options.distance_mm > 0 ? options.distance_mm : 1.5 * part.bounds().Diagonal();
  SweepOptions sweep_options;
  // A τ that is not finite is passed on, for Sweep to refuse.
  sweep_options.contact_mm =
      std::isfinite(options.contact_mm) && options.contact_mm <= 0
          ? FreeDirectionOptions::kDefaultContactRelative * part.bounds().Diagonal()
          : options.contact_mm;
  sweep_options.max_iterations = options.max_iterations;

  std::vector<FreeDirection> out;
  for (const auto& [label, dir] : directions) {
    FreeDirection f;
    f.label = label;
    f.direction_W = dir;
    // dir is unit by construction, X_WP is the caller's valid pose: creation cannot fail
    // except for a pose that is not rigid, which then leaves the direction undecided.
    absl::StatusOr<Motion> motion = Motion::Linear(X_WP, dir, distance);
    if (!motion.ok()) {
      f.undecided = true;
      f.status = motion.status();
      out.push_back(std::move(f));
      continue;
    }
    const SweepResult r = Sweep(part, *motion, obstacles, sweep_options, should_stop);
    f.status = r.status;
    if (r.blocked) {
      f.blocked_at_mm = r.t_contact * distance;
      f.free_travel_mm = std::max(r.t_last_free, 0.0) * distance;
      f.blocking_ids = r.blocking_ids;
    } else if (r.exhausted || r.stopped) {
      f.undecided = true;
    } else {
      f.free = true;
    }
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace clash::geom
