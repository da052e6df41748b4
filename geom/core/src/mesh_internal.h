// The vertex weld of TriangleMesh::Create: internal to geom/core (and its tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "clash/geom/aabb.h"
#include "clash/geom/types.h"

namespace clash::geom::internal {

// What Weld found.
struct WeldResult {
  std::vector<uint32_t> rep;     // per vertex: its representative (itself when kept)
  std::size_t merged = 0;        // vertices merged into another
  std::size_t cells = 0;         // grid cells holding a representative
  std::size_t largest_cell = 0;  // most representatives in one cell
};

// Maps each vertex to a representative: a representative before it in input order within
// `tol` of it (the first found on a hash grid of cells of side > tol counted from
// `bounds.min`), itself when there is none; so the representatives are the vertices with no
// representative before them within tol, whatever the grid. Vertices outside `bounds`
// inflated by tol stay alone. With tol == 0 only identical positions merge (anywhere), each
// into the first of its position.
[[nodiscard]] WeldResult Weld(const std::vector<Vec3>& v, const Aabb& bounds, double tol);

}  // namespace clash::geom::internal
