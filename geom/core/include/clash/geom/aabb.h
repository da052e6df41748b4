// Axis-aligned bounding box.
#pragma once

#include <array>
#include <limits>

#include "clash/geom/transform.h"
#include "clash/geom/types.h"

namespace clash::geom {

/// An axis-aligned box [min, max]. A default-constructed box is empty (min > max).
struct Aabb {
  Vec3 min = Vec3::Constant(std::numeric_limits<double>::infinity());   ///< Lower corner.
  Vec3 max = Vec3::Constant(-std::numeric_limits<double>::infinity());  ///< Upper corner.

  /// The box spanned by two corners (in any order).
  [[nodiscard]] static Aabb FromPoints(const Vec3& a, const Vec3& b) {
    return {a.cwiseMin(b), a.cwiseMax(b)};
  }
  /// The box with the given centre and half extents.
  [[nodiscard]] static Aabb FromCenterHalf(const Vec3& c, const Vec3& h) { return {c - h, c + h}; }
  /// True when the box holds no point.
  [[nodiscard]] bool IsEmpty() const { return (min.array() > max.array()).any(); }
  /// Centre point (undefined for an empty box).
  [[nodiscard]] Vec3 Center() const { return 0.5 * (min + max); }
  /// Edge lengths (undefined for an empty box).
  [[nodiscard]] Vec3 Size() const { return max - min; }
  /// Half edge lengths.
  [[nodiscard]] Vec3 HalfExtents() const { return 0.5 * (max - min); }
  /// Length of the diagonal, 0 for an empty box.
  [[nodiscard]] double Diagonal() const { return IsEmpty() ? 0.0 : Size().norm(); }
  /// Volume, 0 for an empty box.
  [[nodiscard]] double Volume() const { return IsEmpty() ? 0.0 : Size().prod(); }
  /// Surface area, 0 for an empty box.
  [[nodiscard]] double SurfaceArea() const {
    if (IsEmpty()) return 0.0;
    Vec3 s = Size();
    return 2.0 * (s.x() * s.y() + s.y() * s.z() + s.z() * s.x());
  }
  /// Corner i (bit 0: x, bit 1: y, bit 2: z; 0 = min, 1 = max).
  [[nodiscard]] Vec3 Corner(int i) const {
    return {(i & 1) ? max.x() : min.x(), (i & 2) ? max.y() : min.y(), (i & 4) ? max.z() : min.z()};
  }
  /// The eight corners.
  [[nodiscard]] std::array<Vec3, 8> Corners() const {
    std::array<Vec3, 8> c;
    for (int i = 0; i < 8; ++i) c[i] = Corner(i);
    return c;
  }
  /// Grows the box to contain p.
  void Add(const Vec3& p) {
    min = min.cwiseMin(p);
    max = max.cwiseMax(p);
  }
  /// Grows the box to contain b.
  void Add(const Aabb& b) {
    min = min.cwiseMin(b.min);
    max = max.cwiseMax(b.max);
  }
  /// Grows the box by d on every side.
  [[nodiscard]] Aabb Inflated(double d) const { return {min.array() - d, max.array() + d}; }
  /// True when p lies in the closed box.
  [[nodiscard]] bool Contains(const Vec3& p) const {
    return (p.array() >= min.array()).all() && (p.array() <= max.array()).all();
  }
  /// True when b lies in the closed box (an empty b is contained).
  [[nodiscard]] bool Contains(const Aabb& b) const {
    return b.IsEmpty() ||
           ((b.min.array() >= min.array()).all() && (b.max.array() <= max.array()).all());
  }
  /// True when the closed boxes share a point.
  [[nodiscard]] bool Overlaps(const Aabb& b) const {
    return (min.array() <= b.max.array()).all() && (b.min.array() <= max.array()).all();
  }
  /// The point of the box closest to p.
  [[nodiscard]] Vec3 ClosestPoint(const Vec3& p) const { return p.cwiseMax(min).cwiseMin(max); }
  /// Euclidean distance from p to the box (0 inside).
  [[nodiscard]] double Distance(const Vec3& p) const { return (p - ClosestPoint(p)).norm(); }
  /// Euclidean distance between two boxes (0 when they overlap).
  [[nodiscard]] double Distance(const Aabb& b) const {
    Vec3 gap = (b.min - max).cwiseMax(min - b.max).cwiseMax(0.0);
    return gap.norm();
  }
  /// The axis-aligned box of this box after transform X (Arvo's method: the extents
  /// are |R| times the half extents, exact for the rotated box's bounds), rounded outward.
  [[nodiscard]] Aabb Transformed(const RigidTransform& X) const {
    if (IsEmpty()) return {};
    const Vec3 c0 = Center(), h0 = HalfExtents();
    const Mat3 A = X.R.cwiseAbs();
    const Vec3 c = X * c0;
    const Vec3 h = A * h0;
    // Rounding may only enlarge a box (DESIGN.md §2). The centre and half extents, the products
    // and sums above and the subtraction below are each off by at most a unit in the last place
    // of the magnitudes they combine, about 8 of them in all along any path; the slack bounds
    // twice that, relative to those magnitudes (a few 1e-15 of the coordinates).
    constexpr double kRelativeSlack = 16.0 * std::numeric_limits<double>::epsilon();
    const Vec3 slack = kRelativeSlack * (A * (c0.cwiseAbs() + h0) + X.t.cwiseAbs());
    return {c - h - slack, c + h + slack};
  }
};

}  // namespace clash::geom
