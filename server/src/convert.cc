#include "convert.h"

#include <cmath>
#include <exception>
#include <new>
#include <string>

#include "Eigen/Geometry"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "log.h"

namespace clash::server {

void ToProto(const geom::Vec3& v, v1::Vec3* out) {
  out->set_x(v.x());
  out->set_y(v.y());
  out->set_z(v.z());
}

void ToProto(const geom::Aabb& box, v1::Box3* out) {
  ToProto(box.min, out->mutable_min_mm());
  ToProto(box.max, out->mutable_max_mm());
}

absl::StatusOr<geom::RigidTransform> PoseFromUpdate(const v1::PoseUpdate& update,
                                                    std::string_view what) {
  if (!update.has_pose()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": no pose given"));
  }
  return PoseFromProto(update.pose(), what);
}

absl::StatusOr<geom::RigidTransform> PoseFromProto(const v1::Pose& pose, std::string_view what,
                                                   double rotation_tolerance) {
  geom::RigidTransform X;
  X.t = FromProto(pose.translation_mm());
  if (!X.t.allFinite()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": translation_mm is not finite"));
  }
  switch (pose.rotation_case()) {
    case v1::Pose::kQuaternion: {
      const v1::Quaternion& q = pose.quaternion();
      Eigen::Quaterniond quat(q.w(), q.x(), q.y(), q.z());
      if (!quat.coeffs().allFinite()) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(what), ": quaternion is not finite"));
      }
      const double norm = quat.norm();
      if (norm == 0.0) {  // (a message left empty, most likely by mistake)
        return absl::InvalidArgumentError(absl::StrCat(
            std::string(what), ": quaternion is zero (leave the rotation unset for the identity)"));
      }
      if (std::abs(norm - 1.0) > 1e-6) {
        return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": quaternion norm ",
                                                       absl::StrFormat("%.10g", norm),
                                                       " is not 1 (within 1e-6)"));
      }
      X.R = quat.normalized().toRotationMatrix();
      break;
    }
    case v1::Pose::kMatrix: {
      const auto& rows = pose.matrix().rows();
      if (rows.size() != 9) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(what), ": rotation matrix needs 9 values, got ", rows.size()));
      }
      for (int i = 0; i < 9; ++i) X.R(i / 3, i % 3) = rows[i];
      break;
    }
    case v1::Pose::ROTATION_NOT_SET:
      break;
  }
  if (!X.IsValid(rotation_tolerance)) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": rotation is not a finite proper rotation"));
  }
  return X;
}

void ToProto(const geom::RigidTransform& X, v1::Pose* out) {
  ToProto(X.t, out->mutable_translation_mm());
  Eigen::Quaterniond q(X.R);
  q.normalize();
  if (q.w() < 0) q.coeffs() *= -1.0;
  v1::Quaternion* pq = out->mutable_quaternion();
  pq->set_w(q.w());
  pq->set_x(q.x());
  pq->set_y(q.y());
  pq->set_z(q.z());
}

void ToProtoExact(const geom::RigidTransform& X, v1::Pose* out) {
  ToProto(X.t, out->mutable_translation_mm());
  v1::RotationMatrix* m = out->mutable_matrix();
  m->clear_rows();
  for (int i = 0; i < 9; ++i) m->add_rows(X.R(i / 3, i % 3));
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return {static_cast<grpc::StatusCode>(status.code()), std::string(status.message())};
}

grpc::Status StatusOfCurrentException(const char* method) {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED, "out of memory"};
  } catch (const std::exception& e) {
    LogLine(LogLevel::kError, absl::StrCat(method, ": unexpected exception: ", e.what()));
  } catch (...) {
    LogLine(LogLevel::kError, absl::StrCat(method, ": unexpected exception"));
  }
  return {grpc::StatusCode::INTERNAL, "internal error (logged)"};
}

}  // namespace clash::server
