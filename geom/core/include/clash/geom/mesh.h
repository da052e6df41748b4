// Validated triangle meshes.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "clash/geom/aabb.h"
#include "clash/geom/triangle.h"
#include "clash/geom/types.h"

namespace clash::geom {

/// Options for TriangleMesh::Create.
struct MeshOptions {
  /// Vertices closer than this are welded into one. Negative: `weld_relative` times the
  /// diagonal of the mesh bounds. 0: only bit-identical positions are welded.
  double weld_tolerance_mm = -1.0;
  /// Relative weld tolerance used when weld_tolerance_mm < 0. 1e-7 of the diagonal is far
  /// below any tessellation deflection and far above the rounding of coordinates.
  double weld_relative = 1e-7;
  /// Triangles with area at most this fraction of diagonal^2 are degenerate and dropped.
  /// (The diagonal, here and for the weld, is that of the vertices the triangles use.)
  double degenerate_relative_area = 1e-14;
  std::size_t max_vertices = 100'000'000;   ///< Input limit.
  std::size_t max_triangles = 100'000'000;  ///< Input limit.
};

/// What TriangleMesh::Create found and did.
struct MeshStats {
  std::size_t input_vertices = 0;        ///< Vertices given.
  std::size_t input_triangles = 0;       ///< Triangles given.
  std::size_t welded_vertices = 0;       ///< Vertices merged into another one.
  std::size_t unused_vertices = 0;       ///< Vertices referenced by no kept triangle (dropped).
  std::size_t degenerate_triangles = 0;  ///< Zero-area triangles dropped.
  std::size_t boundary_edges = 0;        ///< Edges used by one triangle.
  std::size_t nonmanifold_edges = 0;     ///< Edges used by more than two triangles.
  std::size_t misoriented_edges = 0;     ///< Two-triangle edges traversed the same way by both.
  /// Every edge is shared by exactly two triangles. Counted on the welded triangles with three
  /// distinct vertices, zero-area slivers included (they close T-junctions), or, when that
  /// count is not oriented, on the kept triangles alone (a stray sliver adds no surface).
  bool closed = false;
  bool oriented = false;  ///< Closed, and every edge is used once each way.
  /// Closed and oriented but inside out: every triangle's winding was reversed, so that
  /// normals face out of the material as the containment tests assume.
  bool turned_outward = false;
  /// Shells (TriangleMesh::shells) whose winding was reversed: a solid's shell faces out, a
  /// void's in (nesting by winding number; meshes of more than 64 shells are turned as a whole,
  /// by the sign of their volume).
  std::size_t shells_turned = 0;
};

/// A connected piece of a closed mesh's surface (triangles joined through shared edges): one of
/// the solids of a part made of several, or the shell of a void inside a solid. Solids that
/// touch at a vertex only are separate shells.
struct MeshShell {
  Aabb bounds;          ///< Bounds of its vertices.
  uint32_t vertex = 0;  ///< One of its vertices.
};

/// A triangle mesh in its own frame (millimetres), validated at creation: finite coordinates,
/// indices in range, degenerate triangles dropped, vertices welded. Every triangle carries a
/// tag (the B-rep face id for imported parts). Immutable once created; queries cannot fail.
class TriangleMesh {
 public:
  using Index3 = std::array<uint32_t, 3>;

  /// Validates and cleans the input. `tags` is empty (all 0) or one per triangle.
  /// Errors: INVALID_ARGUMENT for non-finite coordinates, indices out of range, mismatched tag
  /// count or no triangle left; RESOURCE_EXHAUSTED beyond the limits.
  [[nodiscard]] static absl::StatusOr<TriangleMesh> Create(std::vector<Vec3> vertices,
                                                           std::vector<Index3> triangles,
                                                           std::vector<uint32_t> tags = {},
                                                           const MeshOptions& options = {});
  /// Same, from flat arrays (3 doubles per vertex, 3 indices per triangle).
  [[nodiscard]] static absl::StatusOr<TriangleMesh> FromBuffers(std::span<const double> xyz,
                                                                std::span<const uint32_t> indices,
                                                                std::span<const uint32_t> tags,
                                                                const MeshOptions& options = {});

  /// Vertex positions.
  [[nodiscard]] const std::vector<Vec3>& vertices() const { return vertices_; }
  /// Vertex indices of each triangle.
  [[nodiscard]] const std::vector<Index3>& triangles() const { return triangles_; }
  /// One tag per triangle.
  [[nodiscard]] const std::vector<uint32_t>& tags() const { return tags_; }
  /// The index in the input of kept triangle i.
  [[nodiscard]] uint32_t SourceIndex(std::size_t i) const {
    return source_index_.empty() ? static_cast<uint32_t>(i) : source_index_[i];
  }
  /// Triangle indices in the order of the input (by increasing SourceIndex).
  [[nodiscard]] std::vector<uint32_t> InSourceOrder() const;
  /// Number of triangles.
  [[nodiscard]] std::size_t num_triangles() const { return triangles_.size(); }
  /// Triangle i with its vertex positions.
  [[nodiscard]] Triangle triangle(std::size_t i) const {
    const Index3& t = triangles_[i];
    return {vertices_[t[0]], vertices_[t[1]], vertices_[t[2]]};
  }
  /// Bounds of the vertices.
  [[nodiscard]] const Aabb& bounds() const { return bounds_; }
  /// What creation found.
  [[nodiscard]] const MeshStats& stats() const { return stats_; }
  /// True when the mesh is closed and consistently oriented (it bounds a solid).
  [[nodiscard]] bool IsClosed() const { return stats_.oriented; }
  /// The connected pieces of a closed mesh (one for most parts); empty for a mesh that is not
  /// closed.
  [[nodiscard]] const std::vector<MeshShell>& shells() const { return shells_; }
  /// Signed volume (positive for a closed mesh with outward normals).
  [[nodiscard]] double SignedVolume() const;
  /// Total surface area.
  [[nodiscard]] double Area() const;
  /// The same mesh with its triangles in another order: triangle i of the result is triangle
  /// order[i] of this one (`order` a permutation of the triangle indices), with its tag and
  /// source index; vertices are renumbered in order of first use (unused ones last), so that
  /// triangles near in `order` read vertices near in memory. Stats and bounds are unchanged.
  [[nodiscard]] TriangleMesh Reordered(std::span<const uint32_t> order) &&;
  /// Bytes held by the mesh arrays.
  [[nodiscard]] std::size_t MemoryBytes() const;

 private:
  std::vector<Vec3> vertices_;
  std::vector<Index3> triangles_;
  std::vector<uint32_t> tags_;
  std::vector<uint32_t> source_index_;  // empty when no triangle was dropped (identity)
  std::vector<MeshShell> shells_;
  Aabb bounds_;
  MeshStats stats_;
};

}  // namespace clash::geom
