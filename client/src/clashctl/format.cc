#include "clashctl/format.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"

namespace clash::clashctl {
namespace {

using google::protobuf::RepeatedPtrField;

std::size_t CodePoints(std::string_view s) {
  return static_cast<std::size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

std::string YesNo(bool b) { return b ? "yes" : "no"; }

std::string Utc(int64_t seconds) {
  if (seconds <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buffer;
}

bool IsBlocking(const v1::Clash& c) {
  return !c.suppressed() && (c.clash_class() == v1::HARD || c.clash_class() == v1::CONTAINED);
}

// Whether the clash's surfaces cross (its depth is a penetration depth).
bool SurfacesCross(const v1::Clash& c) {
  return c.clash_class() == v1::HARD || (c.clash_class() == v1::CONTACT && c.distance_mm() == 0);
}

// The depth of a clash, in mm. With the depth for the class only (`class_only`), the depth of
// crossing surfaces is exact only between 0.75 and 1.25 τ (or a rule's deeper limit): deeper
// ones are lower bounds (">= x"), and 0 means shallower than 0.75 τ ("< x").
std::string DepthText(const v1::Clash& c, bool class_only) {
  if (class_only && SurfacesCross(c)) {
    const double tau = c.contact_tolerance_mm();
    if (c.depth_mm() > 1.25 * tau) return absl::StrCat(">= ", Mm(c.depth_mm()));
    if (c.depth_mm() == 0 && tau > 0) return absl::StrCat("< ", Mm(0.75 * tau));
  }
  return Mm(c.depth_mm());
}

// Depth for clashes whose surfaces cross (or that are contained), distance otherwise.
std::string DepthCell(const v1::Clash& c, bool class_only) {
  return SurfacesCross(c) || c.clash_class() == v1::CONTAINED ? DepthText(c, class_only) : "-";
}

bool ClassOnly(const v1::InterferenceResponse& r) {
  return r.depth_estimate() == v1::DEPTH_ESTIMATE_CLASS_ONLY;
}

std::string DistanceCell(const v1::Clash& c) {
  const bool apart =
      c.clash_class() == v1::CLEARANCE || (c.clash_class() == v1::CONTACT && c.distance_mm() > 0);
  return apart ? Mm(c.distance_mm()) : "-";
}

std::string Marks(const v1::Clash& c) {
  std::vector<std::string> marks;
  if (c.uncertain()) marks.push_back("uncertain");
  if (c.suppressed()) {
    marks.push_back(c.suppressed_by().empty() ? "suppressed"
                                              : absl::StrCat("suppressed by ", c.suppressed_by()));
  }
  if (c.intersections_truncated()) marks.push_back("truncated");
  return absl::StrJoin(marks, ", ");
}

std::string ContactToleranceText(const v1::InterferenceResponse& r) {
  if (r.tolerances().has_contact_tolerance_mm()) {
    return absl::StrCat(Mm(r.tolerances().contact_tolerance_mm()), " mm");
  }
  if (r.clashes().empty()) return "per pair (sum of the parts' deflections)";
  double lo = r.clashes(0).contact_tolerance_mm();
  double hi = lo;
  for (const v1::Clash& c : r.clashes()) {
    lo = std::min(lo, c.contact_tolerance_mm());
    hi = std::max(hi, c.contact_tolerance_mm());
  }
  const std::string range = lo == hi ? Mm(lo) : absl::StrCat(Mm(lo), "..", Mm(hi));
  return absl::StrCat("per pair ", range, " mm (sum of the parts' deflections)");
}

// A JUnit <testcase>; `outcome` is empty (passed) or a complete <failure>/<skipped> element.
std::string Testcase(std::string_view name, std::string_view outcome) {
  std::string out =
      absl::StrCat("    <testcase classname=\"interference\" name=\"", XmlEscape(name), "\"");
  if (outcome.empty()) return absl::StrCat(out, "/>\n");
  return absl::StrCat(out, ">\n      ", std::string(outcome), "\n    </testcase>\n");
}

std::string ClashDetails(const v1::Clash& c, bool class_only) {
  return absl::StrCat(ClassName(c.clash_class()), " between #", c.instance_a(), " ", c.path_a(),
                      " (part ", c.part_a(), ") and #", c.instance_b(), " ", c.path_b(), " (part ",
                      c.part_b(), "): depth ", DepthText(c, class_only), " mm, distance ",
                      Mm(c.distance_mm()), " mm, contact tolerance ", Mm(c.contact_tolerance_mm()),
                      " mm, witness points ", FormatVec3(c.point_a_mm()), " and ",
                      FormatVec3(c.point_b_mm()), c.uncertain() ? ", uncertain" : "");
}

// What an import read and lost, as rows of a key-value table.
void AddReportRows(const v1::ImportReport& r, Table* kv) {
  kv->AddRow({"roots", absl::StrCat(r.roots_transferred(), "/", r.roots_total(), " transferred")});
  kv->AddRow({"faces", absl::StrCat(r.faces_meshed(), "/", r.faces_total(), " meshed")});
  kv->AddRow({"triangles", absl::StrCat(r.triangles())});
  kv->AddRow(
      {"load", absl::StrCat(r.load_failures(), " failures, ", r.load_warnings(), " warnings")});
  if (r.empty_parts() > 0) kv->AddRow({"empty parts", absl::StrCat(r.empty_parts(), " left out")});
  kv->AddRow({"complete", YesNo(r.complete())});
}

std::string ReportWarnings(const v1::ImportReport& r) {
  if (r.warnings().empty()) return "";
  std::string out = "warnings:\n";
  for (const std::string& w : r.warnings()) {
    absl::StrAppend(&out, "  - ", WithoutControls(w), "\n");
  }
  return out;
}

}  // namespace

int CheckExitCode(const v1::InterferenceResponse& response) {
  const bool listed = std::any_of(response.clashes().begin(), response.clashes().end(), IsBlocking);
  const bool counted = response.summary().hard() + response.summary().contained() > 0;
  return listed || counted ? kExitFound : kExitOk;
}

std::string ErrorLine(const absl::Status& status) {
  return absl::StrCat("clashctl: ", absl::StatusCodeToString(status.code()), ": ",
                      WithoutControls(std::string(status.message())));
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  const auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    // Only invalid UTF-8 in a string field can get here; keep the output valid JSON.
    return DumpJson(nlohmann::ordered_json{{"error", std::string(status.message())}});
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

nlohmann::ordered_json ToJsonValue(const google::protobuf::Message& message) {
  return nlohmann::ordered_json::parse(ToJson(message));
}

std::string DumpJson(const nlohmann::ordered_json& doc) {
  return doc.dump(2, ' ', /*ensure_ascii=*/true);
}

namespace {
bool IsControl(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || u == 0x7f;
}
}  // namespace

constexpr char kC1Lead = '\xc2';
bool IsC1Second(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 && u <= 0x9f;
}

std::string WithoutControls(std::string_view text, std::string_view keep) {
  std::ostringstream out;
  {
    ControlFilter filter(out, std::string(keep));  // flushes a trailing lead byte when it goes
    std::ostream(&filter) << text;
  }
  return out.str();
}

bool ControlFilter::Put(char c) {
  if (pending_c2_) {
    pending_c2_ = false;
    if (IsC1Second(c)) return target_->sputc('?') != traits_type::eof();
    if (target_->sputc(kC1Lead) == traits_type::eof()) return false;
  }
  if (c == kC1Lead) {
    pending_c2_ = true;
    return true;
  }
  if (IsControl(c) && keep_.find(c) == std::string::npos) c = '?';
  return target_->sputc(c) != traits_type::eof();
}

void ControlFilter::FlushPending() {
  if (pending_c2_) target_->sputc(kC1Lead);
  pending_c2_ = false;
}

int ControlFilter::overflow(int c) {
  if (c == traits_type::eof()) return traits_type::not_eof(c);
  return Put(traits_type::to_char_type(c)) ? c : traits_type::eof();
}

std::streamsize ControlFilter::xsputn(const char* s, std::streamsize n) {
  for (std::streamsize i = 0; i < n; ++i) {
    if (!Put(s[i])) return i;
  }
  return n;
}

int ControlFilter::sync() {
  FlushPending();
  return target_->pubsync();
}

Table::Table(std::vector<std::string> headers, std::string align)
    : headers_(std::move(headers)), align_(std::move(align)) {}

void Table::AddRow(std::vector<std::string> cells) {
  for (std::string& cell : cells) cell = WithoutControls(cell);
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<std::size_t> widths(headers_.size(), 0);
  const auto measure = [&widths](const std::vector<std::string>& row) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (std::size_t i = 0; i < row.size(); ++i)
      widths[i] = std::max(widths[i], CodePoints(row[i]));
  };
  measure(headers_);
  for (const auto& row : rows_) measure(row);
  std::string out;
  const auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const std::string pad(widths[i] - CodePoints(row[i]), ' ');
      const bool right = i < align_.size() && align_[i] == 'r';
      absl::StrAppend(&line, i == 0 ? "" : "  ", right ? pad : "", row[i], right ? "" : pad);
    }
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(&out, line, "\n");
  };
  if (!headers_.empty()) emit(headers_);
  for (const auto& row : rows_) emit(row);
  return out;
}

std::string ClassName(v1::ClashClass c) {
  switch (c) {
    case v1::HARD:
      return "HARD";
    case v1::CONTACT:
      return "CONTACT";
    case v1::CLEARANCE:
      return "CLEARANCE";
    case v1::CONTAINED:
      return "CONTAINED";
    default:
      return "UNSPECIFIED";
  }
}

std::string Mm(double value_mm) { return absl::StrFormat("%.3f", value_mm); }

std::string FormatVec3(const v1::Vec3& v) {
  return absl::StrCat("(", Mm(v.x()), ", ", Mm(v.y()), ", ", Mm(v.z()), ")");
}

std::string FormatImport(const v1::ImportCadResponse& response) {
  const v1::Assembly& a = response.assembly();
  Table kv({});
  kv.AddRow({"assembly", a.assembly_id()});
  kv.AddRow({"file", a.file_name()});
  kv.AddRow({"instances",
             absl::StrCat(a.instances_size(), " of ", response.parts_size(), " distinct parts")});
  AddReportRows(a.report(), &kv);
  kv.AddRow({"from cache", YesNo(a.report().from_cache())});
  kv.AddRow({"seconds", absl::StrFormat("%.2f", a.report().import_seconds())});
  return absl::StrCat(kv.Render(), ReportWarnings(a.report()), "\n",
                      FormatPartsTable(response.parts()));
}

std::string FormatPartsTable(const RepeatedPtrField<v1::Part>& parts) {
  Table t({"part", "name", "triangles", "closed", "deflection mm", "AABB nodes", "OBB nodes"},
          "llrlrrr");
  for (const v1::Part& p : parts) {
    t.AddRow({p.part_id(), p.name(), absl::StrCat(p.triangle_count()), YesNo(p.closed()),
              Mm(p.deflection_mm()), absl::StrCat(p.hierarchy().aabb_nodes()),
              absl::StrCat(p.hierarchy().obb_nodes())});
  }
  return t.Render();
}

std::string FormatPart(const v1::Part& p) {
  const v1::HierarchyStats& h = p.hierarchy();
  Table kv({});
  kv.AddRow({"part", p.part_id()});
  kv.AddRow({"name", p.name()});
  kv.AddRow({"triangles", absl::StrCat(p.triangle_count())});
  kv.AddRow({"vertices", absl::StrCat(p.vertex_count())});
  kv.AddRow({"bounds mm", absl::StrCat(FormatVec3(p.bounds().min_mm()), " .. ",
                                       FormatVec3(p.bounds().max_mm()))});
  kv.AddRow({"closed", YesNo(p.closed())});
  kv.AddRow({"deflection mm", Mm(p.deflection_mm())});
  kv.AddRow({"faces", absl::StrCat(p.faces_meshed(), "/", p.faces_total(), " meshed")});
  kv.AddRow(
      {"hierarchy", absl::StrCat(h.nodes(), " nodes (", h.aabb_nodes(), " AABB, ", h.obb_nodes(),
                                 " OBB), ", h.leaves(), " leaves, depth ", h.depth())});
  kv.AddRow({"OBB volume saved", absl::StrFormat("%.1f %%", 100.0 * h.volume_saved_fraction())});
  kv.AddRow({"memory", absl::StrFormat("%.2f MB", static_cast<double>(p.memory_bytes()) / 1e6)});
  kv.AddRow(
      {"cleaning", absl::StrCat(p.welded_vertices(), " welded vertices, ", p.degenerate_triangles(),
                                " degenerate triangles, ", p.boundary_edges(), " boundary edges")});
  return kv.Render();
}

std::string FormatAssembly(const v1::Assembly& a) {
  const v1::TessellationOptions& t = a.tessellation();
  Table kv({});
  kv.AddRow({"assembly", a.assembly_id()});
  kv.AddRow({"file", a.file_name()});
  kv.AddRow({"sha256", a.file_sha256()});
  kv.AddRow({"tessellation", absl::StrCat(t.linear_deflection_mm() > 0
                                              ? absl::StrCat(Mm(t.linear_deflection_mm()), " mm")
                                              : absl::StrCat("relative ", t.relative_deflection()),
                                          ", angular ", t.angular_deflection_rad(), " rad")});
  AddReportRows(a.report(), &kv);
  std::string out = absl::StrCat(kv.Render(), ReportWarnings(a.report()));
  absl::StrAppend(&out, "\ninstances (", a.instances_size(), "):\n");
  // Instances come depth-first, so a path shares its leading names with the previous one: print
  // only the names that differ, indented by depth, and the leaf with its part and placement.
  std::vector<std::string> previous;
  for (const v1::AssemblyInstance& inst : a.instances()) {
    std::vector<std::string> names;
    std::string_view rest = inst.path();
    for (std::size_t at; (at = rest.find('/')) != std::string_view::npos;
         rest.remove_prefix(at + 1)) {
      names.emplace_back(rest.substr(0, at));
    }
    names.emplace_back(rest);
    std::size_t common = 0;
    while (common + 1 < names.size() && common < previous.size() &&
           names[common] == previous[common]) {
      ++common;
    }
    for (std::size_t d = common; d < names.size(); ++d) {
      absl::StrAppend(&out, std::string(2 * (d + 1), ' '), WithoutControls(names[d]));
      if (d + 1 == names.size()) {
        absl::StrAppend(&out, "  ", WithoutControls(inst.part_id()), "  at ",
                        FormatVec3(inst.pose().translation_mm()));
      }
      absl::StrAppend(&out, "\n");
    }
    previous = std::move(names);
  }
  return out;
}

std::string FormatSceneList(const std::vector<v1::Scene>& scenes) {
  Table t({"scene", "name", "version", "instances", "groups", "updated"}, "llrrrl");
  for (const v1::Scene& s : scenes) {
    t.AddRow({s.scene_id(), s.name(), absl::StrCat(s.version()), absl::StrCat(s.instance_count()),
              absl::StrCat(s.group_sizes_size()), Utc(s.update_time_s())});
  }
  return t.Render();
}

std::string FormatScene(const v1::Scene& s, const std::vector<v1::Instance>& instances) {
  Table kv({});
  kv.AddRow({"scene", s.scene_id()});
  kv.AddRow({"name", s.name()});
  kv.AddRow({"version", absl::StrCat(s.version())});
  kv.AddRow({"instances", absl::StrCat(s.instance_count())});
  // Map order is unspecified: sort the groups by name.
  std::vector<std::pair<std::string, uint64_t>> groups(s.group_sizes().begin(),
                                                       s.group_sizes().end());
  std::sort(groups.begin(), groups.end());
  std::vector<std::string> group_texts;
  for (const auto& [name, size] : groups)
    group_texts.push_back(absl::StrCat(name, " (", size, ")"));
  kv.AddRow({"groups", group_texts.empty() ? "-" : absl::StrJoin(group_texts, ", ")});
  kv.AddRow({"created", Utc(s.create_time_s())});
  kv.AddRow({"updated", Utc(s.update_time_s())});
  return absl::StrCat(kv.Render(), "\n", FormatInstances(instances));
}

std::string FormatInstances(const std::vector<v1::Instance>& instances) {
  Table t({"id", "path", "part", "enabled", "groups", "translation mm"}, "rlllll");
  for (const v1::Instance& i : instances) {
    t.AddRow({absl::StrCat(i.instance_id()), i.path(), i.part_id(), YesNo(i.enabled()),
              i.groups().empty() ? "-" : absl::StrJoin(i.groups(), ","),
              FormatVec3(i.pose().translation_mm())});
  }
  return t.Render();
}

std::string FormatInterference(const v1::InterferenceResponse& response, bool all_classes) {
  Table t({"class", "path a", "path b", "depth mm", "distance mm", "witness point a", "notes"},
          "lllrrll");
  std::size_t hidden = 0;
  const bool class_only = ClassOnly(response);
  for (const v1::Clash& c : response.clashes()) {
    if (c.clash_class() == v1::CONTACT && !all_classes) {
      ++hidden;
      continue;
    }
    t.AddRow({ClassName(c.clash_class()), c.path_a(), c.path_b(), DepthCell(c, class_only),
              DistanceCell(c), FormatVec3(c.point_a_mm()), Marks(c)});
  }
  std::string out = t.rows() > 0 ? t.Render() : "no clashes to show\n";
  if (hidden > 0) {
    absl::StrAppend(&out, "(", hidden, " CONTACT row", hidden == 1 ? "" : "s",
                    " not shown; --all-classes lists them)\n");
  }
  return absl::StrCat(out, FormatInterferenceSummary(response), "\n");
}

std::string FormatInterferenceSummary(const v1::InterferenceResponse& r) {
  const v1::InterferenceSummary& s = r.summary();
  const std::string clearance = r.tolerances().clearance_mm() > 0
                                    ? absl::StrCat(Mm(r.tolerances().clearance_mm()), " mm")
                                    : std::string("not checked");
  return absl::StrCat(
      "HARD ", s.hard(), ", CONTAINED ", s.contained(), ", CONTACT ", s.contact(), ", CLEARANCE ",
      s.clearance(), ", suppressed ", s.suppressed(), "; contact tolerance ",
      ContactToleranceText(r), ", clearance ", clearance,
      ClassOnly(r) ? "; depths for the class only (>= x: a lower bound, < x: shallower)" : "", "; ",
      s.instances(), " instances, ", s.candidate_pairs(), " candidate pairs (", s.cached_pairs(),
      " cached), scene version ", r.scene_version());
}

namespace {

// The length of the well-formed UTF-8 sequence at text[i] (1-4), or 0 when the bytes there are
// not one (a stray continuation byte, a truncated sequence, an overlong form, a surrogate, a
// code point above U+10FFFF): the ranges of the Unicode standard's table 3-7.
std::size_t Utf8SequenceAt(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) {
    return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u;
  };
  const unsigned b0 = byte(0);
  if (b0 < 0x80) return 1;
  const auto cont = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xbf) {
    const unsigned b = byte(k);
    return b >= lo && b <= hi;
  };
  if (b0 >= 0xc2 && b0 <= 0xdf) return cont(1) ? 2 : 0;
  if (b0 >= 0xe0 && b0 <= 0xef) {
    const unsigned lo = b0 == 0xe0 ? 0xa0 : 0x80, hi = b0 == 0xed ? 0x9f : 0xbf;
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (b0 >= 0xf0 && b0 <= 0xf4) {
    const unsigned lo = b0 == 0xf0 ? 0x90 : 0x80, hi = b0 == 0xf4 ? 0x8f : 0xbf;
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    // The document says UTF-8: a byte that starts no well-formed sequence (a file name or a
    // sequence file in Latin-1, say) becomes U+FFFD, and a whole sequence is copied as it is.
    if (const std::size_t n = Utf8SequenceAt(text, i); n != 1) {
      if (n == 0) {
        out += "\xef\xbf\xbd";
      } else if (const std::string_view seq = text.substr(i, n);
                 seq == "\xef\xbf\xbe" || seq == "\xef\xbf\xbf") {
        out += '?';  // U+FFFE and U+FFFF are not XML 1.0 characters either
      } else {
        out += seq;
      }
      i += n == 0 ? 0 : n - 1;
      continue;
    }
    const char c = text[i];
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\n':
        out += "&#10;";
        break;
      case '\t':
        out += "&#9;";
        break;
      case '\r':
        out += "&#13;";
        break;
      default:
        // Other control characters are not allowed in XML 1.0, not even as references.
        out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
    }
  }
  return out;
}

std::string JunitReport(std::string_view scene_id, const v1::InterferenceResponse& response) {
  std::string cases;
  int failures = 0;
  int skipped = 0;
  int blocking = 0;
  const bool class_only = ClassOnly(response);
  for (const v1::Clash& c : response.clashes()) {
    const std::string name = absl::StrCat(c.clash_id(), ": ", c.path_a(), " <-> ", c.path_b());
    std::string outcome;
    if (c.suppressed()) {
      ++skipped;
      outcome = absl::StrCat("<skipped message=\"", ClassName(c.clash_class()), " suppressed by ",
                             XmlEscape(c.suppressed_by()), "\"/>");
    } else if (IsBlocking(c)) {
      ++failures;
      ++blocking;
      outcome =
          absl::StrCat("<failure type=\"", ClassName(c.clash_class()), "\" message=\"",
                       ClassName(c.clash_class()), " depth ", XmlEscape(DepthText(c, class_only)),
                       " mm\">", XmlEscape(ClashDetails(c, class_only)), "</failure>");
    }
    absl::StrAppend(&cases, Testcase(name, outcome));
  }
  // The summary counts what the listing holds; take the larger, as CheckExitCode does.
  const uint64_t counted = response.summary().hard() + response.summary().contained();
  const uint64_t hard_total = std::max<uint64_t>(counted, static_cast<uint64_t>(blocking));
  std::string verdict;
  if (hard_total > 0) {
    ++failures;
    verdict =
        absl::StrCat("<failure type=\"HARD\" message=\"", hard_total,
                     " unsuppressed HARD or CONTAINED clash", hard_total == 1 ? "" : "es", "\"/>");
  }
  absl::StrAppend(&cases, Testcase("no hard clashes", verdict));
  const int tests = response.clashes_size() + 1;
  const std::string counts = absl::StrCat("tests=\"", tests, "\" failures=\"", failures,
                                          "\" errors=\"0\" skipped=\"", skipped, "\"");
  const std::string suite = XmlEscape(absl::StrCat("interference ", std::string(scene_id)));
  return absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", "<testsuites name=\"", suite, "\" ", counts,
      ">\n", "  <testsuite name=\"", suite, "\" ", counts, ">\n", "    <properties>\n",
      "      <property name=\"scene_version\" value=\"", response.scene_version(), "\"/>\n",
      "      <property name=\"summary\" value=\"", XmlEscape(FormatInterferenceSummary(response)),
      "\"/>\n", "    </properties>\n", cases, "  </testsuite>\n", "</testsuites>\n");
}

std::string FormatDistance(const v1::DistanceResponse& r, double max_distance_mm) {
  if (!r.found()) {
    return absl::StrCat("no pair closer than ", Mm(max_distance_mm), " mm (", r.pairs_measured(),
                        " pairs measured, scene version ", r.scene_version(), ")\n");
  }
  Table kv({});
  kv.AddRow({"distance mm", absl::StrCat(Mm(r.distance_mm()),
                                         r.distance_mm() == 0 ? " (touching or crossing)" : "")});
  kv.AddRow({"a", absl::StrCat("#", r.instance_a(), " ", r.path_a(), "  at ",
                               FormatVec3(r.point_a_mm()), "  face ", r.face_a())});
  kv.AddRow({"b", absl::StrCat("#", r.instance_b(), " ", r.path_b(), "  at ",
                               FormatVec3(r.point_b_mm()), "  face ", r.face_b())});
  kv.AddRow({"pairs measured", absl::StrCat(r.pairs_measured())});
  kv.AddRow({"scene version", absl::StrCat(r.scene_version())});
  return kv.Render();
}

std::string FormatPicks(const v1::PickResponse& r) {
  Table t({"ray", "hit", "instance", "path", "part", "face", "point mm", "normal", "distance mm"},
          "rlrllrllr");
  int ray = 0;
  for (const v1::PickHit& h : r.hits()) {
    if (!h.hit()) {
      t.AddRow({absl::StrCat(ray++), "no", "-", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    t.AddRow({absl::StrCat(ray++), "yes", absl::StrCat(h.instance_id()), h.path(), h.part_id(),
              absl::StrCat(h.face_id()), FormatVec3(h.point_mm()), FormatVec3(h.normal()),
              Mm(h.distance_mm())});
  }
  return t.Render();
}

std::string ProgressLine(uint64_t sent, uint64_t total, double seconds) {
  constexpr int kWidth = 30;
  const double fraction =
      total == 0 ? 1.0 : std::min(1.0, static_cast<double>(sent) / static_cast<double>(total));
  const int filled = static_cast<int>(fraction * kWidth);
  const double rate = seconds > 0 ? static_cast<double>(sent) / 1e6 / seconds : 0.0;
  return absl::StrFormat("[%s%s] %3d%%  %.1f/%.1f MB  %.1f MB/s", std::string(filled, '#'),
                         std::string(kWidth - filled, '-'), static_cast<int>(fraction * 100),
                         static_cast<double>(sent) / 1e6, static_cast<double>(total) / 1e6, rate);
}

namespace {

std::string StepBlockers(const v1::StepResult& step) {
  std::vector<std::string> parts;
  for (const v1::Blocker& b : step.blockers()) {
    parts.push_back(absl::StrCat(b.path(), " (", v1::ClashClass_Name(b.clash_class()), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

std::string StepName(const v1::StepResult& step) {
  return step.name().empty() ? absl::StrCat("step ", step.step_index() + 1) : step.name();
}

// What a step that is not ok ran into: its blockers, or for an undecided step (the sweep ran
// out of iterations, which the server counts as blocked) that it was not decided.
std::string StepProblem(const v1::StepResult& step) {
  const std::string blockers = StepBlockers(step);
  if (!step.undecided()) return blockers;
  const std::string undecided =
      "not decided: the sweep reached its iteration cap (the path is proven free only up to "
      "its t)";
  return blockers.empty() ? undecided : absl::StrCat(blockers, "; ", undecided);
}

}  // namespace

std::string FormatSequenceSteps(const std::vector<v1::StepResult>& steps,
                                const v1::Tolerances& requested) {
  std::string out = absl::StrFormat("%-4s %-28s %-8s %9s %9s %12s  %s\n", "#", "step", "result",
                                    "blocked t", "contact t", "clearance mm", "blocking / closest");
  for (const v1::StepResult& step : steps) {
    const std::string contact =
        step.first_contact_t() < 0 ? "-" : absl::StrFormat("%.4f", step.first_contact_t());
    const std::string clearance = std::isfinite(step.min_clearance_mm())
                                      ? absl::StrFormat("%.3f", step.min_clearance_mm())
                                      : std::string("-");
    absl::StrAppendFormat(
        &out, "%-4d %-28s %-8s %9s %9s %12s  %s\n", step.step_index() + 1,
        WithoutControls(StepName(step)),
        step.ok()          ? "ok"
        : step.undecided() ? "UNDECIDED"
                           : "BLOCKED",
        step.ok() ? "-" : absl::StrFormat("%.4f", step.blocked_t()), contact, clearance,
        WithoutControls(step.ok() ? step.min_clearance_path() : StepProblem(step)));
    // A contact tolerance below 1e-9 of a mover's travel is raised to it (rounding): say so,
    // or a step moved 1e12 mm would read as checked at the requested tolerance.
    if (requested.has_contact_tolerance_mm() &&
        step.contact_tolerance_mm() > requested.contact_tolerance_mm()) {
      absl::StrAppendFormat(&out,
                            "       contact tolerance raised to %.6g mm (1e-9 of the mover's "
                            "size or travel)\n",
                            step.contact_tolerance_mm());
    }
    if (step.suppressed_pairs() > 0) {
      absl::StrAppendFormat(&out, "       %d allowed pair%s left out of the sweep\n",
                            step.suppressed_pairs(), step.suppressed_pairs() == 1 ? "" : "s");
    }
    for (const v1::FreeDirection& d : step.free_directions()) {
      absl::StrAppendFormat(&out, "       escape %-4s %s (%.1f mm)\n", WithoutControls(d.name()),
                            d.free()        ? "free"
                            : d.undecided() ? "undecided"
                                            : "blocked",
                            d.distance_mm());
    }
  }
  return out;
}

std::string FormatSequence(const std::vector<v1::StepResult>& steps,
                           const v1::SequenceSummary& summary) {
  std::string out = FormatSequenceSteps(steps, summary.tolerances());
  absl::StrAppendFormat(
      &out,
      "%d steps: %d ok, %d blocked, %d not run; first blocked: %s; contact "
      "tolerance %s, clearance %.3f mm\n",
      summary.steps(), summary.steps_ok(), summary.steps_blocked(), summary.steps_skipped(),
      summary.first_blocked_step() < 0 ? std::string("none")
                                       : absl::StrCat("step ", summary.first_blocked_step() + 1),
      summary.tolerances().has_contact_tolerance_mm()
          ? absl::StrFormat("%.3f mm", summary.tolerances().contact_tolerance_mm())
          : std::string("per pair (sum of deflections)"),
      summary.tolerances().clearance_mm());
  return out;
}

std::string JunitErrorReport(std::string_view suite_name, const absl::Status& status) {
  const std::string suite = XmlEscape(suite_name);
  const std::string message = XmlEscape(ErrorLine(status));
  return absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"", suite,
      "\" tests=\"1\" failures=\"0\" errors=\"1\">\n  <testsuite name=\"", suite,
      "\" tests=\"1\" failures=\"0\" errors=\"1\">\n    <testcase classname=\"clashctl\" "
      "name=\"call\">\n      <error type=\"",
      absl::StatusCodeToString(status.code()), "\" message=\"", message, "\"/>\n",
      "    </testcase>\n  </testsuite>\n</testsuites>\n");
}

namespace {

// One JUnit testcase per step run: failing when blocked or undecided.
std::string StepCases(const std::vector<v1::StepResult>& steps) {
  std::string cases;
  for (const v1::StepResult& step : steps) {
    absl::StrAppend(&cases, "    <testcase classname=\"sequence\" name=\"",
                    XmlEscape(absl::StrCat(step.step_index() + 1, " ", StepName(step))), "\"");
    if (step.ok()) {
      absl::StrAppend(&cases, "/>\n");
    } else {
      absl::StrAppend(&cases, ">\n      <failure message=\"",
                      XmlEscape(absl::StrCat(step.undecided() ? "undecided at t=" : "blocked at t=",
                                             step.blocked_t())),
                      "\">", XmlEscape(StepProblem(step)), "</failure>\n    </testcase>\n");
    }
  }
  return cases;
}

int NotOk(const std::vector<v1::StepResult>& steps) {
  return static_cast<int>(
      std::count_if(steps.begin(), steps.end(), [](const v1::StepResult& r) { return !r.ok(); }));
}

}  // namespace

std::string SequenceJunitReport(std::string_view scene_id, const std::vector<v1::StepResult>& steps,
                                const v1::SequenceSummary& summary) {
  std::string cases = StepCases(steps);
  for (int i = static_cast<int>(steps.size()); i < summary.steps(); ++i) {
    absl::StrAppend(&cases, "    <testcase classname=\"sequence\" name=\"step ", i + 1,
                    "\">\n      <skipped message=\"not run after a blocked step\"/>\n"
                    "    </testcase>\n");
  }
  const std::string suite = XmlEscape(absl::StrCat("sequence ", std::string(scene_id)));
  return absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"", suite,
      "\" tests=\"", summary.steps(), "\" failures=\"", summary.steps_blocked(), "\" skipped=\"",
      summary.steps_skipped(), "\">\n", cases, "  </testsuite>\n</testsuites>\n");
}

std::string SequenceJunitPartialReport(std::string_view scene_id,
                                       const std::vector<v1::StepResult>& steps,
                                       const absl::Status& status) {
  const std::string suite = XmlEscape(absl::StrCat("sequence ", std::string(scene_id)));
  return absl::StrCat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"", suite,
      "\" tests=\"", steps.size() + 1, "\" failures=\"", NotOk(steps), "\" errors=\"1\">\n",
      StepCases(steps), "    <testcase classname=\"clashctl\" name=\"call\">\n      <error type=\"",
      absl::StatusCodeToString(status.code()), "\" message=\"", XmlEscape(ErrorLine(status)),
      "\"/>\n    </testcase>\n  </testsuite>\n</testsuites>\n");
}

}  // namespace clash::clashctl
