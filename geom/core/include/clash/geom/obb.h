// Oriented bounding boxes and the separating-axis test.
#pragma once

#include <limits>
#include <span>

#include "clash/geom/aabb.h"
#include "clash/geom/transform.h"
#include "clash/geom/types.h"

namespace clash::geom {

/// An oriented box: centre, orthonormal axes (the columns of `axes`) and half extents.
/// A point p is inside when |axes.col(i) . (p - center)| <= half(i) for every i.
struct Obb {
  Vec3 center = Vec3::Zero();    ///< Centre.
  Mat3 axes = Mat3::Identity();  ///< Columns are the box axes (orthonormal, right-handed).
  Vec3 half = Vec3::Zero();      ///< Half extents along the axes.

  /// The box of an AABB.
  [[nodiscard]] static Obb FromAabb(const Aabb& b) {
    return {b.Center(), Mat3::Identity(), b.HalfExtents()};
  }
  /// Volume.
  [[nodiscard]] double Volume() const { return 8.0 * half.prod(); }
  /// True when p lies in the closed box (with tolerance tol).
  [[nodiscard]] bool Contains(const Vec3& p, double tol = 0.0) const {
    Vec3 q = axes.transpose() * (p - center);
    return (q.cwiseAbs().array() <= half.array() + tol).all();
  }
  /// Corner i (bit k selects the sign along axis k).
  [[nodiscard]] Vec3 Corner(int i) const {
    Vec3 s((i & 1) ? 1.0 : -1.0, (i & 2) ? 1.0 : -1.0, (i & 4) ? 1.0 : -1.0);
    return center + axes * s.cwiseProduct(half);
  }
  /// The box after transform X.
  [[nodiscard]] Obb Transformed(const RigidTransform& X) const {
    return {X * center, X.R * axes, half};
  }
  /// Its axis-aligned bounding box.
  [[nodiscard]] Aabb Bounds() const {
    Vec3 h = axes.cwiseAbs() * half;
    return {center - h, center + h};
  }
};

/// Separating-axis test (Gottschalk, Lin, Manocha, "OBBTree", SIGGRAPH 1996) of box a and box b,
/// where b's axes and centre are given relative to a: R_ab = a.axes^T * b.axes and
/// t_ab = a.axes^T * (b.center - a.center). The 15 axes are tried, face axes first; `eps`
/// is added to |R| so near-parallel edge pairs do not produce a false separation.
/// Returns true when the closed boxes overlap.
[[nodiscard]] bool BoxesOverlap(const Vec3& half_a, const Vec3& half_b, const Mat3& R_ab,
                                const Vec3& t_ab, double eps = 1e-12);

/// BoxesOverlap with AbsR = |R_ab| + eps precomputed by the caller (it is the same for every
/// pair of axis-aligned nodes of two parts).
[[nodiscard]] bool BoxesOverlapAbs(const Vec3& half_a, const Vec3& half_b, const Mat3& R_ab,
                                   const Mat3& AbsR, const Vec3& t_ab);

/// Overlap of two boxes given in a common frame.
[[nodiscard]] bool Overlaps(const Obb& a, const Obb& b);

/// A lower bound on the distance between the closed boxes a and b (0 if they may touch),
/// with b given relative to a as in BoxesOverlap. It is the larger of the AABB gaps measured
/// in a's frame and in b's frame (exact when R_ab is the identity); when that is below
/// `target`, the nine edge-edge separating axes are tried as well, each gap divided by the
/// length of its axis.
[[nodiscard]] double BoxDistanceLowerBound(const Vec3& half_a, const Vec3& half_b, const Mat3& R_ab,
                                           const Vec3& t_ab, double target = 0.0);

/// Continuous separating-axis bound for a translation (issue 5's conservative advancement):
/// box b, given relative to box a as in BoxesOverlap, moves by s·w_ab (w_ab in a's box frame,
/// per mm of travel s >= 0). Projected on any axis L, boxes farther apart than `margin` along L
/// are farther apart than `margin`; so the travels at which they may be within the margin lie
/// in the intersection over the 15 axes of the travels where their projections are (a window,
/// see separation_internal.h). Returns the window's start: 0 when they may be within the margin
/// now, +inf when never (they pass by, or do not approach). Stops as soon as the answer is known
/// to be at least `target` (it is then only known to be >= target). Exact for the margin 0 in
/// general position (the axes hold every face normal of the boxes' Minkowski difference);
/// near-parallel edge pairs are skipped.
[[nodiscard]] double BoxSeparationTravel(const Vec3& half_a, const Vec3& half_b, const Mat3& R_ab,
                                         const Vec3& t_ab, const Vec3& w_ab, double margin,
                                         double target = std::numeric_limits<double>::infinity());

/// Principal axes of a set of triangles: the eigenvectors of the area-weighted covariance of
/// the triangles' surfaces (columns, right-handed), and their mean. Falls back to the
/// vertices' covariance when the total area is zero.
struct PrincipalFrame {
  Vec3 mean = Vec3::Zero();         ///< Area-weighted centroid.
  Mat3 axes = Mat3::Identity();     ///< Eigenvectors (columns), eigenvalues descending.
  Vec3 eigenvalues = Vec3::Zero();  ///< Descending.
};

/// The OBB of points on the given axes (extents by projection).
[[nodiscard]] Obb FitObbOnAxes(std::span<const Vec3> points, const Mat3& axes);

/// FitObbOnAxes one point at a time, for sets that are not one contiguous span. Projects
/// relative to `ref`, a point of the set (FitObbOnAxes takes the first), so that rounding
/// scales with the set's size and not with its distance from the origin; the box of the
/// same points, in any order and with repeats, is the same to the last bit.
class ObbOnAxesFit {
 public:
  ObbOnAxesFit(const Vec3& ref, const Mat3& axes) : ref_(ref), at_(axes.transpose()) {}
  /// Adds a point.
  void Add(const Vec3& p) {
    const Vec3 q = at_ * (p - ref_);
    lo_ = lo_.cwiseMin(q);
    hi_ = hi_.cwiseMax(q);
  }
  /// Adds points.
  void Add(std::span<const Vec3> points) {
    for (const Vec3& p : points) Add(p);
  }
  /// The box of the points added (at least one; ref must be one of them).
  [[nodiscard]] Obb Box() const {
    const Mat3 axes = at_.transpose();  // exact
    return {ref_ + axes * (0.5 * (lo_ + hi_)), axes, 0.5 * (hi_ - lo_)};
  }

 private:
  Vec3 ref_;
  Mat3 at_;  // the axes as rows
  Vec3 lo_ = Vec3::Constant(std::numeric_limits<double>::infinity());
  Vec3 hi_ = Vec3::Constant(-std::numeric_limits<double>::infinity());
};

}  // namespace clash::geom
