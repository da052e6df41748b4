#include "clashctl/args.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace clash::clashctl {
namespace {

constexpr std::string_view kWhitespace = " \t\r\n";

std::string_view Trim(std::string_view s) {
  const std::size_t begin = s.find_first_not_of(kWhitespace);
  if (begin == std::string_view::npos) return {};
  const std::size_t end = s.find_last_not_of(kWhitespace);
  return s.substr(begin, end - begin + 1);
}

// Splits at every `sep`; "a,,b" gives an empty middle piece, "" gives one empty piece.
std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    const std::size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

// Splits at runs of whitespace; no empty pieces.
std::vector<std::string_view> Tokens(std::string_view s) {
  std::vector<std::string_view> out;
  for (;;) {
    const std::size_t begin = s.find_first_not_of(kWhitespace);
    if (begin == std::string_view::npos) return out;
    s.remove_prefix(begin);
    const std::size_t end = s.find_first_of(kWhitespace);
    out.push_back(s.substr(0, end));
    if (end == std::string_view::npos) return out;
    s.remove_prefix(end);
  }
}

absl::Status Invalid(const auto&... pieces) {
  return absl::InvalidArgumentError(absl::StrCat(pieces...));
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

bool AllLettersOrCommas(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!letter && c != ',' && c != ' ') return false;
  }
  return true;
}

absl::StatusOr<double> ParseFinite(std::string_view text) {
  const std::string_view t = Trim(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
    return Invalid("'", std::string(t), "' is not a number");
  }
  if (!std::isfinite(value)) return Invalid("'", std::string(t), "' is not a finite number");
  return value;
}

// Exactly `n` comma-separated finite numbers.
template <std::size_t n>
absl::StatusOr<std::array<double, n>> ParseNumbers(std::string_view text, std::string_view form) {
  const std::vector<std::string_view> parts = Split(text, ',');
  if (parts.size() != n) {
    return Invalid("expected ", std::string(form), " (", n, " comma-separated numbers), got '",
                   std::string(text), "'");
  }
  std::array<double, n> out{};
  for (std::size_t i = 0; i < n; ++i) {
    absl::StatusOr<double> v = ParseFinite(parts[i]);
    if (!v.ok()) return Invalid(v.status().message(), " in '", std::string(text), "'");
    out[i] = *v;
  }
  return out;
}

v1::Vec3 MakeVec3(double x, double y, double z) {
  v1::Vec3 v;
  v.set_x(x);
  v.set_y(y);
  v.set_z(z);
  return v;
}

absl::StatusOr<v1::Ray> MakeRay(const v1::Vec3& origin, const v1::Vec3& direction,
                                double max_distance_mm) {
  if (direction.x() == 0 && direction.y() == 0 && direction.z() == 0) {
    return Invalid("the direction is zero");
  }
  v1::Ray ray;
  *ray.mutable_origin_mm() = origin;
  *ray.mutable_direction() = direction;
  ray.set_max_distance_mm(max_distance_mm);
  return ray;
}

v1::Quaternion Multiply(const v1::Quaternion& a, const v1::Quaternion& b) {
  v1::Quaternion q;
  q.set_w(a.w() * b.w() - a.x() * b.x() - a.y() * b.y() - a.z() * b.z());
  q.set_x(a.w() * b.x() + a.x() * b.w() + a.y() * b.z() - a.z() * b.y());
  q.set_y(a.w() * b.y() - a.x() * b.z() + a.y() * b.w() + a.z() * b.x());
  q.set_z(a.w() * b.z() + a.x() * b.y() - a.y() * b.x() + a.z() * b.w());
  return q;
}

v1::Quaternion AxisRotation(int axis, double angle_rad) {
  v1::Quaternion q;
  q.set_w(std::cos(angle_rad / 2));
  const double s = std::sin(angle_rad / 2);
  if (axis == 0) q.set_x(s);
  if (axis == 1) q.set_y(s);
  if (axis == 2) q.set_z(s);
  return q;
}

// A selector of an allow rule: as ParseSelector, but never empty. An empty selector is every
// instance, and a side left empty by a stray '/' or ':' ("path:as1/plate_1/", "x=:hard") would
// silently suppress a part's clashes with everything: every instance is written `all`.
absl::StatusOr<v1::InstanceSelector> ParseRuleSelector(std::string_view text) {
  if (Trim(text).empty()) return Invalid("a selector is empty (write all for every instance)");
  return ParseSelector(text);
}

// The first and the last comma-separated item of a selector text, trimmed.
std::string_view FirstItem(std::string_view text) { return Trim(text.substr(0, text.find(','))); }
std::string_view LastItem(std::string_view text) {
  const std::size_t comma = text.rfind(',');
  return Trim(comma == std::string_view::npos ? text : text.substr(comma + 1));
}

// OK unless SEL_B begins with a bare id or `all` right after a path item's '/': in
// "path:motor/4711" that segment may as well be part of the path, and reading it as SEL_B would
// suppress clashes nobody meant to. The message says how to write either reading.
absl::Status CheckUnambiguousSplit(std::string_view a_text, std::string_view b_text) {
  const std::string_view path = LastItem(a_text);
  const std::string_view next = FirstItem(b_text);
  if (!path.starts_with("path:") || (next != "all" && !AllDigits(next))) return absl::OkStatus();
  const std::string_view a = Trim(a_text);
  const std::string_view b = Trim(b_text);
  return Invalid("'", std::string(a), "/", std::string(b), "' is ambiguous: '", std::string(next),
                 "' after the '/' of a path may be a path segment or the second selector; write '",
                 std::string(b), "/", std::string(a), "' for ", std::string(a), " against ",
                 std::string(b), " (the sides swapped), or '", std::string(a), "/", std::string(b),
                 "/", std::string(a), "/", std::string(b),
                 "' for any two instances of the one selector (it on both sides)");
}

// Both selectors of "SEL_A[/SEL_B]": SEL_B starts after the first '/' where both sides parse
// (refused when that split is ambiguous: CheckUnambiguousSplit, with `*ambiguous` set).
absl::Status ParseSelectorPair(std::string_view text, v1::AllowedInterference* out,
                               bool* ambiguous = nullptr) {
  if (ambiguous != nullptr) *ambiguous = false;
  for (std::size_t at = text.find('/'); at != std::string_view::npos; at = text.find('/', at + 1)) {
    absl::StatusOr<v1::InstanceSelector> a = ParseRuleSelector(text.substr(0, at));
    absl::StatusOr<v1::InstanceSelector> b = ParseRuleSelector(text.substr(at + 1));
    if (a.ok() && b.ok()) {
      if (absl::Status st = CheckUnambiguousSplit(text.substr(0, at), text.substr(at + 1));
          !st.ok()) {
        if (ambiguous != nullptr) *ambiguous = true;
        return st;
      }
      *out->mutable_a() = *std::move(a);
      *out->mutable_b() = *std::move(b);
      return absl::OkStatus();
    }
  }
  absl::StatusOr<v1::InstanceSelector> a = ParseRuleSelector(text);
  if (!a.ok()) return a.status();
  *out->mutable_a() = *std::move(a);
  out->clear_b();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::ClashClass>> ParseClassList(std::string_view text) {
  std::vector<v1::ClashClass> out;
  for (std::string_view item : Split(text, ',')) {
    absl::StatusOr<v1::ClashClass> c = ParseClashClass(item);
    if (!c.ok()) return c.status();
    out.push_back(*c);
  }
  return out;
}

}  // namespace

absl::Status CheckNonNegative(std::string_view flag, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return Invalid(std::string(flag), " must be a finite number >= 0, got ", value);
}

absl::StatusOr<uint64_t> ParseInstanceId(std::string_view text) {
  const std::string_view t = Trim(text);
  uint64_t id = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), id);
  if (!AllDigits(t) || ec != std::errc() || end != t.data() + t.size()) {
    return Invalid("'", std::string(t), "' is not an instance id (a number up to 2^64-1)");
  }
  return id;
}

absl::StatusOr<v1::InstanceSelector> ParseSelector(std::string_view text) {
  v1::InstanceSelector selector;
  const std::string_view all = Trim(text);
  if (all.empty() || all == "all") return selector;
  for (std::string_view raw : Split(all, ',')) {
    const std::string_view item = Trim(raw);
    if (item.empty()) return Invalid("empty item in selector '", std::string(all), "'");
    if (item == "all") {
      return Invalid("'all' cannot be combined with other items in '", std::string(all), "'");
    }
    if (item.starts_with("group:") || item.starts_with("path:")) {
      const bool group = item.starts_with("group:");
      const std::string_view name = item.substr(group ? 6 : 5);
      if (name.empty()) {
        return Invalid("'", std::string(item), "' names no ", group ? "group" : "path prefix");
      }
      if (!group && name.back() == '/') {  // it would match no instance
        return Invalid("path prefix '", std::string(name),
                       "' ends with '/' (a prefix matches whole path segments: write path:",
                       std::string(name.substr(0, name.find_last_not_of('/') + 1)), ")");
      }
      *(group ? selector.add_groups() : selector.add_path_prefixes()) = std::string(name);
      continue;
    }
    if (!AllDigits(item)) {
      return Invalid("selector item '", std::string(item),
                     "' is not an instance id, group:NAME, path:PREFIX or all");
    }
    absl::StatusOr<uint64_t> id = ParseInstanceId(item);
    if (!id.ok()) return id.status();
    selector.add_instance_ids(*id);
  }
  return selector;
}

absl::StatusOr<v1::Vec3> ParseVec3(std::string_view text) {
  absl::StatusOr<std::array<double, 3>> v = ParseNumbers<3>(text, "x,y,z");
  if (!v.ok()) return v.status();
  return MakeVec3((*v)[0], (*v)[1], (*v)[2]);
}

v1::Quaternion QuaternionFromFixedXyzDeg(double rx_deg, double ry_deg, double rz_deg) {
  constexpr double kRadPerDeg = M_PI / 180.0;
  // Fixed axes: X first, so it is the rightmost factor.
  return Multiply(
      AxisRotation(2, rz_deg * kRadPerDeg),
      Multiply(AxisRotation(1, ry_deg * kRadPerDeg), AxisRotation(0, rx_deg * kRadPerDeg)));
}

absl::StatusOr<v1::Quaternion> ParseRotationDeg(std::string_view text) {
  absl::StatusOr<std::array<double, 3>> v = ParseNumbers<3>(text, "rx,ry,rz degrees");
  if (!v.ok()) return v.status();
  return QuaternionFromFixedXyzDeg((*v)[0], (*v)[1], (*v)[2]);
}

absl::StatusOr<v1::Quaternion> ParseQuaternion(std::string_view text) {
  absl::StatusOr<std::array<double, 4>> v = ParseNumbers<4>(text, "w,x,y,z");
  if (!v.ok()) return v.status();
  const auto& [w, x, y, z] = *v;
  const double norm = std::sqrt(w * w + x * x + y * y + z * z);
  if (!(norm > 1e-12) || !std::isfinite(norm)) {
    return Invalid("quaternion '", std::string(text), "' has no direction (norm ", norm, ")");
  }
  v1::Quaternion q;
  q.set_w(w / norm);
  q.set_x(x / norm);
  q.set_y(y / norm);
  q.set_z(z / norm);
  return q;
}

absl::StatusOr<v1::Pose> ParsePose(std::string_view at, std::string_view rot_deg,
                                   std::string_view quat) {
  v1::Pose pose;
  if (!rot_deg.empty() && !quat.empty()) {
    return Invalid("give --rot-deg or --quat, not both");
  }
  if (!at.empty()) {
    absl::StatusOr<v1::Vec3> t = ParseVec3(at);
    if (!t.ok()) return Invalid("--at: ", t.status().message());
    *pose.mutable_translation_mm() = *std::move(t);
  }
  if (!rot_deg.empty() || !quat.empty()) {
    absl::StatusOr<v1::Quaternion> q =
        rot_deg.empty() ? ParseQuaternion(quat) : ParseRotationDeg(rot_deg);
    if (!q.ok()) {
      return Invalid(rot_deg.empty() ? "--quat: " : "--rot-deg: ", q.status().message());
    }
    *pose.mutable_quaternion() = *std::move(q);
  }
  return pose;
}

absl::StatusOr<v1::ClashClass> ParseClashClass(std::string_view text) {
  std::string lower(Trim(text));
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "hard") return v1::HARD;
  if (lower == "contact") return v1::CONTACT;
  if (lower == "clearance") return v1::CLEARANCE;
  if (lower == "contained") return v1::CONTAINED;
  return Invalid("unknown clash class '", std::string(Trim(text)),
                 "' (hard, contact, clearance, contained)");
}

absl::StatusOr<v1::AllowedInterference> ParseAllowRule(std::string_view text) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos || Trim(text.substr(0, eq)).empty()) {
    return Invalid("allow rule '", std::string(text), "' is not NAME=SEL_A[/SEL_B][:CLASSES]");
  }
  v1::AllowedInterference rule;
  rule.set_name(std::string(Trim(text.substr(0, eq))));
  const std::string_view body = text.substr(eq + 1);
  const std::size_t colon = body.rfind(':');
  if (colon != std::string_view::npos) {
    const std::string_view head = body.substr(0, colon);
    const std::string_view tail = body.substr(colon + 1);
    absl::StatusOr<std::vector<v1::ClashClass>> classes = ParseClassList(tail);
    v1::AllowedInterference with_classes = rule;
    bool ambiguous = false;
    const absl::Status head_status = ParseSelectorPair(head, &with_classes, &ambiguous);
    if (head_status.ok() && classes.ok()) {
      for (v1::ClashClass c : *classes) with_classes.add_classes(c);
      return with_classes;
    }
    if (ambiguous && classes.ok()) {
      return Invalid("allow rule '", std::string(text), "': ", head_status.message());
    }
    // Letters after the last ':' that are no class list: the name of a second selector's group
    // or path ("group:bolts/group:nuts", whose head reads as the one group "bolts/group") when
    // the whole body reads as two selectors and the head as one (the two-sided reading wins),
    // else a mistyped class (paths get ":<n>" suffixes, not letters).
    if (head_status.ok() && AllLettersOrCommas(tail)) {
      v1::AllowedInterference two_sided = rule;
      if (!with_classes.has_b() && ParseSelectorPair(body, &two_sided).ok() && two_sided.has_b()) {
        return two_sided;
      }
      return Invalid("allow rule '", std::string(text), "': ", classes.status().message());
    }
  }
  absl::Status status = ParseSelectorPair(body, &rule);
  if (!status.ok()) return Invalid("allow rule '", std::string(text), "': ", status.message());
  return rule;
}

absl::StatusOr<v1::Ray> ParseRay(std::string_view origin, std::string_view dir,
                                 double max_distance_mm) {
  absl::StatusOr<v1::Vec3> o = ParseVec3(origin);
  if (!o.ok()) return Invalid("--origin: ", o.status().message());
  absl::StatusOr<v1::Vec3> d = ParseVec3(dir);
  if (!d.ok()) return Invalid("--dir: ", d.status().message());
  absl::StatusOr<v1::Ray> ray = MakeRay(*o, *d, max_distance_mm);
  if (!ray.ok()) return Invalid("--dir: ", ray.status().message());
  return ray;
}

absl::StatusOr<std::vector<v1::Ray>> ParseRays(std::string_view text, double max_distance_mm) {
  std::vector<v1::Ray> rays;
  int line_number = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_number;
    const std::string_view t = Trim(line);
    if (t.empty() || t.front() == '#') continue;
    const std::vector<std::string_view> tokens = Tokens(t);
    if (tokens.size() != 6) {
      return Invalid("line ", line_number, ": expected 6 numbers (ox oy oz dx dy dz), got ",
                     tokens.size());
    }
    std::array<double, 6> v{};
    for (std::size_t i = 0; i < 6; ++i) {
      absl::StatusOr<double> x = ParseFinite(tokens[i]);
      if (!x.ok()) return Invalid("line ", line_number, ": ", x.status().message());
      v[i] = *x;
    }
    absl::StatusOr<v1::Ray> ray =
        MakeRay(MakeVec3(v[0], v[1], v[2]), MakeVec3(v[3], v[4], v[5]), max_distance_mm);
    if (!ray.ok()) return Invalid("line ", line_number, ": ", ray.status().message());
    rays.push_back(*std::move(ray));
  }
  if (rays.empty()) return Invalid("no rays in the file");
  return rays;
}

}  // namespace clash::clashctl
