// The as1 assembly as a scene of clashd's sequence engine, and its assembly order, derived from
// the geometry (shared by tests/server/sequence_as1_test.cc and bench/sequence_bench.cc).
//
// The assembly is read in process with clash::cad::ReadAssembly at the import defaults (what the
// import worker runs), its parts go through server::PartStore::Put (validation, hierarchy) and
// its instances into a server::Scene at their installed poses (wire-pose round trip, as
// AddInstances places them).
//
// Nothing about as1 is hard-coded but the part names ("plate", "l-bracket", "bolt", "nut",
// "rod"); the rest is measured:
//  - a bolt's axis is its part's longest principal axis (area moments of its surface) through
//    the mean of its surface; its head is the end whose cross-section reaches farthest from the
//    axis; it is inserted head last, moving from head to tip ("tip direction");
//  - a nut belongs to the bolt or rod whose axis passes nearest to its centre; it is screwed on
//    from beyond the nearer end of that shaft (a bolt's tip), advancing along the axis;
//  - the base part is the one most instances touch (the plate), the brackets are the others
//    that are neither bolts, nuts nor rods.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <numbers>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "clash/cad/assembly.h"
#include "clash/geom/adaptive_bv.h"
#include "clash/geom/interference.h"
#include "clash/geom/query.h"
#include "clash/geom/status_macros.h"
#include "clash/v1/sequences.pb.h"
#include "convert.h"
#include "part_store.h"
#include "scene.h"

namespace clash::testing {

/// The as1 file in a data folder.
inline std::string As1File(const std::string& data_dir) { return data_dir + "/as1-oc-214-mat.stp"; }

/// A bolt or rod: an elongated part with an axis.
struct Shaft {
  const server::InstanceRec* rec = nullptr;
  geom::Vec3 axis_point_W = geom::Vec3::Zero();  ///< Mean of the surface (world).
  geom::Vec3 tip_dir_W = geom::Vec3::UnitZ();    ///< Unit, from head to tip (world).
  double head_s = 0, tip_s = 0;                  ///< Axis coordinates of the two ends.
  double head_radius = 0, shank_radius = 0;      ///< Largest distance from the axis near each end.
  bool is_bolt = false;                          ///< Bolt (has a head) or rod.
};

/// A nut, on the shaft whose axis passes nearest to its centre.
struct NutOnShaft {
  const server::InstanceRec* rec = nullptr;
  int shaft = -1;                ///< Index into As1::shafts.
  double s = 0;                  ///< Axis coordinate of the nut's centre on that shaft.
  double length_along_axis = 0;  ///< Its extent along the axis.
  double distance_to_axis = 0;   ///< Of its centre (diagnostic: ~0).
  /// It is screwed on from the nearer end of its shaft: +1 from the tip end, -1 from the head
  /// end; `to_end_mm` is the distance from its centre to that end along the axis.
  int from = 1;
  double to_end_mm = 0;
};

/// The scene and what the geometry says about it.
struct As1 {
  std::string dir;  ///< Part store folder (removed by the destructor).
  std::unique_ptr<server::PartStore> parts;
  std::unique_ptr<server::Scene> scene;
  const server::InstanceRec* plate = nullptr;
  std::vector<const server::InstanceRec*> brackets;  ///< Neither plate, bolt, nut nor rod.
  std::vector<Shaft> shafts;                         ///< Bolts and rods.
  std::vector<NutOnShaft> nuts;

  As1() = default;
  As1(const As1&) = delete;
  As1& operator=(const As1&) = delete;
  ~As1() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

namespace as1_internal {

inline std::string PartName(const server::InstanceRec& rec) { return rec.part->info.name(); }

// Axis of an elongated part (world), from the area moments of its surface.
inline Shaft MeasureShaft(const server::InstanceRec& rec) {
  const geom::Part& part = *rec.part->geom;
  geom::AreaMoments moments;
  for (std::size_t i = 0; i < part.mesh().num_triangles(); ++i) {
    moments.Add(geom::AreaMoments::Of(part.mesh().triangle(i)));
  }
  const geom::Vec3 mean_P = moments.Mean();
  const geom::PrincipalFrame frame = geom::PrincipalAxes(mean_P, moments.Covariance());
  geom::Vec3 axis_P = frame.axes.col(0).normalized();
  // Extent along the axis and the radius near each end.
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const geom::Vec3& v : part.mesh().vertices()) {
    const double s = (v - mean_P).dot(axis_P);
    lo = std::min(lo, s);
    hi = std::max(hi, s);
  }
  const double band = 0.1 * (hi - lo);
  double r_lo = 0, r_hi = 0;
  for (const geom::Vec3& v : part.mesh().vertices()) {
    const double s = (v - mean_P).dot(axis_P);
    const double r = ((v - mean_P) - s * axis_P).norm();
    if (s <= lo + band) r_lo = std::max(r_lo, r);
    if (s >= hi - band) r_hi = std::max(r_hi, r);
  }
  Shaft out;
  out.rec = &rec;
  // Orient the axis from the wider end (head) to the narrower (tip).
  if (r_hi > r_lo) {
    axis_P = -axis_P;
    std::swap(lo, hi);
    lo = -lo;
    hi = -hi;
    std::swap(r_lo, r_hi);
  }
  out.head_s = lo;
  out.tip_s = hi;
  out.head_radius = r_lo;
  out.shank_radius = r_hi;
  out.axis_point_W = rec.X_WP * mean_P;
  out.tip_dir_W = (rec.X_WP.R * axis_P).normalized();
  out.is_bolt = absl::StrContains(PartName(rec), "bolt");
  return out;
}

}  // namespace as1_internal

/// Reads as1 and builds the scene. NOT_FOUND when the file is missing.
inline absl::StatusOr<std::unique_ptr<As1>> LoadAs1(const std::string& file) {
  if (!std::filesystem::exists(file)) return absl::NotFoundError(absl::StrCat("no ", file));
  CLASH_ASSIGN_OR_RETURN(cad::ImportedAssembly imported,
                         cad::ReadAssembly(file, cad::TessellationOptions{}));
  auto as1 = std::make_unique<As1>();
  std::string tmpl = (std::filesystem::temp_directory_path() / "clash-as1-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  as1->dir = tmpl;
  CLASH_ASSIGN_OR_RETURN(as1->parts, server::PartStore::Open(as1->dir, 20'000'000));
  std::vector<std::shared_ptr<const server::PartEntry>> entries;
  for (const cad::AssemblyPart& p : imported.parts) {
    CLASH_ASSIGN_OR_RETURN(auto entry, as1->parts->Put(server::PartInputOf(p)));
    entries.push_back(std::move(entry));
  }
  as1->scene = std::make_unique<server::Scene>("as1");
  for (const cad::AssemblyInstance& inst : imported.instances) {
    server::InstanceRec rec;
    rec.id = as1->scene->next_instance_id++;
    rec.part = entries.at(static_cast<std::size_t>(inst.part));
    rec.path = inst.path;
    rec.name = inst.name;
    v1::Pose wire;
    server::ToProto(server::TransformOf(inst.placement), &wire);
    CLASH_ASSIGN_OR_RETURN(rec.X_WP, server::PoseFromProto(wire, inst.path));
    as1->scene->Add(std::move(rec));
  }

  // Roles.
  std::vector<const server::InstanceRec*> others;
  for (const auto& [id, rec] : as1->scene->instances) {
    const std::string name = as1_internal::PartName(rec);
    if (absl::StrContains(name, "bolt") || absl::StrContains(name, "rod")) {
      as1->shafts.push_back(as1_internal::MeasureShaft(rec));
    } else if (absl::StrContains(name, "nut")) {
      NutOnShaft n;
      n.rec = &rec;
      as1->nuts.push_back(n);
    } else {
      others.push_back(&rec);
    }
  }
  // The plate: the other part touched (within τ) by the most instances.
  int best = -1;
  for (const server::InstanceRec* o : others) {
    int touching = 0;
    for (const auto& [id, rec] : as1->scene->instances) {
      if (&rec == o) continue;
      const double d =
          geom::Distance(*o->part->geom, o->X_WP, *rec.part->geom, rec.X_WP, 1.0).distance;
      touching += d <= o->part->deflection_mm + rec.part->deflection_mm;
    }
    if (as1_internal::PartName(*o) == "plate" || (as1->plate == nullptr && touching > best)) {
      best = touching;
      as1->plate = o;
    }
  }
  for (const server::InstanceRec* o : others) {
    if (o != as1->plate) as1->brackets.push_back(o);
  }
  // Nuts onto the nearest axis.
  for (NutOnShaft& n : as1->nuts) {
    const geom::Vec3 c = n.rec->world_box.Center();
    double best_d = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < as1->shafts.size(); ++k) {
      const Shaft& s = as1->shafts[k];
      const double along = (c - s.axis_point_W).dot(s.tip_dir_W);
      const double d = ((c - s.axis_point_W) - along * s.tip_dir_W).norm();
      if (d < best_d) {
        best_d = d;
        n.shaft = static_cast<int>(k);
        n.s = along;
      }
    }
    n.distance_to_axis = best_d;
    if (n.shaft < 0) return absl::InternalError("a nut without a shaft");
    const Shaft& s = as1->shafts[static_cast<std::size_t>(n.shaft)];
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const geom::Vec3& v : n.rec->part->geom->mesh().vertices()) {
      const double along = (n.rec->X_WP * v - s.axis_point_W).dot(s.tip_dir_W);
      lo = std::min(lo, along);
      hi = std::max(hi, along);
    }
    n.length_along_axis = hi - lo;
    n.from = s.tip_s - n.s <= n.s - s.head_s ? 1 : -1;
    n.to_end_mm = n.from > 0 ? s.tip_s - n.s : n.s - s.head_s;
  }
  if (as1->plate == nullptr) return absl::InternalError("no plate");
  return as1;
}

/// A linear step: `paths` moved together along the unit `dir` over `distance` into place.
inline v1::SequenceStep LinearStep(const std::string& name, const std::vector<std::string>& paths,
                                   const geom::Vec3& dir, double distance) {
  v1::SequenceStep step;
  step.set_name(name);
  for (const std::string& p : paths) step.mutable_moving()->add_path_prefixes(p);
  server::ToProto(dir, step.mutable_motion()->mutable_linear()->mutable_direction());
  step.mutable_motion()->mutable_linear()->set_distance_mm(distance);
  return step;
}

/// Clear length for a part to come in from outside: its box diagonal plus `margin`.
inline double ApproachDistance(const server::InstanceRec& rec, double margin = 5.0) {
  return rec.part->geom->bounds().Diagonal() + margin;
}

/// The screw step of a nut: from beyond the nearer end of its shaft, `turns` turns, the nut/shaft
/// pair allowed (threads).
inline v1::SequenceStep NutStep(const As1& as1, const NutOnShaft& n, double turns) {
  const Shaft& s = as1.shafts[static_cast<std::size_t>(n.shaft)];
  // Start fully beyond the end: the advance covers the way from the end to the installed centre
  // plus the nut's length and a margin.
  const double advance = n.to_end_mm + n.length_along_axis + 2.0;
  v1::SequenceStep step;
  step.set_name(n.rec->path);
  step.mutable_moving()->add_path_prefixes(n.rec->path);
  v1::ScrewMotion* screw = step.mutable_motion()->mutable_screw();
  server::ToProto(s.axis_point_W, screw->mutable_axis_point_mm());
  server::ToProto(geom::Vec3(-n.from * s.tip_dir_W), screw->mutable_axis());
  screw->set_angle_rad(turns * 2 * std::numbers::pi);
  screw->set_pitch_mm(advance / turns);
  v1::AllowedInterference* allow = step.add_allowed();
  allow->set_name("thread");
  allow->mutable_a()->add_path_prefixes(n.rec->path);
  allow->mutable_b()->add_path_prefixes(s.rec->path);
  return step;
}

/// The bolt's step: along its tip direction from beyond its head, its length plus 5 mm.
inline v1::SequenceStep BoltStep(const Shaft& s) {
  return LinearStep(s.rec->path, {s.rec->path}, s.tip_dir_W, s.tip_s - s.head_s + 5.0);
}

/// The direction the plate's normal points to on the brackets' side (world axis along which
/// the plate is thinnest).
inline geom::Vec3 Up(const As1& as1) {
  const geom::Vec3 size = as1.plate->world_box.Size();
  int thin = 0;
  for (int k = 1; k < 3; ++k) {
    if (size[k] < size[thin]) thin = k;
  }
  geom::Vec3 up = geom::Vec3::Unit(thin);
  double bracket_side = 0;
  for (const auto* b : as1.brackets) {
    bracket_side += (b->world_box.Center() - as1.plate->world_box.Center()).dot(up);
  }
  return bracket_side < 0 ? geom::Vec3(-up) : up;
}

/// A bracket lowered onto its place along -Up.
inline v1::SequenceStep BracketStep(const As1& as1, const server::InstanceRec& b) {
  return LinearStep(b.path, {b.path}, -Up(as1), ApproachDistance(b));
}

/// The valid order: the plate raised into place, each bracket lowered onto it, each bolt along
/// its tip direction from beyond its head, the bolts' nuts, then the rods along their axes and
/// their nuts (a rod crosses the bolts' way in as1, so the bolts go first). Nuts are screwed on
/// with `turns` turns.
inline v1::ValidateSequenceRequest ValidOrder(const As1& as1, double turns = 2.0) {
  v1::ValidateSequenceRequest req;
  req.set_scene_id(as1.scene->id());
  const geom::Vec3 up = Up(as1);
  *req.add_steps() = LinearStep("plate", {as1.plate->path}, up, ApproachDistance(*as1.plate));
  for (const auto* b : as1.brackets) *req.add_steps() = BracketStep(as1, *b);
  for (const bool bolts : {true, false}) {
    for (const Shaft& s : as1.shafts) {
      if (s.is_bolt == bolts) *req.add_steps() = BoltStep(s);
    }
    for (const NutOnShaft& n : as1.nuts) {
      if (as1.shafts[static_cast<std::size_t>(n.shaft)].is_bolt == bolts) {
        *req.add_steps() = NutStep(as1, n, turns);
      }
    }
  }
  return req;
}

/// `req` followed by every step of the valid order whose instance it does not move yet: every
/// instance is moved by some step, so the ones after the steps under test are absent (not
/// standing installed) while those run.
inline v1::ValidateSequenceRequest Completed(const As1& as1, v1::ValidateSequenceRequest req) {
  std::set<std::string> moved;
  for (const v1::SequenceStep& s : req.steps()) moved.insert(s.moving().path_prefixes(0));
  const v1::ValidateSequenceRequest valid = ValidOrder(as1);
  for (const v1::SequenceStep& s : valid.steps()) {
    if (!moved.count(s.moving().path_prefixes(0))) *req.add_steps() = s;
  }
  return req;
}

/// The first bolt (nullptr when none).
inline const Shaft* FirstBolt(const As1& as1) {
  for (const Shaft& s : as1.shafts) {
    if (s.is_bolt) return &s;
  }
  return nullptr;
}

/// The bolts whose axis passes through a bracket's box.
inline std::vector<const Shaft*> BoltsUnder(const As1& as1, const server::InstanceRec& bracket) {
  std::vector<const Shaft*> out;
  for (const Shaft& s : as1.shafts) {
    if (!s.is_bolt) continue;
    const geom::Vec3 p = s.axis_point_W;
    const geom::Aabb& b = bracket.world_box;
    bool inside = true;
    for (int k = 0; k < 3; ++k) {
      if (std::abs(s.tip_dir_W[k]) < 0.5 && (p[k] < b.min[k] || p[k] > b.max[k])) inside = false;
    }
    if (inside) out.push_back(&s);
  }
  return out;
}

/// How far the wrong-side bolt travels: its length plus 5 mm.
inline double WrongSideDistance(const Shaft& bolt) { return bolt.tip_s - bolt.head_s + 5.0; }

/// Plate and brackets as in the valid order, then the first bolt from the wrong side: from the
/// nut's side, head first (the last step; complete it with Completed()).
inline v1::ValidateSequenceRequest WrongSideBoltOrder(const As1& as1) {
  const v1::ValidateSequenceRequest valid = ValidOrder(as1);
  v1::ValidateSequenceRequest req;
  req.set_scene_id(as1.scene->id());
  for (int k = 0; k < 1 + static_cast<int>(as1.brackets.size()); ++k) {
    *req.add_steps() = valid.steps(k);
  }
  const Shaft* bolt = FirstBolt(as1);
  if (bolt != nullptr) {
    *req.add_steps() = LinearStep("bolt from the wrong side", {bolt->rec->path}, -bolt->tip_dir_W,
                                  WrongSideDistance(*bolt));
  }
  return req;
}

/// The plate, the first bracket's bolts through the plate, then that bracket lowered onto them
/// (the last step; complete it with Completed()).
inline v1::ValidateSequenceRequest BracketAfterBoltsOrder(const As1& as1) {
  const v1::ValidateSequenceRequest valid = ValidOrder(as1);
  v1::ValidateSequenceRequest req;
  req.set_scene_id(as1.scene->id());
  *req.add_steps() = valid.steps(0);
  if (as1.brackets.empty()) return req;
  for (const Shaft* s : BoltsUnder(as1, *as1.brackets.front())) *req.add_steps() = BoltStep(*s);
  *req.add_steps() = BracketStep(as1, *as1.brackets.front());
  req.mutable_steps(req.steps_size() - 1)->set_name("bracket after its bolts");
  return req;
}

}  // namespace clash::testing
