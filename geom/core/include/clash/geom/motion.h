// Rigid motions of one part, parametrised by t in [0, 1] (DESIGN.md §6, issue 5).
//
// A Motion gives the world pose X_WP(t) of a moving part P from its start pose X0 = X_WP(0):
//   - linear:    X(t) = Translation(t L d) · X0                      (unit direction d, L >= 0)
//   - rotation:  X(t) = Rot(c, a, t θ) · X0                          (axis through c along unit a)
//   - screw:     X(t) = Translation(t θ / 2π · pitch · a) · Rot(c, a, t θ) · X0
//   - keyframes: poses X_0..X_n at 0 = t_0 < ... < t_n = 1; on [t_i, t_{i+1}], with
//                s = (t - t_i) / (t_{i+1} - t_i): translation (1 - s) T_i + s T_{i+1}, rotation
//                R_i · Exp(s φ_i k_i), where φ_i in [0, π] and the unit k_i (part frame) are the
//                angle and axis of the shortest rotation R_i^T R_{i+1}; this is the slerp of
//                the two orientations along the shorter arc.
// Rot(c, a, φ) maps x to c + AngleAxis(φ, a) (x - c). Angles are radians, signed by the right-hand
// rule about a; the screw's pitch is the advance along a per turn of +2π (a negative pitch
// advances along -a).
//
// MaxTravel is the displacement bound that conservative advancement (sweep.h) needs: over
// s in [t0, t1], no point of the part's local bounding sphere moves farther than MaxTravel from
// where it was at t0 (or at t1: every bound below depends only on the interval). Derivations:
//   - A point rotated by an angle Δ about a line at distance ρ moves along a chord of length
//     2 |sin(Δ/2)| ρ <= min(|Δ|, 2) ρ, at every intermediate angle too.
//   - linear: |(s - t0) L d| <= (t1 - t0) L.
//   - rotation: every point of the sphere is at most ρ = dist(X0 c_P, axis) + r from the axis
//     (rotation about the axis keeps that distance), so min(|Δθ|, 2) ρ with Δθ = (t1 - t0) θ.
//   - screw: the advance along a commutes with the rotation about a; the rotation moves a point
//     within the plane normal to a and the advance along a, so the two displacements are
//     orthogonal and the bound is hypot(min(|Δθ|, 2) ρ, |Δθ| / 2π |pitch|) (both terms grow
//     with the sub-interval).
//   - keyframes: within a segment, R_i Exp(s φ k) p - R_i Exp(s' φ k) p has the length of
//     (Exp((s - s') φ k) - I) q with q = Exp(s' φ k) p, a rotation about the axis k through the
//     part origin, and q is as far from that axis as p; so a point of the sphere moves by at
//     most |Δs| |T_{i+1} - T_i| + min(|Δs| φ_i, 2) ρ_i, ρ_i = dist(c_P, line(0, k_i)) + r. Over
//     several segments the displacements add up through the knots (triangle inequality), and
//     each term grows with the sub-interval, so the sum over the spanned pieces of [t0, t1]
//     bounds every intermediate s. A part Q carried by the path's part P (Carrying) is the
//     sphere X_PQ · bound_Q in P's frame, so the same bound holds with that sphere.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "clash/geom/sphere.h"
#include "clash/geom/transform.h"
#include "clash/geom/types.h"

namespace clash::geom {

/// The kind of a motion.
enum class MotionKind : uint8_t {
  kLinear,     ///< Translation along a world direction.
  kRotation,   ///< Rotation about a world axis.
  kScrew,      ///< Rotation about a world axis with advance along it.
  kKeyframes,  ///< Piecewise linear translation and slerp rotation through given poses.
};

/// Lower-case name of a kind ("linear", "rotation", "screw", "keyframes").
[[nodiscard]] const char* MotionKindName(MotionKind kind);

/// One pose of a keyframe path: the world pose of the part at parameter t.
struct Keyframe {
  double t = 0.0;       ///< Parameter in [0, 1].
  RigidTransform X_WP;  ///< Pose of the part at t (not relative to the previous one).
};

/// A validated rigid motion over t in [0, 1] (see the top of this file). Create one with the
/// factory functions; after that, queries cannot fail. Cheap to copy except for long keyframe
/// paths.
class Motion {
 public:
  /// Translation of `distance_mm` along the unit `direction_W` from X0. INVALID_ARGUMENT when
  /// X0 is not a finite rigid pose, the direction is not unit length (within 1e-6) or the
  /// distance is negative or not finite.
  [[nodiscard]] static absl::StatusOr<Motion> Linear(const RigidTransform& X0,
                                                     const Vec3& direction_W, double distance_mm);
  /// Rotation by `angle_rad` (signed) about the world axis through `center_W` along the unit
  /// `axis_W`. INVALID_ARGUMENT for a bad X0, a non-unit or zero axis, or non-finite values.
  [[nodiscard]] static absl::StatusOr<Motion> Rotation(const RigidTransform& X0,
                                                       const Vec3& center_W, const Vec3& axis_W,
                                                       double angle_rad);
  /// Rotation by `angle_rad` about the axis with an advance of angle / 2π · `pitch_mm` along
  /// `axis_W` (pitch per turn, signed). Same errors as Rotation.
  [[nodiscard]] static absl::StatusOr<Motion> Screw(const RigidTransform& X0, const Vec3& center_W,
                                                    const Vec3& axis_W, double angle_rad,
                                                    double pitch_mm);
  /// The path through the given poses. INVALID_ARGUMENT with fewer than two keyframes, a pose
  /// that is not a finite rigid transform, parameters that are not finite or not strictly
  /// increasing, or a first parameter other than 0 or a last other than 1.
  [[nodiscard]] static absl::StatusOr<Motion> Keyframes(std::span<const Keyframe> keyframes);

  /// The kind.
  [[nodiscard]] MotionKind kind() const { return kind_; }
  /// The start pose X_WP(0).
  [[nodiscard]] const RigidTransform& start() const { return X0_; }
  /// Unit direction (linear) or axis (rotation, screw), world; zero for keyframes.
  [[nodiscard]] const Vec3& direction() const { return dir_; }
  /// Axis point (rotation, screw), world.
  [[nodiscard]] const Vec3& center() const { return center_; }
  /// Distance (linear), total angle (rotation, screw); 0 for keyframes.
  [[nodiscard]] double amount() const { return amount_; }
  /// Advance per turn (screw); 0 otherwise.
  [[nodiscard]] double pitch_mm() const { return pitch_; }
  /// Signed travel along direction() over the whole motion (t from 0 to 1): the distance
  /// (linear), the advance amount() / 2π · pitch_mm() (screw); 0 for rotations and keyframes.
  [[nodiscard]] double AxialTravel() const;
  /// The keyframes (keyframe paths only; empty otherwise), rotations re-orthonormalised, as
  /// poses of this motion's part (carried, for a motion from Carrying).
  [[nodiscard]] std::vector<Keyframe> keyframes() const;

  /// The motion of a part Q carried rigidly by this motion's part P, at X_PQ (Q's pose in P's
  /// frame, constant): X_WQ(t) = X_WP(t) · X_PQ. This is how a group moves as one rigid body:
  /// every member's motion is one member's motion, carried. For linear, rotation and screw
  /// motions this is the same motion started at X0 · X_PQ; a keyframe path keeps interpolating
  /// P's pose (not Q's: Q's origin follows an arc about P's origin where P turns). INVALID_ARGUMENT
  /// when X_PQ is not a finite rigid transform.
  [[nodiscard]] absl::StatusOr<Motion> Carrying(const RigidTransform& X_PQ) const;

  /// The pose X_WP(t); t is clamped to [0, 1]. PoseAt(0) is the start pose exactly, and a
  /// keyframe path gives its (re-orthonormalised) keyframes exactly at their parameters.
  [[nodiscard]] RigidTransform PoseAt(double t) const;

  /// An upper bound of |X(s) p - X(t0) p| (and of |X(s) p - X(t1) p|) over s between t0 and
  /// t1 and every point p (part frame) of `bound_P`; parameters are clamped to [0, 1] and may
  /// come in either order. See the top of this file.
  [[nodiscard]] double MaxTravel(double t0, double t1, const Sphere& bound_P) const;

  /// The largest t' in [t, 1] with MaxTravel(t, t', bound_P) <= budget_mm (found by bisection
  /// on MaxTravel itself, so the bound holds as evaluated); t when budget_mm <= 0.
  [[nodiscard]] double AdvanceLimit(double t, double budget_mm, const Sphere& bound_P) const;

 private:
  // One keyframe segment, precomputed.
  struct Segment {
    double t0 = 0.0, t1 = 1.0;    // parameter range
    Mat3 R0 = Mat3::Identity();   // orientation at t0 (the keyframe's rotation)
    Vec3 axis_P = Vec3::UnitX();  // k_i, body axis of the relative rotation (unit)
    double angle = 0.0;           // φ_i in [0, π]
    Vec3 T0 = Vec3::Zero();       // translation at t0
    Vec3 dT = Vec3::Zero();       // T_{i+1} - T_i
    // Over the segments before this one: the sums of |dT| and of min(angle, 2) (MaxTravel
    // bounds long spans through their differences).
    double moved_before = 0.0, turned_before = 0.0;
  };

  Motion() = default;
  [[nodiscard]] static absl::StatusOr<Motion> Axis(MotionKind kind, const RigidTransform& X0,
                                                   const Vec3& center_W, const Vec3& axis_W,
                                                   double angle_rad, double pitch_mm);
  [[nodiscard]] std::size_t SegmentIndex(double t) const;

  MotionKind kind_ = MotionKind::kLinear;
  RigidTransform X0_;
  Vec3 dir_ = Vec3::Zero();
  Vec3 center_ = Vec3::Zero();
  double amount_ = 0.0;
  double pitch_ = 0.0;
  // Keyframes: the carrying part's poses and their interpolation, shared by the motions
  // Carrying makes (a group of many parts on a long path holds one copy).
  std::shared_ptr<const std::vector<Keyframe>> keys_;
  std::shared_ptr<const std::vector<Segment>> segments_;
  RigidTransform body_;  // keyframes: the carried part in the carrying part's frame
};

}  // namespace clash::geom
