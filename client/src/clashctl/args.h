// Parsers for clashctl's argument syntax: instance selectors, vectors, rotations, allowed-
// interference rules and ray files. Each turns text into the clash.v1 message it stands for or
// an INVALID_ARGUMENT status naming what is wrong; none talks to a server.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "clash/v1/queries.pb.h"

namespace clash::clashctl {

/// OK when `value` is finite and >= 0; else INVALID_ARGUMENT naming `flag`.
[[nodiscard]] absl::Status CheckNonNegative(std::string_view flag, double value);

/// An instance id: decimal digits only, no sign, at most 2^64 - 1.
[[nodiscard]] absl::StatusOr<uint64_t> ParseInstanceId(std::string_view text);

/// An InstanceSelector from comma-separated items: a number is an instance id, `group:NAME` a
/// group, `path:PREFIX` a path prefix; `all` alone, or empty text, chooses everything (an empty
/// selector).
[[nodiscard]] absl::StatusOr<v1::InstanceSelector> ParseSelector(std::string_view text);

/// Exactly three finite numbers "x,y,z".
[[nodiscard]] absl::StatusOr<v1::Vec3> ParseVec3(std::string_view text);

/// The unit quaternion of rotations by rx, ry, rz degrees about the fixed X, then Y, then Z
/// axes (R = Rz * Ry * Rx).
[[nodiscard]] v1::Quaternion QuaternionFromFixedXyzDeg(double rx_deg, double ry_deg, double rz_deg);

/// "rx,ry,rz" in degrees (see QuaternionFromFixedXyzDeg).
[[nodiscard]] absl::StatusOr<v1::Quaternion> ParseRotationDeg(std::string_view text);

/// "w,x,y,z": four finite numbers, not all zero, normalised to unit length.
[[nodiscard]] absl::StatusOr<v1::Quaternion> ParseQuaternion(std::string_view text);

/// A pose from the optional --at, --rot-deg and --quat texts (empty: not given). At most one
/// of the two rotations; none gives the identity.
[[nodiscard]] absl::StatusOr<v1::Pose> ParsePose(std::string_view at, std::string_view rot_deg,
                                                 std::string_view quat);

/// A clash class by name, case-insensitive: hard, contact, clearance, contained.
[[nodiscard]] absl::StatusOr<v1::ClashClass> ParseClashClass(std::string_view text);

/// An allowed-interference rule "NAME=SEL_A[/SEL_B][:CLASSES]". CLASSES is a comma-separated
/// list of class names after the last ':' (when that text is such a list and what precedes it
/// still parses; otherwise the ':' belongs to a selector, and letters after it that are no
/// class list are refused unless the whole text reads as SEL_A/SEL_B, as in
/// "group:bolts/group:nuts"). SEL_B starts after the first '/' at which both sides parse; other
/// slashes belong to paths. That '/' may not follow a `path:` item when SEL_B begins with an
/// instance id or `all` ("path:motor/4711" is refused as ambiguous).
[[nodiscard]] absl::StatusOr<v1::AllowedInterference> ParseAllowRule(std::string_view text);

/// Rays from text with one "ox oy oz dx dy dz" per line (whitespace-separated; blank lines and
/// lines starting with '#' are skipped). `max_distance_mm` is set on every ray.
[[nodiscard]] absl::StatusOr<std::vector<v1::Ray>> ParseRays(std::string_view text,
                                                             double max_distance_mm);

/// A ray from --origin and --dir texts ("x,y,z" each); the direction must not be zero.
[[nodiscard]] absl::StatusOr<v1::Ray> ParseRay(std::string_view origin, std::string_view dir,
                                               double max_distance_mm);

}  // namespace clash::clashctl
