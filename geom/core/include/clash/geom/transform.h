// Rigid transforms and the frame-naming convention of the project.
//
// Names carry their frames (after Drake and FCL):
//   X_WA  the pose of frame A in frame W: maps coordinates in A to coordinates in W.
//   p_AQ  point Q expressed in frame A;  v_A a direction expressed in A.
//   R_AB  the rotation part of X_AB.
// A relative pose then reads X_AB = X_WA.Inverse() * X_WB, and p_AQ = X_AB * p_BQ.
#pragma once

#include <cmath>

#include "clash/geom/types.h"

namespace clash::geom {

/// A rigid transform: rotation R (orthonormal, det +1) followed by translation t.
struct RigidTransform {
  Mat3 R = Mat3::Identity();  ///< Rotation.
  Vec3 t = Vec3::Zero();      ///< Translation.

  /// The identity transform.
  [[nodiscard]] static RigidTransform Identity() { return {}; }
  /// A pure translation.
  [[nodiscard]] static RigidTransform Translation(const Vec3& t) { return {Mat3::Identity(), t}; }
  /// Applies the transform to a point.
  [[nodiscard]] Vec3 operator*(const Vec3& p) const { return R * p + t; }
  /// Composition: (this * other)(p) = this(other(p)).
  [[nodiscard]] RigidTransform operator*(const RigidTransform& o) const {
    return {R * o.R, R * o.t + t};
  }
  /// The inverse transform (uses R^T, exact for orthonormal R).
  [[nodiscard]] RigidTransform Inverse() const {
    Mat3 Rt = R.transpose();
    return {Rt, -(Rt * t)};
  }
  /// Rotates a direction (no translation).
  [[nodiscard]] Vec3 Rotate(const Vec3& v) const { return R * v; }
  /// True when the rotation is exactly the identity (translation-only poses).
  [[nodiscard]] bool HasIdentityRotation() const { return R == Mat3::Identity(); }
  /// True when every entry is finite and R is orthonormal with det +1 within `tol`.
  [[nodiscard]] bool IsValid(double tol = 1e-6) const {
    if (!R.allFinite() || !t.allFinite()) return false;
    if ((R.transpose() * R - Mat3::Identity()).cwiseAbs().maxCoeff() > tol) return false;
    return std::abs(R.determinant() - 1.0) <= tol;
  }
};

}  // namespace clash::geom
