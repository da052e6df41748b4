// Shared inputs of the benchmarks: parts tessellated from real CAD files, near-contact pair
// workloads and ray sets, all generated from fixed seeds and cached for the whole process.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clash/geom/adaptive_bv.h"
#include "clash/geom/mesh.h"
#include "clash/geom/part.h"
#include "clash/geom/ray.h"
#include "clash/geom/transform.h"

namespace clash::bench {

/// The three node-volume modes, in the order used by PartData::parts.
inline constexpr std::array<geom::BvMode, 3> kModes = {
    geom::BvMode::kAdaptive, geom::BvMode::kAabbOnly, geom::BvMode::kObbOnly};

/// Library label of clash in a mode: "clash-adaptive", "clash-aabb" or "clash-obb".
[[nodiscard]] const char* ModeLabel(geom::BvMode mode);

/// One real part: the validated mesh every library is given, and clash's hierarchies.
struct PartData {
  std::string name;  ///< Dataset name ("screw", ...).
  std::string path;  ///< CAD file it was read from.
  geom::TriangleMesh mesh;
  std::array<std::shared_ptr<const geom::Part>, 3> parts;  ///< By kModes order.
  double diagonal = 0;                                     ///< Bounding-box diagonal (mm).

  /// The part built in `mode`.
  [[nodiscard]] const geom::Part& Get(geom::BvMode mode) const;
};

/// Names of the part datasets whose CAD file was found.
[[nodiscard]] std::vector<std::string> AvailableParts();

/// The part dataset `name`, read, tessellated (clash::cad defaults) and built on first use.
[[nodiscard]] absl::StatusOr<const PartData*> LoadPart(const std::string& name);

/// One pair query: part a at the identity, part b at X_WB.
struct PairCase {
  geom::RigidTransform X_WB;  ///< Pose of b.
  geom::Vec3 direction_W;     ///< Direction along which b was brought to first contact.
  double offset_mm = 0;       ///< Beyond first contact: > 0 pulled apart, < 0 pushed in.
};

/// A pair workload: `pairs[i]` is pulled apart for even i and pushed in for odd i.
struct PairDataset {
  std::string name;
  const PartData* a = nullptr;
  const PartData* b = nullptr;
  std::vector<PairCase> pairs;
  uint64_t seed = 0;          ///< Seed the poses came from.
  int placement_retries = 0;  ///< Draws discarded because no contact was found.
  /// Displacement below which two results count as the same contact up to rounding:
  /// 1e-9 of the larger part's diagonal (clash inflates its boxes by the same relative amount).
  double touch_tolerance_mm = 0;

  /// Indices of the pulled-apart (apart = true) or pushed-in pairs.
  [[nodiscard]] std::vector<uint32_t> Indices(bool apart) const;
};

/// Names of the pair datasets whose parts were found.
[[nodiscard]] std::vector<std::string> AvailablePairs();

/// The pair dataset `name`, generated on first use.
[[nodiscard]] absl::StatusOr<const PairDataset*> LoadPairs(const std::string& name);

/// Random rays through a part's bounding box (part at the identity), about half of them hitting.
struct RaySet {
  std::vector<geom::Ray> rays;
  int hits = 0;  ///< Rays that hit (by clash's CastRay).
};

/// The ray set of part dataset `name`, generated on first use.
[[nodiscard]] absl::StatusOr<const RaySet*> LoadRays(const std::string& name);

/// Number of pairs per dataset and rays per part.
inline constexpr int kPairsPerDataset = 64;
inline constexpr int kRaysPerPart = 1024;

}  // namespace clash::bench
