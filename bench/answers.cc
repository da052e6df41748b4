#include "answers.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>

#include "clash/geom/query.h"
#include "clash/geom/triangle.h"

namespace clash::bench {
namespace {

using geom::RigidTransform;
using geom::Vec3;

// Relative agreement of distances and ray parameters (the requirement).
constexpr double kRelativeTolerance = 1e-6;
// Mismatches listed in an error message.
constexpr int kMaxListed = 3;

// The displacements of b tried when deciding whether a contact is within rounding.
std::vector<Vec3> Nudges(const PairCase& c) {
  return {Vec3::UnitX(), -Vec3::UnitX(), Vec3::UnitY(), -Vec3::UnitY(),
          Vec3::UnitZ(), -Vec3::UnitZ(), c.direction_W, -c.direction_W};
}

// True when the two surfaces touch within rounding: clash sees them apart by at most the
// tolerance, or its yes flips to no when b moves by the tolerance.
bool PairTouches(const PairDataset& ds, const PairCase& c, double* out_distance) {
  const geom::Part& a = ds.a->Get(geom::BvMode::kAdaptive);
  const geom::Part& b = ds.b->Get(geom::BvMode::kAdaptive);
  const RigidTransform I = RigidTransform::Identity();
  const double eps = ds.touch_tolerance_mm;
  *out_distance = geom::Distance(a, I, b, c.X_WB).distance;
  if (!geom::SurfacesIntersect(a, I, b, c.X_WB)) return *out_distance <= eps;
  for (const Vec3& d : Nudges(c)) {
    RigidTransform X = c.X_WB;
    X.t += eps * d;
    if (!geom::SurfacesIntersect(a, I, b, X)) return true;
  }
  return false;
}

// Same at the level of one triangle pair.
bool TrianglePairTouches(const PairDataset& ds, const PairCase& c, uint32_t ta, uint32_t tb) {
  const geom::Triangle A = ds.a->mesh.triangle(ta);
  const geom::Triangle b = ds.b->mesh.triangle(tb);
  const geom::Triangle B{c.X_WB * b.a, c.X_WB * b.b, c.X_WB * b.c};
  const double eps = ds.touch_tolerance_mm;
  if (!geom::TrianglesIntersect(A, B)) return geom::DistanceTriangles(A, B).distance <= eps;
  for (const Vec3& d : Nudges(c)) {
    const Vec3 s = eps * d;
    if (!geom::TrianglesIntersect(A, {B.a + s, B.b + s, B.c + s})) return true;
  }
  return false;
}

std::string Fmt(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace

const char* QueryName(Query q) {
  switch (q) {
    case Query::kCollide:
      return "Collide";
    case Query::kContacts:
      return "Contacts";
    case Query::kDistanceApart:
      return "DistanceApart";
    case Query::kDistancePushed:
      return "DistancePushed";
    case Query::kBuild:
      return "Build";
    case Query::kRay:
      return "Ray";
  }
  return "?";
}

bool IsPartQuery(Query q) { return q == Query::kBuild || q == Query::kRay; }

std::string BenchName(Query q, const std::string& lib, const std::string& dataset) {
  return std::string("BM_") + QueryName(q) + "/" + lib + "/" + dataset;
}

std::vector<uint32_t> CaseIndices(Query q, const PairDataset& ds) {
  if (q == Query::kDistanceApart) return ds.Indices(true);
  if (q == Query::kDistancePushed) return ds.Indices(false);
  std::vector<uint32_t> all(ds.pairs.size());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

absl::StatusOr<const Answers*> CachedAnswers(const std::string& key,
                                             const std::function<absl::StatusOr<Answers>()>& make) {
  static std::map<std::string, absl::StatusOr<Answers>> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make()).first;
  if (!it->second.ok()) return it->second.status();
  return &*it->second;
}

Agreement Compare(Query q, const std::string& dataset, const Answers& ours, const char* ours_label,
                  const Answers& theirs, const char* theirs_label) {
  Agreement out;
  std::ostringstream err;
  int listed = 0;
  auto fail = [&](const std::string& what) {
    if (listed++ < kMaxListed) err << (listed > 1 ? "; " : "") << what;
  };
  if (ours.values.size() != theirs.values.size()) {
    out.error = std::string(ours_label) + " and " + theirs_label + " ran different case counts";
    return out;
  }
  const std::size_t n = ours.values.size();
  if (q == Query::kRay) {
    for (std::size_t i = 0; i < n; ++i) {
      const double t1 = ours.values[i], t2 = theirs.values[i];
      const bool h1 = t1 >= 0, h2 = t2 >= 0;
      if (h1 != h2) {
        fail("ray " + std::to_string(i) + ": " + ours_label + (h1 ? " hits" : " misses") + ", " +
             theirs_label + (h2 ? " hits" : " misses"));
      } else if (h1 && std::abs(t1 - t2) > kRelativeTolerance * std::max(t1, t2)) {
        fail("ray " + std::to_string(i) + ": t " + Fmt(t1) + " vs " + Fmt(t2));
      }
    }
  } else {
    auto ds_or = LoadPairs(dataset);
    if (!ds_or.ok()) return {std::string(ds_or.status().message()), 0};
    const PairDataset& ds = **ds_or;
    const std::vector<uint32_t> cases = CaseIndices(q, ds);
    for (std::size_t i = 0; i < n; ++i) {
      const PairCase& c = ds.pairs[cases[i]];
      const std::string where = "pair " + std::to_string(cases[i]);
      const double v1 = ours.values[i], v2 = theirs.values[i];
      if (q == Query::kCollide) {
        if (v1 == v2) continue;
        // The yes side's witness, where it gives one, must be a triangle pair that touches
        // within rounding (decided on the two triangles alone, not by either library's walk);
        // otherwise the whole parts must (PairTouches, which asks clashd).
        const Answers& yes = v1 != 0 ? ours : theirs;
        if (i < yes.tri_pairs.size() && !yes.tri_pairs[i].empty()) {
          const auto [ta, tb] = yes.tri_pairs[i][0];
          if (TrianglePairTouches(ds, c, ta, tb)) {
            ++out.excused;
          } else {
            fail(where + ": " + (v1 != 0 ? ours_label : theirs_label) + " finds triangles (" +
                 std::to_string(ta) + ", " + std::to_string(tb) + ") crossing beyond rounding, " +
                 (v1 != 0 ? theirs_label : ours_label) + " no collision");
          }
          continue;
        }
        double d = 0;
        if (PairTouches(ds, c, &d)) {
          ++out.excused;
        } else {
          fail(where + ": " + ours_label + (v1 != 0 ? " yes, " : " no, ") + theirs_label +
               (v2 != 0 ? " yes" : " no") + " (clash distance " + Fmt(d) + " mm)");
        }
      } else if (q == Query::kContacts) {
        if (v1 == v2 && (ours.tri_pairs.empty() || theirs.tri_pairs.empty() ||
                         ours.tri_pairs[i] == theirs.tri_pairs[i])) {
          continue;
        }
        if (ours.tri_pairs.empty() || theirs.tri_pairs.empty()) {
          fail(where + ": " + Fmt(v1) + " vs " + Fmt(v2) + " triangle pairs");
          continue;
        }
        std::vector<std::pair<uint32_t, uint32_t>> diff;
        std::set_symmetric_difference(ours.tri_pairs[i].begin(), ours.tri_pairs[i].end(),
                                      theirs.tri_pairs[i].begin(), theirs.tri_pairs[i].end(),
                                      std::back_inserter(diff));
        for (const auto& [ta, tb] : diff) {
          if (TrianglePairTouches(ds, c, ta, tb)) {
            ++out.excused;
          } else {
            fail(where + ": triangles (" + std::to_string(ta) + ", " + std::to_string(tb) +
                 ") intersect for one library only; counts " + Fmt(v1) + " (" + ours_label +
                 ") vs " + Fmt(v2) + " (" + theirs_label + ")");
            break;
          }
        }
      } else {  // distances
        const double tol =
            kRelativeTolerance * std::max(std::abs(v1), std::abs(v2)) + ds.touch_tolerance_mm;
        if (!(std::abs(v1 - v2) <= tol)) {
          fail(where + ": distance " + Fmt(v1) + " (" + ours_label + ") vs " + Fmt(v2) + " (" +
               theirs_label + ")");
        }
      }
    }
  }
  if (listed > 0) {
    out.error = std::string(ours_label) + " disagrees with " + theirs_label + " on " +
                std::to_string(listed) + " case(s): " + err.str();
  }
  return out;
}

const Prepared& PrepareOnce(const std::string& key, const std::function<Prepared()>& make) {
  static std::map<std::string, Prepared> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make()).first;
  return it->second;
}

Prepared PrepareChecked(Query q, const std::string& dataset,
                        const absl::StatusOr<const Answers*>& ours, const char* ours_label,
                        const absl::StatusOr<const Answers*>& theirs, const char* theirs_label) {
  Prepared p;
  if (!ours.ok()) {
    p.error = std::string(ours_label) + " failed: " + std::string(ours.status().message());
    return p;
  }
  if (!theirs.ok()) {
    p.error = std::string("reference ") + theirs_label +
              " failed: " + std::string(theirs.status().message());
    return p;
  }
  const Agreement agreement = Compare(q, dataset, **ours, ours_label, **theirs, theirs_label);
  if (!agreement.error.empty()) {
    p.error = agreement.error;
    return p;
  }
  p.values = (*ours)->values;
  p.counters["cases"] = static_cast<double>(p.values.size());
  p.counters["excused"] = agreement.excused;
  double sum = 0;
  for (double v : p.values) sum += v;
  if (q == Query::kCollide)
    p.counters["hit_rate"] = sum / std::max<std::size_t>(1, p.values.size());
  if (q == Query::kContacts) {
    p.counters["mean_tri_pairs"] = sum / std::max<std::size_t>(1, p.values.size());
  }
  return p;
}

}  // namespace clash::bench
