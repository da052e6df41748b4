// The queries of QueryService on one scene: interference classification, minimum distance and
// ray picks. Callers hold the scene's mutex shared for the duration of a call.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "clash/v1/queries.pb.h"
#include "scene.h"

namespace clash::server {

class QueryHelpers;

/// Polled during long work: a non-OK status (CANCELLED, DEADLINE_EXCEEDED) stops the query,
/// which returns that status. Called from helper threads too when a query is given helpers,
/// so it must be thread-safe.
using StopCheck = std::function<absl::Status()>;

/// Limits of one query.
struct QueryLimits {
  int max_rays = 100'000;
  /// Interference: instance pairs whose boxes (grown by the tolerances) overlap, and clashes
  /// found; RESOURCE_EXHAUSTED beyond (a scene of parts placed at one spot, not a check to
  /// run: about 40 and 140 bytes each). Distance: pairs within the bound (24 bytes each).
  std::size_t max_candidate_pairs = std::size_t{1} << 24;
  std::size_t max_clashes = std::size_t{1} << 22;
  /// Interference: a page ends at page_size clashes or once its clashes take more than this
  /// many bytes (instance paths may be long), whichever comes first; it always holds one.
  std::size_t max_page_bytes = std::size_t{64} << 20;
  /// Pick: RESOURCE_EXHAUSTED when the answer would take more than this many bytes.
  std::size_t max_answer_bytes = std::size_t{256} << 20;
};

/// INVALID_ARGUMENT for a negative or non-finite contact tolerance or clearance.
[[nodiscard]] absl::Status ValidateTolerances(const v1::Tolerances& tol);

/// The contact tolerance τ: the explicit one, else `deflection_sum` (the parts' tessellation
/// deflections added), at least 1e-6 of `diagonal` (the larger part's).
[[nodiscard]] double ContactTolerance(const v1::Tolerances& tol, double deflection_sum,
                                      double diagonal);

/// An allowed-interference rule resolved to instance sets.
struct AllowRule {
  std::string name;
  absl::flat_hash_set<uint64_t> a;   ///< When !a_all.
  absl::flat_hash_set<uint64_t> b;   ///< When !b_all.
  bool a_all = false;                ///< a names nothing: every instance (no set is made).
  bool b_all = false;                ///< Likewise for b (when it is present).
  bool pairs_within_a = true;        ///< No set b: any two instances of a.
  absl::flat_hash_set<int> classes;  ///< Empty: every class.
  double max_depth_mm = 0;           ///< > 0: deeper HARD clashes are not covered.
  /// The rule names this pair (whatever the class).
  [[nodiscard]] bool CoversPair(uint64_t x, uint64_t y) const;
  /// The rule suppresses a clash of this pair, class and depth.
  [[nodiscard]] bool Covers(uint64_t x, uint64_t y, v1::ClashClass cls, double depth_mm) const;
};

/// Rules a request may give, and instances their selectors may name in all (counting an
/// instance once per selector naming it; an empty selector, every instance, counts none):
/// RESOURCE_EXHAUSTED beyond, as for other sizes.
inline constexpr int kMaxAllowRules = 10'000;
inline constexpr std::size_t kMaxAllowRuleInstances = std::size_t{1} << 22;

/// Resolved rules in request order, indexed by the instances they name: finding the rule of a
/// pair looks at the rules naming either end and those naming every instance, not at every
/// rule (a report of many clashes under many rules).
class AllowRules {
 public:
  /// Appends a rule (after those already held: it comes later in the order of precedence).
  void Add(AllowRule rule);
  [[nodiscard]] const std::vector<AllowRule>& rules() const { return rules_; }
  [[nodiscard]] bool empty() const { return rules_.empty(); }
  /// The first rule that names the pair (whatever the class), or nullptr.
  [[nodiscard]] const AllowRule* FirstCoveringPair(uint64_t x, uint64_t y) const;
  /// The first rule that suppresses a clash of this pair, class and depth, or nullptr.
  [[nodiscard]] const AllowRule* FirstCovering(uint64_t x, uint64_t y, v1::ClashClass cls,
                                               double depth_mm) const;

 private:
  template <typename Pred>
  const AllowRule* First(uint64_t x, uint64_t y, const Pred& covers) const;

  std::vector<AllowRule> rules_;
  // Rules (indices, ascending) whose sets hold the instance; a rule naming a set on one side
  // and every instance on the other is listed under the set's instances only, since one end of
  // every pair it covers is among them.
  absl::flat_hash_map<uint64_t, std::vector<uint32_t>> by_instance_;
  std::vector<uint32_t> every_;  // rules naming every instance on each side
};

/// Appends the rules, resolved on the scene. NOT_FOUND as SelectInstances; RESOURCE_EXHAUSTED
/// beyond kMaxAllowRules or kMaxAllowRuleInstances.
[[nodiscard]] absl::Status ResolveAllowRules(
    const Scene& scene, const google::protobuf::RepeatedPtrField<v1::AllowedInterference>& in,
    AllowRules* out);

/// Interference over a scene. The candidate pairs are classified through `helpers` when given
/// (on idle query slots too), else on this thread; the answer is the same either way.
[[nodiscard]] absl::StatusOr<v1::InterferenceResponse> RunInterference(
    const Scene& scene, const v1::InterferenceRequest& request, const StopCheck& stop,
    const QueryLimits& limits = {}, QueryHelpers* helpers = nullptr);

/// The minimum distance; RESOURCE_EXHAUSTED when more than limits.max_candidate_pairs pairs
/// stay within the distance bound (instances at one spot).
[[nodiscard]] absl::StatusOr<v1::DistanceResponse> RunDistance(const Scene& scene,
                                                               const v1::DistanceRequest& request,
                                                               const StopCheck& stop,
                                                               const QueryLimits& limits = {});

/// Ray picks; the rays are cast through `helpers` when given (on idle query slots too), else
/// on this thread; the answer is the same either way. RESOURCE_EXHAUSTED when the answer would
/// take more than limits.max_answer_bytes.
[[nodiscard]] absl::StatusOr<v1::PickResponse> RunPick(const Scene& scene,
                                                       const v1::PickRequest& request,
                                                       const StopCheck& stop,
                                                       const QueryLimits& limits = {},
                                                       QueryHelpers* helpers = nullptr);

/// The instances a selector chooses (enabled only), in id order. NOT_FOUND for an unknown
/// instance id or group, or a path prefix that matches nothing.
[[nodiscard]] absl::StatusOr<std::vector<const InstanceRec*>> SelectInstances(
    const Scene& scene, const v1::InstanceSelector& selector);

/// The stable id of the clash between two paths (path_a < path_b): "c" and 16 hex digits of
/// the SHA-256 of the two paths joined by a newline (paths holding newlines: see the .cc).
/// Distinct pairs get distinct keys.
[[nodiscard]] std::string ClashId(const std::string& path_a, const std::string& path_b);

}  // namespace clash::server
