// Conversions between the wire types of clash.v1 and the geometry core, with validation.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "clash/geom/aabb.h"
#include "clash/geom/transform.h"
#include "clash/v1/common.pb.h"
#include "clash/v1/scenes.pb.h"
#include "grpcpp/support/status.h"

namespace clash::server {

[[nodiscard]] inline geom::Vec3 FromProto(const v1::Vec3& v) { return {v.x(), v.y(), v.z()}; }
void ToProto(const geom::Vec3& v, v1::Vec3* out);
void ToProto(const geom::Aabb& box, v1::Box3* out);

/// X_WP from a wire pose. INVALID_ARGUMENT (naming `what`) for non-finite values, a quaternion
/// whose norm is not within 1e-6 of 1 (a zero one included: leave the rotation unset for the
/// identity), or a matrix that is not a rotation within
/// `rotation_tolerance` (1e-6 for what clients send; stored poses, products of accepted ones,
/// are read with a looser one).
[[nodiscard]] absl::StatusOr<geom::RigidTransform> PoseFromProto(const v1::Pose& pose,
                                                                 std::string_view what,
                                                                 double rotation_tolerance = 1e-6);
/// The pose of an update (SetPoses, pose overrides): as PoseFromProto, and INVALID_ARGUMENT when
/// it has none (rather than move the instance to the origin).
[[nodiscard]] absl::StatusOr<geom::RigidTransform> PoseFromUpdate(const v1::PoseUpdate& update,
                                                                  std::string_view what);
/// A wire pose (translation + unit quaternion with w >= 0).
void ToProto(const geom::RigidTransform& X, v1::Pose* out);
/// The pose with its rotation as the matrix itself: PoseFromProto reads back the very same
/// transform, bit for bit (a quaternion round trip changes the last bits). For storage.
void ToProtoExact(const geom::RigidTransform& X, v1::Pose* out);

/// The gRPC status of an absl status (same code and message).
[[nodiscard]] grpc::Status ToGrpc(const absl::Status& status);

/// The status of the exception being handled (call it inside a catch block), so that no
/// exception reaches gRPC (which would answer UNKNOWN): std::bad_alloc is RESOURCE_EXHAUSTED;
/// anything else is INTERNAL, logged with `method`, its message not sent to the client.
[[nodiscard]] grpc::Status StatusOfCurrentException(const char* method);

/// Runs an RPC body (returning grpc::Status) so that no exception leaves it: an exception is
/// answered by StatusOfCurrentException(method).
template <class Body>
[[nodiscard]] grpc::Status Guarded(const char* method, Body&& body) {
  try {
    return body();
  } catch (...) {
    return StatusOfCurrentException(method);
  }
}

}  // namespace clash::server
