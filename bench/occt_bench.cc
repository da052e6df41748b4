// OCCT 7.6 baseline: mesh interference yes/no on the same pairs with BRepExtrema_OverlapTool,
// the engine of BRepExtrema_ShapeProximity (tolerance 0: triangulations sharing a point). The
// bench is the one place outside geom/cad that includes OCCT, because OCCT is a baseline here.
//
// Each part becomes one TopoDS_Face carrying clash's validated mesh as its Poly_Triangulation,
// so OCCT tests exactly the triangles the other libraries test; one face per part is the
// cheapest input for a yes/no answer (OCCT reports overlapping face pairs).
//
// Why not BRepExtrema_ShapeProximity itself: in 7.6 its overlap sets are never cleared, so a
// tool reused for a second pose still reports the first pose's overlaps (and skips the face
// pairs already found); a fresh tool per pose would rebuild both BVHs. OCCT has no relative-pose
// query either: BRepExtrema_TriangleSet copies a shape's vertices in world coordinates and builds
// its BVH in Init(). So part a's set is built once, and each timed query is
// TriangleSet::Init(b moved to its pose) + a fresh OverlapTool::Perform(0) - everything
// ShapeProximity::LoadShape2 + Perform would do.
#include <BRepExtrema_OverlapTool.hxx>
#include <BRepExtrema_TriangleSet.hxx>
#include <BRep_Builder.hxx>
#include <Poly_Triangulation.hxx>
#include <Standard_Failure.hxx>
#include <TopLoc_Location.hxx>
#include <TopoDS.hxx>
#include <TopoDS_Face.hxx>
#include <gp_Trsf.hxx>
#include <map>
#include <string>
#include <vector>

#include "answers.h"

namespace clash::bench {
namespace {

TopoDS_Face MakeFace(const geom::TriangleMesh& mesh) {
  Handle(Poly_Triangulation) tri = new Poly_Triangulation(
      static_cast<int>(mesh.vertices().size()), static_cast<int>(mesh.num_triangles()), false);
  for (std::size_t i = 0; i < mesh.vertices().size(); ++i) {
    const geom::Vec3& p = mesh.vertices()[i];
    tri->SetNode(static_cast<int>(i) + 1, gp_Pnt(p.x(), p.y(), p.z()));
  }
  for (std::size_t i = 0; i < mesh.num_triangles(); ++i) {
    const auto& t = mesh.triangles()[i];
    tri->SetTriangle(static_cast<int>(i) + 1,
                     Poly_Triangle(static_cast<int>(t[0]) + 1, static_cast<int>(t[1]) + 1,
                                   static_cast<int>(t[2]) + 1));
  }
  TopoDS_Face face;
  BRep_Builder().MakeFace(face, tri);
  return face;
}

TopLoc_Location ToLocation(const geom::RigidTransform& X) {
  gp_Trsf trsf;
  const geom::Mat3& R = X.R;
  trsf.SetValues(R(0, 0), R(0, 1), R(0, 2), X.t.x(), R(1, 0), R(1, 1), R(1, 2), X.t.y(), R(2, 0),
                 R(2, 1), R(2, 2), X.t.z());
  return TopLoc_Location(trsf);
}

// Everything a dataset needs: a's triangle set, b's face and its pose per pair.
struct OcctPairs {
  Handle(BRepExtrema_TriangleSet) set_a;
  Handle(BRepExtrema_TriangleSet) set_b;
  TopoDS_Face b;
  std::vector<TopLoc_Location> poses;
};

OcctPairs& Setup(const PairDataset& ds) {
  static std::map<std::string, OcctPairs> cache;
  auto [it, inserted] = cache.try_emplace(ds.name);
  OcctPairs& s = it->second;
  if (inserted) {
    BRepExtrema_ShapeList faces_a;
    faces_a.Append(MakeFace(ds.a->mesh));
    s.set_a = new BRepExtrema_TriangleSet();
    if (!s.set_a->Init(faces_a)) throw Standard_Failure("TriangleSet::Init failed for part a");
    s.set_b = new BRepExtrema_TriangleSet();
    s.b = MakeFace(ds.b->mesh);
    for (const PairCase& c : ds.pairs) s.poses.push_back(ToLocation(c.X_WB));
  }
  return s;
}

// One query: true when the triangulations share a point.
bool Overlap(OcctPairs& s, std::size_t pair) {
  BRepExtrema_ShapeList faces_b;
  faces_b.Append(TopoDS::Face(s.b.Moved(s.poses[pair])));
  if (!s.set_b->Init(faces_b)) throw Standard_Failure("TriangleSet::Init failed for part b");
  BRepExtrema_OverlapTool tool(s.set_a, s.set_b);
  tool.Perform(0.0);
  // IsDone() is false when no pair of leaf boxes overlaps (Perform counts accepted leaf pairs).
  return tool.IsDone() && !tool.OverlapSubShapes1().IsEmpty();
}

void CollideBench(benchmark::State& state, const std::string& dataset) {
  const Prepared& p = PrepareOnce(BenchName(Query::kCollide, "occt", dataset), [&] {
    absl::StatusOr<const Answers*> ours = CachedAnswers(
        BenchName(Query::kCollide, "occt", dataset), [&]() -> absl::StatusOr<Answers> {
          auto ds = LoadPairs(dataset);
          if (!ds.ok()) return ds.status();
          try {
            OcctPairs& s = Setup(**ds);
            Answers out;
            for (std::size_t i = 0; i < (*ds)->pairs.size(); ++i) {
              out.values.push_back(Overlap(s, i) ? 1.0 : 0.0);
            }
            return out;
          } catch (const Standard_Failure& e) {
            return absl::InternalError(std::string("OCCT: ") + e.GetMessageString());
          }
        });
    return PrepareChecked(Query::kCollide, dataset, ours, "occt",
                          ClashAnswers(Query::kCollide, geom::BvMode::kAdaptive, dataset),
                          "clash-adaptive");
  });
  if (!p.error.empty()) {
    state.SkipWithError(p.error.c_str());
    return;
  }
  try {
    OcctPairs& s = Setup(**LoadPairs(dataset));
    TimedLoop(state, p, [&](std::size_t i) { return Overlap(s, i) ? 1.0 : 0.0; });
  } catch (const Standard_Failure& e) {
    state.SkipWithError((std::string("OCCT: ") + e.GetMessageString()).c_str());
  }
}

}  // namespace

void RegisterOcct(Query q, const std::string& dataset) {
  if (q != Query::kCollide) return;
  benchmark::RegisterBenchmark(BenchName(q, "occt", dataset).c_str(), CollideBench, dataset)
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace clash::bench
