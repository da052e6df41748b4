// clash-import: imports a STEP or IGES file the way the server does (ImportAssemblyWithCache: the
// import cache, else the isolated worker) and prints its assembly tree and import report.
//
//   clash-import FILE [--no-cache | --cache-dir DIR] [--cache-max-mb M] [--deflection-mm X]
//                [--relative-deflection X] [--angular-deflection-rad X] [--max-triangles N]
//                [--timeout-s S] [--memory-mb M] [--strict] [--json]
//   clash-import [options] -- FILE    (a FILE whose name starts with "-")
//
// Exit codes: 0 imported (and, with --strict, nothing lost); 1 import error, or with --strict an
// incomplete import (the report is still printed; "clash-import: <CODE>: <message>" goes to
// stderr); 2 usage error. SIGINT and SIGTERM cancel the import (its worker is killed) and exit 1.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "clash/cad/assembly.h"
#include "clash/cad/import_cache.h"
#include "clash/cad/isolated_import.h"
#include "clash/cad/tessellate.h"

namespace clash::cad {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitImportError = 1;
constexpr int kExitUsage = 2;

// Set by SIGINT / SIGTERM; the import polls it and kills its worker.
std::atomic<bool> g_cancel{false};
static_assert(std::atomic<bool>::is_always_lock_free, "written from a signal handler");

extern "C" void OnSignal(int /*signal*/) { g_cancel.store(true); }

void CancelOnSignals() {
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

// The command line.
struct Flags {
  std::string file;
  bool no_cache = false;
  std::string cache_dir;
  std::uint64_t cache_max_mb = 1024;
  TessellationOptions options;
  double timeout_s = 120;
  std::size_t memory_mb = 4096;
  bool strict = false;
  bool json = false;
};

// $XDG_CACHE_HOME/clashd/import, else ~/.cache/clashd/import; "" when neither is known.
std::string DefaultCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return absl::StrCat(xdg, "/clashd/import");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.cache/clashd/import");
  }
  return "";
}

// What the import gave, with how the cache served it.
struct Outcome {
  CachedAssemblyImport result;
  bool cache_used = false;
  std::string cache_dir;
  std::string cache_warning;  // why the cache could not be used, if it was asked for
};

// The cache's bound: --cache-max-mb (saturating; 0 caches nothing).
ImportCacheOptions CacheBound(const Flags& flags) {
  ImportCacheOptions options;
  options.max_bytes = flags.cache_max_mb > (std::numeric_limits<std::uint64_t>::max() >> 20)
                          ? std::numeric_limits<std::uint64_t>::max()
                          : flags.cache_max_mb << 20;
  return options;
}

absl::StatusOr<Outcome> Import(const Flags& flags) {
  IsolationLimits limits;
  limits.wall_seconds = flags.timeout_s;
  limits.cpu_seconds = flags.timeout_s;
  limits.address_space_bytes = flags.memory_mb << 20;
  Outcome outcome;
  if (!flags.no_cache) {
    outcome.cache_dir = flags.cache_dir.empty() ? DefaultCacheDir() : flags.cache_dir;
    absl::StatusOr<ImportCache> cache =
        outcome.cache_dir.empty() ? absl::InvalidArgumentError("no cache folder")
                                  : ImportCache::Open(outcome.cache_dir, CacheBound(flags));
    if (cache.ok()) {
      absl::StatusOr<CachedAssemblyImport> result =
          ImportAssemblyWithCache(flags.file, flags.options, limits, *cache, &g_cancel);
      if (!result.ok()) return result.status();
      outcome.result = *std::move(result);
      outcome.cache_used = true;
      return outcome;
    }
    outcome.cache_warning = std::string(cache.status().message());
  }
  absl::StatusOr<ImportedAssembly> assembly =
      ImportAssemblyIsolated(flags.file, flags.options, limits, &g_cancel);
  if (!assembly.ok()) return assembly.status();
  outcome.result.assembly = *std::move(assembly);
  return outcome;
}

std::size_t Triangles(const MeshBuffers& mesh) { return mesh.triangles.size() / 3; }

// "#rrggbb", or "-" without a colour.
std::string ColorHex(const std::optional<std::array<float, 3>>& rgb) {
  if (!rgb) return "-";
  char hex[8];
  const auto byte = [](float c) {
    return static_cast<int>(std::lround(std::clamp(c, 0.f, 1.f) * 255));
  };
  std::snprintf(hex, sizeof(hex), "#%02x%02x%02x", byte((*rgb)[0]), byte((*rgb)[1]),
                byte((*rgb)[2]));
  return hex;
}

bool IsIdentity(const std::array<double, 9>& rotation) { return rotation == Placement{}.rotation; }

void PrintText(const Flags& flags, const Outcome& outcome, const absl::Status& complete) {
  const ImportedAssembly& a = outcome.result.assembly;
  std::size_t path_width = 0;
  std::size_t part_width = 0;
  for (const AssemblyInstance& instance : a.instances) {
    path_width = std::max(path_width, instance.path.size());
  }
  for (const AssemblyPart& part : a.parts) part_width = std::max(part_width, part.name.size());
  std::cout << flags.file << ": " << a.parts.size() << " parts, " << a.instances.size()
            << " instances\n\ninstances (path, part, colour, translation in mm):\n";
  for (const AssemblyInstance& instance : a.instances) {
    const std::string& part = a.parts[static_cast<std::size_t>(instance.part)].name;
    const auto& t = instance.placement.translation_mm;
    std::cout << "  " << instance.path << std::string(path_width - instance.path.size(), ' ')
              << "  " << part << std::string(part_width - part.size(), ' ') << "  "
              << ColorHex(instance.color_rgb) << "  (" << t[0] << ", " << t[1] << ", " << t[2]
              << ")" << (IsIdentity(instance.placement.rotation) ? "" : " rotated") << "\n";
  }
  std::cout << "\nparts (index, name, faces meshed/total, triangles, deflection):\n";
  std::size_t triangles = 0;
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    const MeshBuffers& mesh = a.parts[i].mesh;
    triangles += Triangles(mesh);
    const std::string& name = a.parts[i].name;
    std::cout << "  " << i << "  " << name << std::string(part_width - name.size(), ' ')
              << "  faces " << mesh.faces_meshed << "/" << mesh.faces_total << "  "
              << Triangles(mesh) << " triangles  deflection " << mesh.deflection_mm << " mm\n";
  }
  std::cout << "\nreport:\n"
            << "  roots transferred  " << a.roots_transferred << "/" << a.roots_total << "\n"
            << "  load failures      " << a.load_failures << "\n"
            << "  load warnings      " << a.load_warnings << "\n"
            << "  empty parts        " << a.empty_parts << "\n"
            << "  triangles          " << triangles << " in parts\n"
            << "  from cache         " << (outcome.result.from_cache ? "yes" : "no");
  if (outcome.cache_used) {
    std::cout << " (" << outcome.cache_dir << ", "
              << (outcome.result.stored ? "stored" : "not stored") << ")";
  } else {
    std::cout << " (cache not used)";
  }
  std::cout << "\n  complete           "
            << (complete.ok() ? "yes" : absl::StrCat("no: ", complete.message())) << "\n";
  for (const std::string& warning : a.warnings) {
    std::cout << "  warning            " << warning << "\n";
  }
}

void PrintJson(const Flags& flags, const Outcome& outcome, const absl::Status& complete) {
  using Json = nlohmann::ordered_json;
  const ImportedAssembly& a = outcome.result.assembly;
  Json parts = Json::array();
  std::size_t triangles = 0;
  for (const AssemblyPart& part : a.parts) {
    const MeshBuffers& mesh = part.mesh;
    triangles += Triangles(mesh);
    parts.push_back({{"name", part.name},
                     {"vertices", mesh.xyz.size() / 3},
                     {"triangles", Triangles(mesh)},
                     {"faces_total", mesh.faces_total},
                     {"faces_meshed", mesh.faces_meshed},
                     {"faces_reversed", mesh.faces_reversed},
                     {"deflection_mm", mesh.deflection_mm}});
  }
  Json instances = Json::array();
  for (const AssemblyInstance& instance : a.instances) {
    instances.push_back(
        {{"path", instance.path},
         {"name", instance.name},
         {"part", instance.part},
         {"rotation", instance.placement.rotation},
         {"translation_mm", instance.placement.translation_mm},
         {"color_rgb", instance.color_rgb ? Json(*instance.color_rgb) : Json(nullptr)}});
  }
  const Json out = {
      {"file", flags.file},
      {"report",
       {{"roots_total", a.roots_total},
        {"roots_transferred", a.roots_transferred},
        {"load_failures", a.load_failures},
        {"load_warnings", a.load_warnings},
        {"empty_parts", a.empty_parts},
        {"triangles", triangles},
        {"complete", complete.ok()},
        {"incomplete", complete.ok() ? Json(nullptr) : Json(std::string(complete.message()))},
        {"warnings", a.warnings}}},
      {"cache",
       {{"used", outcome.cache_used},
        {"dir", outcome.cache_used ? Json(outcome.cache_dir) : Json(nullptr)},
        {"key", outcome.cache_used ? Json(outcome.result.key) : Json(nullptr)},
        {"from_cache", outcome.result.from_cache},
        {"stored", outcome.result.stored}}},
      {"parts", std::move(parts)},
      {"instances", std::move(instances)}};
  // Names come from the file and need not be UTF-8: replace invalid bytes instead of throwing.
  std::cout << out.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
}

int Fail(const absl::Status& status) {
  std::cerr << "clash-import: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return kExitImportError;
}

int Run(int argc, char** argv) {
  Flags flags;
  CLI::App app{
      "Imports a STEP or IGES file as clashd does (import cache, else an isolated worker) "
      "and prints its assembly tree and import report."};
  app.add_option("FILE", flags.file, "STEP or IGES file (format sniffed from content)")->required();
  CLI::Option* no_cache =
      app.add_flag("--no-cache", flags.no_cache, "Neither read nor write the import cache");
  app.add_option("--cache-dir", flags.cache_dir,
                 "Import cache folder (default $XDG_CACHE_HOME/clashd/import, else "
                 "~/.cache/clashd/import)")
      ->excludes(no_cache);
  app.add_option("--cache-max-mb", flags.cache_max_mb,
                 "Bound of the cache folder: least recently used entries go first (0: store "
                 "nothing)")
      ->excludes(no_cache)
      ->capture_default_str();
  app.add_option("--deflection-mm", flags.options.linear_deflection_mm,
                 "Absolute chordal deflection in mm (default: relative to each part's size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--relative-deflection", flags.options.relative_deflection,
                 "Deflection as a fraction of each part's bounding-box diagonal")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--angular-deflection-rad", flags.options.angular_deflection_rad,
                 "Largest angle between normals along a mesh edge, in (0, pi)")
      ->check(CLI::Range(0.0, std::numbers::pi))
      ->capture_default_str();
  app.add_option("--max-triangles", flags.options.max_triangles, "Triangle cap over all parts")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--timeout-s", flags.timeout_s, "Wall-clock and CPU limit of the import worker")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--memory-mb", flags.memory_mb, "Address-space limit of the import worker")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--strict", flags.strict,
               "Fail (exit 1) when anything was lost (CheckImportComplete)");
  app.add_flag("--json", flags.json, "Print the tree and report as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;  // --help prints and succeeds
  }

  CancelOnSignals();
  absl::StatusOr<Outcome> outcome = Import(flags);
  if (!outcome.ok()) return Fail(outcome.status());
  if (!outcome->cache_warning.empty()) {
    std::cerr << "clash-import: warning: import cache not used: " << outcome->cache_warning << "\n";
  }
  const absl::Status complete = CheckImportComplete(outcome->result.assembly);
  if (flags.json) {
    PrintJson(flags, *outcome, complete);
  } else {
    PrintText(flags, *outcome, complete);
  }
  if (flags.strict && !complete.ok()) return Fail(complete);
  return kExitOk;
}

}  // namespace
}  // namespace clash::cad

// OCCT is linked in (clash_cad) but never runs here; its one-time registrations at load time would
// still be reported by LeakSanitizer in sanitizer builds. Only leaks inside libTK* are suppressed.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

int main(int argc, char** argv) { return clash::cad::Run(argc, argv); }
