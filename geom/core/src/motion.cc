#include "clash/geom/motion.h"

#include <Eigen/Geometry>
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace clash::geom {
namespace {

// A direction or axis counts as unit length within this (the caller normalises; this only
// catches a vector that was never normalised, or a zero one).
constexpr double kUnitTolerance = 1e-6;
// Bisection steps of AdvanceLimit: 2^-64 is below the spacing of doubles in [0, 1].
constexpr int kAdvanceBisections = 64;
// MaxTravel sums the keyframe segments of a span one by one up to this many; longer spans add
// the whole segments between their ends from prefix sums (O(1) instead of O(segments)).
constexpr std::size_t kExactSegments = 32;

double Clamp01(double t) { return std::clamp(t, 0.0, 1.0); }

// Chord bound of a rotation by `angle` at distance rho from the axis: 2 |sin(angle / 2)| rho is
// at most min(|angle|, 2) rho, and so is every chord for an intermediate angle.
double ChordBound(double angle, double rho) { return std::min(std::abs(angle), 2.0) * rho; }

// Distance of point p from the line through c along the unit u.
double DistanceFromLine(const Vec3& p, const Vec3& c, const Vec3& u) {
  const Vec3 v = p - c;
  return (v - v.dot(u) * u).norm();
}

absl::Status CheckPose(const RigidTransform& X, absl::string_view what) {
  if (!X.IsValid()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not a finite rigid transform (orthonormal rotation, det +1)"));
  }
  return absl::OkStatus();
}

absl::Status CheckUnit(const Vec3& v, absl::string_view what) {
  if (!v.allFinite() || std::abs(v.norm() - 1.0) > kUnitTolerance) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a finite unit vector (length ", v.norm(), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(double x, absl::string_view what) {
  if (!std::isfinite(x)) return absl::InvalidArgumentError(absl::StrCat(what, " is not finite"));
  return absl::OkStatus();
}

}  // namespace

double Motion::AxialTravel() const {
  switch (kind_) {
    case MotionKind::kLinear:
      return amount_;
    case MotionKind::kScrew:
      return amount_ / (2.0 * std::numbers::pi) * pitch_;
    case MotionKind::kRotation:
    case MotionKind::kKeyframes:
      return 0.0;
  }
  return 0.0;
}

const char* MotionKindName(MotionKind kind) {
  switch (kind) {
    case MotionKind::kLinear:
      return "linear";
    case MotionKind::kRotation:
      return "rotation";
    case MotionKind::kScrew:
      return "screw";
    case MotionKind::kKeyframes:
      return "keyframes";
  }
  return "unknown";
}

absl::StatusOr<Motion> Motion::Linear(const RigidTransform& X0, const Vec3& direction_W,
                                      double distance_mm) {
  if (absl::Status s = CheckPose(X0, "start pose"); !s.ok()) return s;
  if (absl::Status s = CheckUnit(direction_W, "direction"); !s.ok()) return s;
  if (absl::Status s = CheckFinite(distance_mm, "distance"); !s.ok()) return s;
  if (distance_mm < 0.0) {
    return absl::InvalidArgumentError("distance must be >= 0 (reverse the direction instead)");
  }
  Motion m;
  m.kind_ = MotionKind::kLinear;
  m.X0_ = X0;
  m.dir_ = direction_W.normalized();
  m.amount_ = distance_mm;
  return m;
}

absl::StatusOr<Motion> Motion::Axis(MotionKind kind, const RigidTransform& X0, const Vec3& center_W,
                                    const Vec3& axis_W, double angle_rad, double pitch_mm) {
  if (absl::Status s = CheckPose(X0, "start pose"); !s.ok()) return s;
  if (absl::Status s = CheckUnit(axis_W, "axis"); !s.ok()) return s;
  if (!center_W.allFinite()) return absl::InvalidArgumentError("axis point is not finite");
  if (absl::Status s = CheckFinite(angle_rad, "angle"); !s.ok()) return s;
  if (absl::Status s = CheckFinite(pitch_mm, "pitch"); !s.ok()) return s;
  Motion m;
  m.kind_ = kind;
  m.X0_ = X0;
  m.dir_ = axis_W.normalized();
  m.center_ = center_W;
  m.amount_ = angle_rad;
  m.pitch_ = pitch_mm;
  return m;
}

absl::StatusOr<Motion> Motion::Rotation(const RigidTransform& X0, const Vec3& center_W,
                                        const Vec3& axis_W, double angle_rad) {
  return Axis(MotionKind::kRotation, X0, center_W, axis_W, angle_rad, 0.0);
}

absl::StatusOr<Motion> Motion::Screw(const RigidTransform& X0, const Vec3& center_W,
                                     const Vec3& axis_W, double angle_rad, double pitch_mm) {
  return Axis(MotionKind::kScrew, X0, center_W, axis_W, angle_rad, pitch_mm);
}

absl::StatusOr<Motion> Motion::Keyframes(std::span<const Keyframe> keyframes) {
  if (keyframes.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a keyframe path needs at least 2 keyframes, got ", keyframes.size()));
  }
  for (std::size_t i = 0; i < keyframes.size(); ++i) {
    const Keyframe& k = keyframes[i];
    if (absl::Status s = CheckPose(k.X_WP, absl::StrCat("keyframe ", i, " pose")); !s.ok()) {
      return s;
    }
    if (absl::Status s = CheckFinite(k.t, absl::StrCat("keyframe ", i, " parameter")); !s.ok()) {
      return s;
    }
    if (i > 0 && !(k.t > keyframes[i - 1].t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("keyframe parameters must increase strictly: keyframe ", i, " has t = ", k.t,
                       " after t = ", keyframes[i - 1].t));
    }
  }
  if (keyframes.front().t != 0.0 || keyframes.back().t != 1.0) {
    return absl::InvalidArgumentError(absl::StrCat("keyframe parameters must run from 0 to 1, got ",
                                                   keyframes.front().t, " to ",
                                                   keyframes.back().t));
  }
  Motion m;
  m.kind_ = MotionKind::kKeyframes;
  // Rotations within IsValid's tolerance of orthonormal are projected onto rotations, so that
  // the end of one segment's slerp and the next keyframe agree to rounding.
  auto keys = std::make_shared<std::vector<Keyframe>>();
  auto segments = std::make_shared<std::vector<Segment>>();
  keys->reserve(keyframes.size());
  segments->reserve(keyframes.size() - 1);
  for (const Keyframe& k : keyframes) {
    Keyframe& copy = keys->emplace_back(k);
    copy.X_WP.R = Eigen::Quaterniond(k.X_WP.R).normalized().toRotationMatrix();
  }
  m.X0_ = keys->front().X_WP;
  for (std::size_t i = 0; i + 1 < keys->size(); ++i) {
    const Keyframe& a = (*keys)[i];
    const Keyframe& b = (*keys)[i + 1];
    Segment seg;
    seg.t0 = a.t;
    seg.t1 = b.t;
    seg.R0 = a.X_WP.R;
    seg.T0 = a.X_WP.t;
    seg.dT = b.X_WP.t - a.X_WP.t;
    // The relative rotation R_a^T R_b in the part frame, on the shorter arc (w >= 0).
    const Mat3 R_rel = a.X_WP.R.transpose() * b.X_WP.R;
    Eigen::Quaterniond q(R_rel);
    q.normalize();
    if (q.w() < 0) q.coeffs() = -q.coeffs();
    const double s = q.vec().norm();
    seg.angle = 2.0 * std::atan2(s, q.w());
    seg.axis_P = s > 0 ? Vec3(q.vec() / s) : Vec3::UnitX();
    if (!segments->empty()) {
      const Segment& prev = segments->back();
      seg.moved_before = prev.moved_before + prev.dT.norm();
      seg.turned_before = prev.turned_before + std::min(prev.angle, 2.0);
    }
    segments->push_back(seg);
  }
  m.keys_ = std::move(keys);
  m.segments_ = std::move(segments);
  return m;
}

std::vector<Keyframe> Motion::keyframes() const {
  std::vector<Keyframe> out;
  if (keys_ == nullptr) return out;
  out.reserve(keys_->size());
  for (const Keyframe& k : *keys_) out.push_back({k.t, k.X_WP * body_});
  return out;
}

absl::StatusOr<Motion> Motion::Carrying(const RigidTransform& X_PQ) const {
  if (absl::Status s = CheckPose(X_PQ, "carried pose"); !s.ok()) return s;
  Motion m = *this;
  m.X0_ = X0_ * X_PQ;
  if (kind_ == MotionKind::kKeyframes) m.body_ = body_ * X_PQ;
  return m;
}

std::size_t Motion::SegmentIndex(double t) const {
  // The last segment whose start is <= t.
  const std::vector<Segment>& segments = *segments_;
  auto it = std::upper_bound(segments.begin(), segments.end(), t,
                             [](double x, const Segment& s) { return x < s.t0; });
  return it == segments.begin() ? 0 : static_cast<std::size_t>(it - segments.begin()) - 1;
}

RigidTransform Motion::PoseAt(double t) const {
  t = Clamp01(t);
  if (t == 0.0) return X0_;
  switch (kind_) {
    case MotionKind::kLinear:
      return RigidTransform::Translation(t * amount_ * dir_) * X0_;
    case MotionKind::kRotation:
    case MotionKind::kScrew: {
      const double phi = t * amount_;
      const Mat3 rot = Eigen::AngleAxisd(phi, dir_).toRotationMatrix();
      const Vec3 advance = (phi / (2.0 * std::numbers::pi) * pitch_) * dir_;
      return {rot * X0_.R, rot * (X0_.t - center_) + center_ + advance};
    }
    case MotionKind::kKeyframes: {
      if (t >= 1.0) return keys_->back().X_WP * body_;
      const Segment& seg = (*segments_)[SegmentIndex(t)];
      const double s = (t - seg.t0) / (seg.t1 - seg.t0);
      const Mat3 rot = Eigen::AngleAxisd(s * seg.angle, seg.axis_P).toRotationMatrix();
      return RigidTransform{seg.R0 * rot, seg.T0 + s * seg.dT} * body_;
    }
  }
  return X0_;
}

double Motion::MaxTravel(double t0, double t1, const Sphere& bound_P) const {
  const double a = Clamp01(std::min(t0, t1)), b = Clamp01(std::max(t0, t1));
  if (!(b > a)) return 0.0;
  const double r = std::max(bound_P.radius, 0.0);
  switch (kind_) {
    case MotionKind::kLinear:
      return (b - a) * amount_;
    case MotionKind::kRotation:
    case MotionKind::kScrew: {
      const double dphi = (b - a) * std::abs(amount_);
      const double rho = DistanceFromLine(X0_ * bound_P.center, center_, dir_) + r;
      // Rotation (normal to the axis) and advance (along it) are orthogonal displacements.
      return std::hypot(ChordBound(dphi, rho), dphi / (2.0 * std::numbers::pi) * std::abs(pitch_));
    }
    case MotionKind::kKeyframes: {
      const std::vector<Segment>& segments = *segments_;
      const Vec3 c = body_ * bound_P.center;
      // Segment i's share: its translation plus the chord of its turn at the sphere's distance
      // from its axis, over the fraction of it within [a, b].
      auto share = [&](std::size_t i) {
        const Segment& seg = segments[i];
        const double f = (std::min(b, seg.t1) - std::max(a, seg.t0)) / (seg.t1 - seg.t0);
        if (f <= 0.0) return 0.0;
        const double rho = DistanceFromLine(c, Vec3::Zero(), seg.axis_P) + r;
        return f * seg.dT.norm() + ChordBound(f * seg.angle, rho);
      };
      // Segments [first, end) start before b.
      const std::size_t first = SegmentIndex(a);
      const std::size_t end = static_cast<std::size_t>(
          std::lower_bound(segments.begin() + first, segments.end(), b,
                           [](const Segment& s, double x) { return s.t0 < x; }) -
          segments.begin());
      double sum = 0.0;
      if (end <= first + kExactSegments) {
        for (std::size_t i = first; i < end; ++i) sum += share(i);
        return sum;
      }
      // A long span (a sweep's every step asks MaxTravel(t, 1)): the two end segments as
      // above; the whole ones between, first + 1 to end - 2, from the prefix sums, with the
      // sphere's distance from every axis bounded by |c| (never less than the exact sum). The
      // margin covers the prefix sums' rounding (at most n ulps of the totals each).
      sum = share(first) + share(end - 1);
      const Segment &lo = segments[first + 1], &hi = segments[end - 1], &last = segments.back();
      const double rho = c.norm() + r;
      const double moved = hi.moved_before - lo.moved_before;
      const double turned = hi.turned_before - lo.turned_before;
      const double total = last.moved_before + last.dT.norm() +
                           (last.turned_before + std::min(last.angle, 2.0)) * rho;
      const double rounding =
          4.0 * static_cast<double>(segments.size()) * std::numeric_limits<double>::epsilon();
      return sum + std::max(moved, 0.0) + std::max(turned, 0.0) * rho + rounding * total;
    }
  }
  return 0.0;
}

double Motion::AdvanceLimit(double t, double budget_mm, const Sphere& bound_P) const {
  t = Clamp01(t);
  if (!(budget_mm > 0.0)) return t;
  if (MaxTravel(t, 1.0, bound_P) <= budget_mm) return 1.0;
  // MaxTravel(t, .) grows with its second argument: keep lo within the budget, hi beyond it.
  double lo = t, hi = 1.0;
  for (int i = 0; i < kAdvanceBisections; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    if (MaxTravel(t, mid, bound_P) <= budget_mm) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace clash::geom
