#include "clash/geom/mesh.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "mesh_internal.h"

namespace clash::geom {
namespace {

// Hash of an integer grid cell.
struct CellHash {
  std::size_t operator()(const std::array<int64_t, 3>& c) const {
    uint64_t h = static_cast<uint64_t>(c[0]) * 0x9E3779B97F4A7C15ull;
    h ^= static_cast<uint64_t>(c[1]) * 0xC2B2AE3D27D4EB4Full + (h << 6) + (h >> 2);
    h ^= static_cast<uint64_t>(c[2]) * 0x165667B19E3779F9ull + (h << 6) + (h >> 2);
    return static_cast<std::size_t>(h);
  }
};

// The bits of a position (-0 as +0), equal exactly when the positions compare equal.
std::array<int64_t, 3> PositionKey(const Vec3& p) {
  std::array<int64_t, 3> key;
  for (int k = 0; k < 3; ++k) {
    const double x = p[k] == 0.0 ? 0.0 : p[k];
    std::memcpy(&key[k], &x, sizeof x);
  }
  return key;
}

}  // namespace

namespace internal {

WeldResult Weld(const std::vector<Vec3>& v, const Aabb& bounds, double tol) {
  WeldResult out;
  out.rep.resize(v.size());
  std::unordered_map<std::array<int64_t, 3>, std::vector<uint32_t>, CellHash> grid;
  grid.reserve(v.size());
  if (!(tol > 0.0)) {
    // Only identical positions merge: keyed by their bits, wherever they are.
    for (uint32_t i = 0; i < v.size(); ++i) {
      std::vector<uint32_t>& same = grid[PositionKey(v[i])];
      out.rep[i] = same.empty() ? i : same.front();
      if (same.empty()) {
        same.push_back(i);
      } else {
        ++out.merged;
      }
    }
    out.cells = grid.size();
    out.largest_cell = v.empty() ? 0 : 1;
    return out;
  }
  // Cells counted from the bounds' minimum corner, so that a vertex within tol of another is
  // in one of the 27 cells around it. Counted from the origin, cell numbers overflowed int64
  // far from it (undefined behaviour) and, with coordinates coarser than the cell, every vertex
  // fell into one cell (a quadratic weld). At most kMaxCells = 2^40 cells per axis keep each
  // offset / cell within 2^-12 of a cell of its exact value (2^-53 of a number below 2^40);
  // with up to 2^60, as first written, numbers beyond 2^53 were rounded to multiples of up to
  // 256 and two vertices within tol landed cells apart. Each v - min is rounded too, to the
  // spacing of doubles near the largest coordinate M: M * 2^-51 for two vertices at most
  // (exact when v and min are within a factor of two; otherwise the extent is of the order of
  // M, and with M / tol above 2^40 the cap sets the width, so this margin rarely binds). With
  // cell > (tol + M * 2^-51) * (1 + 2^-8), the cell numbers of two vertices within tol differ
  // by at most one, and none overflows.
  constexpr double kMaxCells = 0x1p40;
  const Aabb box = bounds.Inflated(tol);
  const double extent = box.IsEmpty() ? 0.0 : box.Size().maxCoeff();
  const double largest =
      box.IsEmpty() ? 0.0 : std::max(box.min.cwiseAbs().maxCoeff(), box.max.cwiseAbs().maxCoeff());
  const double cell = std::max((tol + largest * 0x1p-51) * (1 + 0x1p-8), extent / kMaxCells);
  const double tol2 = tol * tol;
  for (uint32_t i = 0; i < v.size(); ++i) {
    out.rep[i] = i;
    // Vertices outside the inflated bounds are farther than tol from every vertex inside
    // (unused ones, as in a shared buffer): they stay alone.
    if (!box.Contains(v[i])) continue;
    std::array<int64_t, 3> c;
    for (int k = 0; k < 3; ++k) {
      const double q = std::floor((v[i][k] - box.min[k]) / cell);  // NaN when cell is inf
      c[k] = q > 0.0 ? static_cast<int64_t>(std::min(q, kMaxCells)) : 0;
    }
    // An earlier representative within tol, the first one found (which one depends on the
    // cells' layout; whether there is one does not, so neither do the representatives).
    uint32_t found = i;
    for (int dx = -1; dx <= 1 && found == i; ++dx) {
      for (int dy = -1; dy <= 1 && found == i; ++dy) {
        for (int dz = -1; dz <= 1 && found == i; ++dz) {
          auto it = grid.find({c[0] + dx, c[1] + dy, c[2] + dz});
          if (it == grid.end()) continue;
          for (uint32_t r : it->second) {
            if ((v[r] - v[i]).squaredNorm() <= tol2) {
              found = r;
              break;
            }
          }
        }
      }
    }
    if (found != i) {
      out.rep[i] = found;
      ++out.merged;
    } else {
      std::vector<uint32_t>& in_cell = grid[c];
      in_cell.push_back(i);
      out.largest_cell = std::max(out.largest_cell, in_cell.size());
    }
  }
  out.cells = grid.size();
  return out;
}

}  // namespace internal

namespace {

// Meshes of more shells are turned as a whole (by the sign of their total volume), not shell by
// shell: the nesting test costs a pass over the triangles per shell that fits in another's box.
constexpr std::size_t kMaxOrientedShells = 64;

// Counts edge uses into `stats` (its edge counts, closed and oriented are set afresh):
// closedness and orientation. For an oriented mesh, also fills `parent` with a union-find
// forest over the triangles joining the two triangles of every edge, every node pointing
// straight at its root, the smallest index of its tree: the trees are the shells.
void AnalyseEdges(const std::vector<TriangleMesh::Index3>& tris, MeshStats* stats,
                  std::vector<uint32_t>* parent) {
  struct Use {
    uint32_t count = 0;
    int32_t balance = 0;       // +1 for each use lo->hi, -1 for hi->lo
    uint32_t tri[2] = {0, 0};  // the first two triangles using it
  };
  stats->boundary_edges = stats->nonmanifold_edges = stats->misoriented_edges = 0;
  parent->clear();
  std::unordered_map<uint64_t, Use> edges;
  edges.reserve(tris.size() * 2);
  for (uint32_t ti = 0; ti < tris.size(); ++ti) {
    const auto& t = tris[ti];
    for (int i = 0; i < 3; ++i) {
      uint32_t a = t[i], b = t[(i + 1) % 3];
      uint64_t key = a < b ? (uint64_t{a} << 32 | b) : (uint64_t{b} << 32 | a);
      Use& u = edges[key];
      if (u.count < 2) u.tri[u.count] = ti;
      ++u.count;
      u.balance += a < b ? 1 : -1;
    }
  }
  for (const auto& [key, u] : edges) {
    if (u.count == 1) ++stats->boundary_edges;
    if (u.count > 2) ++stats->nonmanifold_edges;
    if (u.count == 2 && u.balance != 0) ++stats->misoriented_edges;
  }
  stats->closed = !tris.empty() && stats->boundary_edges == 0 && stats->nonmanifold_edges == 0;
  stats->oriented = stats->closed && stats->misoriented_edges == 0;
  if (!stats->oriented) return;
  parent->resize(tris.size());
  std::iota(parent->begin(), parent->end(), 0u);
  auto root = [&](uint32_t x) {
    while ((*parent)[x] != x) x = (*parent)[x] = (*parent)[(*parent)[x]];  // path halving
    return x;
  };
  for (const auto& [key, u] : edges) {
    const uint32_t x = root(u.tri[0]), y = root(u.tri[1]);
    if (x != y) (*parent)[std::max(x, y)] = std::min(x, y);
  }
  // A parent's index is below its child's (unions and path halving only ever point to a
  // smaller index), so in increasing order the parent already points at its root.
  for (uint32_t t = 0; t < tris.size(); ++t) (*parent)[t] = (*parent)[(*parent)[t]];
}

// The shells of a closed mesh: its triangles grouped by `component` (one id per triangle, the
// edge-connected piece it belongs to), so solids that only touch at a vertex are separate
// shells. Ordered by their first triangle (first_tri); each shell's vertex is that triangle's
// first. tri_shell: the shell of each triangle.
std::vector<MeshShell> FindShells(const std::vector<Vec3>& vertices,
                                  const std::vector<TriangleMesh::Index3>& tris,
                                  const std::vector<uint32_t>& component,
                                  std::vector<uint32_t>* tri_shell,
                                  std::vector<uint32_t>* first_tri) {
  std::vector<MeshShell> shells;
  constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> shell_of(
      component.empty() ? 0 : *std::max_element(component.begin(), component.end()) + 1, kNone);
  tri_shell->resize(tris.size());
  for (uint32_t t = 0; t < tris.size(); ++t) {
    uint32_t& s = shell_of[component[t]];
    if (s == kNone) {
      s = static_cast<uint32_t>(shells.size());
      first_tri->push_back(t);
      shells.push_back({Aabb(), tris[t][0]});
    }
    (*tri_shell)[t] = s;
    for (uint32_t v : tris[t]) shells[s].bounds.Add(vertices[v]);
  }
  return shells;
}

// Orients every shell so that its triangles face out of the material: outward (a positive
// volume) when the shell lies inside an even number of the other shells (a solid, or a solid in
// another's void), inward when odd (the shell of a void). A solid given inside out beside
// others is turned alone, where turning the whole mesh by its total volume would leave it
// reversed (and the inside tests near it wrong). Nesting is read at the centroid of a shell's
// first triangle from the winding number of each other shell whose bounds hold it (shells do
// not cross, so one point decides). Returns how many shells were turned.
std::size_t OrientShells(const std::vector<Vec3>& v, std::vector<TriangleMesh::Index3>* tris,
                         const std::vector<MeshShell>& shells,
                         const std::vector<uint32_t>& tri_shell,
                         const std::vector<uint32_t>& first_tri) {
  const std::size_t n = shells.size();
  std::vector<double> six_volume(n, 0.0), winding(n, 0.0);
  for (std::size_t t = 0; t < tris->size(); ++t) {
    const auto& f = (*tris)[t];
    const Vec3 o = shells[tri_shell[t]].bounds.Center();  // well conditioned
    six_volume[tri_shell[t]] += (v[f[0]] - o).dot((v[f[1]] - o).cross(v[f[2]] - o));
  }
  std::vector<int> depth(n, 0);
  if (n > 1) {
    for (std::size_t s = 0; s < n; ++s) {
      const auto& f = (*tris)[first_tri[s]];
      const Vec3 p = (v[f[0]] + v[f[1]] + v[f[2]]) / 3.0;
      std::fill(winding.begin(), winding.end(), 0.0);
      bool any = false;
      for (std::size_t j = 0; j < n; ++j)
        any |= j != s && shells[j].bounds.Contains(shells[s].bounds);
      if (!any) continue;
      for (std::size_t t = 0; t < tris->size(); ++t) {
        const std::size_t j = tri_shell[t];
        if (j == s || !shells[j].bounds.Contains(shells[s].bounds)) continue;
        const auto& g = (*tris)[t];
        winding[j] += SolidAngle(v[g[0]] - p, v[g[1]] - p, v[g[2]] - p);
      }
      for (std::size_t j = 0; j < n; ++j)
        depth[s] += std::abs(winding[j]) > 2.0 * M_PI;  // |w| > 1/2
    }
  }
  std::vector<bool> turn(n);
  std::size_t turned = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const bool outward = depth[s] % 2 == 0;
    turn[s] = six_volume[s] != 0.0 && (six_volume[s] > 0.0) != outward;
    turned += turn[s];
  }
  if (turned == 0) return 0;
  for (std::size_t t = 0; t < tris->size(); ++t) {
    if (turn[tri_shell[t]]) std::swap((*tris)[t][1], (*tris)[t][2]);
  }
  return turned;
}

}  // namespace

absl::StatusOr<TriangleMesh> TriangleMesh::Create(std::vector<Vec3> vertices,
                                                  std::vector<Index3> triangles,
                                                  std::vector<uint32_t> tags,
                                                  const MeshOptions& options) {
  if (vertices.size() > options.max_vertices || triangles.size() > options.max_triangles) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "mesh has ", vertices.size(), " vertices and ", triangles.size(),
        " triangles; the limits are ", options.max_vertices, " and ", options.max_triangles));
  }
  if (vertices.size() >= std::numeric_limits<uint32_t>::max()) {
    return absl::ResourceExhaustedError("too many vertices for 32-bit indices");
  }
  if (!tags.empty() && tags.size() != triangles.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", tags.size(), " tags for ", triangles.size(), " triangles"));
  }
  if (tags.empty()) tags.assign(triangles.size(), 0);
  for (std::size_t i = 0; i < vertices.size(); ++i) {
    if (!vertices[i].allFinite()) {
      return absl::InvalidArgumentError(absl::StrCat("vertex ", i, " has a non-finite coordinate"));
    }
  }
  // The scale of the weld and of degenerate areas: the vertices the triangles use (a stray
  // unused vertex in a shared buffer must not weld the mesh together).
  Aabb bounds;
  for (std::size_t i = 0; i < triangles.size(); ++i) {
    for (uint32_t k : triangles[i]) {
      if (k >= vertices.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("triangle ", i, " references vertex ", k, " of ", vertices.size()));
      }
      bounds.Add(vertices[k]);
    }
  }
  const double diag = triangles.empty() ? 0.0 : bounds.Diagonal();
  const double tol =
      options.weld_tolerance_mm >= 0 ? options.weld_tolerance_mm : options.weld_relative * diag;
  if (!std::isfinite(tol)) return absl::InvalidArgumentError("weld tolerance is not finite");

  TriangleMesh m;
  m.stats_.input_vertices = vertices.size();
  m.stats_.input_triangles = triangles.size();
  internal::WeldResult weld = internal::Weld(vertices, bounds, tol);
  m.stats_.welded_vertices = weld.merged;
  const std::vector<uint32_t> rep = std::move(weld.rep);

  // Keep the non-degenerate triangles, then compact the vertices they use. The edge analysis
  // below sees every welded triangle with three distinct vertices, the zero-area ones among
  // them: tessellators close T-junctions with collinear slivers, and without them the edges
  // along the sliver are each used once (the mesh looked open, so its inside was never tested).
  const double min_cross =
      2.0 * options.degenerate_relative_area * diag * diag;  // bound on |cross| = 2 * area
  std::vector<uint32_t> new_index(vertices.size(), UINT32_MAX);
  std::vector<Index3> welded;          // input vertex numbers
  std::vector<uint32_t> welded_index;  // the index in `welded` of each kept triangle
  welded.reserve(triangles.size());
  welded_index.reserve(triangles.size());
  m.triangles_.reserve(triangles.size());
  m.tags_.reserve(triangles.size());
  m.source_index_.reserve(triangles.size());
  for (std::size_t i = 0; i < triangles.size(); ++i) {
    Index3 t = {rep[triangles[i][0]], rep[triangles[i][1]], rep[triangles[i][2]]};
    if (t[0] == t[1] || t[1] == t[2] || t[2] == t[0]) {
      ++m.stats_.degenerate_triangles;
      continue;
    }
    welded.push_back(t);
    if (!((vertices[t[1]] - vertices[t[0]]).cross(vertices[t[2]] - vertices[t[0]]).norm() >
          min_cross)) {
      ++m.stats_.degenerate_triangles;
      continue;
    }
    welded_index.push_back(static_cast<uint32_t>(welded.size() - 1));
    for (uint32_t& k : t) {
      if (new_index[k] == UINT32_MAX) {
        new_index[k] = static_cast<uint32_t>(m.vertices_.size());
        m.vertices_.push_back(vertices[k]);
      }
      k = new_index[k];
    }
    m.triangles_.push_back(t);
    m.tags_.push_back(tags[i]);
    m.source_index_.push_back(static_cast<uint32_t>(i));
  }
  if (m.triangles_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no triangle with a non-zero area among ", triangles.size()));
  }
  m.stats_.unused_vertices = vertices.size() - m.stats_.welded_vertices - m.vertices_.size();
  // Nothing dropped: the map back to the input is the identity and is not stored.
  if (m.triangles_.size() == triangles.size()) m.source_index_.clear();
  m.vertices_.shrink_to_fit();
  m.triangles_.shrink_to_fit();
  m.tags_.shrink_to_fit();
  m.source_index_.shrink_to_fit();
  for (const Vec3& p : m.vertices_) m.bounds_.Add(p);
  std::vector<uint32_t> shell_forest;
  AnalyseEdges(welded, &m.stats_, &shell_forest);
  if (!m.stats_.oriented && welded.size() > m.triangles_.size()) {
    // A stray sliver on an edge of a closed surface (its other edges used by nothing else)
    // opens the count although it adds no surface: the kept triangles alone decide then.
    MeshStats kept = m.stats_;
    std::vector<uint32_t> kept_forest;
    AnalyseEdges(m.triangles_, &kept, &kept_forest);
    if (kept.oriented) {
      m.stats_ = kept;
      shell_forest = std::move(kept_forest);
      std::iota(welded_index.begin(), welded_index.end(), 0u);
    }
  }
  welded = {};
  if (m.stats_.oriented) {
    // The shells hold the kept triangles, joined through the slivers too; a shell of slivers
    // alone has no surface and is none.
    std::vector<uint32_t> component(m.triangles_.size()), tri_shell, first_tri;
    for (std::size_t t = 0; t < component.size(); ++t) {
      component[t] = shell_forest[welded_index[t]];
    }
    m.shells_ = FindShells(m.vertices_, m.triangles_, component, &tri_shell, &first_tri);
    if (m.shells_.size() <= kMaxOrientedShells) {
      m.stats_.shells_turned =
          OrientShells(m.vertices_, &m.triangles_, m.shells_, tri_shell, first_tri);
      m.stats_.turned_outward = m.stats_.shells_turned == m.shells_.size();
    } else if (m.SignedVolume() < 0.0) {
      for (Index3& t : m.triangles_) std::swap(t[1], t[2]);
      m.stats_.turned_outward = true;
      m.stats_.shells_turned = m.shells_.size();
    }
  }
  return m;
}

absl::StatusOr<TriangleMesh> TriangleMesh::FromBuffers(std::span<const double> xyz,
                                                       std::span<const uint32_t> indices,
                                                       std::span<const uint32_t> tags,
                                                       const MeshOptions& options) {
  if (xyz.size() % 3 != 0) return absl::InvalidArgumentError("coordinate count is not 3n");
  if (indices.size() % 3 != 0) return absl::InvalidArgumentError("index count is not 3n");
  if (xyz.size() / 3 > options.max_vertices || indices.size() / 3 > options.max_triangles) {
    return absl::ResourceExhaustedError(absl::StrCat("mesh has ", xyz.size() / 3, " vertices and ",
                                                     indices.size() / 3,
                                                     " triangles; over the limits"));
  }
  std::vector<Vec3> v(xyz.size() / 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = {xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2]};
  std::vector<Index3> t(indices.size() / 3);
  for (std::size_t i = 0; i < t.size(); ++i) {
    t[i] = {indices[3 * i], indices[3 * i + 1], indices[3 * i + 2]};
  }
  return Create(std::move(v), std::move(t), std::vector<uint32_t>(tags.begin(), tags.end()),
                options);
}

double TriangleMesh::SignedVolume() const {
  // Divergence theorem about the bounds centre (keeps the sum well conditioned).
  const Vec3 o = bounds_.Center();
  double six_v = 0.0;
  for (const Index3& t : triangles_) {
    six_v += (vertices_[t[0]] - o).dot((vertices_[t[1]] - o).cross(vertices_[t[2]] - o));
  }
  return six_v / 6.0;
}

double TriangleMesh::Area() const {
  double a = 0.0;
  for (std::size_t i = 0; i < triangles_.size(); ++i) a += triangle(i).Area();
  return a;
}

TriangleMesh TriangleMesh::Reordered(std::span<const uint32_t> order) && {
  const std::size_t n = triangles_.size();
  assert(order.size() == n);
  constexpr uint32_t kUnset = std::numeric_limits<uint32_t>::max();
  TriangleMesh out;
  out.bounds_ = bounds_;
  out.stats_ = stats_;
  std::vector<uint32_t> renumber(vertices_.size(), kUnset);
  out.vertices_.reserve(vertices_.size());
  out.triangles_.resize(n);
  out.tags_.resize(n);
  out.source_index_.resize(n);
  bool identity = true;
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t from = order[i];
    assert(from < n);
    for (int k = 0; k < 3; ++k) {
      uint32_t& v = renumber[triangles_[from][k]];
      if (v == kUnset) {
        v = static_cast<uint32_t>(out.vertices_.size());
        out.vertices_.push_back(vertices_[triangles_[from][k]]);
      }
      out.triangles_[i][k] = v;
    }
    out.tags_[i] = tags_[from];
    out.source_index_[i] = SourceIndex(from);
    identity = identity && out.source_index_[i] == i;
  }
  for (std::size_t v = 0; v < vertices_.size(); ++v) {
    if (renumber[v] == kUnset) out.vertices_.push_back(vertices_[v]);
  }
  if (identity) out.source_index_ = {};
  // Every vertex of a created mesh is used, so each shell's vertex has its new number.
  out.shells_ = shells_;
  for (MeshShell& s : out.shells_) s.vertex = renumber[s.vertex];
  return out;
}

std::vector<uint32_t> TriangleMesh::InSourceOrder() const {
  std::vector<uint32_t> order(triangles_.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  if (!source_index_.empty()) {
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return source_index_[a] < source_index_[b]; });
  }
  return order;
}

std::size_t TriangleMesh::MemoryBytes() const {
  return vertices_.capacity() * sizeof(Vec3) + triangles_.capacity() * sizeof(Index3) +
         tags_.capacity() * sizeof(uint32_t) + source_index_.capacity() * sizeof(uint32_t) +
         shells_.capacity() * sizeof(MeshShell);
}

}  // namespace clash::geom
