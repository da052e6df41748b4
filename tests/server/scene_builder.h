// Scenes built in process for the query and sequence engine tests (no server).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "scene.h"
#include "testing/random_geometry.h"

namespace clash::server {

/// Adds an instance of a part made from `mesh` (part id "p" + path), placed at translation
/// `at`; returns its id.
inline uint64_t AddInstance(Scene& scene, const std::string& path,
                            const clash::testing::RawMesh& mesh, const geom::Vec3& at) {
  auto part = std::make_shared<PartEntry>();
  part->geom = mesh.Part();
  part->info.set_part_id("p" + path);
  InstanceRec rec;
  rec.id = scene.next_instance_id++;
  rec.part = std::move(part);
  rec.path = path;
  rec.name = path;
  rec.X_WP = geom::RigidTransform::Translation(at);
  const uint64_t id = rec.id;
  scene.Add(std::move(rec));
  return id;
}

}  // namespace clash::server
