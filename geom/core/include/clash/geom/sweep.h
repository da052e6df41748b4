// Continuous collision checking of one part moving along a Motion among fixed obstacles
// (DESIGN.md §6, issue 5): conservative advancement, not sampling.
//
// Conservative advancement (Mirtich, "Impulse-based dynamic simulation of rigid body systems",
// 1996; Zhang, Lee, Kim, "Continuous collision detection for articulated models using Taylor
// models and temporal culling", 2007) with the displacement bound of motion.h. τ = contact_mm,
// raised to 1e-9 of the larger of the part's diagonal and its travel when below that (so that
// the steps stay finite): that floor is the τ of every step and of every classification below.
// A τ that is not finite, an obstacle without a part or with a pose that has a non-finite entry
// (or a world box that overflows) is invalid input: Sweep then checks nothing and says so in
// SweepResult::status (INVALID_ARGUMENT), with `exhausted` set so that the answer never reads as
// free.
//
// The loop visits poses 0 = t_0 < t_1 < ... of the moving part. At each pose t:
//  1. d(t) = the minimum surface distance to the obstacles: obstacles are visited in order of
//     the distance between their world box and the moving part's world box, each with
//     Distance(..., upper_bound = max(best so far, τ)), and the walk stops at the first box
//     farther than that, so distant obstacles cost one box test. The obstacles within τ are
//     "near".
//  2. Each near obstacle is classified as ClassifyPair(contact_mm = τ) would: kHard or
//     kContained at a pose means blocked. Surfaces apart (0 < d <= τ) touch unless one part
//     holds the other, so those pairs only need FindContainment; crossing or touching ones
//     (d = 0) get ClassifyPair. At t = 0, obstacles whose boxes overlap the part's are also
//     tested with FindContainment (a part inside an obstacle is far from its surface).
//  3. The next pose is the largest t' with MaxTravel(t, t') <= budget, where
//       budget = d - τ/2                       when no obstacle is near (far mode);
//       budget = min over near obstacles of max(τ/4, τ - depth)   (near mode),
//     depth being ClassifyPair's penetration estimate (0 when the surfaces do not cross). With a
//     clearance C > 0 the far budget is also at most max(d - C, resolution), so that the
//     path's approach below C is sampled finely enough to report its minimum.
//  4. Far mode of a linear, rotation or screw motion: the step may go farther, up to where some
//     obstacle could first come within the margin m = max(τ/2, d/2) (max(C, d/2) with a
//     clearance C, while d > C). For a translation, FreeTranslation (query.h) bounds that
//     from separating axes: an obstacle approached only sideways, like the wall of a hole the
//     part slides through, does not limit the step at all, whereas the distance step is at
//     most d. For a turn about the motion's axis (with its advance, for a screw), FreeScrew
//     bounds it from the parts' footprints about the axis (distance from it, position along
//     it), which a turn leaves alone: a nut turning on a bolt it clears is limited only by its
//     advance towards what lies ahead of it, and a pure turn with no obstacle within its reach
//     is free at once. Obstacles whose world box cannot come within m first are skipped. With
//     a profile requested, such a step spans at most 1/64 of the parameter.
//
// Why nothing between two checked poses is missed. Let δ(s) = MaxTravel(t, s): every point of
// the moving part is within δ(s) of where it was at t (motion.h).
//  - Far mode: the part at s lies within δ(s) <= d - τ/2 of the part at t, which is d away
//    from every obstacle; so every obstacle stays at least τ/2 away over the whole step: no
//    touch at all, however thin the obstacle or fast the motion ("tunnelling" is impossible,
//    as a step never travels as far as the current distance). Neither can a containment
//    appear, since it would need the surfaces to meet first.
//  - Directional step (4): by FreeTranslation's and FreeScrew's contracts every obstacle stays
//    more than m away over the whole step (along a separating axis of each pair of triangles
//    the gap shrinks no faster than the motion's component along it; two points are at least
//    as far apart as their footprints about the axis, which only the advance changes), so the
//    far-mode argument holds with m in place of τ/2, and min_distance_lower_bound gets m for
//    that step.
//  - Near mode: let D(s) be the pointwise penetration depth, the largest distance of a point of
//    either solid inside the other from the other's surface (what ClassifyPair estimates from
//    sample points). A point of the part moves by at most δ(s), and a point of an obstacle
//    moves by at most δ(s) relative to the part's frame (it lies in the part's bounding
//    sphere), so D(s) <= D(t) + δ(s) and, for surfaces d apart at t, D(s) <= δ(s) - d.
//    With the near budget, D(s) <= max(τ, D(t) + τ/4) over the step: a pose between checked
//    poses that are no deeper than τ is never deeper than 1.25 τ, and deeper than τ (HARD)
//    only right after a checked pose deeper than 3τ/4 (which is still CONTACT by definition).
//    This slack is the price of termination: a step must not shrink to zero as D(t) nears τ.
//    (Until 2026-11-24 the budget was τ/2 - depth, which kept shallow contacts below τ/2
//    between checks: twice the checks for a margin the definition of HARD does not ask for.)
//    The guarantee is as good as ClassifyPair's depth at the checked poses, which is a lower
//    bound from sample points (interference.h).
//  - Termination: every budget is at least τ/4, so the number of poses is at most about
//    4 · MaxTravel(0, 1) / τ (far steps are at least τ/2; a directional step is taken only
//    when it is longer than the distance step). τ = 0 steps with a floor of 1e-9 of
//    the larger of the part's diagonal and the total travel; with τ = 0 a sliding contact
//    therefore runs into max_iterations (`exhausted`). Give the tessellation tolerance.
//
// At the first blocked pose t_b (after the last free pose t_f), the first blocked parameter is
// refined by bisection between t_f and t_b until MaxTravel(t_f, t_b) <= τ/4: t_contact is
// then a blocked pose (kHard or kContained there) and t_last_free a free one at most τ/4 of
// travel before it. When the depth grows monotonically (a peg pushed into a face), t_contact is
// within τ/4 of travel after the first pose deeper than τ.
//
// Limits: obstacles and the moving part should be closed meshes; an open mesh whose surface
// crosses another is kHard (uncertain) in ClassifyPair and blocks. The minimum distance is
// the minimum at the checked poses (an upper bound of the true minimum);
// min_distance_lower_bound bounds the true minimum from below. Over a directional step the
// distance stays above half the distance at its start, but a distance step only keeps τ/2 (or
// the clearance): give a clearance C to have the path's approach below C sampled finely.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "clash/geom/interference.h"
#include "clash/geom/motion.h"
#include "clash/geom/part.h"
#include "clash/geom/transform.h"

namespace clash::geom {

/// A fixed obstacle: a part at a world pose, with the caller's id.
struct SweepObstacle {
  const Part* part = nullptr;  ///< The part (not owned, not null; must outlive the call).
  /// Its world pose: rigid, as for every query (query.h); one with a non-finite entry is
  /// refused (SweepResult::status).
  RigidTransform X_WO;
  uint64_t id = 0;  ///< Caller's id, reported back.
};

/// Settings of Sweep.
struct SweepOptions {
  /// τ: surfaces within τ, or crossing by at most τ, touch (CONTACT, allowed); deeper blocks.
  /// At least 1e-9 of the larger of the part's diagonal and its travel (a lower value is
  /// raised to that). Must be finite: +inf would let any penetration through, NaN means
  /// nothing (SweepResult::status).
  double contact_mm = 0.0;
  /// Clearance C for reporting: the path's approach closer than C is sampled finely (see
  /// clearance_resolution_mm) so that the reported minimum distance is accurate there. 0: none.
  double clearance_mm = 0.0;
  /// Travel between checked poses while closer than the clearance; 0: max(τ/2, C/4).
  double clearance_resolution_mm = 0.0;
  /// Record (t, distance) at every checked pose of the scan.
  bool profile = false;
  /// Cap on checked poses; reaching it stops the scan with `exhausted`.
  int max_iterations = 100000;
  /// The scan covers the motion's parameters [0, t_end] only (clamped to [0, 1]): the movers
  /// of a group that another mover blocks go no farther than it. Unblocked, t_last_free is
  /// t_end.
  double t_end = 1.0;
  /// Called with t after each checked pose of the scan found free, in increasing t (progress
  /// reports of long sweeps). Optional; it must be cheap and must not throw.
  std::function<void(double t)> on_free_pose;
};

/// The outcome of one sweep.
struct SweepResult {
  /// OK, or INVALID_ARGUMENT naming the bad input (SweepOptions::contact_mm not finite; an
  /// obstacle with a null part, a pose with a non-finite entry or a world box that is not
  /// finite). When not OK nothing was checked: `exhausted` is set (NOT proven free),
  /// t_last_free is -1 and iterations 0.
  absl::Status status;
  bool blocked = false;  ///< Some pose penetrates an obstacle by more than τ (or is contained).
  /// τ the sweep used: SweepOptions::contact_mm, or the floor above it (see the top of this
  /// file).
  double contact_mm = 0.0;
  /// First parameter found blocked (refined by bisection; see the top of this file); 1 when
  /// not blocked.
  double t_contact = 1.0;
  RigidTransform X_contact;                  ///< Pose at t_contact.
  std::vector<uint64_t> blocking_ids;        ///< Obstacles kHard or kContained at t_contact, by id.
  std::vector<ClashClass> blocking_classes;  ///< Their classes (parallel to blocking_ids).
  double blocking_depth_mm = 0.0;            ///< Largest depth estimate among them at t_contact.
  /// The deepest blocker's witness point at t_contact: on the moving part, or on the obstacle
  /// when that lies inside the part.
  Vec3 p_contact_W = Vec3::Zero();
  std::vector<Vec3> blocking_points_W;  ///< Each blocker's own witness point (parallel).
  /// Last checked parameter that was free (every checked pose up to it was not blocked): 1
  /// (t_end) when the whole path was checked unblocked, -1 when the start pose is blocked; after
  /// a stop or the iteration cap, where the scan got to.
  double t_last_free = 1.0;
  /// First checked parameter with distance <= τ (touching without blocking), -1 if none. Up to
  /// the checked pose before it the path kept at least τ/2 from every obstacle; it may have come
  /// between τ/2 and τ of one between two checked poses without a checked pose within τ.
  double first_touch_t = -1.0;
  uint64_t first_touch_id = 0;  ///< The nearest obstacle there.
  /// Minimum distance at the checked poses (0 when surfaces crossed), with where and which. A
  /// blocked scan's last pose is t_contact (measured there after the bisection), not the
  /// blocked pose the scan checked past it; so for the profile and the first touch.
  double min_distance = std::numeric_limits<double>::infinity();
  double t_min_distance = 0.0;   ///< Where min_distance was found.
  uint64_t min_distance_id = 0;  ///< Which obstacle.
  /// A lower bound of the true minimum distance over the scanned path (from each step's
  /// distances and travel); min_distance is an upper bound of it.
  double min_distance_lower_bound = std::numeric_limits<double>::infinity();
  std::vector<std::pair<double, double>> profile;  ///< (t, distance), when requested.
  int distance_queries = 0;                        ///< Distance calls.
  int classify_queries = 0;                        ///< ClassifyPair and FindContainment calls.
  int directional_queries = 0;  ///< FreeTranslation and FreeScrew calls (far mode).
  int directional_steps = 0;    ///< Steps they made longer than the distance step.
  int iterations = 0;           ///< Poses checked (scan and bisection).
  bool exhausted = false;       ///< max_iterations reached (or no progress): NOT proven free.
  bool stopped = false;         ///< should_stop returned true: the answer is partial.
};

/// Sweeps `moving` along `motion` among `obstacles` (see the top of this file).
/// `should_stop` (optional) is called once per checked pose; returning true ends the sweep
/// with `stopped`. Not blocked, not exhausted and not stopped means the whole path is free.
[[nodiscard]] SweepResult Sweep(const Part& moving, const Motion& motion,
                                std::span<const SweepObstacle> obstacles,
                                const SweepOptions& options,
                                const std::function<bool()>& should_stop = {});

/// The bounding sphere that Sweep uses for a part's travel bound: Ritter's sphere of its
/// vertices.
[[nodiscard]] Sphere TravelSphere(const Part& part);

/// Settings of FreeDirections.
struct FreeDirectionOptions {
  /// How far to test each direction; 0: 1.5 times the diagonal of the part's bounds.
  double distance_mm = 0.0;
  /// τ, as in SweepOptions (a part resting on a face touches it). 0 (the default) or a finite
  /// negative value: kDefaultContactRelative times the diagonal of the part's bounds. Sliding
  /// along a face the part touches takes about distance_mm / τ checked poses, so a τ below
  /// distance_mm / max_iterations leaves such directions undecided. A τ that is not finite
  /// leaves every direction undecided (FreeDirection::status).
  double contact_mm = 0.0;
  /// The default τ relative to the part's diagonal: about the deflection of a fine
  /// tessellation, and 1500 checked poses to slide the default distance along a face.
  static constexpr double kDefaultContactRelative = 1e-3;
  /// Also test ± the part's own principal axes (area-weighted, adaptive_bv.h).
  bool principal_axes = true;
  /// Cap on checked poses per direction.
  int max_iterations = 100000;
};

/// One tested escape direction.
struct FreeDirection {
  std::string label;                ///< "+X", "-X", "+Y", "-Y", "+Z", "-Z", "+P1", ... "-P3".
  Vec3 direction_W = Vec3::Zero();  ///< Unit direction (world).
  bool free = false;                ///< No block along the whole distance.
  /// Travel at which it blocks (distance × t_contact); +inf when free or undecided.
  double blocked_at_mm = std::numeric_limits<double>::infinity();
  /// Travel proven free when it blocks (distance × t_last_free, at least 0): the block lies
  /// between it and blocked_at_mm, at most τ/4 farther.
  double free_travel_mm = 0.0;
  std::vector<uint64_t> blocking_ids;  ///< Obstacles blocking it.
  bool undecided = false;              ///< The sweep was exhausted or stopped, or invalid.
  /// OK, or why the direction could not be swept (X_WP not a finite rigid transform, or
  /// SweepResult::status); the direction is then undecided.
  absl::Status status;
};

/// For a part at its installed pose X_WP among obstacles: sweeps it linearly along +X, -X, +Y,
/// -Y, +Z, -Z (world) and, when asked, along ± its principal axes P1, P2, P3 (descending
/// spread, signs as the eigen solver gives them, in world coordinates) over the test distance,
/// and reports for each direction whether it is free or where it blocks. Touching at the start
/// (a box on a table) is allowed as in Sweep. `should_stop` is passed to each sweep.
[[nodiscard]] std::vector<FreeDirection> FreeDirections(
    const Part& part, const RigidTransform& X_WP, std::span<const SweepObstacle> obstacles,
    const FreeDirectionOptions& options, const std::function<bool()>& should_stop = {});

}  // namespace clash::geom
