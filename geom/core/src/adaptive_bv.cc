#include "clash/geom/adaptive_bv.h"

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>

namespace clash::geom {
namespace {

// Cosine of the angle between v and its nearest coordinate axis.
double CosToNearestAxis(const Vec3& v) { return std::min(1.0, v.cwiseAbs().maxCoeff() / v.norm()); }

// The smallest such cosine over the determined principal axes (1 when none is determined).
double MinAlignmentCosine(const PrincipalFrame& f, double tie_relative) {
  const Vec3& l = f.eigenvalues;
  if (!(l(0) > 0)) return 1.0;  // no spread at all: any axes fit
  const double tie = tie_relative * l(0);
  const bool tie01 = l(0) - l(1) <= tie, tie12 = l(1) - l(2) <= tie;
  if (tie01 && tie12) return 1.0;  // isotropic: the coordinate axes are principal axes too
  if (tie01) return CosToNearestAxis(f.axes.col(2));
  if (tie12) return CosToNearestAxis(f.axes.col(0));
  return std::min({CosToNearestAxis(f.axes.col(0)), CosToNearestAxis(f.axes.col(1)),
                   CosToNearestAxis(f.axes.col(2))});
}

// Volume with a floor on each extent (kVolumePadRelative of the box's size), so flat boxes
// (a planar leaf) compare by area rather than by a rounding-sized thickness.
double PaddedVolume(const Vec3& half, double pad) { return (2.0 * half.array() + pad).prod(); }

}  // namespace

AreaMoments AreaMoments::Of(const Triangle& t) {
  AreaMoments m;
  m.area = t.Area();
  const Vec3 c = t.Centroid();
  m.first = m.area * c;
  // (area / 12) (9 c c^T + a a^T + b b^T + c' c'^T), entry by entry without temporaries.
  const double w = m.area / 12.0;
  const Vec3 c9 = 9.0 * c;
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i < 3; ++i) {
      m.second(i, j) = w * (c9[i] * c[j] + t.a[i] * t.a[j] + t.b[i] * t.b[j] + t.c[i] * t.c[j]);
    }
  }
  return m;
}

Mat3 AreaMoments::Covariance() const {
  const Vec3 m = Mean();
  Mat3 c = second / area - m * m.transpose();
  return 0.5 * (c + c.transpose());
}

PrincipalFrame PrincipalAxes(const Vec3& mean, const Mat3& covariance) {
  PrincipalFrame f;
  f.mean = mean;
  Eigen::SelfAdjointEigenSolver<Mat3> es;
  es.computeDirect(covariance);
  Mat3 v = es.eigenvectors();
  Vec3 l = es.eigenvalues();
  // The closed form loses accuracy on nearly repeated eigenvalues; fall back to the
  // iterative solver when its vectors are not orthonormal.
  if (es.info() != Eigen::Success || !v.allFinite() ||
      (v.transpose() * v - Mat3::Identity()).cwiseAbs().maxCoeff() > 1e-9) {
    es.compute(covariance);
    v = es.eigenvectors();
    l = es.eigenvalues();
  }
  // Eigen sorts ascending; store descending and right-handed.
  f.axes.col(0) = v.col(2).normalized();
  f.axes.col(1) = v.col(1).normalized();
  f.axes.col(2) = f.axes.col(0).cross(f.axes.col(1)).normalized();
  f.eigenvalues = Vec3(l(2), l(1), l(0));
  return f;
}

double MisalignmentAngle(const PrincipalFrame& f, double tie_relative) {
  return std::acos(MinAlignmentCosine(f, tie_relative));
}

double PredictedAabbGrowth(const PrincipalFrame& frame, double pad_relative) {
  // The principal "standard deviation box" (extents sqrt(eigenvalue) on the principal axes)
  // against its own axis-aligned box (Arvo's extents |R| e): how much the tilt inflates it.
  const Vec3 e = frame.eigenvalues.cwiseMax(0.0).cwiseSqrt();
  const double pad = pad_relative * e.norm();
  const Vec3 aligned = frame.axes.cwiseAbs() * e;
  return (aligned.array() + pad).prod() / (e.array() + pad).prod();
}

bool TakesAabb(const PrincipalFrame& frame, const AdaptiveBvOptions& options) {
  switch (options.mode) {
    case BvMode::kAabbOnly:
      return true;
    case BvMode::kObbOnly:
      return false;
    case BvMode::kAdaptive:
      break;
  }
  // angle <= eps, compared as cosines (no acos on the build's hot path).
  return MinAlignmentCosine(frame, options.eigen_tie_relative) >= std::cos(options.eps_rad) &&
         PredictedAabbGrowth(frame, kVolumePadRelative) * options.obb_volume_ratio <= 1.0;
}

AdaptiveBox ChooseFittedBox(const Obb& fitted, const Aabb& aabb, const AdaptiveBvOptions& options) {
  AdaptiveBox r;
  r.aabb_volume = aabb.Volume();
  if (options.mode == BvMode::kAdaptive) {
    const double pad = kVolumePadRelative * aabb.Diagonal();
    if (PaddedVolume(fitted.half, pad) >
        options.obb_volume_ratio * PaddedVolume(aabb.HalfExtents(), pad)) {
      r.box = Obb::FromAabb(aabb);
      return r;
    }
  }
  r.box = fitted;
  r.is_obb = true;
  return r;
}

}  // namespace clash::geom
