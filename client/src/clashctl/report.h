// clashctl's HTML report of a sequence validation (`clashctl validate --html FILE`): one
// self-contained file with the summary, a table per step, the clearance profile as inline SVG
// and a 3D view per step drawn by three.js, which is embedded in the file together with the
// geometry (base64 float32 vertices and uint32 indices), so that viewing needs no network.
// Pure functions of clash.v1 messages; fetching the meshes is the caller's job.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "clash/v1/parts.pb.h"
#include "clash/v1/scenes.pb.h"
#include "clash/v1/sequences.pb.h"

namespace clash::clashctl {

/// Total triangles the report embeds by default; parts beyond it are drawn as their boxes.
inline constexpr uint64_t kDefaultReportTriangles = 500'000;

/// A 4x4 rigid transform, row-major (last row 0 0 0 1).
using Matrix4 = std::array<double, 16>;

/// The 4x4 matrix of a pose (unset rotation: identity).
[[nodiscard]] Matrix4 PoseMatrix(const v1::Pose& pose);

/// What one step's 3D view draws.
struct StepView {
  std::vector<uint64_t> moving;    ///< Instances the step moves (drawn at `motion` * installed).
  std::vector<uint64_t> blockers;  ///< Instances blocking it (red).
  std::vector<uint64_t> context;   ///< Installed instances near them (faint).
  /// World motion of the moving instances: blocked pose * installed pose^-1 of the first
  /// moving instance for a blocked step, the identity otherwise.
  Matrix4 motion{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  /// World box (min x, y, z, max x, y, z) of the moving instances at that pose and the blockers.
  std::array<double, 6> focus{};
};

/// The views of the step results: moving instances (by the result's moving paths), blockers,
/// and context: enabled instances standing installed during the step (moved by no step from this
/// one on, per the request's selectors) whose world bounds reach within a margin of the focus
/// box (a quarter of its diagonal + 5 mm).
[[nodiscard]] std::vector<StepView> PlanStepViews(const v1::ValidateSequenceRequest& request,
                                                  const std::vector<v1::StepResult>& steps,
                                                  const std::vector<v1::Instance>& instances);

/// The distinct part ids the views draw, most important first: those of moving instances and
/// blockers, then context.
[[nodiscard]] std::vector<std::string> ViewPartIds(const std::vector<StepView>& views,
                                                   const std::vector<v1::Instance>& instances);

/// Everything the HTML report shows.
struct SequenceReportData {
  std::string scene_id;
  std::string sequence_file;
  v1::ValidateSequenceRequest request;  ///< As sent (tolerances, options).
  std::vector<v1::StepResult> steps;
  v1::SequenceSummary summary;
  std::vector<v1::Instance> instances;    ///< The scene's instances.
  std::vector<StepView> views;            ///< One per step result (PlanStepViews).
  std::map<std::string, v1::Part> parts;  ///< Descriptions of the drawn parts (bounds).
  /// Meshes of drawn parts; a part without one is drawn as its bounding box.
  std::map<std::string, v1::PartMesh> meshes;
  std::vector<std::string> notes;  ///< Shown under the header (e.g. parts left out).
};

/// The report (text escaped with XmlEscape, valid in HTML too): one HTML document with everything
/// embedded (three.js, its licence, the viewer and the geometry); no external resource.
[[nodiscard]] std::string SequenceHtmlReport(const SequenceReportData& data);

// Embedded at build time (client/report/embed_assets.py).
/// three.js's build/three.core.js and build/three.module.js, as installed from npm.
[[nodiscard]] std::string_view ThreeCoreJs();
[[nodiscard]] std::string_view ThreeModuleJs();
/// three.js's LICENSE (MIT) and package version.
[[nodiscard]] std::string_view ThreeLicense();
[[nodiscard]] std::string_view ThreeVersion();
/// The report's viewer (client/report/viewer.js).
[[nodiscard]] std::string_view ViewerJs();

}  // namespace clash::clashctl
