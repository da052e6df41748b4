#include "clashctl/report.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <set>
#include <type_traits>
#include <unordered_map>

#include "Eigen/Geometry"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "clashctl/format.h"
#include "nlohmann/json.hpp"

namespace clash::clashctl {
namespace {

constexpr Matrix4 kIdentity{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};

// Matrix4 is row-major (what the viewer hands to three.js's Matrix4.set).
using RowMajor4 = Eigen::Matrix<double, 4, 4, Eigen::RowMajor>;

Matrix4 Multiply(const Matrix4& a, const Matrix4& b) {
  Matrix4 c;
  Eigen::Map<RowMajor4>(c.data()) =
      Eigen::Map<const RowMajor4>(a.data()) * Eigen::Map<const RowMajor4>(b.data());
  return c;
}

// Inverse of a rigid transform: [R^T, -R^T t].
Matrix4 RigidInverse(const Matrix4& m) {
  Eigen::Isometry3d X;
  X.matrix() = Eigen::Map<const RowMajor4>(m.data());
  Matrix4 r;
  Eigen::Map<RowMajor4>(r.data()) = X.inverse(Eigen::Isometry).matrix();
  return r;
}

using Box = std::array<double, 6>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Box kEmptyBox{kInf, kInf, kInf, -kInf, -kInf, -kInf};

void Extend(Box* box, double x, double y, double z) {
  const double p[3] = {x, y, z};
  for (int k = 0; k < 3; ++k) {
    (*box)[k] = std::min((*box)[k], p[k]);
    (*box)[k + 3] = std::max((*box)[k + 3], p[k]);
  }
}

// `box` grown by the 8 corners of `b` transformed by `m`.
void ExtendTransformed(Box* box, const v1::Box3& b, const Matrix4& m) {
  for (int c = 0; c < 8; ++c) {
    const double x = (c & 1) ? b.max_mm().x() : b.min_mm().x();
    const double y = (c & 2) ? b.max_mm().y() : b.min_mm().y();
    const double z = (c & 4) ? b.max_mm().z() : b.min_mm().z();
    Extend(box, m[0] * x + m[1] * y + m[2] * z + m[3], m[4] * x + m[5] * y + m[6] * z + m[7],
           m[8] * x + m[9] * y + m[10] * z + m[11]);
  }
}

bool Overlaps(const Box& a, const v1::Box3& b) {
  return a[0] <= b.max_mm().x() && b.min_mm().x() <= a[3] && a[1] <= b.max_mm().y() &&
         b.min_mm().y() <= a[4] && a[2] <= b.max_mm().z() && b.min_mm().z() <= a[5];
}

bool PathUnder(const std::string& path, const std::string& prefix) {
  return path == prefix ||
         (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
          path[prefix.size()] == '/');
}

// The instances a selector chooses (README: ids, groups, path prefixes; empty: all enabled).
bool Selects(const v1::InstanceSelector& s, const v1::Instance& inst) {
  if (!inst.enabled()) return false;
  if (s.instance_ids().empty() && s.groups().empty() && s.path_prefixes().empty()) return true;
  for (uint64_t id : s.instance_ids()) {
    if (id == inst.instance_id()) return true;
  }
  for (const std::string& g : s.groups()) {
    for (const std::string& h : inst.groups()) {
      if (g == h) return true;
    }
  }
  for (const std::string& p : s.path_prefixes()) {
    if (PathUnder(inst.path(), p)) return true;
  }
  return false;
}

std::string Num(double v, int decimals = 3) { return absl::StrFormat("%.*f", decimals, v); }

std::string ParamT(double t) { return t < 0 ? "never" : Num(t, 4); }

// Values as base64 of their little-endian 32-bit patterns (float32 for doubles, uint32 as is),
// what the viewer reads into Float32Array / Uint32Array.
template <class T>
std::string Base64Le32(const google::protobuf::RepeatedField<T>& values) {
  std::string bytes;
  bytes.reserve(4 * static_cast<std::size_t>(values.size()));
  for (T v : values) {
    uint32_t u = 0;
    if constexpr (std::is_floating_point_v<T>) {
      u = std::bit_cast<uint32_t>(static_cast<float>(v));
    } else {
      u = static_cast<uint32_t>(v);
    }
    for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<char>((u >> (8 * k)) & 0xff));
  }
  return absl::Base64Escape(bytes);
}

nlohmann::json MatrixJson(const Matrix4& m) {
  nlohmann::json a = nlohmann::json::array();
  for (double v : m) a.push_back(v);
  return a;
}

// The geometry and views as JSON for the viewer. '<' is written as \u003c so that no text of
// the data can close the <script> element holding it.
std::string ViewData(const SequenceReportData& data) {
  std::unordered_map<uint64_t, const v1::Instance*> by_id;
  for (const v1::Instance& inst : data.instances) by_id[inst.instance_id()] = &inst;
  nlohmann::json parts = nlohmann::json::object();
  nlohmann::json views = nlohmann::json::array();
  for (std::size_t i = 0; i < data.views.size(); ++i) {
    const StepView& view = data.views[i];
    nlohmann::json objects = nlohmann::json::array();
    auto add = [&](uint64_t id, const char* role, const Matrix4& motion) {
      auto it = by_id.find(id);
      if (it == by_id.end()) return;
      const v1::Instance& inst = *it->second;
      const std::string& pid = inst.part_id();
      if (!parts.contains(pid)) {
        nlohmann::json part = nlohmann::json::object();
        if (auto m = data.meshes.find(pid); m != data.meshes.end()) {
          part["v"] = Base64Le32(m->second.vertices_mm());
          part["i"] = Base64Le32(m->second.triangles());
        } else if (auto p = data.parts.find(pid); p != data.parts.end()) {
          const v1::Box3& b = p->second.bounds();
          part["box"] = {b.min_mm().x(), b.min_mm().y(), b.min_mm().z(),
                         b.max_mm().x(), b.max_mm().y(), b.max_mm().z()};
        } else {
          return;  // nothing known to draw
        }
        parts[pid] = std::move(part);
      }
      objects.push_back({{"part", pid},
                         {"path", inst.path()},
                         {"role", role},
                         {"m", MatrixJson(Multiply(motion, PoseMatrix(inst.pose())))}});
    };
    for (uint64_t id : view.context) add(id, "context", kIdentity);
    for (uint64_t id : view.blockers) add(id, "blocker", kIdentity);
    for (uint64_t id : view.moving) add(id, "moving", view.motion);
    nlohmann::json witness = nlohmann::json::array();
    if (i < data.steps.size()) {
      for (const v1::Blocker& b : data.steps[i].blockers()) {
        if (b.has_point_mm()) {
          witness.push_back({b.point_mm().x(), b.point_mm().y(), b.point_mm().z()});
        }
      }
    }
    nlohmann::json focus = nlohmann::json::array();
    for (double v : view.focus) focus.push_back(std::isfinite(v) ? v : 0.0);
    views.push_back({{"objects", objects}, {"witness", witness}, {"focus", focus}});
  }
  const std::string text = nlohmann::json{{"parts", parts}, {"views", views}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  return absl::StrReplaceAll(text, {{"<", "\\u003c"}});
}

// Raw text for a <script> element: refuse nothing, but break any "</script" and "<!--" so
// that the HTML parser cannot leave the element early. Neither occurs in three.js or the
// viewer (checked by the report test); this keeps the document well-formed if one ever did.
std::string ScriptText(std::string_view code) {
  return absl::StrReplaceAll(absl::string_view(code.data(), code.size()),
                             {{"</script", "<\\/script"}, {"<!--", "<\\!--"}});
}

// The clearance profile (distance against t) as an inline SVG line plot.
std::string ProfileSvg(const v1::StepResult& step) {
  constexpr double kW = 640, kH = 180, kLeft = 72, kRight = 12, kTop = 10, kBottom = 28;
  double max_d = 0;
  for (const v1::ProfileSample& s : step.profile()) max_d = std::max(max_d, s.distance_mm());
  if (max_d <= 0) max_d = 1;
  auto x = [&](double t) { return kLeft + std::clamp(t, 0.0, 1.0) * (kW - kLeft - kRight); };
  auto y = [&](double d) {
    return kTop + (1.0 - std::clamp(d, 0.0, max_d) / max_d) * (kH - kTop - kBottom);
  };
  std::string points;
  for (const v1::ProfileSample& s : step.profile()) {
    absl::StrAppend(&points, Num(x(s.t()), 1), ",", Num(y(s.distance_mm()), 1), " ");
  }
  std::string svg = absl::StrFormat(
      "<svg class=\"profile\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "role=\"img\" aria-label=\"clearance against t\">\n"
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"plot\"/>\n",
      static_cast<int>(kW), static_cast<int>(kH), static_cast<int>(kW), static_cast<int>(kH), kLeft,
      kTop, kW - kLeft - kRight, kH - kTop - kBottom);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s mm</text>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>\n"
                        "<text x=\"%.1f\" y=\"%.1f\">t = 0</text>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">t = 1</text>\n",
                        kLeft - 4, kTop + 10, Num(max_d, 2), kLeft - 4, kH - kBottom, kLeft, kH - 8,
                        kW - kRight, kH - 8);
  if (!step.ok()) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                          "class=\"blocked\"/>\n",
                          x(step.blocked_t()), x(step.blocked_t()), kTop, kH - kBottom);
  }
  absl::StrAppend(&svg, "<polyline fill=\"none\" class=\"curve\" points=\"", points,
                  "\"/>\n</svg>\n");
  return svg;
}

void Row(std::string* out, const std::string& key, const std::string& html_value) {
  absl::StrAppend(out, "<tr><th>", key, "</th><td>", html_value, "</td></tr>\n");
}

// Texts escaped, one per line.
std::string EscapedLines(const google::protobuf::RepeatedPtrField<std::string>& texts) {
  return absl::StrJoin(texts, "<br>", [](std::string* out, const std::string& text) {
    out->append(XmlEscape(text));
  });
}

std::string StepSection(const v1::StepResult& step, std::size_t view_index) {
  std::string out;
  const std::string status =
      step.ok() ? "OK" : (step.undecided() ? "BLOCKED (undecided)" : "BLOCKED");
  absl::StrAppendFormat(&out,
                        "<section class=\"step %s\" id=\"step-%d\">\n<h2>Step %d: %s "
                        "<span class=\"badge\">%s</span></h2>\n",
                        step.ok() ? "ok" : "blocked", step.step_index() + 1, step.step_index() + 1,
                        XmlEscape(step.name()), status);
  out += "<div class=\"cols\"><div>\n<table class=\"facts\">\n";
  Row(&out, "moving", step.moving_paths().empty() ? "–" : EscapedLines(step.moving_paths()));
  Row(&out, "blocked at t", step.ok() ? "–" : ParamT(step.blocked_t()));
  Row(&out, "first contact t", ParamT(step.first_contact_t()));
  Row(&out, "min clearance",
      absl::StrCat(Mm(step.min_clearance_mm()), " mm at t = ", ParamT(step.min_clearance_t()),
                   step.min_clearance_path().empty()
                       ? ""
                       : absl::StrCat(" to ", XmlEscape(step.min_clearance_path())),
                   step.clearance_violated() ? " <b>(below the clearance)</b>" : ""));
  Row(&out, "contact tolerance τ", absl::StrCat(Mm(step.contact_tolerance_mm()), " mm"));
  Row(&out, "distance queries", absl::StrCat(step.distance_queries()));
  if (!step.suppressed().empty()) {
    const int64_t more = step.suppressed_pairs() - step.suppressed_size();
    Row(&out, "suppressed",
        absl::StrCat(EscapedLines(step.suppressed()),
                     more > 0 ? absl::StrCat("<br>… and ", more, " more pairs") : ""));
  }
  out += "</table>\n";
  if (!step.blockers().empty()) {
    out +=
        "<h3>Blockers</h3>\n<table class=\"list\"><tr><th>instance</th><th>class</th>"
        "<th>witness point (mm)</th><th>blocks</th></tr>\n";
    for (const v1::Blocker& b : step.blockers()) {
      absl::StrAppend(&out, "<tr><td>", XmlEscape(b.path()), " (", b.instance_id(), ")</td><td>",
                      ClassName(b.clash_class()), "</td><td>", FormatVec3(b.point_mm()),
                      "</td><td>", XmlEscape(b.moving_path()), "</td></tr>\n");
    }
    out += "</table>\n";
  }
  if (!step.free_directions().empty()) {
    out +=
        "<h3>Escape directions</h3>\n<table class=\"list\"><tr><th>direction</th><th>vector</th>"
        "<th>free</th><th>distance (mm)</th></tr>\n";
    for (const v1::FreeDirection& d : step.free_directions()) {
      absl::StrAppend(&out, "<tr><td>", XmlEscape(d.name()), "</td><td>", FormatVec3(d.direction()),
                      "</td><td>",
                      d.free()        ? "free"
                      : d.undecided() ? "undecided"
                                      : "blocked",
                      "</td><td>", Mm(d.distance_mm()), "</td></tr>\n");
    }
    out += "</table>\n";
  }
  if (!step.profile().empty()) {
    absl::StrAppend(&out, "<h3>Clearance profile</h3>\n", ProfileSvg(step));
  }
  absl::StrAppendFormat(
      &out,
      "</div><figure><canvas class=\"view\" data-view=\"%d\" width=\"640\" height=\"420\">"
      "</canvas><figcaption><span class=\"key moving\"></span>moving (%s) "
      "<span class=\"key blocker\"></span>blocker <span class=\"key context\"></span>installed "
      "<span class=\"key witness\"></span>contact point — drag to turn, wheel to zoom"
      "</figcaption></figure></div>\n</section>\n",
      view_index, step.ok() ? "installed pose" : "at the blocking pose");
  return out;
}

constexpr char kStyle[] = R"css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
h1 { font-size: 1.5em; margin: 0 0 .3em; } h2 { font-size: 1.2em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: .4em 0; }
th, td { text-align: left; padding: .15em .6em; border-bottom: 1px solid #ddd; vertical-align: top; }
table.facts th { color: #555; font-weight: normal; }
.step { border-top: 2px solid #ccc; margin-top: 1.2em; }
.badge { font-size: .8em; padding: .1em .5em; border-radius: .3em; color: #fff; }
.ok .badge { background: #2a8a3a; } .blocked .badge { background: #c62020; }
.cols { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
figure { margin: .5em 0; } canvas.view { border: 1px solid #ccc; cursor: grab; display: block; }
figcaption { color: #555; font-size: .9em; }
.key { display: inline-block; width: .9em; height: .9em; margin: 0 .3em 0 .6em; vertical-align: middle; }
.key.moving { background: #2f6fdf; } .key.blocker { background: #e01818; }
.key.context { background: #c8ccd2; } .key.witness { background: #ffb000; border-radius: 50%; }
svg.profile text { font-size: 11px; fill: #555; }
svg.profile .plot { fill: #fafafa; stroke: #ccc; } svg.profile .curve { stroke: #2f6fdf; stroke-width: 1.5; }
svg.profile .blocked { stroke: #e01818; stroke-dasharray: 4 3; }
.notes { color: #8a5a00; } footer { margin-top: 2em; color: #777; font-size: .85em; }
)css";

}  // namespace

Matrix4 PoseMatrix(const v1::Pose& pose) {
  Matrix4 m = kIdentity;
  if (pose.has_matrix() && pose.matrix().rows_size() == 9) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m[4 * i + j] = pose.matrix().rows(3 * i + j);
    }
  } else if (pose.has_quaternion()) {
    const v1::Quaternion& q = pose.quaternion();
    const Eigen::Quaterniond quat(q.w(), q.x(), q.y(), q.z());
    if (quat.norm() > 0) {
      Eigen::Map<RowMajor4>(m.data()).topLeftCorner<3, 3>() = quat.normalized().toRotationMatrix();
    }
  }
  m[3] = pose.translation_mm().x();
  m[7] = pose.translation_mm().y();
  m[11] = pose.translation_mm().z();
  return m;
}

std::vector<StepView> PlanStepViews(const v1::ValidateSequenceRequest& request,
                                    const std::vector<v1::StepResult>& steps,
                                    const std::vector<v1::Instance>& instances) {
  std::unordered_map<std::string, const v1::Instance*> by_path;
  std::unordered_map<uint64_t, const v1::Instance*> by_id;
  for (const v1::Instance& inst : instances) {
    by_path[inst.path()] = &inst;
    by_id[inst.instance_id()] = &inst;
  }
  // moved_from[j]: instances moved by step j or a later one.
  const int n = request.steps_size();
  std::vector<std::set<uint64_t>> moved_from(static_cast<std::size_t>(n) + 1);
  for (int j = n - 1; j >= 0; --j) {
    moved_from[j] = moved_from[j + 1];
    for (const v1::Instance& inst : instances) {
      if (Selects(request.steps(j).moving(), inst)) moved_from[j].insert(inst.instance_id());
    }
  }
  std::vector<StepView> views;
  views.reserve(steps.size());
  for (const v1::StepResult& step : steps) {
    StepView view;
    std::set<uint64_t> shown;
    for (const std::string& path : step.moving_paths()) {
      auto it = by_path.find(path);
      if (it != by_path.end() && shown.insert(it->second->instance_id()).second) {
        view.moving.push_back(it->second->instance_id());
      }
    }
    if (!step.ok() && step.has_blocked_pose() && !view.moving.empty()) {
      view.motion = Multiply(PoseMatrix(step.blocked_pose()),
                             RigidInverse(PoseMatrix(by_id.at(view.moving[0])->pose())));
    }
    Box focus = kEmptyBox;
    for (uint64_t id : view.moving) {
      ExtendTransformed(&focus, by_id.at(id)->world_bounds(), view.motion);
    }
    for (const v1::Blocker& b : step.blockers()) {
      auto it = by_id.find(b.instance_id());
      if (it == by_id.end() || !shown.insert(b.instance_id()).second) continue;
      view.blockers.push_back(b.instance_id());
      ExtendTransformed(&focus, it->second->world_bounds(), kIdentity);
    }
    if (focus[0] <= focus[3]) {
      const double diagonal =
          std::hypot(focus[3] - focus[0], focus[4] - focus[1], focus[5] - focus[2]);
      const double margin = 0.25 * diagonal + 5.0;
      Box near = focus;
      for (int k = 0; k < 3; ++k) near[k] -= margin, near[k + 3] += margin;
      const int index = std::clamp(step.step_index(), 0, n);
      for (const v1::Instance& inst : instances) {
        if (!inst.enabled() || moved_from[index].count(inst.instance_id()) ||
            shown.count(inst.instance_id()) || !Overlaps(near, inst.world_bounds())) {
          continue;
        }
        view.context.push_back(inst.instance_id());
      }
    }
    view.focus = focus;
    views.push_back(std::move(view));
  }
  return views;
}

std::vector<std::string> ViewPartIds(const std::vector<StepView>& views,
                                     const std::vector<v1::Instance>& instances) {
  std::unordered_map<uint64_t, const std::string*> part_of;
  for (const v1::Instance& inst : instances) part_of[inst.instance_id()] = &inst.part_id();
  std::vector<std::string> ids;
  std::set<std::string> seen;
  auto add = [&](const std::vector<uint64_t>& list) {
    for (uint64_t id : list) {
      auto it = part_of.find(id);
      if (it != part_of.end() && seen.insert(*it->second).second) ids.push_back(*it->second);
    }
  };
  for (const StepView& v : views) add(v.moving), add(v.blockers);
  for (const StepView& v : views) add(v.context);
  return ids;
}

std::string SequenceHtmlReport(const SequenceReportData& data) {
  const v1::SequenceSummary& sum = data.summary;
  std::string out;
  absl::StrAppend(&out,
                  "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<title>Sequence report: ",
                  XmlEscape(data.sequence_file), "</title>\n<style>", kStyle,
                  "</style>\n</head>\n<body data-render=\"pending\">\n<header>\n"
                  "<h1>Assembly sequence report</h1>\n<table class=\"facts\">\n");
  Row(&out, "scene", XmlEscape(data.scene_id));
  Row(&out, "sequence file", XmlEscape(data.sequence_file));
  Row(&out, "steps",
      absl::StrCat(sum.steps(), ": ", sum.steps_ok(), " ok, ", sum.steps_blocked(), " blocked, ",
                   sum.steps_skipped(), " not run"));
  if (sum.steps_blocked() > 0) {
    Row(&out, "first blocked step", absl::StrCat(sum.first_blocked_step() + 1));
  }
  const v1::Tolerances& tol = sum.tolerances();
  Row(&out, "contact tolerance",
      tol.has_contact_tolerance_mm() ? absl::StrCat(Mm(tol.contact_tolerance_mm()), " mm")
                                     : "per pair: sum of the parts' deflections");
  Row(&out, "clearance", absl::StrCat(Mm(tol.clearance_mm()), " mm"));
  Row(&out, "scene version", absl::StrCat(sum.scene_version()));
  out += "</table>\n";
  for (const std::string& note : data.notes) {
    absl::StrAppend(&out, "<p class=\"notes\">", XmlEscape(note), "</p>\n");
  }
  out += "</header>\n<main>\n";
  for (std::size_t i = 0; i < data.steps.size(); ++i) out += StepSection(data.steps[i], i);
  absl::StrAppend(&out, "</main>\n<footer>Written by clashctl. 3D views drawn with three.js ",
                  std::string(ThreeVersion()),
                  " (MIT licence, embedded below), bundled at build time; this file needs no "
                  "network.</footer>\n");
  absl::StrAppend(&out, "<script type=\"application/json\" id=\"clash-data\">", ViewData(data),
                  "</script>\n");
  absl::StrAppend(
      &out, "<!-- three.js ", std::string(ThreeVersion()), " (npm package three)\n",
      absl::StrReplaceAll(absl::string_view(ThreeLicense().data(), ThreeLicense().size()),
                          {{"--", "- -"}}),
      "-->\n");
  absl::StrAppend(&out, "<script type=\"text/plain\" id=\"three-core\">", ScriptText(ThreeCoreJs()),
                  "</script>\n<script type=\"text/plain\" id=\"three-module\">",
                  ScriptText(ThreeModuleJs()), "</script>\n<script type=\"module\">",
                  ScriptText(ViewerJs()), "</script>\n</body>\n</html>\n");
  return out;
}

}  // namespace clash::clashctl
