#include "query_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clash/cad/import_cache.h"
#include "clash/geom/query.h"
#include "clash/geom/status_macros.h"
#include "convert.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "parallel.h"

namespace clash::server {
namespace {

using geom::Aabb;
using geom::RigidTransform;

// Pairs between two stop checks.
constexpr int kStopEvery = 16;

// A distance query with a set of at most this many instances pairs each of them with every
// instance of the other set; larger sets are swept along an axis.
constexpr std::size_t kMaxDirectDistanceSet = 16;

// An instance with the pose a query uses (stored or overridden).
struct Posed {
  const InstanceRec* rec = nullptr;
  RigidTransform X_WP;
  Aabb box;
  bool overridden = false;
};

using IdSet = absl::flat_hash_set<uint64_t>;

// Effective poses of every enabled instance that a query may touch.
class PosedScene {
 public:
  static absl::StatusOr<PosedScene> Make(
      const Scene& scene, const google::protobuf::RepeatedPtrField<v1::PoseUpdate>& overrides) {
    PosedScene ps;
    for (const v1::PoseUpdate& u : overrides) {
      const InstanceRec* rec = scene.Find(u.instance_id());
      if (rec == nullptr) {
        return absl::NotFoundError(absl::StrCat("no instance ", u.instance_id(), " in scene"));
      }
      const std::string what = absl::StrCat("pose of ", rec->path);
      CLASH_ASSIGN_OR_RETURN(RigidTransform X, PoseFromUpdate(u, what));
      // As a stored pose: beyond the scene's reach the arithmetic keeps no precision.
      CLASH_RETURN_IF_ERROR(scene.CheckPlaceable(*rec->part, X, what));
      ps.overrides_[rec->id] = X;
    }
    return ps;
  }

  Posed Get(const InstanceRec& rec) const {
    Posed p{&rec, rec.X_WP, rec.world_box, false};
    if (auto it = overrides_.find(rec.id); it != overrides_.end()) {
      p.X_WP = it->second;
      p.box = rec.part->geom->bounds().Transformed(p.X_WP);
      p.overridden = true;
    }
    return p;
  }
  bool IsOverridden(uint64_t id) const { return overrides_.contains(id); }
  std::vector<uint64_t> OverriddenIds() const {
    std::vector<uint64_t> ids;
    for (const auto& [id, X] : overrides_) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    return ids;
  }

 private:
  absl::flat_hash_map<uint64_t, RigidTransform> overrides_;
};

IdSet ToSet(const std::vector<const InstanceRec*>& v) {
  IdSet s;
  s.reserve(v.size());
  for (const InstanceRec* r : v) s.insert(r->id);
  return s;
}

bool SelectsAll(const v1::InstanceSelector& selector) {
  return selector.instance_ids().empty() && selector.groups().empty() &&
         selector.path_prefixes().empty();
}

// A selector resolved on a scene, for membership tests of enabled instances (the only ones
// the broad-phase tree and SelectInstances give): all of them (a query against the whole scene
// costs no per-instance set), or the ids chosen.
struct Selection {
  bool all = false;
  IdSet ids;  // when !all
  [[nodiscard]] bool Contains(uint64_t id) const { return all || ids.contains(id); }
};

// The selection of `selector`, given the instances SelectInstances listed for it.
Selection SelectionOf(const v1::InstanceSelector& selector,
                      const std::vector<const InstanceRec*>& listed) {
  Selection out;
  out.all = SelectsAll(selector);
  if (!out.all) out.ids = ToSet(listed);
  return out;
}

// The selection of `selector`, listing the scene only when it names instances.
absl::StatusOr<Selection> Resolve(const Scene& scene, const v1::InstanceSelector& selector) {
  if (SelectsAll(selector)) return SelectionOf(selector, {});
  CLASH_ASSIGN_OR_RETURN(std::vector<const InstanceRec*> listed, SelectInstances(scene, selector));
  return SelectionOf(selector, listed);
}

double PairTolerance(const v1::Tolerances& tol, const InstanceRec& a, const InstanceRec& b) {
  return ContactTolerance(
      tol, a.part->deflection_mm + b.part->deflection_mm,
      std::max(a.part->geom->bounds().Diagonal(), b.part->geom->bounds().Diagonal()));
}

// Candidate pairs (ids ordered low, high) whose world boxes, grown by `margin`, overlap: every
// pair with one instance in A and the other in B (or two in A when B is null). The broad phase
// is asked about each instance of `walk`, the instances of A or (when B is given) those of B.
// `stop` (may be empty) is asked every 1024 instances or pairs of overridden instances.
// RESOURCE_EXHAUSTED past `max_pairs`.
absl::StatusOr<std::vector<std::pair<const InstanceRec*, const InstanceRec*>>> CandidatePairs(
    const Scene& scene, const PosedScene& posed, const std::vector<const InstanceRec*>& walk,
    const Selection& in_a, const Selection* in_b, double margin, std::size_t max_pairs,
    const StopCheck& stop) {
  std::size_t steps = 0;
  const auto step = [&]() -> absl::Status {
    return (++steps & 1023) == 0 && stop ? stop() : absl::OkStatus();
  };
  absl::flat_hash_set<std::pair<uint64_t, uint64_t>> seen;
  std::vector<std::pair<const InstanceRec*, const InstanceRec*>> out;
  auto valid = [&](uint64_t x, uint64_t y) {
    if (x == y) return false;
    if (in_b == nullptr) return in_a.Contains(x) && in_a.Contains(y);
    return (in_a.Contains(x) && in_b->Contains(y)) || (in_b->Contains(x) && in_a.Contains(y));
  };
  bool too_many = false;
  auto consider = [&](const InstanceRec* x, const InstanceRec* y) {
    if (!valid(x->id, y->id)) return true;
    if (x->id > y->id) std::swap(x, y);
    if (seen.insert({x->id, y->id}).second) out.emplace_back(x, y);
    too_many = out.size() > max_pairs;
    return !too_many;
  };
  const auto refuse = [&] {
    return absl::ResourceExhaustedError(absl::StrCat(
        "more than ", max_pairs,
        " candidate pairs (instances whose boxes overlap): narrow set_a and set_b, or check the "
        "placement (parts at one spot?)"));
  };
  // Overridden instances are not where the tree has them: the tree is asked with their
  // overriding boxes, and pairs of two overridden instances are tested directly.
  std::vector<const InstanceRec*> overridden;
  std::vector<Aabb> overridden_boxes;  // their boxes where the overrides put them
  for (uint64_t id : posed.OverriddenIds()) {
    const InstanceRec* rec = scene.Find(id);
    if (rec == nullptr || !rec->enabled) continue;
    // One in neither set pairs with nothing.
    if (!in_a.Contains(id) && (in_b == nullptr || !in_b->Contains(id))) continue;
    overridden.push_back(rec);
    overridden_boxes.push_back(posed.Get(*rec).box);
  }
  for (const InstanceRec* a : walk) {
    CLASH_RETURN_IF_ERROR(step());
    if (posed.IsOverridden(a->id)) continue;
    scene.tree.Query(a->world_box.Inflated(margin), [&](uint64_t other) {
      if (posed.IsOverridden(other)) return true;
      const InstanceRec* b = scene.Find(other);
      return b == nullptr || consider(a, b);
    });
    if (too_many) return refuse();
  }
  for (std::size_t i = 0; i < overridden.size(); ++i) {
    CLASH_RETURN_IF_ERROR(step());
    const InstanceRec* o = overridden[i];
    const Aabb box = overridden_boxes[i].Inflated(margin);
    scene.tree.Query(box, [&](uint64_t other) {
      if (posed.IsOverridden(other)) return true;
      const InstanceRec* b = scene.Find(other);
      return b == nullptr || consider(o, b);
    });
    if (too_many) return refuse();
    for (std::size_t j = i + 1; j < overridden.size(); ++j) {
      CLASH_RETURN_IF_ERROR(step());
      if (box.Overlaps(overridden_boxes[j]) && !consider(o, overridden[j])) return refuse();
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& p, const auto& q) {
    return std::pair(p.first->id, p.second->id) < std::pair(q.first->id, q.second->id);
  });
  return out;
}

v1::ClashClass ToProto(geom::ClashClass c) {
  switch (c) {
    case geom::ClashClass::kHard:
      return v1::HARD;
    case geom::ClashClass::kContact:
      return v1::CONTACT;
    case geom::ClashClass::kClearance:
      return v1::CLEARANCE;
    case geom::ClashClass::kContained:
      return v1::CONTAINED;
    case geom::ClashClass::kClear:
      break;
  }
  return v1::CLASH_CLASS_UNSPECIFIED;
}

int ClassRank(v1::ClashClass c) {
  switch (c) {
    case v1::HARD:
      return 0;
    case v1::CONTAINED:
      return 1;
    case v1::CONTACT:
      return 2;
    case v1::CLEARANCE:
      return 3;
    default:
      return 4;
  }
}

// A page token names the scene version, the offset of the page's first clash and a
// fingerprint of the request it continues (every field but the page's own), so that a token
// given with another request (other sets, tolerances, rules or overrides) is refused rather
// than answered with a page of another list.
struct PageToken {
  uint64_t version = 0;
  std::size_t offset = 0;
  uint64_t fingerprint = 0;
};

// Stable across runs of one build (std::hash of bytes), so a token outlives a restart.
uint64_t RequestFingerprint(const v1::InterferenceRequest& request) {
  v1::InterferenceRequest key = request;
  key.clear_page_token();
  key.clear_page_size();
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.SetSerializationDeterministic(true);
    key.SerializeToCodedStream(&coded);
  }
  return std::hash<std::string_view>{}(bytes);
}

std::string FormatPageToken(const PageToken& t) {
  return absl::StrCat(t.version, ":", t.offset, ":", absl::Hex(t.fingerprint));
}

absl::StatusOr<PageToken> ParsePageToken(const std::string& token) {
  PageToken t;
  if (token.empty()) return t;
  std::vector<std::string> parts = absl::StrSplit(token, ':');
  if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &t.version) &&
      absl::SimpleAtoi(parts[1], &t.offset)) {  // an older server's "<version>:<offset>"
    return absl::FailedPreconditionError("page_token is of an older server's form: start again");
  }
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &t.version) ||
      !absl::SimpleAtoi(parts[1], &t.offset) || !absl::SimpleHexAtoi(parts[2], &t.fingerprint)) {
    return absl::InvalidArgumentError("malformed page_token");
  }
  return t;
}

// The two ends of a pair in the order answers use (by path), with their witnesses (world
// points and the B-rep faces of their triangles).
struct PairEnds {
  const InstanceRec* a;
  const InstanceRec* b;
  geom::Vec3 p_a;
  geom::Vec3 p_b;
  uint32_t face_a;
  uint32_t face_b;
};

PairEnds OrderByPath(const InstanceRec& x, const InstanceRec& y, const geom::Vec3& p_x,
                     const geom::Vec3& p_y, uint32_t tri_x, uint32_t tri_y) {
  auto face = [](const InstanceRec& r, uint32_t tri) {
    const auto& tags = r.part->geom->mesh().tags();
    return tags.empty() ? 0u : tags[tri];
  };
  PairEnds e{&x, &y, p_x, p_y, face(x, tri_x), face(y, tri_y)};
  if (y.path < x.path) {
    std::swap(e.a, e.b);
    std::swap(e.p_a, e.p_b);
    std::swap(e.face_a, e.face_b);
  }
  return e;
}

}  // namespace

absl::Status ValidateTolerances(const v1::Tolerances& tol) {
  if (tol.has_contact_tolerance_mm() &&
      !(std::isfinite(tol.contact_tolerance_mm()) && tol.contact_tolerance_mm() >= 0)) {
    return absl::InvalidArgumentError("contact_tolerance_mm must be finite and >= 0");
  }
  if (!(std::isfinite(tol.clearance_mm()) && tol.clearance_mm() >= 0)) {
    return absl::InvalidArgumentError("clearance_mm must be finite and >= 0");
  }
  return absl::OkStatus();
}

double ContactTolerance(const v1::Tolerances& tol, double deflection_sum, double diagonal) {
  if (tol.has_contact_tolerance_mm()) return tol.contact_tolerance_mm();
  return std::max(deflection_sum, 1e-6 * diagonal);
}

absl::Status ResolveAllowRules(
    const Scene& scene, const google::protobuf::RepeatedPtrField<v1::AllowedInterference>& in,
    AllowRules* out) {
  if (in.size() > kMaxAllowRules) {
    return absl::ResourceExhaustedError(
        absl::StrCat(in.size(), " allowed-interference rules; at most ", kMaxAllowRules));
  }
  // Sets are made only for selectors that name instances, and only up to a budget: a few bytes
  // of request naming a large group many times must not take gigabytes.
  std::size_t named = 0;
  const auto resolve = [&](const v1::AllowedInterference& r, const v1::InstanceSelector& selector,
                           bool* all, absl::flat_hash_set<uint64_t>* ids) -> absl::Status {
    *all = SelectsAll(selector);
    if (*all) return absl::OkStatus();
    CLASH_ASSIGN_OR_RETURN(std::vector<const InstanceRec*> listed,
                           SelectInstances(scene, selector));
    named += listed.size();
    if (named > kMaxAllowRuleInstances) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "allowed-interference rules name more than ", kMaxAllowRuleInstances,
          " instances in all (at rule '", r.name(), "'); an empty selector names every instance"));
    }
    *ids = ToSet(listed);
    return absl::OkStatus();
  };
  for (const v1::AllowedInterference& r : in) {
    AllowRule rule;
    rule.name = r.name();
    CLASH_RETURN_IF_ERROR(resolve(r, r.a(), &rule.a_all, &rule.a));
    // b unset: the pairs within a; b present, like every selector, chooses every instance when
    // it names nothing (a against the whole scene, as for InterferenceRequest.set_b).
    rule.pairs_within_a = !r.has_b();
    if (r.has_b()) CLASH_RETURN_IF_ERROR(resolve(r, r.b(), &rule.b_all, &rule.b));
    for (int c : r.classes()) {
      if (c != v1::HARD && c != v1::CONTACT && c != v1::CLEARANCE && c != v1::CONTAINED) {
        return absl::InvalidArgumentError(
            absl::StrCat("allowed interference '", r.name(), "': unknown clash class ", c));
      }
      rule.classes.insert(c);
    }
    if (!(std::isfinite(r.max_depth_mm()) && r.max_depth_mm() >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("allowed interference '", r.name(),
                                                     "': max_depth_mm must be finite and >= 0"));
    }
    rule.max_depth_mm = r.max_depth_mm();
    out->Add(std::move(rule));
  }
  return absl::OkStatus();
}

bool AllowRule::CoversPair(uint64_t x, uint64_t y) const {
  const auto in_a = [&](uint64_t id) { return a_all || a.contains(id); };
  const auto in_b = [&](uint64_t id) { return b_all || b.contains(id); };
  return pairs_within_a ? (in_a(x) && in_a(y)) : ((in_a(x) && in_b(y)) || (in_b(x) && in_a(y)));
}

bool AllowRule::Covers(uint64_t x, uint64_t y, v1::ClashClass cls, double depth_mm) const {
  if (!CoversPair(x, y)) return false;
  if (!classes.empty() && !classes.contains(cls)) return false;
  return !(cls == v1::HARD && max_depth_mm > 0 && depth_mm > max_depth_mm);
}

void AllowRules::Add(AllowRule rule) {
  const auto index = static_cast<uint32_t>(rules_.size());
  const auto list = [&](const absl::flat_hash_set<uint64_t>& ids) {
    for (uint64_t id : ids) {
      std::vector<uint32_t>& of = by_instance_[id];
      if (of.empty() || of.back() != index) of.push_back(index);
    }
  };
  // A pair the rule covers has an end in each named set (in a, when pairs are within a).
  const bool a_named = !rule.a_all;
  const bool b_named = !rule.pairs_within_a && !rule.b_all;
  if (a_named) list(rule.a);
  if (b_named) list(rule.b);
  if (!a_named && !b_named) every_.push_back(index);
  rules_.push_back(std::move(rule));
}

template <typename Pred>
const AllowRule* AllowRules::First(uint64_t x, uint64_t y, const Pred& covers) const {
  static const std::vector<uint32_t> kNone;
  const auto of = [&](uint64_t id) -> const std::vector<uint32_t>& {
    auto it = by_instance_.find(id);
    return it == by_instance_.end() ? kNone : it->second;
  };
  // The three ascending lists, merged: the first rule in request order that covers the pair.
  const std::vector<uint32_t>* lists[3] = {&of(x), x == y ? &kNone : &of(y), &every_};
  std::size_t at[3] = {0, 0, 0};
  for (;;) {
    uint32_t next = std::numeric_limits<uint32_t>::max();
    for (int k = 0; k < 3; ++k) {
      if (at[k] < lists[k]->size()) next = std::min(next, (*lists[k])[at[k]]);
    }
    if (next == std::numeric_limits<uint32_t>::max()) return nullptr;
    for (int k = 0; k < 3; ++k) {
      if (at[k] < lists[k]->size() && (*lists[k])[at[k]] == next) ++at[k];
    }
    if (covers(rules_[next])) return &rules_[next];
  }
}

const AllowRule* AllowRules::FirstCoveringPair(uint64_t x, uint64_t y) const {
  return First(x, y, [&](const AllowRule& r) { return r.CoversPair(x, y); });
}

const AllowRule* AllowRules::FirstCovering(uint64_t x, uint64_t y, v1::ClashClass cls,
                                           double depth_mm) const {
  return First(x, y, [&](const AllowRule& r) { return r.Covers(x, y, cls, depth_mm); });
}

std::string ClashId(const std::string& path_a, const std::string& path_b) {
  // The paths joined by a newline when neither holds one: the form every id has been made from,
  // which the join inverts. A path may hold newlines, which would make that join ambiguous
  // ("x\ny" + "z" and "x" + "y\nz"): such a pair is hashed as the first path's length and the
  // two paths, after two newlines, so that the key has three newlines or more and no join of
  // newline-free paths (exactly one) can equal it.
  const bool plain =
      path_a.find('\n') == std::string::npos && path_b.find('\n') == std::string::npos;
  const std::string key = plain ? absl::StrCat(path_a, "\n", path_b)
                                : absl::StrCat("\n\n", path_a.size(), "\n", path_a, path_b);
  return absl::StrCat("c", cad::Sha256Hex(key).substr(0, 16));
}

absl::StatusOr<std::vector<const InstanceRec*>> SelectInstances(
    const Scene& scene, const v1::InstanceSelector& selector) {
  std::vector<const InstanceRec*> out;
  if (SelectsAll(selector)) {
    for (const auto& [id, rec] : scene.instances) {
      if (rec.enabled) out.push_back(&rec);
    }
    return out;
  }
  std::set<uint64_t> chosen;  // ordered: answers list instances by id
  for (uint64_t id : selector.instance_ids()) {
    if (scene.Find(id) == nullptr) {
      return absl::NotFoundError(absl::StrCat("no instance ", id, " in scene"));
    }
    chosen.insert(id);
  }
  absl::flat_hash_set<std::string_view> seen_groups;
  for (const std::string& g : selector.groups()) {
    if (!seen_groups.insert(g).second) continue;
    auto it = scene.groups.find(g);
    if (it == scene.groups.end()) return absl::NotFoundError(absl::StrCat("no group '", g, "'"));
    chosen.insert(it->second.begin(), it->second.end());
  }
  // A path is under a prefix when it is the prefix or continues it with '/': the prefix itself
  // and the range ["prefix/", "prefix0") of the ordered paths ('0' follows '/'), so a prefix
  // costs a lookup and its matches, not a pass over the scene.
  absl::flat_hash_set<std::string_view> seen_prefixes;
  std::string key;
  for (const std::string& prefix : selector.path_prefixes()) {
    if (!seen_prefixes.insert(prefix).second) continue;
    bool matched = false;
    if (auto it = scene.by_path.find(prefix); it != scene.by_path.end()) {
      matched = true;
      chosen.insert(it->second);
    }
    key.assign(prefix).push_back('/');
    auto it = scene.by_path.lower_bound(key);
    key.back() = '/' + 1;
    for (const auto end = scene.by_path.lower_bound(key); it != end; ++it) {
      matched = true;
      chosen.insert(it->second);
    }
    if (!matched) return absl::NotFoundError(absl::StrCat("no instance under path '", prefix, "'"));
  }
  for (uint64_t id : chosen) {
    const InstanceRec* rec = scene.Find(id);
    if (rec != nullptr && rec->enabled) out.push_back(rec);
  }
  return out;
}

namespace {

// The stop of a query worked on by several threads: the first non-OK status of the call's
// stop check, after which no thread claims more work.
class SharedStop {
 public:
  explicit SharedStop(const StopCheck& stop) : stop_(stop) {}
  // False once the call is to stop (checks it now).
  bool GoOn() {
    if (stopped_.load(std::memory_order_relaxed)) return false;
    if (!stop_) return true;
    absl::Status st = stop_();
    if (st.ok()) return true;
    std::lock_guard lock(mu_);
    if (status_.ok()) status_ = std::move(st);
    stopped_ = true;
    return false;
  }
  // The stop status (OK when none fired); read after the work is done.
  [[nodiscard]] absl::Status status() {
    std::lock_guard lock(mu_);
    return status_;
  }

 private:
  const StopCheck& stop_;
  std::atomic<bool> stopped_{false};
  std::mutex mu_;
  absl::Status status_;
};

// fn(i) for every i in [0, n): through `helpers` when given, else on this thread in order.
void ForEachItem(QueryHelpers* helpers, std::size_t n, const std::function<void(std::size_t)>& fn) {
  if (helpers != nullptr) {
    helpers->ForEach(n, fn);
  } else {
    for (std::size_t i = 0; i < n; ++i) fn(i);
  }
}

}  // namespace

absl::StatusOr<v1::InterferenceResponse> RunInterference(const Scene& scene,
                                                         const v1::InterferenceRequest& request,
                                                         const StopCheck& stop,
                                                         const QueryLimits& limits,
                                                         QueryHelpers* helpers) {
  const v1::Tolerances& tol = request.tolerances();
  CLASH_RETURN_IF_ERROR(ValidateTolerances(tol));
  if (request.page_size() < 0) return absl::InvalidArgumentError("page_size must be >= 0");
  const std::size_t page_size =
      request.page_size() == 0 ? 1000 : std::min(request.page_size(), 10000);
  CLASH_ASSIGN_OR_RETURN(const PageToken token, ParsePageToken(request.page_token()));
  // The request's fingerprint, computed once and only when a token is given or handed out.
  std::optional<uint64_t> fingerprint;
  const auto fingerprint_of_request = [&] {
    if (!fingerprint) fingerprint = RequestFingerprint(request);
    return *fingerprint;
  };
  if (!request.page_token().empty()) {
    // The request first: a token of another scene's listing is no older version of this one.
    if (token.fingerprint != fingerprint_of_request()) {
      return absl::InvalidArgumentError(
          "page_token is from another request: every field but page_size and page_token must "
          "be as in the request that gave it");
    }
    if (token.version != scene.version) {
      return absl::FailedPreconditionError(absl::StrCat("page_token is from scene version ",
                                                        token.version, "; the scene is now at ",
                                                        scene.version, ": start again"));
    }
  }
  CLASH_ASSIGN_OR_RETURN(PosedScene posed, PosedScene::Make(scene, request.pose_overrides()));
  CLASH_ASSIGN_OR_RETURN(std::vector<const InstanceRec*> set_a,
                         SelectInstances(scene, request.set_a()));
  const Selection in_a = SelectionOf(request.set_a(), set_a);
  Selection in_b;
  std::vector<const InstanceRec*> set_b;  // listed when it names instances
  if (request.has_set_b()) {
    if (!SelectsAll(request.set_b())) {
      CLASH_ASSIGN_OR_RETURN(set_b, SelectInstances(scene, request.set_b()));
    }
    in_b = SelectionOf(request.set_b(), set_b);
  }
  // The broad phase is asked about each instance of the smaller set (a set naming nothing is
  // every instance): one part dragged against the scene costs one query either way round.
  const bool walk_b = request.has_set_b() && !in_b.all && set_b.size() < set_a.size();
  AllowRules rules;
  CLASH_RETURN_IF_ERROR(ResolveAllowRules(scene, request.allowed(), &rules));
  // The depth each pair must resolve: all of it, or (for the class only) up to the deepest
  // limit of a rule, so that every rule covers what it would with the full depth.
  double depth_cap_mm = std::numeric_limits<double>::infinity();
  v1::DepthEstimate estimate = v1::DEPTH_ESTIMATE_FULL;  // echoed in the answer
  switch (request.depth_estimate()) {
    case v1::DEPTH_ESTIMATE_UNSPECIFIED:
    case v1::DEPTH_ESTIMATE_FULL:
      break;
    case v1::DEPTH_ESTIMATE_CLASS_ONLY:
      estimate = v1::DEPTH_ESTIMATE_CLASS_ONLY;
      depth_cap_mm = 0;
      for (const AllowRule& rule : rules.rules()) {
        depth_cap_mm = std::max(depth_cap_mm, rule.max_depth_mm);
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown depth_estimate ", static_cast<int>(request.depth_estimate())));
  }

  // The broad phase grows boxes by the largest tolerance any pair can have.
  const double max_tau =
      ContactTolerance(tol, 2 * scene.max_deflection_mm, scene.max_part_diagonal_mm);
  const double margin = std::max(max_tau, tol.clearance_mm());
  CLASH_ASSIGN_OR_RETURN(const auto candidates,
                         CandidatePairs(scene, posed, walk_b ? set_b : set_a, in_a,
                                        request.has_set_b() ? &in_b : nullptr, margin,
                                        limits.max_candidate_pairs, stop));

  v1::InterferenceResponse response;
  v1::InterferenceSummary* summary = response.mutable_summary();
  if (in_a.all || in_b.all) {
    summary->set_instances(scene.tree.size());
  } else {
    IdSet involved = in_a.ids;
    involved.insert(in_b.ids.begin(), in_b.ids.end());
    summary->set_instances(involved.size());
  }
  // Candidate pairs go in blocks: from the pair cache where it has them, the rest classified
  // (on helpers too when given), every classified pair cached, then reported in order. Blocks
  // bound the memory a query of millions of pairs holds; caching before a stop keeps the work
  // of a query stopped by its deadline for the next try.
  struct Job {
    const InstanceRec* ra;
    const InstanceRec* rb;
    Posed a, b;
    geom::PairTolerances tol;
    bool cacheable = false;
    bool done = false;  // pc holds the answer (from the cache or classified)
    geom::PairClassification pc;
  };
  constexpr std::size_t kBlockPairs = 1024;
  std::vector<Job> jobs;
  jobs.reserve(kBlockPairs);
  std::vector<std::size_t> to_classify;
  // A clash found, kept small: only the page's clashes become messages.
  struct Found {
    const InstanceRec* ra;  // the pair as classified (pc's A and B)
    const InstanceRec* rb;
    geom::PairClassification pc;
    double contact_mm;
    const AllowRule* rule;  // the rule suppressing it, or null
    v1::ClashClass cls;
    // The ends by path, the order of the answer.
    [[nodiscard]] const std::string& path_lo() const { return std::min(ra->path, rb->path); }
    [[nodiscard]] const std::string& path_hi() const { return std::max(ra->path, rb->path); }
  };
  std::vector<Found> clashes;
  auto report = [&](const Job& j) -> absl::Status {
    if (j.pc.cls == geom::ClashClass::kClear) return absl::OkStatus();
    if (clashes.size() >= limits.max_clashes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "more than ", limits.max_clashes,
          " clashes: narrow set_a and set_b, or check the placement (parts at one spot?)"));
    }
    const v1::ClashClass cls = ToProto(j.pc.cls);
    // A depth that could not be estimated (an open part) is no shallow depth: a rule with a
    // depth limit does not cover it.
    const AllowRule* rule = rules.FirstCovering(
        j.ra->id, j.rb->id, cls,
        j.pc.depth_unknown ? std::numeric_limits<double>::infinity() : j.pc.depth_mm);
    if (rule != nullptr) {
      summary->set_suppressed(summary->suppressed() + 1);
    } else {
      switch (cls) {
        case v1::HARD:
          summary->set_hard(summary->hard() + 1);
          break;
        case v1::CONTACT:
          summary->set_contact(summary->contact() + 1);
          break;
        case v1::CLEARANCE:
          summary->set_clearance(summary->clearance() + 1);
          break;
        case v1::CONTAINED:
          summary->set_contained(summary->contained() + 1);
          break;
        default:
          break;
      }
    }
    clashes.push_back({j.ra, j.rb, j.pc, j.tol.contact_mm, rule, cls});
    return absl::OkStatus();
  };
  const auto to_message = [](const Found& f) {
    v1::Clash c;
    const geom::PairClassification& pc = f.pc;
    const PairEnds e = OrderByPath(*f.ra, *f.rb, pc.p_WA, pc.p_WB, pc.tri_a, pc.tri_b);
    c.set_clash_id(ClashId(e.a->path, e.b->path));
    c.set_instance_a(e.a->id);
    c.set_instance_b(e.b->id);
    c.set_path_a(e.a->path);
    c.set_path_b(e.b->path);
    c.set_part_a(e.a->part->info.part_id());
    c.set_part_b(e.b->part->info.part_id());
    c.set_clash_class(f.cls);
    c.set_depth_mm(pc.depth_mm);
    c.set_distance_mm(std::isfinite(pc.distance_mm) ? pc.distance_mm : 0.0);
    ToProto(e.p_a, c.mutable_point_a_mm());
    ToProto(e.p_b, c.mutable_point_b_mm());
    c.set_face_a(e.face_a);
    c.set_face_b(e.face_b);
    c.set_intersecting_triangle_pairs(static_cast<uint32_t>(pc.intersecting_pairs));
    c.set_intersections_truncated(pc.intersections_truncated);
    c.set_uncertain(pc.uncertain);
    c.set_contact_tolerance_mm(f.contact_mm);
    if (f.rule != nullptr) {
      c.set_suppressed(true);
      c.set_suppressed_by(f.rule->name);
    }
    return c;
  };
  auto run_block = [&]() -> absl::Status {
    SharedStop shared_stop(stop);
    ForEachItem(helpers, to_classify.size(), [&](std::size_t k) {
      if (!shared_stop.GoOn()) return;
      Job& j = jobs[to_classify[k]];
      j.pc = geom::ClassifyPair(*j.ra->part->geom, j.a.X_WP, *j.rb->part->geom, j.b.X_WP, j.tol);
      j.done = true;
    });
    {
      std::lock_guard lock(scene.cache_mu);
      for (std::size_t k : to_classify) {
        const Job& j = jobs[k];
        if (!j.done || !j.cacheable) continue;
        scene.pair_cache.Put({j.ra->id, j.rb->id},
                             CachedPair{j.ra->pose_version, j.rb->pose_version, j.tol.contact_mm,
                                        j.tol.clearance_mm, j.tol.depth_cap_mm, j.pc});
      }
    }
    CLASH_RETURN_IF_ERROR(shared_stop.status());
    for (const Job& j : jobs) CLASH_RETURN_IF_ERROR(report(j));
    jobs.clear();
    to_classify.clear();
    return absl::OkStatus();
  };
  int since_stop = 0;
  for (const auto& [ra, rb] : candidates) {
    if (++since_stop == kStopEvery) {
      since_stop = 0;
      if (stop) CLASH_RETURN_IF_ERROR(stop());
    }
    Job job{ra, rb, posed.Get(*ra), posed.Get(*rb), {}, false, false, {}};
    job.tol.contact_mm = PairTolerance(tol, *ra, *rb);
    job.tol.clearance_mm = tol.clearance_mm();
    job.tol.depth_cap_mm = depth_cap_mm;
    const double grow = std::max(job.tol.contact_mm, job.tol.clearance_mm);
    if (!job.a.box.Inflated(grow).Overlaps(job.b.box)) continue;
    summary->set_candidate_pairs(summary->candidate_pairs() + 1);
    job.cacheable = !job.a.overridden && !job.b.overridden;
    if (job.cacheable) {
      std::lock_guard lock(scene.cache_mu);
      const CachedPair* hit = scene.pair_cache.Find({ra->id, rb->id});
      if (hit != nullptr && hit->pose_version_a == ra->pose_version &&
          hit->pose_version_b == rb->pose_version && hit->contact_mm == job.tol.contact_mm &&
          hit->clearance_mm == job.tol.clearance_mm && hit->depth_cap_mm >= job.tol.depth_cap_mm) {
        job.pc = hit->result;
        job.done = true;
        summary->set_cached_pairs(summary->cached_pairs() + 1);
      }
    }
    if (!job.done) to_classify.push_back(jobs.size());
    jobs.push_back(std::move(job));
    if (jobs.size() == kBlockPairs) CLASH_RETURN_IF_ERROR(run_block());
  }
  CLASH_RETURN_IF_ERROR(run_block());
  std::sort(clashes.begin(), clashes.end(), [](const Found& p, const Found& q) {
    const int rp = ClassRank(p.cls);
    const int rq = ClassRank(q.cls);
    if (rp != rq) return rp < rq;
    if (p.path_lo() != q.path_lo()) return p.path_lo() < q.path_lo();
    return p.path_hi() < q.path_hi();
  });
  const std::size_t begin = std::min(token.offset, clashes.size());
  std::size_t end = std::min(begin + page_size, clashes.size());
  std::size_t page_bytes = 0;
  for (std::size_t i = begin; i < end; ++i) {
    if (page_bytes > limits.max_page_bytes) {  // the rest on the next page
      end = i;
      break;
    }
    v1::Clash* c = response.add_clashes();
    *c = to_message(clashes[i]);
    page_bytes += c->ByteSizeLong() + 8;
  }
  if (end < clashes.size()) {
    response.set_next_page_token(FormatPageToken({scene.version, end, fingerprint_of_request()}));
  }
  response.set_scene_version(scene.version);
  *response.mutable_tolerances() = tol;
  response.set_depth_estimate(estimate);
  return response;
}

absl::StatusOr<v1::DistanceResponse> RunDistance(const Scene& scene,
                                                 const v1::DistanceRequest& request,
                                                 const StopCheck& stop, const QueryLimits& limits) {
  if (!(std::isfinite(request.max_distance_mm()) && request.max_distance_mm() >= 0)) {
    return absl::InvalidArgumentError("max_distance_mm must be finite and >= 0");
  }
  CLASH_ASSIGN_OR_RETURN(PosedScene posed, PosedScene::Make(scene, request.pose_overrides()));
  CLASH_ASSIGN_OR_RETURN(std::vector<const InstanceRec*> set_a,
                         SelectInstances(scene, request.set_a()));
  const bool two_sets = request.has_set_b();
  // A few instances against the whole scene (a dragged part's clearance): the scene's broad
  // phase gives the instances near them, without a walk of every instance.
  const bool against_scene =
      two_sets && SelectsAll(request.set_b()) && set_a.size() <= kMaxDirectDistanceSet;
  std::vector<const InstanceRec*> set_b;
  if (two_sets && !against_scene) {
    CLASH_ASSIGN_OR_RETURN(set_b, SelectInstances(scene, request.set_b()));
  }
  const double limit = request.max_distance_mm() > 0 ? request.max_distance_mm()
                                                     : std::numeric_limits<double>::infinity();
  // The instances of either set, each once, with a vertex of its part in the world (a point of
  // its surface: the distance between two such points bounds the pair's distance from above)
  // and the magnitude of its box's coordinates (what the rounding of box distances scales with).
  struct Member {
    Posed posed;
    geom::Vec3 point_W;
    double magnitude = 0;
    bool in_a = false;
    bool in_b = false;
  };
  std::vector<Member> members;
  absl::flat_hash_map<uint64_t, std::size_t> index;  // by instance id
  auto member_of = [&](const InstanceRec* r) {
    Member m;
    m.in_b = against_scene;  // set_b is every instance
    m.posed = posed.Get(*r);
    m.point_W = m.posed.X_WP * r->part->geom->AnyVertex();
    m.magnitude =
        std::max(m.posed.box.min.cwiseAbs().maxCoeff(), m.posed.box.max.cwiseAbs().maxCoeff()) +
        m.posed.box.Diagonal();
    return m;
  };
  auto enlist = [&](const InstanceRec* r) -> Member& {
    auto [it, fresh] = index.try_emplace(r->id, members.size());
    if (fresh) members.push_back(member_of(r));
    return members[it->second];
  };
  for (const InstanceRec* r : set_a) enlist(r).in_a = true;
  for (const InstanceRec* r : set_b) enlist(r).in_b = true;
  // Candidate pairs: the valid pairs whose box distance (a lower bound of their distance) is
  // within both the limit and `bound`, an upper bound of the answer that comes down as pairs
  // are listed: the distance between the two surface points of a pair, grown by far more than
  // its rounding and that of the box distances it is compared with. Not the n^2 / 2 pairs of a
  // whole scene (2 million for 2000 instances), each hashed and sorted, as before.
  struct Candidate {
    double lower;
    const InstanceRec* a;
    const InstanceRec* b;
  };
  std::vector<Candidate> candidates;
  bool too_many = false;  // more candidates within the bound than limits.max_candidate_pairs
  double bound = limit;
  auto can_pair = [&](const Member& x, const Member& y) {
    return !two_sets || (x.in_a && y.in_b) || (x.in_b && y.in_a);
  };
  auto tighten = [&](const Member& x, const Member& y) {
    const double slack = 1e-9 * (x.magnitude + y.magnitude);
    bound = std::min(bound, (x.point_W - y.point_W).norm() * (1.0 + 1e-9) + slack);
  };
  // A valid pair, listed when its boxes are within the bound. Its order (which instance is
  // Distance's first argument): the one from set_a when only one order is valid, else the
  // smaller id.
  auto consider = [&](const Member& x, const Member& y) {
    const double lower = x.posed.box.Distance(y.posed.box);
    if (!(lower <= bound)) return;
    const bool x_can_be_a = !two_sets || (x.in_a && y.in_b);
    const bool y_can_be_a = !two_sets || (y.in_a && x.in_b);
    const bool x_first = x_can_be_a && y_can_be_a ? x.posed.rec->id < y.posed.rec->id : x_can_be_a;
    const Member& a = x_first ? x : y;
    const Member& b = x_first ? y : x;
    candidates.push_back({lower, a.posed.rec, b.posed.rec});
    tighten(x, y);
    // Instances at one spot keep every pair within the bound: past the limit, the pairs the
    // bound has left behind go, and if that is not enough the query is refused (RESOURCE_
    // EXHAUSTED), rather than holding gigabytes of pairs (3000 cubes at one spot took 300 MB).
    if (candidates.size() > limits.max_candidate_pairs) {
      std::erase_if(candidates, [&](const Candidate& c) { return c.lower > bound; });
      too_many = candidates.size() > limits.max_candidate_pairs;
    }
  };
  const auto n_a =
      std::count_if(members.begin(), members.end(), [](const Member& m) { return m.in_a; });
  const auto n_b =
      std::count_if(members.begin(), members.end(), [](const Member& m) { return m.in_b; });
  if (against_scene) {
    // members: set_a, each also in set_b (everything). Its pairs with one another and with
    // the other overridden instances are listed directly; those with the rest come from the
    // broad phase (stored poses: overridden instances are skipped there), first within a
    // radius growing from a twentieth of the instance's size until some pair bounds the
    // answer, then within that bound.
    std::vector<Member> others;  // overridden instances outside set_a
    for (uint64_t id : posed.OverriddenIds()) {
      const InstanceRec* r = scene.Find(id);
      if (r == nullptr || !r->enabled || index.contains(id)) continue;
      others.push_back(member_of(r));
    }
    // Visits the instances outside set_a, not overridden, whose tree boxes overlap x's box
    // grown by `radius`; returns how many tree entries it met.
    auto near = [&](const Member& x, double radius, auto&& visit) {
      std::size_t met = 0;
      scene.tree.Query(x.posed.box.Inflated(radius), [&](uint64_t id) {
        ++met;
        if (posed.IsOverridden(id) || index.contains(id)) return;
        if (const InstanceRec* r = scene.Find(id)) visit(member_of(r));
      });
      return met;
    };
    for (std::size_t i = 0; i < members.size(); ++i) {
      for (std::size_t j = i + 1; j < members.size(); ++j) tighten(members[i], members[j]);
      for (const Member& y : others) tighten(members[i], y);
    }
    for (const Member& x : members) {
      if (stop) CLASH_RETURN_IF_ERROR(stop());
      bool found = false;
      for (double radius = 0.05 * x.posed.box.Diagonal() + 1e-9 * x.magnitude;
           !found && radius < bound; radius *= 8) {
        const std::size_t met = near(x, radius, [&](const Member& y) {
          tighten(x, y);
          found = true;
        });
        if (met == scene.tree.size()) break;
      }
    }
    for (std::size_t i = 0; i < members.size() && !too_many; ++i) {
      const Member& x = members[i];
      for (std::size_t j = i + 1; j < members.size(); ++j) consider(x, members[j]);
      for (const Member& y : others) consider(x, y);
      near(x, bound, [&](const Member& y) { consider(x, y); });
    }
  } else if (two_sets && static_cast<std::size_t>(std::min(n_a, n_b)) <= kMaxDirectDistanceSet) {
    // One small set against an explicit other set: each of its members against all.
    const bool small_is_a = n_a <= n_b;
    auto in_small = [&](const Member& m) { return small_is_a ? m.in_a : m.in_b; };
    for (std::size_t i = 0; i < members.size() && !too_many; ++i) {
      if (!in_small(members[i])) continue;
      if (stop) CLASH_RETURN_IF_ERROR(stop());
      for (std::size_t j = 0; j < members.size(); ++j) {
        if (j == i || !can_pair(members[i], members[j])) continue;
        if (in_small(members[j]) && j < i) continue;  // listed from j already
        consider(members[i], members[j]);
      }
    }
  } else {
    // A sweep along the axis on which the boxes' centres spread most, in order of the boxes'
    // lower ends: each member against those that start within the bound of its upper end.
    // A first bound in linear time, so that the sweep does not start unbounded: the first
    // member of set_a against every member, and each member against its successor.
    geom::Aabb centres;
    for (const Member& m : members) centres.Add(m.posed.box.Center());
    int axis = 0;
    centres.Size().maxCoeff(&axis);
    std::sort(members.begin(), members.end(), [axis](const Member& x, const Member& y) {
      if (x.posed.box.min[axis] != y.posed.box.min[axis]) {
        return x.posed.box.min[axis] < y.posed.box.min[axis];
      }
      return x.posed.rec->id < y.posed.rec->id;
    });
    const auto first_a =
        std::find_if(members.begin(), members.end(), [](const Member& m) { return m.in_a; });
    if (first_a != members.end()) {
      for (const Member& y : members) {
        if (&y != &*first_a && can_pair(*first_a, y)) tighten(*first_a, y);
      }
    }
    for (std::size_t i = 0; i + 1 < members.size(); ++i) {
      if (can_pair(members[i], members[i + 1])) tighten(members[i], members[i + 1]);
    }
    for (std::size_t i = 0; i < members.size() && !too_many; ++i) {
      if (i % 256 == 255 && stop) CLASH_RETURN_IF_ERROR(stop());
      const Member& x = members[i];
      for (std::size_t j = i + 1; j < members.size(); ++j) {
        const Member& y = members[j];
        // The gap on the axis bounds the box distance from below; sorted: all after too.
        if (y.posed.box.min[axis] - x.posed.box.max[axis] > bound) break;
        if (can_pair(x, y)) consider(x, y);
      }
    }
  }
  if (too_many) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "more than ", limits.max_candidate_pairs,
        " instance pairs within the distance bound: narrow set_a and set_b, or check the "
        "placement (parts at one spot?)"));
  }
  // Pairs listed before the bound came down to below their lower bound cannot be the answer.
  std::erase_if(candidates, [&](const Candidate& c) { return c.lower > bound; });
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& p, const Candidate& q) {
    if (p.lower != q.lower) return p.lower < q.lower;
    return std::pair(p.a->id, p.b->id) < std::pair(q.a->id, q.b->id);
  });
  v1::DistanceResponse response;
  response.set_scene_version(scene.version);
  double best = limit;
  geom::DistanceResult best_result;
  const InstanceRec* best_a = nullptr;
  const InstanceRec* best_b = nullptr;
  int since_stop = 0;
  uint64_t measured = 0;
  for (const Candidate& c : candidates) {
    if (c.lower > best || (best_a != nullptr && c.lower >= best)) break;
    if (++since_stop == kStopEvery) {
      since_stop = 0;
      if (stop) CLASH_RETURN_IF_ERROR(stop());
    }
    const Posed a = posed.Get(*c.a);
    const Posed b = posed.Get(*c.b);
    ++measured;
    geom::DistanceResult d =
        geom::Distance(*c.a->part->geom, a.X_WP, *c.b->part->geom, b.X_WP, best);
    if (std::isfinite(d.distance) && (best_a == nullptr || d.distance < best)) {
      best = d.distance;
      best_result = d;
      best_a = c.a;
      best_b = c.b;
    }
  }
  response.set_pairs_measured(measured);
  if (best_a == nullptr) return response;
  const PairEnds e = OrderByPath(*best_a, *best_b, best_result.p_WA, best_result.p_WB,
                                 best_result.tri_a, best_result.tri_b);
  response.set_found(true);
  response.set_distance_mm(best_result.distance);
  response.set_instance_a(e.a->id);
  response.set_instance_b(e.b->id);
  response.set_path_a(e.a->path);
  response.set_path_b(e.b->path);
  ToProto(e.p_a, response.mutable_point_a_mm());
  ToProto(e.p_b, response.mutable_point_b_mm());
  response.set_face_a(e.face_a);
  response.set_face_b(e.face_b);
  return response;
}

absl::StatusOr<v1::PickResponse> RunPick(const Scene& scene, const v1::PickRequest& request,
                                         const StopCheck& stop, const QueryLimits& limits,
                                         QueryHelpers* helpers) {
  if (request.rays_size() > limits.max_rays) {
    return absl::InvalidArgumentError(absl::StrCat(
        request.rays_size(), " rays, above the limit of ", limits.max_rays, " per request"));
  }
  CLASH_ASSIGN_OR_RETURN(const Selection targets, Resolve(scene, request.targets()));
  // Every ray is checked before any is cast.
  std::vector<geom::Ray> rays(static_cast<std::size_t>(request.rays_size()));
  for (int i = 0; i < request.rays_size(); ++i) {
    const v1::Ray& r = request.rays(i);
    geom::Ray& ray = rays[static_cast<std::size_t>(i)];
    ray.origin = FromProto(r.origin_mm());
    const geom::Vec3 dir = FromProto(r.direction());
    const double len = dir.stableNorm();  // no overflow or underflow of the squares
    if (!ray.origin.allFinite() || !dir.allFinite() || !(len > 0) || !std::isfinite(len)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ray ", i, ": origin and direction must be finite, direction non-zero"));
    }
    // (As poses: beyond the scene's reach a ray's arithmetic keeps no precision, and an
    // origin at 1e300 mm answered a hit 1e300 mm away.)
    if (!(ray.origin.cwiseAbs().maxCoeff() <= Scene::kMaxCoordinateMm)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ray ", i, ": origin beyond the scene's reach (±", Scene::kMaxCoordinateMm, " mm)"));
    }
    if (!(std::isfinite(r.max_distance_mm()) && r.max_distance_mm() >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ray ", i, ": max_distance_mm must be finite and >= 0"));
    }
    ray.direction = dir / len;
    if (r.max_distance_mm() > 0) ray.t_max = r.max_distance_mm();
  }
  struct Hit {
    std::optional<geom::RayHit> hit;
    const InstanceRec* rec = nullptr;
  };
  std::vector<Hit> hits(rays.size());
  // Rays in chunks (on helpers too when given); a stop ends the claiming of further chunks.
  constexpr std::size_t kRaysPerChunk = 16;
  const std::size_t chunks = (rays.size() + kRaysPerChunk - 1) / kRaysPerChunk;
  SharedStop shared_stop(stop);
  ForEachItem(helpers, chunks, [&](std::size_t chunk) {
    if (!shared_stop.GoOn()) return;
    const std::size_t end = std::min(rays.size(), (chunk + 1) * kRaysPerChunk);
    for (std::size_t i = chunk * kRaysPerChunk; i < end; ++i) {
      geom::Ray ray = rays[i];
      Hit& best = hits[i];
      scene.tree.QueryRay(ray, [&](uint64_t id, double /*t_entry*/) {
        if (!targets.Contains(id)) return ray.t_max;
        const InstanceRec* rec = scene.Find(id);
        if (rec == nullptr) return ray.t_max;
        std::optional<geom::RayHit> hit = geom::CastRay(*rec->part->geom, rec->X_WP, ray);
        // Equal distances go to the smaller instance id, whatever order the tree (whose shape
        // depends on the scene's history) visits them in.
        if (hit && (!best.hit || hit->t < best.hit->t ||
                    (hit->t == best.hit->t && rec->id < best.rec->id))) {
          best.hit = hit;
          best.rec = rec;
          ray.t_max = hit->t;
        }
        return ray.t_max;
      });
    }
  });
  CLASH_RETURN_IF_ERROR(shared_stop.status());

  v1::PickResponse response;
  response.set_scene_version(scene.version);
  // Counted as the hits are listed, so that an answer gRPC could not send (long instance
  // paths times many rays) is refused before it is built.
  std::size_t answer_bytes = 0;
  for (const Hit& h : hits) {
    v1::PickHit* out = response.add_hits();
    answer_bytes += 4;
    if (!h.hit) continue;
    // (A hit with a short path and a part id takes about 130 bytes: ~96 besides its strings.)
    answer_bytes += 100 + h.rec->path.size() + h.rec->part->info.part_id().size();
    if (answer_bytes > limits.max_answer_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the answer to ", hits.size(), " rays would take more than ", limits.max_answer_bytes,
          " bytes (--max-message-bytes; the hit instances' paths are long): cast fewer rays "
          "per call"));
    }
    const geom::RayHit& best = *h.hit;
    out->set_hit(true);
    out->set_instance_id(h.rec->id);
    out->set_path(h.rec->path);
    out->set_part_id(h.rec->part->info.part_id());
    out->set_triangle(h.rec->part->geom->mesh().SourceIndex(best.triangle));
    out->set_face_id(best.tag);
    ToProto(best.p_W, out->mutable_point_mm());
    ToProto(best.normal_W, out->mutable_normal());
    out->set_distance_mm(best.t);
  }
  return response;
}

}  // namespace clash::server
