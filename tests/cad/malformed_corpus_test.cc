// The malformed-file corpus of RELIABILITY.md, generated from a valid STEP file and imported
// through the isolated worker: every file must end in the status its damage calls for
// (RELIABILITY.md requirements 3 and 5: the code, and the phase in the message) within its
// limits, and no worker process or temporary file may be left behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "clash/cad/isolated_import.h"
#include "testing/temp_dir.h"

namespace clash::cad {
namespace {

namespace fs = std::filesystem;

// OCCT leaks its one-time registrations; only leaks inside libTK* are ignored.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

// Wall-clock limit per file: generous for a 2-core machine, far below a hang.
constexpr double kWallSeconds = 8.0;

using ::testing::AnyOfArray;
using ::testing::HasSubstr;

constexpr absl::StatusCode kOk = absl::StatusCode::kOk;
constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kDeadline = absl::StatusCode::kDeadlineExceeded;

// A worker that crashes (a stack overflow, a null handle in OCCT) names no phase: "import
// worker crashed (signal 11, SIGSEGV)" in the release build, "import worker exited with code 1
// without a result" under AddressSanitizer, which catches the SIGSEGV.
constexpr const char* kCrashed = "import worker ";
// A file OCCT loops on forever: the wall clock stops it, or the CPU limit (also 8 s) when the
// worker had the processor to itself; both are DEADLINE_EXCEEDED.
constexpr const char* kTimeLimit = "exceeded the ";

struct CorpusFile {
  std::string name;
  std::string bytes;
  TessellationOptions options;
  // The outcomes allowed: one, or the alternatives of a time limit (kOk: the file imports).
  std::vector<absl::StatusCode> codes;
  // A fragment of the message of a failure: the phase (read, transfer, mesh) with its reason.
  std::string message;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ReplaceFirst(std::string s, const std::string& what, const std::string& with) {
  const auto at = s.find(what);
  if (at != std::string::npos) s.replace(at, what.size(), with);
  return s;
}

std::vector<CorpusFile> MakeCorpus(const std::string& valid) {
  std::vector<CorpusFile> c;
  std::mt19937 rng(20261122);
  c.push_back({"valid control", valid, {}, {kOk}, ""});
  c.push_back({"empty", "", {}, {kInvalid}, "read: the file is empty"});
  std::string random(4096, '\0');
  for (char& ch : random) ch = static_cast<char>(rng());
  c.push_back({"random bytes", random, {}, {kInvalid}, "read: unrecognised format"});
  c.push_back({"random bytes after a STEP header",
               "ISO-10303-21;\nHEADER;\n" + random,
               {},
               {kInvalid},
               "read: OCCT cannot parse the STEP file"});
  for (int percent : {5, 30, 60, 95}) {
    c.push_back({"truncated at " + std::to_string(percent) + "%",
                 valid.substr(0, valid.size() * percent / 100),
                 {},
                 {kInvalid},
                 "read: OCCT cannot parse the STEP file"});
  }
  c.push_back({"header removed",
               valid.substr(valid.find("DATA;")),
               {},
               {kInvalid},
               "read: unrecognised format"});
  // Seed 0 parses but gives no shape; seeds 1 to 3 crash OCCT (null handles).
  for (int seed = 0; seed < 4; ++seed) {
    std::string flipped = valid;
    std::mt19937 r(seed);
    for (int k = 0; k < 40; ++k) flipped[r() % flipped.size()] ^= static_cast<char>(1 << (r() % 7));
    c.push_back({"40 bit flips, seed " + std::to_string(seed),
                 flipped,
                 {},
                 {kInvalid},
                 seed == 0 ? "transfer: none of the 1 roots" : kCrashed});
  }
  c.push_back({"coordinate 1.E+400",
               ReplaceFirst(valid, "(-27.8196811084,0.423702927757,5.43633)",
                            "(1.E+400,0.423702927757,5.43633)"),
               {},
               {kDeadline},
               kTimeLimit});
  // Both overflow the stack.
  c.push_back({"self-referencing oriented edge",
               ReplaceFirst(valid, "#17 = ORIENTED_EDGE('',*,*,#18,.T.);",
                            "#17 = ORIENTED_EDGE('',*,*,#17,.T.);"),
               {},
               {kInvalid},
               kCrashed});
  c.push_back(
      {"200000 nested parentheses",
       ReplaceFirst(valid, "#20 = CARTESIAN_POINT('',(-27.8196811084,0.423702927757,5.43633));",
                    "#20 = CARTESIAN_POINT(''," + std::string(200000, '(') + "1.0" +
                        std::string(200000, ')') + ");"),
       {},
       {kInvalid},
       kCrashed});
  // A large file: the valid model followed by ~40 MB of unused entities.
  std::string large = valid.substr(0, valid.rfind("ENDSEC;"));
  for (int i = 0; large.size() < 40u << 20; ++i) {
    large += "#" + std::to_string(1000000 + i) + " = CARTESIAN_POINT('',(1.,2.," +
             std::to_string(i) + ".));\n";
  }
  large += "ENDSEC;\nEND-ISO-10303-21;\n";
  // It imports in ~4 s (~8 s under AddressSanitizer): on a busy machine the wall clock may
  // stop it first.
  c.push_back({"40 MB of extra entities", large, {}, {kOk, kDeadline}, kTimeLimit});
  // Deflections below the floor relative to the part's size (requirement 5).
  TessellationOptions fine;
  fine.linear_deflection_mm = 1e-7;
  c.push_back({"absurdly fine absolute deflection",
               valid,
               fine,
               {kInvalid},
               "mesh: deflection 1e-07 mm is below the floor"});
  TessellationOptions fine_rel;
  fine_rel.relative_deflection = 1e-9;
  c.push_back({"relative deflection below the floor",
               valid,
               fine_rel,
               {kInvalid},
               "relative_deflection must be at least 1e-05"});
  return c;
}

// A private folder `dir_` for the corpus files, and `tmp_` inside it as TMPDIR (the import's own
// temporary folders must vanish); TMPDIR is restored and both are removed after the test.
class MalformedCorpus : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = clash::testing::MakeTempDir(fs::temp_directory_path(), "clash_corpus_");
    ASSERT_FALSE(dir_.empty());
    tmp_ = dir_ / "tmp";
    fs::create_directories(tmp_);
    tmpdir_.emplace("TMPDIR", tmp_.string());
  }
  void TearDown() override {
    tmpdir_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  fs::path dir_;
  fs::path tmp_;
  std::optional<clash::testing::ScopedEnv> tmpdir_;
};

TEST_F(MalformedCorpus, EveryFileEndsClassifiedWithinItsLimits) {
  const std::string sample = CLASH_OCCT_SAMPLE_STEP;
  if (!fs::exists(sample)) GTEST_SKIP() << sample << " is missing (Debian package occt-misc)";

  IsolationLimits limits;
  limits.worker_path = CLASH_CAD_WORKER_PATH;
  limits.wall_seconds = kWallSeconds;
  limits.cpu_seconds = kWallSeconds;
  limits.address_space_bytes = 2ull << 30;

  for (const CorpusFile& f : MakeCorpus(ReadFile(sample))) {
    SCOPED_TRACE(f.name);
    const fs::path path = dir_ / "input.step";
    std::ofstream(path, std::ios::binary) << f.bytes;
    const auto start = std::chrono::steady_clock::now();
    const absl::StatusOr<MeshBuffers> r = ImportIsolated(path.string(), f.options, limits);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, kWallSeconds + 3.0);
    EXPECT_THAT(r.status().code(), AnyOfArray(f.codes)) << r.status();
    if (r.ok()) {
      // An honest report: what was meshed is consistent and finite.
      EXPECT_LE(r->faces_meshed, r->faces_total);
      EXPECT_EQ(r->triangles.size() % 3, 0u);
      EXPECT_EQ(r->face_ids.size() * 3, r->triangles.size());
      for (double x : r->xyz) ASSERT_TRUE(std::isfinite(x));
    } else {
      EXPECT_THAT(std::string(r.status().message()), HasSubstr(f.message));
    }
    std::cerr << "[ corpus ] " << f.name << ": "
              << (r.ok() ? "OK, " + std::to_string(r->faces_meshed) + "/" +
                               std::to_string(r->faces_total) + " faces"
                         : r.status().ToString())
              << " in " << seconds << " s\n";
  }
  // Nothing left behind: no child process, no temporary folder.
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_TRUE(fs::is_empty(tmp_));
}

}  // namespace
}  // namespace clash::cad
