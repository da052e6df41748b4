#include "clashctl/cli.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "clash/client/client.h"
#include "clashctl/args.h"
#include "clashctl/format.h"
#include "clashctl/report.h"

namespace clash::clashctl {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kFooter[] =
    R"(Selectors (SEL): comma-separated items, their union: an instance id (12), group:NAME,
  path:PREFIX (the path itself or anything below it); 'all' or nothing = every enabled instance.
Poses: --at x,y,z in mm; --rot-deg rx,ry,rz in DEGREES about the fixed X, then Y, then Z axes
  (R = Rz*Ry*Rx), converted to the quaternion the wire carries (radians there); --quat w,x,y,z is
  normalised. Negative values need no quoting: --at -5,0,0.
Output: tables on stdout; --json prints the API message(s) as JSON instead (proto field names);
  -q prints only ids of what was created or listed (the distance for 'distance'), nothing else.
Exit codes:
  0  success
  1  'check' found unsuppressed HARD or CONTAINED clashes; 'validate' found a blocked step (an
     undecided step counts as blocked); 'health' is not SERVING
  2  usage error (bad arguments, unreadable input file, unwritable output file)
  3  the server answered an error (printed as 'clashctl: <CODE>: <message>') or was unreachable)";

struct Globals {
  std::string server = "127.0.0.1:50051";
  std::optional<double> timeout_s;
  bool json = false;
  bool quiet = false;
  bool tls = false;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_server_name;
  std::string token_file;
};

// What every command runs with: the streams, the global options and a client made on first use.
class Session {
 public:
  Session(const Globals& globals, std::ostream& out, std::ostream& err, const Terminal& terminal)
      : globals_(globals), out_(out), err_(err), terminal_(terminal) {}

  /// Makes the client from the global options (TLS files, token): a usage error otherwise.
  absl::Status Connect() {
    client::ClientOptions options;
    options.target = globals_.server;
    options.tls = globals_.tls || !globals_.tls_ca.empty() || !globals_.tls_cert.empty();
    options.tls_ca_file = globals_.tls_ca;
    options.tls_cert_file = globals_.tls_cert;
    options.tls_key_file = globals_.tls_key;
    options.tls_server_name = globals_.tls_server_name;
    absl::StatusOr<std::string> token = client::FindToken(globals_.token_file);
    if (!token.ok()) return token.status();
    options.token = *std::move(token);
    if (globals_.timeout_s) {
      const auto timeout = std::chrono::milliseconds(
          std::max<int64_t>(1, std::llround(*globals_.timeout_s * 1000.0)));
      options.edit_timeout = timeout;
      options.query_timeout = timeout;
      options.import_timeout = timeout;
      options.sequence_timeout = timeout;
      options.health_timeout = timeout;
    }
    absl::StatusOr<std::unique_ptr<client::Client>> client = client::Client::Connect(options);
    if (!client.ok()) return client.status();
    client_ = *std::move(client);
    return absl::OkStatus();
  }

  /// The client Connect made (Run connects before any command).
  client::Client& client() { return *client_; }

  /// A usage error: the message, a hint, kExitUsage.
  int Usage(const absl::Status& status) {
    ReportFailure(status);
    err_ << "clashctl: " << WithoutControls(std::string(status.message()))
         << "\nRun with --help for more information.\n";
    return kExitUsage;
  }
  int Usage(const std::string& message) { return Usage(absl::InvalidArgumentError(message)); }

  /// An error from the server (or the connection): "clashctl: CODE: message", kExitError.
  int Failed(const absl::Status& status) {
    ReportFailure(status);
    err_ << ErrorLine(status) << "\n";
    return kExitError;
  }

  /// From now on, a failure (Usage or Failed) writes a JUnit report of its error, in the suite
  /// `suite`, to the --junit file `path`, so that no earlier run's report stays there.
  void ReportFailuresTo(std::string path, std::string suite) {
    junit_path_ = std::move(path);
    junit_suite_ = std::move(suite);
  }

  /// The JUnit report of a failure, when ReportFailuresTo named a file (Usage and Failed call it).
  void ReportFailure(const absl::Status& status) {
    const std::string path = junit_path_;
    WriteJunit(path, JunitErrorReport(junit_suite_, status));
  }

  /// Writes a --junit report to `path` (nothing when it is empty); false, after saying so, when
  /// the file cannot be written. Failures no longer write to it: it holds the run's report.
  bool WriteJunit(const std::string& path, const std::string& report) {
    if (path == junit_path_) junit_path_.clear();
    if (path.empty()) return true;
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << report;
    file.close();
    if (!file) err_ << "clashctl: cannot write " << path << "\n";
    return static_cast<bool>(file);
  }

  bool json() const { return globals_.json; }
  bool quiet() const { return globals_.quiet && !globals_.json; }
  /// Human output is wanted (neither --json nor -q).
  bool human() const { return !globals_.json && !globals_.quiet; }
  /// Progress on stderr is wanted (no -q).
  bool progress() const { return !globals_.quiet; }
  bool err_is_tty() const { return terminal_.err_is_tty; }
  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }

 private:
  const Globals& globals_;
  std::ostream& out_;
  std::ostream& err_;
  Terminal terminal_;
  std::unique_ptr<client::Client> client_;
  std::string junit_path_;
  std::string junit_suite_;
};

// Pose options shared by import, place and move.
struct PoseArgs {
  std::string at;
  std::string rot_deg;
  std::string quat;

  void Register(CLI::App* app) {
    app->add_option("--at", at, "translation x,y,z in mm");
    CLI::Option* rot = app->add_option(
        "--rot-deg", rot_deg, "rotation rx,ry,rz in degrees about fixed X, then Y, then Z");
    app->add_option("--quat", quat, "rotation as a quaternion w,x,y,z (normalised)")->excludes(rot);
  }
  bool given() const { return !at.empty() || !rot_deg.empty() || !quat.empty(); }
  absl::StatusOr<v1::Pose> Parse() const { return ParsePose(at, rot_deg, quat); }
};

// Ray and sequence files: text, far below this in any real use.
constexpr std::size_t kMaxInputFileBytes = std::size_t{256} << 20;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  return client::ReadRegularFile(path, kMaxInputFileBytes);
}

// ---------------------------------------------------------------------------------------------
// import

struct ImportArgs {
  std::string file;
  double deflection_mm = 0;
  double relative_deflection = 0;
  double angular_deflection_rad = 0;
  bool strict = false;
  std::string scene;
  std::string prefix;
  std::vector<std::string> groups;
  PoseArgs pose;
};

// Upload progress on stderr: a bar redrawn in place on a terminal, one plain line otherwise.
class UploadMeter {
 public:
  UploadMeter(std::ostream& err, bool tty, bool enabled) : err_(err), tty_(tty), on_(enabled) {}

  void Update(uint64_t sent, uint64_t total) {
    sent_ = sent;
    upload_seconds_ = Seconds();
    if (!on_ || !tty_) return;
    const Clock::time_point now = Clock::now();
    if (sent < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    err_ << "\r" << ProgressLine(sent, total, upload_seconds_) << (sent >= total ? "\n" : "")
         << std::flush;
    open_line_ = sent < total;
  }

  // After the call: end an unfinished bar, or print the plain line.
  void Finish() {
    if (!on_) return;
    if (tty_) {
      if (open_line_) err_ << "\n";
      return;
    }
    err_ << absl::StrFormat(
        "uploaded %.1f MB in %.1f s (%.1f MB/s); answer after %.1f s\n",
        static_cast<double>(sent_) / 1e6, upload_seconds_,
        upload_seconds_ > 0 ? static_cast<double>(sent_) / 1e6 / upload_seconds_ : 0.0, Seconds());
  }

 private:
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  std::ostream& err_;
  bool tty_;
  bool on_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
  uint64_t sent_ = 0;
  double upload_seconds_ = 0;
  bool open_line_ = false;
};

int RunImport(Session& s, const ImportArgs& a) {
  for (const auto& [flag, value] : {std::pair{"--deflection-mm", a.deflection_mm},
                                    {"--relative-deflection", a.relative_deflection},
                                    {"--angular-deflection-rad", a.angular_deflection_rad}}) {
    if (absl::Status st = CheckNonNegative(flag, value); !st.ok()) return s.Usage(st);
  }
  if (a.scene.empty() && (!a.prefix.empty() || !a.groups.empty() || a.pose.given())) {
    return s.Usage("--prefix, --group, --at, --rot-deg and --quat need --scene");
  }
  absl::StatusOr<v1::Pose> pose = a.pose.Parse();
  if (!pose.ok()) return s.Usage(pose.status());
  std::error_code ec;
  if (!std::filesystem::is_regular_file(a.file, ec) || !std::ifstream(a.file)) {
    return s.Usage(absl::StrCat("cannot read ", a.file));
  }

  v1::TessellationOptions options;
  options.set_linear_deflection_mm(a.deflection_mm);
  options.set_relative_deflection(a.relative_deflection);
  options.set_angular_deflection_rad(a.angular_deflection_rad);
  UploadMeter meter(s.err(), s.err_is_tty(), s.progress());
  absl::StatusOr<v1::ImportCadResponse> imported =
      s.client().ImportCad(a.file, options, a.strict,
                           [&meter](uint64_t sent, uint64_t total) { meter.Update(sent, total); });
  meter.Finish();
  if (!imported.ok()) return s.Failed(imported.status());

  std::optional<v1::AddInstancesResponse> added;
  absl::Status add_status;
  if (!a.scene.empty()) {
    v1::AddInstancesRequest request;
    request.set_scene_id(a.scene);
    v1::AssemblyPlacement* placement = request.add_assemblies();
    placement->set_assembly_id(imported->assembly().assembly_id());
    *placement->mutable_pose() = *pose;
    placement->set_path_prefix(a.prefix);
    for (const std::string& g : a.groups) placement->add_groups(g);
    absl::StatusOr<v1::AddInstancesResponse> r = s.client().AddInstances(request);
    if (r.ok()) {
      added = *std::move(r);
    } else {
      add_status = r.status();
    }
  }

  if (s.json()) {
    if (a.scene.empty()) {
      s.out() << ToJson(*imported) << "\n";
    } else {
      nlohmann::ordered_json doc{{"import", ToJsonValue(*imported)}};
      if (added) doc["add_instances"] = ToJsonValue(*added);
      s.out() << DumpJson(doc) << "\n";
    }
  } else if (s.quiet()) {
    s.out() << WithoutControls(imported->assembly().assembly_id()) << "\n";
  } else {
    s.out() << FormatImport(*imported);
    if (added) {
      s.out() << "\nadded " << added->instances_size() << " instances to scene " << a.scene
              << " (version " << added->scene_version() << ")\n";
    }
  }
  return add_status.ok() ? kExitOk : s.Failed(add_status);
}

// ---------------------------------------------------------------------------------------------
// scenes

int RunSceneCreate(Session& s, const std::string& name) {
  absl::StatusOr<v1::Scene> scene = s.client().CreateScene(name);
  if (!scene.ok()) return s.Failed(scene.status());
  if (s.json()) {
    s.out() << ToJson(*scene) << "\n";
  } else if (s.quiet()) {
    s.out() << WithoutControls(scene->scene_id()) << "\n";
  } else {
    s.out() << "created scene " << WithoutControls(scene->scene_id()) << " ("
            << WithoutControls(scene->name()) << ")\n";
  }
  return kExitOk;
}

int RunSceneList(Session& s) {
  absl::StatusOr<std::vector<v1::Scene>> scenes = s.client().ListScenes();
  if (!scenes.ok()) return s.Failed(scenes.status());
  if (s.json()) {
    v1::ListScenesResponse all;
    for (v1::Scene& scene : *scenes) *all.add_scenes() = std::move(scene);
    s.out() << ToJson(all) << "\n";
  } else if (s.quiet()) {
    for (const v1::Scene& scene : *scenes) s.out() << WithoutControls(scene.scene_id()) << "\n";
  } else {
    s.out() << FormatSceneList(*scenes);
  }
  return kExitOk;
}

int RunSceneShow(Session& s, const std::string& scene_id) {
  absl::StatusOr<v1::Scene> scene = s.client().GetScene(scene_id);
  if (!scene.ok()) return s.Failed(scene.status());
  absl::StatusOr<std::vector<v1::Instance>> instances = s.client().ListInstances(scene_id);
  if (!instances.ok()) return s.Failed(instances.status());
  if (s.json()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const v1::Instance& i : *instances) list.push_back(ToJsonValue(i));
    s.out() << DumpJson(nlohmann::ordered_json{{"scene", ToJsonValue(*scene)}, {"instances", list}})
            << "\n";
  } else if (s.quiet()) {
    for (const v1::Instance& i : *instances) s.out() << i.instance_id() << "\n";
  } else {
    s.out() << FormatScene(*scene, *instances);
  }
  return kExitOk;
}

int RunSceneDelete(Session& s, const std::string& scene_id) {
  if (absl::Status st = s.client().DeleteScene(scene_id); !st.ok()) return s.Failed(st);
  if (s.json()) {
    s.out() << ToJson(v1::DeleteSceneResponse()) << "\n";
  } else if (s.human()) {
    s.out() << "deleted scene " << scene_id << "\n";
  }
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// instances

struct PlaceArgs {
  std::string scene;
  std::string part;
  std::string assembly;
  std::string path;
  std::string name;
  std::vector<std::string> groups;
  bool disabled = false;
  PoseArgs pose;
};

int RunPlace(Session& s, const PlaceArgs& a) {
  if (a.part.empty() == a.assembly.empty())
    return s.Usage("give exactly one of --part, --assembly");
  if (!a.assembly.empty() && (!a.name.empty() || a.disabled)) {
    return s.Usage("--name and --disabled apply to --part only");
  }
  absl::StatusOr<v1::Pose> pose = a.pose.Parse();
  if (!pose.ok()) return s.Usage(pose.status());
  v1::AddInstancesRequest request;
  request.set_scene_id(a.scene);
  if (!a.part.empty()) {
    v1::PartPlacement* p = request.add_parts();
    p->set_part_id(a.part);
    p->set_path(a.path);
    p->set_name(a.name);
    *p->mutable_pose() = *pose;
    p->set_disabled(a.disabled);
    for (const std::string& g : a.groups) p->add_groups(g);
  } else {
    v1::AssemblyPlacement* p = request.add_assemblies();
    p->set_assembly_id(a.assembly);
    p->set_path_prefix(a.path);
    *p->mutable_pose() = *pose;
    for (const std::string& g : a.groups) p->add_groups(g);
  }
  absl::StatusOr<v1::AddInstancesResponse> added = s.client().AddInstances(request);
  if (!added.ok()) return s.Failed(added.status());
  if (s.json()) {
    s.out() << ToJson(*added) << "\n";
  } else if (s.quiet()) {
    for (const v1::Instance& i : added->instances()) s.out() << i.instance_id() << "\n";
  } else {
    s.out() << "added " << added->instances_size() << " instance"
            << (added->instances_size() == 1 ? "" : "s") << " to scene " << a.scene << " (version "
            << added->scene_version() << ")\n"
            << FormatInstances({added->instances().begin(), added->instances().end()});
  }
  return kExitOk;
}

// The answer of a call that changes a scene: its new version.
int ReportUpdate(Session& s, const absl::StatusOr<uint64_t>& version, std::string_view what) {
  if (!version.ok()) return s.Failed(version.status());
  if (s.json()) {
    v1::SceneUpdateResponse r;
    r.set_scene_version(*version);
    s.out() << ToJson(r) << "\n";
  } else if (s.human()) {
    s.out() << what << "; scene version " << *version << "\n";
  }
  return kExitOk;
}

struct MoveArgs {
  std::string scene;
  std::string instance;
  PoseArgs pose;
};

int RunMove(Session& s, const MoveArgs& a) {
  absl::StatusOr<uint64_t> id = ParseInstanceId(a.instance);
  if (!id.ok()) return s.Usage(id.status());
  if (!a.pose.given()) return s.Usage("give --at, --rot-deg or --quat");
  absl::StatusOr<v1::Pose> pose = a.pose.Parse();
  if (!pose.ok()) return s.Usage(pose.status());
  const bool has_rotation = !a.pose.rot_deg.empty() || !a.pose.quat.empty();
  if (a.pose.at.empty() || !has_rotation) {
    // Half a pose given: keep the other half of the stored one.
    absl::StatusOr<std::vector<v1::Instance>> instances = s.client().ListInstances(a.scene);
    if (!instances.ok()) return s.Failed(instances.status());
    const auto it = std::find_if(instances->begin(), instances->end(),
                                 [&](const v1::Instance& i) { return i.instance_id() == *id; });
    if (it == instances->end()) {
      return s.Failed(
          absl::NotFoundError(absl::StrCat("no instance ", *id, " in scene ", a.scene)));
    }
    v1::Pose merged = it->pose();
    if (has_rotation) {
      *pose->mutable_translation_mm() = merged.translation_mm();
    } else {
      *merged.mutable_translation_mm() = pose->translation_mm();
      pose = std::move(merged);
    }
  }
  v1::SetPosesRequest request;
  request.set_scene_id(a.scene);
  v1::PoseUpdate* update = request.add_poses();
  update->set_instance_id(*id);
  *update->mutable_pose() = *pose;
  return ReportUpdate(s, s.client().SetPoses(request), absl::StrCat("moved instance ", *id));
}

absl::StatusOr<std::vector<uint64_t>> ParseIds(const std::vector<std::string>& texts) {
  std::vector<uint64_t> ids;
  for (const std::string& t : texts) {
    absl::StatusOr<uint64_t> id = ParseInstanceId(t);
    if (!id.ok()) return id.status();
    ids.push_back(*id);
  }
  return ids;
}

int RunEnable(Session& s, const std::string& scene, const std::vector<std::string>& texts,
              bool enabled) {
  absl::StatusOr<std::vector<uint64_t>> ids = ParseIds(texts);
  if (!ids.ok()) return s.Usage(ids.status());
  v1::SetInstancesEnabledRequest request;
  request.set_scene_id(scene);
  request.set_enabled(enabled);
  for (uint64_t id : *ids) request.add_instance_ids(id);
  return ReportUpdate(s, s.client().SetInstancesEnabled(request),
                      absl::StrCat(enabled ? "enabled " : "disabled ", ids->size(), " instance",
                                   ids->size() == 1 ? "" : "s"));
}

int RunGroup(Session& s, const std::string& scene, const std::string& name,
             const std::vector<std::string>& texts) {
  absl::StatusOr<std::vector<uint64_t>> ids = ParseIds(texts);
  if (!ids.ok()) return s.Usage(ids.status());
  v1::SetGroupRequest request;
  request.set_scene_id(scene);
  request.set_group(name);
  for (uint64_t id : *ids) request.add_instance_ids(id);
  return ReportUpdate(s, s.client().SetGroup(request),
                      ids->empty() ? absl::StrCat("deleted group ", name)
                                   : absl::StrCat("group ", name, " has ", ids->size(), " member",
                                                  ids->size() == 1 ? "" : "s"));
}

// ---------------------------------------------------------------------------------------------
// queries

// A selector option's value; errors name the option.
absl::StatusOr<v1::InstanceSelector> ParseSelectorFlag(const std::string& flag,
                                                       const std::string& text) {
  absl::StatusOr<v1::InstanceSelector> selector = ParseSelector(text);
  if (!selector.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", selector.status().message()));
  }
  return selector;
}

// --a into request->set_a, and --b (when given) into request->set_b.
template <class Request>
absl::Status ParseSets(const std::string& a, const std::optional<std::string>& b,
                       Request* request) {
  absl::StatusOr<v1::InstanceSelector> set_a = ParseSelectorFlag("--a", a);
  if (!set_a.ok()) return set_a.status();
  *request->mutable_set_a() = *std::move(set_a);
  if (!b) return absl::OkStatus();
  absl::StatusOr<v1::InstanceSelector> set_b = ParseSelectorFlag("--b", *b);
  if (!set_b.ok()) return set_b.status();
  *request->mutable_set_b() = *std::move(set_b);
  return absl::OkStatus();
}

struct CheckArgs {
  std::string scene;
  std::string a;
  std::optional<std::string> b;
  std::optional<double> contact_tolerance_mm;
  double clearance_mm = 0;
  std::vector<std::string> allow;
  std::string depth = "full";
  bool all_classes = false;
  std::string junit;
};

int RunCheck(Session& s, const CheckArgs& a) {
  v1::InterferenceRequest request;
  request.set_scene_id(a.scene);
  if (absl::Status st = ParseSets(a.a, a.b, &request); !st.ok()) return s.Usage(st);
  if (a.contact_tolerance_mm) {
    absl::Status st = CheckNonNegative("--contact-tolerance-mm", *a.contact_tolerance_mm);
    if (!st.ok()) return s.Usage(st);
    request.mutable_tolerances()->set_contact_tolerance_mm(*a.contact_tolerance_mm);
  }
  if (absl::Status st = CheckNonNegative("--clearance-mm", a.clearance_mm); !st.ok()) {
    return s.Usage(st);
  }
  request.mutable_tolerances()->set_clearance_mm(a.clearance_mm);
  for (const std::string& text : a.allow) {
    absl::StatusOr<v1::AllowedInterference> rule = ParseAllowRule(text);
    if (!rule.ok()) return s.Usage(rule.status());
    *request.add_allowed() = *std::move(rule);
  }
  if (a.depth == "class") {
    request.set_depth_estimate(v1::DEPTH_ESTIMATE_CLASS_ONLY);
  } else if (a.depth != "full") {
    return s.Usage(absl::InvalidArgumentError(
        absl::StrCat("--depth: '", a.depth, "' is neither full nor class")));
  }

  absl::StatusOr<v1::InterferenceResponse> response = s.client().CheckInterference(request);
  if (!response.ok()) return s.Failed(response.status());  // also the --junit report
  if (s.json()) {
    s.out() << ToJson(*response) << "\n";
  } else if (s.human()) {
    s.out() << FormatInterference(*response, a.all_classes);
  }
  if (!s.WriteJunit(a.junit, JunitReport(a.scene, *response))) return kExitUsage;
  return CheckExitCode(*response);
}

// ---------------------------------------------------------------------------------------------
// validate

struct ValidateArgs {
  std::string scene;
  std::string file;
  bool keep_going = false;
  bool profile = false;
  bool free_directions = false;
  std::string junit;
  std::string html;
  uint64_t html_max_triangles = kDefaultReportTriangles;
};

// The HTML report: the scene's instances, the parts the step views draw and their meshes, most
// important first (moving parts and blockers), while the triangle budget lasts.
int WriteHtmlReport(Session& s, const ValidateArgs& a, const v1::ValidateSequenceRequest& request,
                    const client::Client::SequenceReport& report) {
  SequenceReportData data;
  data.scene_id = a.scene;
  data.sequence_file = a.file;
  data.request = request;
  data.steps = report.steps;
  data.summary = report.summary;
  absl::StatusOr<std::vector<v1::Instance>> instances = s.client().ListInstances(a.scene);
  if (!instances.ok()) return s.Failed(instances.status());
  data.instances = *std::move(instances);
  data.views = PlanStepViews(request, data.steps, data.instances);
  uint64_t triangles = 0;
  std::vector<std::string> left_out;
  for (const std::string& id : ViewPartIds(data.views, data.instances)) {
    absl::StatusOr<v1::Part> part = s.client().GetPart(id);
    if (!part.ok()) return s.Failed(part.status());
    if (triangles + part->triangle_count() > a.html_max_triangles) {
      left_out.push_back(absl::StrCat(part->name(), " (", part->triangle_count(), ")"));
    } else {
      absl::StatusOr<v1::PartMesh> mesh = s.client().GetPartMesh(id);
      if (mesh.ok()) {
        triangles += part->triangle_count();
        data.meshes[id] = *std::move(mesh);
      } else if (mesh.status().code() == absl::StatusCode::kResourceExhausted) {
        left_out.push_back(absl::StrCat(part->name(), " (", mesh.status().message(), ")"));
      } else {
        return s.Failed(mesh.status());
      }
    }
    data.parts[id] = *std::move(part);
  }
  if (!left_out.empty()) {
    data.notes.push_back(
        absl::StrCat("Drawn as bounding boxes (over the budget of ", a.html_max_triangles,
                     " triangles, --html-max-triangles): ", absl::StrJoin(left_out, ", "), "."));
  }
  std::ofstream file(a.html, std::ios::binary | std::ios::trunc);
  file << SequenceHtmlReport(data);
  file.close();
  if (!file) {
    s.err() << "clashctl: cannot write " << a.html << "\n";
    return kExitUsage;
  }
  return kExitOk;
}

int RunValidate(Session& s, const ValidateArgs& a) {
  absl::StatusOr<std::string> text = ReadFile(a.file);
  if (!text.ok()) return s.Usage(text.status());
  // The sequence file is the request message in proto3 JSON (README, "Sequence files").
  v1::ValidateSequenceRequest request;
  google::protobuf::util::JsonParseOptions parse;
  const auto parsed = google::protobuf::util::JsonStringToMessage(*text, &request, parse);
  if (!parsed.ok()) {
    return s.Usage(absl::StrCat(a.file, ": not a sequence file: ", parsed.message().as_string()));
  }
  request.set_scene_id(a.scene);
  if (a.keep_going) request.set_continue_after_blocked(true);
  if (a.profile) request.set_clearance_profile(true);
  if (a.free_directions) request.set_free_directions(true);
  const bool bar = s.progress() && s.err_is_tty();
  std::vector<v1::StepResult> received;  // what a call that fails part-way still reports
  auto report = s.client().ValidateSequence(request, [&](const v1::ValidateSequenceEvent& e) {
    if (e.has_step()) received.push_back(e.step());
    if (!bar || !e.has_progress()) return;
    const v1::SequenceProgress& p = e.progress();
    s.err() << absl::StrFormat("\rstep %d/%d  t=%.3f   ", p.step_index() + 1, p.step_count(), p.t())
            << std::flush;
  });
  if (bar) s.err() << "\r" << std::string(40, ' ') << "\r" << std::flush;
  if (!report.ok() && !received.empty()) {
    // The steps run before the failure (a deadline in step 40 of 50, say) are results too:
    // shown, and in the --junit report beside the error, instead of being thrown away.
    if (s.json()) {
      nlohmann::ordered_json steps = nlohmann::ordered_json::array();
      for (const v1::StepResult& step : received) steps.push_back(ToJsonValue(step));
      s.out() << DumpJson(nlohmann::ordered_json{{"steps", steps},
                                                 {"error", ErrorLine(report.status())}})
              << "\n";
    } else if (s.human()) {
      s.out() << FormatSequenceSteps(received, request.tolerances());
    }
    if (!s.WriteJunit(a.junit, SequenceJunitPartialReport(a.scene, received, report.status()))) {
      s.err() << ErrorLine(report.status()) << "\n";  // (the call's error, after the file's)
      return kExitUsage;
    }
  }
  if (!report.ok()) return s.Failed(report.status());  // also the --junit report, if none yet
  if (s.json()) {
    nlohmann::ordered_json steps = nlohmann::ordered_json::array();
    for (const v1::StepResult& step : report->steps) steps.push_back(ToJsonValue(step));
    s.out() << DumpJson(nlohmann::ordered_json{{"steps", steps},
                                               {"summary", ToJsonValue(report->summary)}})
            << "\n";
  } else if (s.human()) {
    s.out() << FormatSequence(report->steps, report->summary);
  }
  if (!s.WriteJunit(a.junit, SequenceJunitReport(a.scene, report->steps, report->summary))) {
    return kExitUsage;
  }
  if (!a.html.empty()) {
    if (const int rc = WriteHtmlReport(s, a, request, *report); rc != kExitOk) return rc;
  }
  return report->summary.steps_blocked() > 0 ? kExitFound : kExitOk;
}

struct DistanceArgs {
  std::string scene;
  std::string a;
  std::optional<std::string> b;
  double max_mm = 0;
};

int RunDistance(Session& s, const DistanceArgs& a) {
  v1::DistanceRequest request;
  request.set_scene_id(a.scene);
  if (absl::Status st = ParseSets(a.a, a.b, &request); !st.ok()) return s.Usage(st);
  if (absl::Status st = CheckNonNegative("--max-mm", a.max_mm); !st.ok()) return s.Usage(st);
  request.set_max_distance_mm(a.max_mm);
  absl::StatusOr<v1::DistanceResponse> response = s.client().ComputeDistance(request);
  if (!response.ok()) return s.Failed(response.status());
  if (s.json()) {
    s.out() << ToJson(*response) << "\n";
  } else if (s.quiet()) {
    if (response->found()) s.out() << Mm(response->distance_mm()) << "\n";
  } else {
    s.out() << FormatDistance(*response, a.max_mm);
  }
  return kExitOk;
}

struct PickArgs {
  std::string scene;
  std::vector<std::string> origins;
  std::vector<std::string> dirs;
  std::string rays_file;
  double max_mm = 0;
  std::string targets;
};

int RunPick(Session& s, const PickArgs& a) {
  if (absl::Status st = CheckNonNegative("--max-mm", a.max_mm); !st.ok()) return s.Usage(st);
  v1::PickRequest request;
  request.set_scene_id(a.scene);
  absl::StatusOr<v1::InstanceSelector> targets = ParseSelectorFlag("--targets", a.targets);
  if (!targets.ok()) return s.Usage(targets.status());
  *request.mutable_targets() = *std::move(targets);
  if (!a.rays_file.empty()) {
    absl::StatusOr<std::string> text = ReadFile(a.rays_file);
    if (!text.ok()) return s.Usage(text.status());
    absl::StatusOr<std::vector<v1::Ray>> rays = ParseRays(*text, a.max_mm);
    if (!rays.ok()) return s.Usage(absl::StrCat(a.rays_file, ": ", rays.status().message()));
    for (v1::Ray& r : *rays) *request.add_rays() = std::move(r);
  } else {
    if (a.origins.empty() || a.origins.size() != a.dirs.size()) {
      return s.Usage("give --rays FILE, or --origin and --dir pairs (as many of each)");
    }
    for (std::size_t i = 0; i < a.origins.size(); ++i) {
      absl::StatusOr<v1::Ray> ray = ParseRay(a.origins[i], a.dirs[i], a.max_mm);
      if (!ray.ok()) return s.Usage(ray.status());
      *request.add_rays() = *std::move(ray);
    }
  }
  absl::StatusOr<v1::PickResponse> response = s.client().PickRays(request);
  if (!response.ok()) return s.Failed(response.status());
  if (s.json()) {
    s.out() << ToJson(*response) << "\n";
  } else if (s.human()) {
    s.out() << FormatPicks(*response);
  }
  return kExitOk;
}

// ---------------------------------------------------------------------------------------------
// info, delete, health

int RunInfo(Session& s, const std::string& id) {
  if (id.starts_with("p")) {
    absl::StatusOr<v1::Part> part = s.client().GetPart(id);
    if (!part.ok()) return s.Failed(part.status());
    s.out() << (s.json() ? ToJson(*part) + "\n" : s.quiet() ? id + "\n" : FormatPart(*part));
    return kExitOk;
  }
  if (id.starts_with("a")) {
    absl::StatusOr<v1::Assembly> assembly = s.client().GetAssembly(id);
    if (!assembly.ok()) return s.Failed(assembly.status());
    s.out() << (s.json()    ? ToJson(*assembly) + "\n"
                : s.quiet() ? id + "\n"
                            : FormatAssembly(*assembly));
    return kExitOk;
  }
  return s.Usage(absl::StrCat("'", id, "' is neither a part id (p...) nor an assembly id (a...)"));
}

int RunDelete(Session& s, const std::string& id) {
  const bool part = id.starts_with("p");
  if (!part && !id.starts_with("a")) {
    return s.Usage(
        absl::StrCat("'", id, "' is neither a part id (p...) nor an assembly id (a...)"));
  }
  if (absl::Status st = part ? s.client().DeletePart(id) : s.client().DeleteAssembly(id);
      !st.ok()) {
    return s.Failed(st);
  }
  if (s.json()) {
    s.out() << (part ? ToJson(v1::DeletePartResponse()) : ToJson(v1::DeleteAssemblyResponse()))
            << "\n";
  } else if (s.human()) {
    s.out() << "deleted " << (part ? "part " : "assembly ") << id << "\n";
  }
  return kExitOk;
}

int RunHealth(Session& s, const std::string& service) {
  absl::StatusOr<client::Health> health = s.client().CheckHealth(service);
  if (!health.ok()) return s.Failed(health.status());
  const char* name = *health == client::Health::kServing      ? "SERVING"
                     : *health == client::Health::kNotServing ? "NOT_SERVING"
                                                              : "UNKNOWN";
  if (s.json()) {
    s.out() << DumpJson(nlohmann::ordered_json{{"status", name}}) << "\n";
  } else if (s.human()) {
    s.out() << name << "\n";
  }
  return *health == client::Health::kServing ? kExitOk : kExitFound;
}

}  // namespace

int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        const Terminal& terminal) {
  CLI::App app("clashctl: the command-line client of clashd, the collision-checking service.",
               "clashctl");
  app.footer(kFooter);
  app.require_subcommand(1);
  app.fallthrough();
  Globals globals;
  app.add_option("--server", globals.server, "server address HOST:PORT")
      ->envname("CLASHD_ADDRESS")
      ->capture_default_str();
  app.add_option("--timeout", globals.timeout_s,
                 "deadline of each call in seconds (default: 30 for edits, 60 for queries, 600 "
                 "for imports, 1800 for sequences, 5 for health checks)");
  app.add_flag("--json", globals.json, "print API messages as JSON on stdout");
  app.add_flag("-q,--quiet", globals.quiet, "print only ids (see below), no progress");
  app.add_flag("--tls", globals.tls, "connect with TLS (implied by --tls-ca and --tls-cert)")
      ->envname("CLASH_TLS");
  app.add_option("--tls-ca", globals.tls_ca, "CA bundle (PEM) that signed the server's certificate")
      ->envname("CLASH_TLS_CA");
  app.add_option("--tls-cert", globals.tls_cert, "client certificate (PEM), for mutual TLS")
      ->envname("CLASH_TLS_CERT");
  app.add_option("--tls-key", globals.tls_key, "client certificate's key (PEM)")
      ->envname("CLASH_TLS_KEY");
  app.add_option("--tls-server-name", globals.tls_server_name,
                 "name to verify in the server's certificate (default: the --server host)");
  app.add_option("--token-file", globals.token_file,
                 "file whose first line is the bearer token ($CLASH_TOKEN wins; "
                 "$CLASH_TOKEN_FILE is the default file)");

  // Everything printed goes through filters: names and paths from CAD files may hold terminal
  // escape sequences (stderr keeps '\r' for its progress lines).
  ControlFilter out_filter(out, "\n\t");
  ControlFilter err_filter(err, "\n\t\r");
  std::ostream safe_out(&out_filter);
  std::ostream safe_err(&err_filter);
  safe_err.tie(&safe_out);  // as std::cerr is tied to std::cout: results before later messages
  Session session(globals, safe_out, safe_err, terminal);
  std::function<int()> action;
  const auto on_run = [&action](CLI::App* cmd, std::function<int()> run) {
    cmd->callback([&action, run = std::move(run)] { action = run; });
  };

  ImportArgs import_args;
  CLI::App* import_cmd = app.add_subcommand("import", "import a STEP or IGES file (ImportCad)");
  import_cmd->add_option("FILE", import_args.file, "the file")->required();
  import_cmd->add_option("--deflection-mm", import_args.deflection_mm,
                         "absolute chordal deflection in mm (0: relative)");
  import_cmd->add_option("--relative-deflection", import_args.relative_deflection,
                         "deflection as a fraction of each part's size (server default 0.002)");
  import_cmd->add_option("--angular-deflection-rad", import_args.angular_deflection_rad,
                         "angular deflection in radians (server default 0.35)");
  import_cmd->add_flag("--strict", import_args.strict, "fail unless nothing was lost");
  import_cmd->add_option("--scene", import_args.scene, "then add the whole assembly to this scene");
  import_cmd->add_option("--prefix", import_args.prefix,
                         "with --scene: path prefix of the instances");
  import_cmd->add_option("--group", import_args.groups, "with --scene: group the instances join")
      ->allow_extra_args(false);
  import_args.pose.Register(import_cmd);
  on_run(import_cmd, [&] { return RunImport(session, import_args); });

  CLI::App* scene_cmd = app.add_subcommand("scene", "create, list, show and delete scenes");
  scene_cmd->require_subcommand(1);
  std::string scene_name;
  std::string scene_id;
  CLI::App* scene_create = scene_cmd->add_subcommand("create", "create a scene; prints its id");
  scene_create->add_option("NAME", scene_name, "the scene's name")->required();
  on_run(scene_create, [&] { return RunSceneCreate(session, scene_name); });
  CLI::App* scene_list = scene_cmd->add_subcommand("list", "list the scenes");
  on_run(scene_list, [&] { return RunSceneList(session); });
  CLI::App* scene_show = scene_cmd->add_subcommand("show", "a scene and its instances");
  scene_show->add_option("SCENE_ID", scene_id)->required();
  on_run(scene_show, [&] { return RunSceneShow(session, scene_id); });
  CLI::App* scene_delete = scene_cmd->add_subcommand("delete", "delete a scene");
  scene_delete->add_option("SCENE_ID", scene_id)->required();
  on_run(scene_delete, [&] { return RunSceneDelete(session, scene_id); });

  PlaceArgs place_args;
  CLI::App* place_cmd =
      app.add_subcommand("place", "add a part or a whole assembly to a scene (AddInstances)");
  place_cmd->add_option("SCENE_ID", place_args.scene)->required();
  CLI::Option* part_opt = place_cmd->add_option("--part", place_args.part, "part id");
  place_cmd->add_option("--assembly", place_args.assembly, "assembly id")->excludes(part_opt);
  place_cmd->add_option("--path", place_args.path,
                        "unique path of the instance (with --assembly: the path prefix)");
  place_cmd->add_option("--name", place_args.name, "the instance's name (--part only)");
  place_cmd->add_option("--group", place_args.groups, "group to join (repeatable)")
      ->allow_extra_args(false);
  place_cmd->add_flag("--disabled", place_args.disabled, "add it disabled (--part only)");
  place_args.pose.Register(place_cmd);
  on_run(place_cmd, [&] { return RunPlace(session, place_args); });

  MoveArgs move_args;
  CLI::App* move_cmd =
      app.add_subcommand("move", "set an instance's pose (SetPoses); the part not given is kept");
  move_cmd->add_option("SCENE_ID", move_args.scene)->required();
  move_cmd->add_option("INSTANCE_ID", move_args.instance)->required();
  move_args.pose.Register(move_cmd);
  on_run(move_cmd, [&] { return RunMove(session, move_args); });

  std::string edit_scene;
  std::vector<std::string> edit_ids;
  for (const bool enable : {true, false}) {
    CLI::App* cmd =
        app.add_subcommand(enable ? "enable" : "disable", enable ? "enable instances"
                                                                 : "disable instances (they "
                                                                   "take part in no query)");
    cmd->add_option("SCENE_ID", edit_scene)->required();
    cmd->add_option("INSTANCE_ID", edit_ids)->required();
    on_run(cmd, [&, enable] { return RunEnable(session, edit_scene, edit_ids, enable); });
  }
  std::string group_name;
  CLI::App* group_cmd =
      app.add_subcommand("group", "set a group's members (none: delete the group)");
  group_cmd->add_option("SCENE_ID", edit_scene)->required();
  group_cmd->add_option("NAME", group_name)->required();
  group_cmd->add_option("INSTANCE_ID", edit_ids);
  on_run(group_cmd, [&] { return RunGroup(session, edit_scene, group_name, edit_ids); });

  CheckArgs check_args;
  CLI::App* check_cmd = app.add_subcommand(
      "check", "classify clashing instance pairs (CheckInterference); exit 1 on HARD/CONTAINED");
  check_cmd->add_option("SCENE_ID", check_args.scene)->required();
  check_cmd->add_option("--a", check_args.a, "first set (SEL; default all)");
  check_cmd->add_option("--b", check_args.b, "second set (SEL); without it, pairs within --a");
  check_cmd->add_option("--contact-tolerance-mm", check_args.contact_tolerance_mm,
                        "contact tolerance in mm (default per pair: sum of deflections)");
  check_cmd->add_option("--clearance-mm", check_args.clearance_mm,
                        "report pairs closer than this as CLEARANCE (0: off)");
  check_cmd
      ->add_option("--allow", check_args.allow,
                   "allowed interference NAME=SEL_A[/SEL_B][:CLASSES] (repeatable); CLASSES: "
                   "comma-separated hard, contact, clearance, contained (default all)")
      ->allow_extra_args(false);
  check_cmd->add_option("--depth", check_args.depth,
                        "full: the depth estimate; class: only as far as the classes need "
                        "(faster; depths outside 0.75-1.25 x tolerance are bounds)");
  check_cmd->add_flag("--all-classes", check_args.all_classes, "list CONTACT rows too");
  check_cmd->add_option("--junit", check_args.junit, "also write a JUnit XML report to FILE");
  on_run(check_cmd, [&] { return RunCheck(session, check_args); });

  ValidateArgs validate_args;
  CLI::App* validate_cmd = app.add_subcommand(
      "validate",
      "validate an assembly sequence (ValidateSequence); exit 1 when a step is blocked");
  validate_cmd->add_option("SCENE_ID", validate_args.scene)->required();
  validate_cmd
      ->add_option("SEQUENCE_JSON", validate_args.file,
                   "sequence file: a ValidateSequenceRequest in proto3 JSON (see README)")
      ->required();
  validate_cmd->add_flag("--continue", validate_args.keep_going,
                         "go on after a blocked step and report every step");
  validate_cmd->add_flag("--profile", validate_args.profile, "record clearance against t");
  validate_cmd->add_flag("--free-directions", validate_args.free_directions,
                         "test escape directions of blocked steps");
  validate_cmd->add_option("--junit", validate_args.junit,
                           "also write a JUnit XML report (one test case per step) to FILE");
  validate_cmd->add_option("--html", validate_args.html,
                           "also write a self-contained HTML report with a 3D view per step");
  // (Checked as a number >= 0: CLI11 would take "-5" into the unsigned count as about 2^64.)
  validate_cmd
      ->add_option("--html-max-triangles", validate_args.html_max_triangles,
                   "triangles the HTML report embeds at most (larger parts: boxes)")
      ->check(CLI::NonNegativeNumber);
  on_run(validate_cmd, [&] { return RunValidate(session, validate_args); });

  DistanceArgs distance_args;
  CLI::App* distance_cmd =
      app.add_subcommand("distance", "minimum distance between two sets (ComputeDistance)");
  distance_cmd->add_option("SCENE_ID", distance_args.scene)->required();
  distance_cmd->add_option("--a", distance_args.a, "first set (SEL)")->required();
  distance_cmd->add_option("--b", distance_args.b,
                           "second set (SEL); without it, between any two of --a");
  distance_cmd->add_option("--max-mm", distance_args.max_mm,
                           "pairs farther than this are not measured (0: no limit)");
  on_run(distance_cmd, [&] { return RunDistance(session, distance_args); });

  PickArgs pick_args;
  CLI::App* pick_cmd = app.add_subcommand("pick", "the first surface each ray hits (PickRays)");
  pick_cmd->add_option("SCENE_ID", pick_args.scene)->required();
  CLI::Option* origin_opt =
      pick_cmd->add_option("--origin", pick_args.origins, "ray origin x,y,z in mm (repeatable)");
  origin_opt->allow_extra_args(false);
  CLI::Option* dir_opt =
      pick_cmd->add_option("--dir", pick_args.dirs, "ray direction x,y,z (one per --origin)");
  dir_opt->allow_extra_args(false);
  pick_cmd
      ->add_option("--rays", pick_args.rays_file,
                   "file with one ray per line: ox oy oz dx dy dz ('#' comments)")
      ->excludes(origin_opt)
      ->excludes(dir_opt);
  pick_cmd->add_option("--max-mm", pick_args.max_mm, "ignore hits farther than this (0: none)");
  pick_cmd->add_option("--targets", pick_args.targets, "instances that can be hit (SEL)");
  on_run(pick_cmd, [&] { return RunPick(session, pick_args); });

  std::string info_id;
  CLI::App* info_cmd =
      app.add_subcommand("info", "a part (id p...) or an assembly (id a...) with its tree");
  info_cmd->add_option("ID", info_id)->required();
  on_run(info_cmd, [&] { return RunInfo(session, info_id); });

  std::string delete_id;
  CLI::App* delete_cmd = app.add_subcommand(
      "delete",
      "delete a part (id p...; refused while a scene or an assembly uses it) or an "
      "assembly (id a...; its parts stay)");
  delete_cmd->add_option("ID", delete_id)->required();
  on_run(delete_cmd, [&] { return RunDelete(session, delete_id); });

  std::string health_service;
  CLI::App* health_cmd =
      app.add_subcommand("health", "the server's serving status; exit 0 only when SERVING");
  health_cmd->add_option("--service", health_service, "service name (default: the server)");
  on_run(health_cmd, [&] { return RunHealth(session, health_service); });

  // Once the command line names check's or validate's --junit file, every failure writes its
  // error there (read from CLI11's results: after a parse error the variables may be unset).
  const auto report_failures = [&] {
    for (const auto& [cmd, suite] :
         {std::pair{check_cmd, "interference "}, std::pair{validate_cmd, "sequence "}}) {
      const CLI::Option* junit = cmd->get_option("--junit");
      const CLI::Option* scene = cmd->get_option("SCENE_ID");
      if (!cmd->parsed() || junit->results().empty() || junit->results().back().empty()) continue;
      session.ReportFailuresTo(
          junit->results().back(),
          absl::StrCat(suite, scene->results().empty() ? "" : scene->results().front()));
    }
  };
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    // CLI11 calls a mistyped command a missing one; name it.
    if (app.get_subcommands().empty() && !app.remaining().empty() &&
        dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
      return session.Usage(absl::StrCat("unknown command '", app.remaining().front(), "'"));
    }
    const int code = app.exit(e, out, err);
    if (code == static_cast<int>(CLI::ExitCodes::Success)) return kExitOk;
    report_failures();
    session.ReportFailure(absl::InvalidArgumentError(e.what()));
    return kExitUsage;
  }
  report_failures();
  // NaN fails both comparisons; the upper bound keeps the milliseconds in range.
  if (globals.timeout_s && !(*globals.timeout_s > 0 && *globals.timeout_s <= 1e7)) {
    return session.Usage("--timeout must be a number of seconds in (0, 1e7]");
  }
  if (!action) return session.Usage("no command given");
  if (absl::Status connected = session.Connect(); !connected.ok()) return session.Usage(connected);
  return action();
}

}  // namespace clash::clashctl
