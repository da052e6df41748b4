#include "clash/geom/obb.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "separation_internal.h"

namespace clash::geom {

bool BoxesOverlap(const Vec3& a, const Vec3& b, const Mat3& R, const Vec3& t, double eps) {
  const Mat3 AbsR = R.cwiseAbs().array() + eps;
  return BoxesOverlapAbs(a, b, R, AbsR, t);
}

bool BoxesOverlapAbs(const Vec3& a, const Vec3& b, const Mat3& R, const Mat3& AbsR, const Vec3& t) {
  // Ericson, "Real-Time Collision Detection", 4.4.1 (after Gottschalk et al.).
  // Axes of a.
  for (int i = 0; i < 3; ++i) {
    double rb = b[0] * AbsR(i, 0) + b[1] * AbsR(i, 1) + b[2] * AbsR(i, 2);
    if (std::abs(t[i]) > a[i] + rb) return false;
  }
  // Axes of b.
  for (int j = 0; j < 3; ++j) {
    double ra = a[0] * AbsR(0, j) + a[1] * AbsR(1, j) + a[2] * AbsR(2, j);
    double tj = t[0] * R(0, j) + t[1] * R(1, j) + t[2] * R(2, j);
    if (std::abs(tj) > ra + b[j]) return false;
  }
  // The nine edge-edge axes a_i x b_j.
  double ra, rb;
  ra = a[1] * AbsR(2, 0) + a[2] * AbsR(1, 0);
  rb = b[1] * AbsR(0, 2) + b[2] * AbsR(0, 1);
  if (std::abs(t[2] * R(1, 0) - t[1] * R(2, 0)) > ra + rb) return false;
  ra = a[1] * AbsR(2, 1) + a[2] * AbsR(1, 1);
  rb = b[0] * AbsR(0, 2) + b[2] * AbsR(0, 0);
  if (std::abs(t[2] * R(1, 1) - t[1] * R(2, 1)) > ra + rb) return false;
  ra = a[1] * AbsR(2, 2) + a[2] * AbsR(1, 2);
  rb = b[0] * AbsR(0, 1) + b[1] * AbsR(0, 0);
  if (std::abs(t[2] * R(1, 2) - t[1] * R(2, 2)) > ra + rb) return false;
  ra = a[0] * AbsR(2, 0) + a[2] * AbsR(0, 0);
  rb = b[1] * AbsR(1, 2) + b[2] * AbsR(1, 1);
  if (std::abs(t[0] * R(2, 0) - t[2] * R(0, 0)) > ra + rb) return false;
  ra = a[0] * AbsR(2, 1) + a[2] * AbsR(0, 1);
  rb = b[0] * AbsR(1, 2) + b[2] * AbsR(1, 0);
  if (std::abs(t[0] * R(2, 1) - t[2] * R(0, 1)) > ra + rb) return false;
  ra = a[0] * AbsR(2, 2) + a[2] * AbsR(0, 2);
  rb = b[0] * AbsR(1, 1) + b[1] * AbsR(1, 0);
  if (std::abs(t[0] * R(2, 2) - t[2] * R(0, 2)) > ra + rb) return false;
  ra = a[0] * AbsR(1, 0) + a[1] * AbsR(0, 0);
  rb = b[1] * AbsR(2, 2) + b[2] * AbsR(2, 1);
  if (std::abs(t[1] * R(0, 0) - t[0] * R(1, 0)) > ra + rb) return false;
  ra = a[0] * AbsR(1, 1) + a[1] * AbsR(0, 1);
  rb = b[0] * AbsR(2, 2) + b[2] * AbsR(2, 0);
  if (std::abs(t[1] * R(0, 1) - t[0] * R(1, 1)) > ra + rb) return false;
  ra = a[0] * AbsR(1, 2) + a[1] * AbsR(0, 2);
  rb = b[0] * AbsR(2, 1) + b[1] * AbsR(2, 0);
  if (std::abs(t[1] * R(0, 2) - t[0] * R(1, 2)) > ra + rb) return false;
  return true;
}

bool Overlaps(const Obb& a, const Obb& b) {
  Mat3 R = a.axes.transpose() * b.axes;
  Vec3 t = a.axes.transpose() * (b.center - a.center);
  return BoxesOverlap(a.half, b.half, R, t);
}

namespace {

// One edge-edge separating axis L = a_i x b_j of two boxes (Ericson 4.4.1), in a's box frame:
// |L|^2 = 1 - R_ij^2 and the boxes' projected radii on L (both scaled by |L|).
struct EdgeEdgeAxis {
  const Mat3& R;
  int i1, i2, j;
  double len2, radii;
  // v . L for a vector v in a's box frame (scaled by |L|).
  [[nodiscard]] double Project(const Vec3& v) const { return v[i2] * R(i1, j) - v[i1] * R(i2, j); }
};

// Calls fn(axis) for the nine edge-edge axes, skipping near-parallel pairs (short axes whose
// direction is mostly rounding); stops when fn returns true.
template <typename Fn>
void ForEdgeEdgeAxes(const Vec3& ha, const Vec3& hb, const Mat3& R, const Mat3& AbsR, Fn&& fn) {
  for (int i = 0; i < 3; ++i) {
    const int i1 = (i + 1) % 3, i2 = (i + 2) % 3;
    for (int j = 0; j < 3; ++j) {
      const int j1 = (j + 1) % 3, j2 = (j + 2) % 3;
      const double len2 = 1.0 - R(i, j) * R(i, j);
      if (len2 < 1e-6) continue;
      const double ra = ha[i1] * AbsR(i2, j) + ha[i2] * AbsR(i1, j);
      const double rb = hb[j1] * AbsR(i, j2) + hb[j2] * AbsR(i, j1);
      if (fn(EdgeEdgeAxis{R, i1, i2, j, len2, ra + rb})) return;
    }
  }
}

}  // namespace

double BoxDistanceLowerBound(const Vec3& ha, const Vec3& hb, const Mat3& R, const Vec3& t,
                             double target) {
  const Mat3 AbsR = R.cwiseAbs();
  const double target2 = target * target;
  // b's AABB in a's frame against a.
  double lb2 = (t.cwiseAbs() - ha - AbsR * hb).cwiseMax(0.0).squaredNorm();
  if (lb2 >= target2) return std::sqrt(lb2);
  // a's AABB in b's frame against b.
  lb2 = std::max(
      lb2,
      ((R.transpose() * t).cwiseAbs() - hb - AbsR.transpose() * ha).cwiseMax(0.0).squaredNorm());
  if (lb2 >= target2) return std::sqrt(lb2);
  // Edge-edge axes: projected centre distance minus both radii, over the axis length, compared
  // squared.
  ForEdgeEdgeAxes(ha, hb, R, AbsR, [&](const EdgeEdgeAxis& L) {
    const double gap = std::abs(L.Project(t)) - L.radii;
    if (gap > 0 && gap * gap > lb2 * L.len2) {
      lb2 = gap * gap / L.len2;
      return lb2 >= target2;
    }
    return false;
  });
  return std::sqrt(lb2);
}

double BoxSeparationTravel(const Vec3& ha, const Vec3& hb, const Mat3& R, const Vec3& t,
                           const Vec3& w, double margin, double target) {
  const Mat3 AbsR = R.cwiseAbs();
  internal::TravelWindow window;
  // Axes of a: b's projected radius is |R| hb.
  const Vec3 rb_on_a = AbsR * hb;
  for (int i = 0; i < 3; ++i) {
    window.Axis(t[i], ha[i] + rb_on_a[i], w[i], margin);
    if (window.AtLeast(target)) return window.First();
  }
  // Axes of b: centre offset and motion in b's frame.
  const Vec3 t_b = R.transpose() * t, w_b = R.transpose() * w, ra_on_b = AbsR.transpose() * ha;
  for (int j = 0; j < 3; ++j) {
    window.Axis(t_b[j], hb[j] + ra_on_b[j], w_b[j], margin);
    if (window.AtLeast(target)) return window.First();
  }
  ForEdgeEdgeAxes(ha, hb, R, AbsR, [&](const EdgeEdgeAxis& L) {
    window.Axis(L.Project(t), L.radii, L.Project(w), margin * std::sqrt(L.len2));
    return window.AtLeast(target);
  });
  return window.First();
}

Obb FitObbOnAxes(std::span<const Vec3> points, const Mat3& axes) {
  if (points.empty()) return {};
  ObbOnAxesFit fit(points[0], axes);
  fit.Add(points);
  return fit.Box();
}

}  // namespace clash::geom
