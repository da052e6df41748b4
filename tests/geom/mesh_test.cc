#include "clash/geom/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mesh_internal.h"
#include "testing/random_geometry.h"
#include "testing/status_matchers.h"

namespace clash::geom {
namespace {

using testing::IsOk;
using testing::MakeBox;
using testing::MakeBoxWithSliver;
using testing::MakeCylinder;
using testing::MakeSubdividedBox;
using testing::RawMesh;
using testing::StatusIs;
using testing::Trials;
using testing::Uniform;

TEST(TriangleMesh, ClosedBoxHasVolumeAndArea) {
  TriangleMesh m = MakeBox(Vec3(1, 2, 3)).Build();
  EXPECT_EQ(m.num_triangles(), 12u);
  EXPECT_TRUE(m.IsClosed());
  EXPECT_TRUE(m.stats().oriented);
  EXPECT_NEAR(m.SignedVolume(), 48.0, 1e-12);
  EXPECT_NEAR(m.Area(), 2 * (2 * 4 + 4 * 6 + 6 * 2), 1e-12);
  EXPECT_EQ(m.bounds().min, Vec3(-1, -2, -3));
}

TEST(TriangleMesh, RejectsBadInputWithClearErrors) {
  auto box = MakeBox(Vec3(1, 1, 1));
  auto bad = box;
  bad.v[3].y() = std::nan("");
  EXPECT_THAT(TriangleMesh::Create(bad.v, bad.t),
              StatusIs(absl::StatusCode::kInvalidArgument, "vertex 3"));
  bad = box;
  bad.v[0].x() = INFINITY;
  EXPECT_THAT(TriangleMesh::Create(bad.v, bad.t),
              StatusIs(absl::StatusCode::kInvalidArgument, "non-finite"));
  bad = box;
  bad.t[5][1] = 8;
  EXPECT_THAT(TriangleMesh::Create(bad.v, bad.t),
              StatusIs(absl::StatusCode::kInvalidArgument, "triangle 5 references vertex 8"));
  EXPECT_THAT(TriangleMesh::Create(box.v, box.t, {1, 2, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument, "3 tags for 12 triangles"));
  EXPECT_THAT(TriangleMesh::Create(box.v, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "no triangle"));
  MeshOptions small;
  small.max_triangles = 10;
  EXPECT_THAT(TriangleMesh::Create(box.v, box.t, {}, small),
              StatusIs(absl::StatusCode::kResourceExhausted, "limits"));
  std::vector<double> xyz = {0, 0, 0, 1, 0, 0, 0, 1};
  std::vector<uint32_t> idx = {0, 1, 2};
  EXPECT_THAT(TriangleMesh::FromBuffers(xyz, idx, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "3n"));
  xyz.push_back(0);
  EXPECT_THAT(TriangleMesh::FromBuffers(xyz, idx, {}), IsOk());
}

TEST(TriangleMesh, DropsDegenerateTrianglesAndKeepsTags) {
  auto box = MakeBox(Vec3(1, 1, 1));
  std::vector<uint32_t> tags(12);
  for (uint32_t i = 0; i < 12; ++i) tags[i] = 100 + i;
  box.t.insert(box.t.begin() + 3, {0, 0, 1});  // repeated index
  tags.insert(tags.begin() + 3, 999);
  box.v.push_back(Vec3(0.5, -1, -1));  // collinear with vertices 0 and 1
  box.t.push_back({0, 1, 8});
  tags.push_back(998);
  auto m = TriangleMesh::Create(box.v, box.t, tags);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->stats().degenerate_triangles, 2u);
  EXPECT_EQ(m->num_triangles(), 12u);
  EXPECT_EQ(m->stats().unused_vertices, 1u);
  EXPECT_EQ(m->vertices().size(), 8u);
  for (std::size_t i = 0; i < 12; ++i) EXPECT_LT(m->tags()[i], 998u);
  EXPECT_EQ(m->tags()[3], 103u);
  EXPECT_EQ(m->SourceIndex(3), 4u);
  EXPECT_EQ(MakeBox(Vec3(1, 1, 1)).Build().SourceIndex(7), 7u);  // nothing dropped: identity
  EXPECT_TRUE(m->IsClosed());
}

// Reordering permutes triangles with their tags and source indices, renumbers vertices by
// first use (unused ones last) and changes neither the geometry nor the stats.
TEST(TriangleMesh, ReorderedKeepsEveryTriangleWithItsTagAndSource) {
  auto rng = testing::SeededRng(31);
  auto cyl = MakeCylinder(2, 5, 24);
  std::vector<uint32_t> tags(cyl.t.size());
  for (uint32_t i = 0; i < tags.size(); ++i) tags[i] = 1000 + i;
  cyl.t.insert(cyl.t.begin() + 5, {3, 3, 4});  // dropped: source indices are not the identity
  tags.insert(tags.begin() + 5, 7);
  cyl.v.push_back(Vec3(9, 9, 9));  // unused: dropped at creation, counted in the stats
  auto made = TriangleMesh::Create(cyl.v, cyl.t, tags);
  ASSERT_THAT(made, IsOk());
  const TriangleMesh m = *made;
  std::vector<uint32_t> order(m.num_triangles());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const TriangleMesh r = TriangleMesh(m).Reordered(order);
  ASSERT_EQ(r.num_triangles(), m.num_triangles());
  EXPECT_EQ(r.vertices().size(), m.vertices().size());
  EXPECT_EQ(r.stats().unused_vertices, m.stats().unused_vertices);
  EXPECT_EQ(r.IsClosed(), m.IsClosed());
  EXPECT_EQ(r.bounds().min, m.bounds().min);
  EXPECT_EQ(r.bounds().max, m.bounds().max);
  EXPECT_NEAR(r.SignedVolume(), m.SignedVolume(), 1e-12 * std::abs(m.SignedVolume()));
  uint32_t next_new_vertex = 0;
  for (uint32_t i = 0; i < r.num_triangles(); ++i) {
    const Triangle a = r.triangle(i), b = m.triangle(order[i]);
    EXPECT_EQ(a.a, b.a);
    EXPECT_EQ(a.b, b.b);
    EXPECT_EQ(a.c, b.c);
    EXPECT_EQ(r.tags()[i], m.tags()[order[i]]);
    EXPECT_EQ(r.SourceIndex(i), m.SourceIndex(order[i]));
    for (uint32_t v : r.triangles()[i]) {  // first uses come in order
      ASSERT_LE(v, next_new_vertex);
      if (v == next_new_vertex) ++next_new_vertex;
    }
  }
  EXPECT_EQ(next_new_vertex, r.vertices().size());  // (creation dropped the unused vertex)
  // InSourceOrder undoes the permutation.
  const std::vector<uint32_t> back = r.InSourceOrder();
  ASSERT_EQ(back.size(), r.num_triangles());
  for (uint32_t i = 0; i < back.size(); ++i) {
    EXPECT_EQ(r.SourceIndex(back[i]), m.SourceIndex(i));
    EXPECT_EQ(r.tags()[back[i]], m.tags()[i]);
  }
  // The identity order gives back the mesh, source indices included.
  const TriangleMesh same =
      MakeBox(Vec3(1, 2, 3))
          .Build()
          .Reordered(std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  EXPECT_EQ(same.triangles(), MakeBox(Vec3(1, 2, 3)).Build().triangles());
  EXPECT_EQ(same.SourceIndex(11), 11u);
}

// A closed mesh of two solids (one product holding two bodies) has two shells, each with its
// bounds and one of its vertices; reordering keeps them; an open mesh has none.
TEST(TriangleMesh, FindsTheShellsOfAClosedMesh) {
  const TriangleMesh one = MakeBox(Vec3(1, 2, 3)).Build();
  ASSERT_EQ(one.shells().size(), 1u);
  EXPECT_EQ(one.shells()[0].bounds.min, one.bounds().min);
  EXPECT_EQ(one.shells()[0].bounds.max, one.bounds().max);

  const TriangleMesh two = MakeCylinder(2, 4, 16)
                               .Transformed(RigidTransform::Translation(Vec3(20, 0, 0)))
                               .Plus(MakeBox(Vec3(1, 1, 1)))
                               .Build();
  ASSERT_TRUE(two.IsClosed());
  auto check = [](const TriangleMesh& m) {
    ASSERT_EQ(m.shells().size(), 2u);
    std::vector<MeshShell> s = m.shells();
    std::sort(s.begin(), s.end(), [](const MeshShell& x, const MeshShell& y) {
      return x.bounds.min.x() < y.bounds.min.x();
    });
    EXPECT_EQ(s[0].bounds.min, Vec3(-1, -1, -1));
    EXPECT_EQ(s[0].bounds.max, Vec3(1, 1, 1));
    EXPECT_NEAR(s[1].bounds.min.x(), 18, 1e-12);
    EXPECT_NEAR(s[1].bounds.max.z(), 2, 1e-12);
    for (const MeshShell& shell : s) {
      EXPECT_TRUE(shell.bounds.Contains(m.vertices()[shell.vertex]));
    }
  };
  check(two);
  std::vector<uint32_t> order(two.num_triangles());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), testing::SeededRng(5));
  check(TriangleMesh(two).Reordered(order));

  // Two cubes touching at one corner (welded into one vertex; every edge still has two
  // triangles): two shells, each with its own bounds.
  const TriangleMesh corner =
      MakeBox(Vec3(1, 1, 1)).Plus(MakeBox(Vec3(1, 1, 1), Vec3(2, 2, 2))).Build();
  ASSERT_TRUE(corner.IsClosed());
  EXPECT_LT(corner.vertices().size(), 16u);  // the corner is shared
  ASSERT_EQ(corner.shells().size(), 2u);
  for (const MeshShell& s : corner.shells()) {
    EXPECT_NEAR((s.bounds.max - s.bounds.min).maxCoeff(), 2.0, 1e-12);
  }

  auto open = MakeBox(Vec3(1, 1, 1));
  open.t.pop_back();
  EXPECT_TRUE(open.Build().shells().empty());
}

// Tessellators close T-junctions with zero-area slivers: the sliver is dropped from the
// geometry, but its edges count. Dropping it before the edge count left the split edge's three
// pieces used once each, so a watertight box was open (and a part inside it was CLEAR).
TEST(TriangleMesh, SliverClosingATJunctionKeepsTheMeshClosed) {
  const RawMesh raw = MakeBoxWithSliver(Vec3(10, 10, 10));
  const TriangleMesh m = raw.Build();
  EXPECT_EQ(m.stats().degenerate_triangles, 1u);
  EXPECT_EQ(m.num_triangles(), raw.t.size() - 1);
  EXPECT_EQ(m.vertices().size(), 9u);
  EXPECT_EQ(m.stats().boundary_edges, 0u);
  EXPECT_TRUE(m.stats().closed);
  EXPECT_TRUE(m.IsClosed());
  ASSERT_EQ(m.shells().size(), 1u);
  EXPECT_EQ(m.shells()[0].bounds.min, Vec3(-10, -10, -10));
  EXPECT_EQ(m.shells()[0].bounds.max, Vec3(10, 10, 10));
  EXPECT_NEAR(m.SignedVolume(), 8000, 1e-9);
  // Given inside out (the sliver too), it is turned as a whole.
  const TriangleMesh turned = raw.Reversed().Build();
  EXPECT_TRUE(turned.IsClosed());
  EXPECT_TRUE(turned.stats().turned_outward);
  EXPECT_NEAR(turned.SignedVolume(), 8000, 1e-9);

  // A flat closed "shell" of slivers alone ({a, b, c} and {a, c, b}, collinear) has no surface:
  // it neither opens the mesh nor becomes a shell.
  RawMesh flat = raw;
  const uint32_t a = static_cast<uint32_t>(flat.v.size());
  flat.v.insert(flat.v.end(), {Vec3(30, 0, 0), Vec3(31, 0, 0), Vec3(33, 0, 0)});
  flat.t.push_back({a, a + 1, a + 2});
  flat.t.push_back({a, a + 2, a + 1});
  const TriangleMesh with_flat = flat.Build();
  EXPECT_TRUE(with_flat.IsClosed());
  EXPECT_EQ(with_flat.shells().size(), 1u);
  EXPECT_EQ(with_flat.stats().degenerate_triangles, 3u);
  EXPECT_EQ(with_flat.stats().unused_vertices, 3u);

  // Holes stay holes: without the triangle across the split edge (the sliver's only partner
  // on edge 0-1), or without the sliver (the T-junction is a gap), the mesh is open.
  RawMesh hole = raw;
  hole.t.erase(std::find(hole.t.begin(), hole.t.end(), TriangleMesh::Index3{0, 1, 4}));
  const TriangleMesh holed = hole.Build();
  EXPECT_FALSE(holed.stats().closed);
  EXPECT_FALSE(holed.IsClosed());
  EXPECT_GT(holed.stats().boundary_edges, 0u);
  EXPECT_TRUE(holed.shells().empty());
  RawMesh gap = raw;
  gap.t.pop_back();
  EXPECT_FALSE(gap.Build().IsClosed());
  EXPECT_EQ(gap.Build().stats().boundary_edges, 3u);
}

// The weld and the degenerate-area threshold scale with the vertices the triangles use: a
// stray unused vertex far away in a shared buffer once welded neighbours together (and at 1e6
// dropped every triangle as degenerate).
TEST(TriangleMesh, UnusedVerticesDoNotScaleTheWeld) {
  for (double far : {3e5, 1e6}) {
    auto box = MakeSubdividedBox(Vec3(1, 1, 1), 100);  // grid step 0.02
    const auto welded_alone = box.Build().stats().welded_vertices;
    box.v.push_back(Vec3(far, 0, 0));
    auto m = TriangleMesh::Create(box.v, box.t);
    ASSERT_THAT(m, IsOk()) << far;
    EXPECT_EQ(m->stats().welded_vertices, welded_alone) << far;
    EXPECT_EQ(m->stats().degenerate_triangles, 0u) << far;
    EXPECT_EQ(m->stats().unused_vertices, 1u) << far;
    EXPECT_EQ(m->num_triangles(), box.t.size()) << far;
    EXPECT_TRUE(m->IsClosed()) << far;
  }
}

// Checks Weld against the brute-force definition: the representatives are the vertices with no
// representative before them within tol, and every other vertex maps to one of those before it
// within tol. Returns the vertices merged.
std::size_t ExpectWeldAsBruteForce(const std::vector<Vec3>& v, const Aabb& bounds, double tol) {
  const internal::WeldResult got = internal::Weld(v, bounds, tol);
  std::vector<uint32_t> reps;
  std::vector<bool> is_rep(v.size(), false);
  for (uint32_t j = 0; j < v.size(); ++j) {
    const bool near = std::any_of(reps.begin(), reps.end(), [&](uint32_t r) {
      return (v[r] - v[j]).squaredNorm() <= tol * tol;
    });
    if (!near) {
      reps.push_back(j);
      is_rep[j] = true;
    }
  }
  EXPECT_EQ(got.rep.size(), v.size());
  for (uint32_t j = 0; j < v.size() && j < got.rep.size(); ++j) {
    const uint32_t r = got.rep[j];
    if (is_rep[j]) {
      EXPECT_EQ(r, j) << "vertex " << j << " has no representative before it within tol";
    } else {
      EXPECT_TRUE(r < j && is_rep[r] && (v[r] - v[j]).squaredNorm() <= tol * tol)
          << "vertex " << j << " mapped to " << r;
    }
  }
  EXPECT_EQ(got.merged, v.size() - reps.size());
  return got.merged;
}

// The weld against the brute-force definition (ExpectWeldAsBruteForce). Clusters of points a
// fraction of the tolerance apart, near the origin, far from it, and with a tolerance so small
// against the extent (1e-13 of it) that the grid is coarsened (more than 2^40 tolerances
// across), yet the points of a cluster stay distinct doubles.
TEST(Weld, AgreesWithBruteForce) {
  auto rng = testing::SeededRng(4242);
  const int trials = Trials(60, 8);
  int merging = 0;
  for (int i = 0; i < trials; ++i) {
    const double extent = std::pow(10.0, Uniform(rng, -2, 4));
    const Vec3 offset = i % 3 == 1 ? testing::RandomPoint(rng, 1e14) : Vec3::Zero();
    const double tol = i % 3 == 2 ? extent * 1e-13 : extent * Uniform(rng, 1e-3, 3e-2);
    std::vector<Vec3> v;
    const int clusters = 1 + static_cast<int>(rng() % 40);
    for (int c = 0; c < clusters; ++c) {
      const Vec3 centre = testing::RandomPoint(rng, extent);
      for (int k = 1 + static_cast<int>(rng() % 6); k > 0; --k) {
        v.push_back(offset + centre + testing::RandomPoint(rng, tol));
      }
    }
    Aabb bounds;
    for (const Vec3& p : v) bounds.Add(p);
    SCOPED_TRACE(::testing::Message() << "trial " << i << " tol " << tol);
    const std::size_t merged = ExpectWeldAsBruteForce(v, bounds, tol);
    merging += merged > 0;
  }
  // Clusters within 2 tol mostly weld something: the comparison is not vacuous.
  EXPECT_GT(merging, trials / 2);
}

// Bounds reaching far to one side of the vertices: each v - min is rounded to the spacing of
// doubles near the far corner (here 2^-33, about 1.2e-10 mm, at 1e6), coarser than the
// tolerance, and offsets divided by the tolerance are cell numbers beyond 2^53, rounded in
// turn. Pairs 0.4 tol apart placed across rounding boundaries then landed cells apart with
// cells of side tol, never compared (a review found pairs unwelded at span 1e6, tol 1e-10).
TEST(Weld, RoundingOfOffsetsFromAFarCornerKeepsNeighboursInNeighbouringCells) {
  for (const double tol : {1e-11, 2e-11, 1e-10}) {
    SCOPED_TRACE(::testing::Message() << "tol " << tol);
    const double span = 1e6;
    const double ulp = std::nextafter(span, 2 * span) - span;
    std::vector<Vec3> v = {Vec3(-span, -span, -span), Vec3(span, span, span)};
    for (int k = 0; k < 200; ++k) {  // across the rounding boundary between two offsets
      const double x = k * 7 * ulp + 0.5 * ulp - 0.2 * tol;
      v.emplace_back(x, 0, 0);
      v.emplace_back(x + 0.4 * tol, 0, 0);
    }
    Aabb bounds;
    for (const Vec3& p : v) bounds.Add(p);
    EXPECT_EQ(ExpectWeldAsBruteForce(v, bounds, tol), 200u);
  }
}

// Far from the origin a mesh welds as at the origin. Cell numbers counted from the origin
// overflowed int64 there (undefined behaviour; x86 gave every vertex the same cell, and a
// 39k-vertex box took 1.1 s to weld instead of 0.04 s): cells count from the bounds' corner.
TEST(Weld, FarFromTheOriginWeldsAsAtTheOrigin) {
  const RawMesh box = MakeSubdividedBox(Vec3(5, 5, 5), 40);  // grid step 0.25: exact at 1e14
  const TriangleMesh at_origin = box.Build();
  for (const Vec3& offset : {Vec3(1e14, 1e14, 1e14), Vec3(-3e13, 1e14, 7e12)}) {
    SCOPED_TRACE(::testing::Message() << offset.transpose());
    const RawMesh far = box.Transformed(RigidTransform::Translation(offset));
    const TriangleMesh m = far.Build();
    EXPECT_TRUE(m.IsClosed());
    EXPECT_EQ(m.stats().welded_vertices, at_origin.stats().welded_vertices);
    EXPECT_EQ(m.vertices().size(), at_origin.vertices().size());
    EXPECT_EQ(m.shells().size(), 1u);
    // Every representative in a cell of its own (they are 0.25 apart; the cells, wider than
    // tol by the rounding of offsets near 1e14, about 0.05).
    Aabb bounds;
    for (const Vec3& p : far.v) bounds.Add(p);
    const double tol = MeshOptions().weld_relative * bounds.Diagonal();
    const internal::WeldResult w = internal::Weld(far.v, bounds, tol);
    EXPECT_EQ(w.merged, at_origin.stats().welded_vertices);
    EXPECT_EQ(w.largest_cell, 1u);
    EXPECT_EQ(w.cells, at_origin.vertices().size());
  }
  // With tolerance 0 (identical positions only) as well, beyond 2^63 unit cells.
  MeshOptions exact;
  exact.weld_tolerance_mm = 0.0;
  const RawMesh big = MakeSubdividedBox(Vec3(5e20, 5e20, 5e20), 40);
  const TriangleMesh huge =
      big.Transformed(RigidTransform::Translation(Vec3(1e30, 0, -1e30))).Build(exact);
  EXPECT_EQ(huge.stats().welded_vertices, big.Build(exact).stats().welded_vertices);
  EXPECT_TRUE(huge.IsClosed());
}

// Faces tessellated separately (duplicated seam vertices) become one closed solid.
TEST(TriangleMesh, WeldsSeamsIntoAClosedSolid) {
  auto box = MakeSubdividedBox(Vec3(10, 5, 2), 4);
  auto m = box.Build();
  EXPECT_TRUE(m.IsClosed());
  EXPECT_GT(m.stats().welded_vertices, 0u);
  EXPECT_EQ(m.vertices().size(), 6u * 4 * 4 + 2);  // V = E - F + 2 for the quad grid
  EXPECT_NEAR(m.SignedVolume(), 20 * 10 * 4, 1e-9);
  // Seams that are off by less than the tolerance weld; farther ones do not.
  auto shaken = box;
  for (std::size_t i = 0; i < shaken.v.size(); ++i)
    shaken.v[i] += Vec3(1e-9, -1e-9, 0) * double(i % 3);
  EXPECT_TRUE(shaken.Build().IsClosed());
  MeshOptions exact;
  exact.weld_tolerance_mm = 0.0;
  EXPECT_FALSE(shaken.Build(exact).IsClosed());
}

TEST(TriangleMesh, ReportsOpenNonManifoldAndMisorientedEdges) {
  auto box = MakeBox(Vec3(1, 1, 1));
  auto open = box;
  open.t.pop_back();
  TriangleMesh m = open.Build();
  EXPECT_FALSE(m.IsClosed());
  EXPECT_EQ(m.stats().boundary_edges, 3u);
  auto flipped = box;
  std::swap(flipped.t[0][1], flipped.t[0][2]);
  m = flipped.Build();
  EXPECT_TRUE(m.stats().closed);
  EXPECT_FALSE(m.stats().oriented);
  EXPECT_EQ(m.stats().misoriented_edges, 3u);
  auto fin = box;
  fin.v.push_back(Vec3(0, 0, 5));
  fin.t.push_back({0, 1, 8});  // a fin on an existing edge
  m = fin.Build();
  EXPECT_EQ(m.stats().nonmanifold_edges, 1u);
  EXPECT_FALSE(m.IsClosed());
}

TEST(TriangleMesh, InsideOutClosedMeshIsTurnedOutward) {
  const auto box = MakeBox(Vec3(1, 2, 3));
  TriangleMesh m = box.Build();
  EXPECT_FALSE(m.stats().turned_outward);
  EXPECT_NEAR(m.SignedVolume(), 48.0, 1e-12);
  auto inside_out = box;
  for (auto& t : inside_out.t) std::swap(t[1], t[2]);
  m = inside_out.Build();
  EXPECT_TRUE(m.IsClosed());
  EXPECT_TRUE(m.stats().turned_outward);
  EXPECT_NEAR(m.SignedVolume(), 48.0, 1e-12);
  // The same triangles (ids and tags) as given, each with its winding reversed.
  ASSERT_EQ(m.triangles().size(), inside_out.t.size());
  EXPECT_EQ(m.triangle(0).RawNormal().normalized(),
            box.Build().triangle(0).RawNormal().normalized());
  // Open meshes keep their winding: inside and outside mean nothing there.
  auto open = inside_out;
  open.t.pop_back();
  EXPECT_FALSE(open.Build().stats().turned_outward);
}

// Each shell is turned on its own: a solid's faces out, a void's in (by how many other shells
// hold it). Turning the whole mesh by its total volume left a small solid given inside out
// beside a big one reversed.
TEST(TriangleMesh, EachShellIsTurnedToFaceOutOfTheMaterial) {
  struct Case {
    const char* name;
    RawMesh raw;
    std::size_t turned;
    double volume;
  };
  const RawMesh big = MakeBox(Vec3(5, 5, 5)), small = MakeBox(Vec3(1, 1, 1), Vec3(20, 0, 0));
  const RawMesh cavity = MakeBox(Vec3(3, 3, 3)), core = MakeBox(Vec3(1, 1, 1));
  const std::vector<Case> cases = {
      {"two solids", big.Plus(small), 0, 1000 + 8},
      {"a solid inside out beside one outward", big.Plus(small.Reversed()), 1, 1000 + 8},
      {"a hollow block, its void facing in", big.Plus(cavity.Reversed()), 0, 1000 - 216},
      {"a hollow block, its void facing out", big.Plus(cavity), 1, 1000 - 216},
      {"a hollow block inside out", big.Reversed().Plus(cavity), 2, 1000 - 216},
      {"a core in a void", big.Plus(cavity.Reversed()).Plus(core), 0, 1000 - 216 + 8},
      {"a core in a void, all outward", big.Plus(cavity).Plus(core), 1, 1000 - 216 + 8},
      {"a core in a void, all inward", big.Reversed().Plus(cavity.Reversed()).Plus(core.Reversed()),
       2, 1000 - 216 + 8},
  };
  for (const Case& c : cases) {
    const TriangleMesh m = c.raw.Build();
    ASSERT_TRUE(m.IsClosed()) << c.name;
    EXPECT_EQ(m.stats().shells_turned, c.turned) << c.name;
    EXPECT_EQ(m.stats().turned_outward, c.turned == m.shells().size()) << c.name;
    EXPECT_NEAR(m.SignedVolume(), c.volume, 1e-9) << c.name;
  }
}

TEST(TriangleMesh, CylinderVolumeConverges) {
  TriangleMesh m = MakeCylinder(5, 20, 256).Build();
  EXPECT_TRUE(m.IsClosed());
  // An inscribed 256-gon has area (n/2) r^2 sin(2 pi / n): 0.01% below pi r^2.
  const double expected = 0.5 * 256 * 25 * std::sin(2 * M_PI / 256) * 20;
  EXPECT_NEAR(m.SignedVolume(), expected, 1e-9);
}

}  // namespace
}  // namespace clash::geom
