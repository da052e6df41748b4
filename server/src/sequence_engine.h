// Sequence validation on one scene (DESIGN.md §6): for each step, the moving instances swept
// continuously along their motion against the instances standing at that point.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "clash/geom/motion.h"
#include "clash/geom/sweep.h"
#include "clash/v1/sequences.pb.h"
#include "query_engine.h"
#include "scene.h"

namespace clash::server {

/// The geometry-core motion of a wire motion that ends at `X_installed` (a linear motion starts
/// distance_mm back along -direction, a rotation or screw the whole angle back); INVALID_ARGUMENT
/// naming `what` for a bad motion, RESOURCE_EXHAUSTED for a path of more than kMaxKeyframes.
[[nodiscard]] absl::StatusOr<geom::Motion> MotionToInstall(const v1::Motion& m,
                                                           const geom::RigidTransform& X_installed,
                                                           const std::string& what);

/// Keyframes a path may have (RESOURCE_EXHAUSTED beyond).
inline constexpr int kMaxKeyframes = 10'000;

/// Most instances a sequence's staged entries may name in all (counted with repeats): beyond
/// it, RESOURCE_EXHAUSTED.
inline constexpr std::size_t kMaxStagedInstances = std::size_t{1} << 22;

/// Pairs a step lists in StepResult.suppressed (suppressed_pairs counts them all).
inline constexpr int kMaxSuppressedListed = 1000;

/// Bounds on a sequence's work besides its stop check.
struct SequenceLimits {
  /// Poses one mover's sweep may check in a step (geom::SweepOptions::max_iterations); a sweep
  /// that reaches it leaves its step undecided.
  int max_sweep_iterations = geom::SweepOptions{}.max_iterations;
  /// Least time between progress events within a step (one also comes at each step's start
  /// and end).
  absl::Duration progress_interval = absl::Milliseconds(500);
};

/// Runs the sequence; `emit` receives progress, one StepResult per step run, then the summary.
/// The caller holds the scene's mutex shared. Errors: NOT_FOUND (unknown instances, groups or
/// paths), INVALID_ARGUMENT (bad motions or tolerances, an instance moved by two steps, a step
/// moving nothing), and `stop`'s status.
[[nodiscard]] absl::Status RunSequence(
    const Scene& scene, const v1::ValidateSequenceRequest& request, const StopCheck& stop,
    const std::function<void(const v1::ValidateSequenceEvent&)>& emit,
    const SequenceLimits& limits = {});

}  // namespace clash::server
