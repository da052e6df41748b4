// The UploadMesh request of a raw test mesh, shared by the server's test files.
#pragma once

#include <cstdint>
#include <string>

#include "clash/v1/parts.pb.h"
#include "testing/random_geometry.h"

namespace clash::testing {

/// The upload of `m` named `name` (deflection 0: an exact mesh, unless given).
inline v1::UploadMeshRequest MeshUpload(const RawMesh& m, const std::string& name,
                                        double deflection = 0) {
  v1::UploadMeshRequest req;
  req.set_name(name);
  for (const geom::Vec3& v : m.v) {
    for (int k = 0; k < 3; ++k) req.add_vertices_mm(v[k]);
  }
  for (const auto& t : m.t) {
    for (uint32_t i : t) req.add_triangles(i);
  }
  req.set_deflection_mm(deflection);
  return req;
}

}  // namespace clash::testing
