// Output of clashctl: human tables and reports, JSON of API messages, the JUnit XML report of
// an interference check, the upload progress line, and the exit code a check answer decides.
// Pure functions of clash.v1 messages; nothing here prints or talks to a server.
#pragma once

#include <cstdint>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "clash/v1/parts.pb.h"
#include "clash/v1/queries.pb.h"
#include "clash/v1/scenes.pb.h"
#include "clash/v1/sequences.pb.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace clash::clashctl {

/// clashctl's exit codes.
enum ExitCode : int {
  /// Success.
  kExitOk = 0,
  /// `check` found unsuppressed HARD or CONTAINED clashes; `validate` found a blocked step;
  /// `health` is not SERVING.
  kExitFound = 1,
  /// Bad command line (or an input file that cannot be read, an output file not written).
  kExitUsage = 2,
  /// The server answered an error, or could not be reached.
  kExitError = 3,
};

/// kExitFound when the answer holds an unsuppressed HARD or CONTAINED clash, else kExitOk.
[[nodiscard]] int CheckExitCode(const v1::InterferenceResponse& response);

/// "clashctl: <CODE_NAME>: <message>", e.g. "clashctl: NOT_FOUND: no scene s12"; the message
/// without control characters (WithoutControls), so it cannot fake further lines.
[[nodiscard]] std::string ErrorLine(const absl::Status& status);

/// The message as JSON with proto field names; scalars with default values are printed too, so
/// that a script finds `"hard": 0` rather than nothing.
[[nodiscard]] std::string ToJson(const google::protobuf::Message& message);
/// The same, as a value to put into a larger JSON document.
[[nodiscard]] nlohmann::ordered_json ToJsonValue(const google::protobuf::Message& message);
/// A JSON document as --json prints it: indented, every character outside printable ASCII
/// escaped (\uXXXX), so that names from CAD files (DEL, C1 controls from 8-bit encodings)
/// survive the output's control filter and read back as they were.
[[nodiscard]] std::string DumpJson(const nlohmann::ordered_json& doc);

/// `text` with every control character (bytes below 0x20, 0x7f, and the C1 controls U+0080 to
/// U+009F as UTF-8, which some terminals obey like ESC sequences) replaced by '?', except the C0
/// ones in `keep` (e.g. "\n"): names and paths come from CAD files, and an escape sequence or a
/// line break in one must not reach a terminal as such.
[[nodiscard]] std::string WithoutControls(std::string_view text, std::string_view keep = "");

/// A stream buffer that forwards to `target`, replacing control characters as WithoutControls
/// does (keeping those in `keep`). clashctl's stdout and stderr go through one, so no server
/// answer can send a terminal escape sequence, whatever prints it; JSON and XML escape their
/// control characters, so their output is unchanged.
class ControlFilter : public std::streambuf {
 public:
  ControlFilter(std::ostream& target, std::string keep)
      : target_(target.rdbuf()), keep_(std::move(keep)) {}
  ~ControlFilter() override { FlushPending(); }
  ControlFilter(const ControlFilter&) = delete;
  ControlFilter& operator=(const ControlFilter&) = delete;

 protected:
  int overflow(int c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  // One byte in: a 0xC2 lead byte waits for the next one (C1 controls are C2 80 to C2 9F).
  bool Put(char c);
  void FlushPending();

  std::streambuf* target_;
  std::string keep_;
  bool pending_c2_ = false;
};

/// A text table: columns padded to their widest cell (counted in UTF-8 code points) and
/// separated by two spaces; columns whose alignment letter is 'r' are right-aligned. Cells are
/// shown without control characters (a line break in a name would fake a row).
class Table {
 public:
  /// `headers` empty: no header line. `align` holds 'l' or 'r' per column ('l' if short).
  explicit Table(std::vector<std::string> headers, std::string align = "");
  void AddRow(std::vector<std::string> cells);
  [[nodiscard]] std::size_t rows() const { return rows_.size(); }
  /// The rendered table, one line per row, each ending in '\n'; trailing spaces trimmed.
  [[nodiscard]] std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::string align_;
  std::vector<std::vector<std::string>> rows_;
};

/// "HARD", "CONTACT", ... ("UNSPECIFIED" for 0 or unknown values).
[[nodiscard]] std::string ClassName(v1::ClashClass c);
/// A length in mm with 3 decimals.
[[nodiscard]] std::string Mm(double value_mm);
/// "(x, y, z)" with 3 decimals.
[[nodiscard]] std::string FormatVec3(const v1::Vec3& v);

/// An import's assembly id, report and parts table.
[[nodiscard]] std::string FormatImport(const v1::ImportCadResponse& response);
/// Parts: id, name, triangles, closed, deflection, AABB and OBB node counts.
[[nodiscard]] std::string FormatPartsTable(
    const google::protobuf::RepeatedPtrField<v1::Part>& parts);
/// A part's details.
[[nodiscard]] std::string FormatPart(const v1::Part& part);
/// An assembly's report and its instances as an indented tree by path.
[[nodiscard]] std::string FormatAssembly(const v1::Assembly& assembly);

/// Scenes: id, name, version, instances, groups, update time.
[[nodiscard]] std::string FormatSceneList(const std::vector<v1::Scene>& scenes);
/// A scene's header and its instance table.
[[nodiscard]] std::string FormatScene(const v1::Scene& scene,
                                      const std::vector<v1::Instance>& instances);
/// Instances: id, path, part, enabled, groups, translation.
[[nodiscard]] std::string FormatInstances(const std::vector<v1::Instance>& instances);

/// The clash table (HARD, CONTAINED and CLEARANCE rows; CONTACT rows too when `all_classes`)
/// and the summary line with counts per class and the tolerances used.
[[nodiscard]] std::string FormatInterference(const v1::InterferenceResponse& response,
                                             bool all_classes);
/// The summary line alone, without a line break.
[[nodiscard]] std::string FormatInterferenceSummary(const v1::InterferenceResponse& response);
/// The JUnit XML report: testsuite "interference <scene_id>", one testcase per clash (failing
/// for unsuppressed HARD/CONTAINED, skipped when suppressed, passing otherwise) and a testcase
/// "no hard clashes".
[[nodiscard]] std::string JunitReport(std::string_view scene_id,
                                      const v1::InterferenceResponse& response);
/// Text escaped for XML attributes and character data (&<>"' and control characters); what
/// XML 1.0 cannot hold at all (C0 controls but tab and line breaks, U+FFFE, U+FFFF) becomes '?'.
[[nodiscard]] std::string XmlEscape(std::string_view text);

/// The closest pair, or that none was found.
[[nodiscard]] std::string FormatDistance(const v1::DistanceResponse& response,
                                         double max_distance_mm);
/// One row per ray: hit, instance, path, part, face, point, normal, distance.
[[nodiscard]] std::string FormatPicks(const v1::PickResponse& response);

/// A JUnit report of a call that failed (one test case, in error, with the status), written
/// in place of the report a --junit run would have written, so that a CI job never reads an
/// earlier run's report after a failed call.
[[nodiscard]] std::string JunitErrorReport(std::string_view suite_name, const absl::Status& status);

/// One row per step (index, name, ok/BLOCKED/UNDECIDED, blocked t, first contact t, min
/// clearance and where, blockers), with lines under a step for its escape directions, allowed
/// pairs and a contact tolerance raised above `requested`'s.
[[nodiscard]] std::string FormatSequenceSteps(const std::vector<v1::StepResult>& steps,
                                              const v1::Tolerances& requested);
/// FormatSequenceSteps, then a summary line.
[[nodiscard]] std::string FormatSequence(const std::vector<v1::StepResult>& steps,
                                         const v1::SequenceSummary& summary);
/// The JUnit XML report of a sequence: testsuite "sequence <scene_id>", one testcase per step
/// (failing when blocked, naming the blockers; skipped when not run).
[[nodiscard]] std::string SequenceJunitReport(std::string_view scene_id,
                                              const std::vector<v1::StepResult>& steps,
                                              const v1::SequenceSummary& summary);
/// The JUnit XML report of a sequence whose call failed part-way (a deadline, say): the steps
/// that came before the failure as SequenceJunitReport has them, then one test case in error
/// with the status.
[[nodiscard]] std::string SequenceJunitPartialReport(std::string_view scene_id,
                                                     const std::vector<v1::StepResult>& steps,
                                                     const absl::Status& status);

/// "[#####-----]  50%  4.0/8.0 MB  2.0 MB/s" for an upload `seconds` after it started.
[[nodiscard]] std::string ProgressLine(uint64_t sent, uint64_t total, double seconds);

}  // namespace clash::clashctl
