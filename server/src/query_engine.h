// The queries of QueryService on one scene: interference classification, minimum distance and
// ray picks. Callers hold the scene's mutex shared for the duration of a call.
#pragma once

#include <functional>

#include "absl/status/statusor.h"
#include "clash/v1/queries.pb.h"
#include "scene.h"

namespace clash::server {

/// Polled during long work: a non-OK status (CANCELLED, DEADLINE_EXCEEDED) stops the query,
/// which returns that status.
using StopCheck = std::function<absl::Status()>;

/// Limits of one query.
struct QueryLimits {
  int max_rays = 100'000;
  int max_overrides = 100'000;
};

[[nodiscard]] absl::StatusOr<v1::InterferenceResponse> RunInterference(
    const Scene& scene, const v1::InterferenceRequest& request, const StopCheck& stop);

[[nodiscard]] absl::StatusOr<v1::DistanceResponse> RunDistance(const Scene& scene,
                                                               const v1::DistanceRequest& request,
                                                               const StopCheck& stop);

[[nodiscard]] absl::StatusOr<v1::PickResponse> RunPick(const Scene& scene,
                                                       const v1::PickRequest& request,
                                                       const StopCheck& stop,
                                                       const QueryLimits& limits = {});

/// The instances a selector chooses (enabled only), in id order. NOT_FOUND for an unknown
/// instance id or group, or a path prefix that matches nothing.
[[nodiscard]] absl::StatusOr<std::vector<const InstanceRec*>> SelectInstances(
    const Scene& scene, const v1::InstanceSelector& selector);

/// The stable id of the clash between two paths (path_a < path_b).
[[nodiscard]] std::string ClashId(const std::string& path_a, const std::string& path_b);

}  // namespace clash::server
