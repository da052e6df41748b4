// A part: a validated mesh with its adaptive AABB/OBB hierarchy, in the part's own frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "clash/geom/adaptive_bv.h"
#include "clash/geom/bvh_build.h"
#include "clash/geom/mesh.h"
#include "clash/geom/ray_bvh.h"

namespace clash::geom {

/// Largest leaf a part's hierarchy may have (queries keep a leaf's triangles on the stack).
inline constexpr int kMaxLeafSize = 16;

/// Settings for building a part's hierarchy.
/// Most OBB nodes a hierarchy can refer to (BvhNode::meta holds slot + 1 in 24 bits).
inline constexpr std::size_t kMaxObbNodes = (std::size_t{1} << 24) - 1;

struct PartOptions {
  BvhBuildOptions bvh;   ///< Topology builder.
  AdaptiveBvOptions bv;  ///< Node volume choice.
  /// Leaves of the ray hierarchy: subtrees of at most this many triangles (1..16).
  int ray_leaf_size = 12;
  /// Most OBB nodes (at most kMaxObbNodes, what a node's slot field holds); further nodes
  /// take their AABB, which is as conservative, only looser.
  std::size_t max_obb_nodes = kMaxObbNodes;
};

/// A hierarchy node (56 bytes): a box centre and half extents in the part frame, and the
/// box's axes: the identity for an AABB node, rotations[obb_slot] for an OBB node.
/// Inner nodes have children `index` and `index + 1`; leaves hold the mesh triangles
/// index .. index + count - 1 (the part's mesh is stored in leaf order).
struct BvhNode {
  Vec3 center;     ///< Box centre (part frame).
  Vec3 half;       ///< Half extents along the box axes (inflated to stay conservative).
  uint32_t index;  ///< First child, or first primitive slot.
  uint32_t meta;   ///< Bits 0-7: primitive count (0 = inner); bits 8-31: OBB slot + 1 (0 = AABB).

  /// True for a leaf.
  [[nodiscard]] bool IsLeaf() const { return (meta & 0xffu) != 0; }
  /// Primitive count of a leaf.
  [[nodiscard]] uint32_t Count() const { return meta & 0xffu; }
  /// True for an oriented node.
  [[nodiscard]] bool IsObb() const { return (meta >> 8) != 0; }
  /// Index into Part::rotations() (only for an OBB node).
  [[nodiscard]] uint32_t ObbSlot() const { return (meta >> 8) - 1; }
};

/// What the hierarchy of a part looks like.
struct PartStats {
  std::size_t nodes = 0;           ///< All nodes.
  std::size_t leaves = 0;          ///< Leaf nodes.
  std::size_t aabb_nodes = 0;      ///< Nodes with an axis-aligned box.
  std::size_t obb_nodes = 0;       ///< Nodes with an oriented box.
  int depth = 0;                   ///< Hierarchy depth.
  double sah_cost = 0.0;           ///< Relative SAH cost of the topology.
  double aabb_volume_sum = 0.0;    ///< Sum over nodes of the tight AABB volume.
  double chosen_volume_sum = 0.0;  ///< Sum over nodes of the chosen box volume.
  std::size_t ray_nodes = 0;       ///< Nodes of the ray hierarchy (64 bytes each).
  std::size_t ray_leaves = 0;      ///< Leaves of the ray hierarchy.
  std::size_t memory_bytes = 0;    ///< Mesh + hierarchy + ray hierarchy bytes.
  /// Fraction of box volume saved by the OBB choices: 1 - chosen / all-AABB.
  [[nodiscard]] double VolumeSaved() const {
    return aabb_volume_sum > 0 ? 1.0 - chosen_volume_sum / aabb_volume_sum : 0.0;
  }
};

/// An immutable part: mesh + hierarchy, safe to share across threads and instances.
class Part {
 public:
  /// Builds the hierarchy of a validated mesh.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const Part>> Create(
      TriangleMesh mesh, const PartOptions& options = {});

  /// The mesh.
  [[nodiscard]] const TriangleMesh& mesh() const { return mesh_; }
  /// The nodes; nodes()[0] is the root.
  [[nodiscard]] const std::vector<BvhNode>& nodes() const { return nodes_; }
  /// The axes of an OBB node, stored as a single-precision quaternion (w, x, y, z), not
  /// necessarily of unit norm.
  using NodeRotation = Eigen::Vector4f;
  /// The rotations of the OBB nodes, by slot; node extents are fitted to exactly the axes
  /// AxesOf gives.
  [[nodiscard]] const std::vector<NodeRotation>& rotations() const { return rotations_; }
  /// The rotation matrix of a non-zero q (its columns a box's axes), orthonormal to double
  /// rounding whatever q's norm: the box tests assume orthonormal axes (a matrix of
  /// single-precision entries is orthonormal only to ~1e-7, which made the separating-axis test of
  /// near-parallel OBB nodes answer "apart" for boxes that overlap).
  [[nodiscard]] static Mat3 AxesOf(const NodeRotation& q) {
    const double w = q[0], x = q[1], y = q[2], z = q[3];
    const double s = 2.0 / (w * w + x * x + y * y + z * z);
    Mat3 R;
    R << 1.0 - s * (y * y + z * z), s * (x * y - w * z), s * (x * z + w * y),  //
        s * (x * y + w * z), 1.0 - s * (x * x + z * z), s * (y * z - w * x),   //
        s * (x * z - w * y), s * (y * z + w * x), 1.0 - s * (x * x + y * y);
    return R;
  }
  /// Box axes of a node (identity for AABB nodes).
  [[nodiscard]] Mat3 NodeAxes(const BvhNode& n) const {
    return n.IsObb() ? AxesOf(rotations_[n.ObbSlot()]) : Mat3::Identity();
  }
  /// The box of a node as an Obb.
  [[nodiscard]] Obb NodeBox(const BvhNode& n) const { return {n.center, NodeAxes(n), n.half}; }
  /// The 4-wide single-precision hierarchy that CastRay and RayHitsAny walk.
  [[nodiscard]] const RayBvh& ray_bvh() const { return ray_bvh_; }
  /// Hierarchy statistics.
  [[nodiscard]] const PartStats& stats() const { return stats_; }
  /// Bounds of the part in its frame.
  [[nodiscard]] const Aabb& bounds() const { return mesh_.bounds(); }
  /// A vertex guaranteed to be on the mesh (for containment tests).
  [[nodiscard]] const Vec3& AnyVertex() const { return mesh_.vertices()[mesh_.triangles()[0][0]]; }
  /// Per triangle, bit c set when corner c is its vertex's first use: every vertex has exactly
  /// one, on the smallest triangle id that uses it (the mesh numbers vertices by first use).
  /// A walk over leaves that looks only at these corners meets each vertex once, in the leaf
  /// whose box is sure to hold it.
  [[nodiscard]] const std::vector<uint8_t>& first_uses() const { return first_uses_; }

 private:
  TriangleMesh mesh_;
  std::vector<BvhNode> nodes_;
  std::vector<NodeRotation> rotations_;
  std::vector<uint8_t> first_uses_;
  RayBvh ray_bvh_;
  PartStats stats_;
};

}  // namespace clash::geom
