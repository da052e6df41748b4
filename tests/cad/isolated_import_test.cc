// Tests for clash::cad::ImportIsolated, the clash-cad-worker process and its result format.
//
// Fixtures are written with OCCT in this (trusted) process; every import under test runs in a
// worker. Failure paths use the worker's CLASH_WORKER_TEST_FAULT hook (crash, hang, spin, oom,
// garbage, exit) instead of relying on OCCT bugs. After every test no child process and no temp
// file may remain: each test points TMPDIR at its own empty folder and checks it at the end.
#include "clash/cad/isolated_import.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp, setenv
#include <sys/wait.h>

#include <BRepPrimAPI_MakeBox.hxx>
#include <BRepPrimAPI_MakeCylinder.hxx>
#include <Interface_Static.hxx>
#include <Message.hxx>
#include <Message_Messenger.hxx>
#include <STEPControl_Controller.hxx>
#include <STEPControl_Writer.hxx>
#include <TopoDS_Shape.hxx>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "assembly_fixtures.h"
#include "clash/cad/tessellate.h"
#include "occt_fixtures.h"
#include "testing/status_matchers.h"
#include "worker_format.h"

// LeakSanitizer: OCCT 7.6 never frees its one-time registrations; see tessellate_test.cc.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

namespace clash::cad {
namespace {

namespace fs = std::filesystem;
using clash::testing::IsOk;
using clash::testing::StatusIs;
using Seconds = std::chrono::duration<double>;
using testing::ExpectSameMesh;
using ::testing::HasSubstr;
using testing::MakeTempDir;
using testing::ReadBytes;
using testing::WriteBytes;
using testing::WriteStep;

// Sets an environment variable for one scope (tests only; never while workers are starting).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class IsolatedImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path base = fs::temp_directory_path();
    data_ = MakeTempDir(base, "clash_iso_data_");
    tmp_ = MakeTempDir(base, "clash_iso_tmp_");
    ASSERT_FALSE(data_.empty());
    ASSERT_FALSE(tmp_.empty());
    tmpdir_.emplace("TMPDIR", tmp_.string());
    unsetenv("CLASH_WORKER_TEST_FAULT");
    box_ = data_ / "box.step";
    WriteStep(BRepPrimAPI_MakeBox(10, 20, 30).Shape(), box_);
  }

  void TearDown() override {
    // No worker left behind: this process has no child at all.
    errno = 0;
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
    // No temp file left behind.
    std::error_code ec;
    EXPECT_TRUE(fs::is_empty(tmp_, ec)) << "temp files left in " << tmp_;
    tmpdir_.reset();
    fs::remove_all(tmp_, ec);
    fs::remove_all(data_, ec);
  }

  static IsolationLimits Limits() {
    IsolationLimits limits;
    limits.worker_path = CLASH_CAD_WORKER_PATH;
    limits.wall_seconds = 60;
    limits.cpu_seconds = 60;
    return limits;
  }

  fs::path data_;
  fs::path tmp_;
  fs::path box_;
  std::optional<ScopedEnv> tmpdir_;
};

TEST_F(IsolatedImportTest, BoxEqualsInProcessResult) {
  const absl::StatusOr<MeshBuffers> local = ReadAndTessellate(box_, {});
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<MeshBuffers> isolated = ImportIsolated(box_, {}, Limits());
  ASSERT_THAT(isolated, IsOk());
  EXPECT_EQ(isolated->triangles.size(), 3u * 12);
  ExpectSameMesh(*isolated, *local);
}

TEST_F(IsolatedImportTest, OptionsReachTheWorker) {
  const fs::path cylinder = data_ / "cylinder.step";
  WriteStep(BRepPrimAPI_MakeCylinder(7.3, 11).Shape(), cylinder);
  TessellationOptions options;
  options.relative_deflection = 0.000731;  // not representable in 6 digits
  options.angular_deflection_rad = 0.123456789;
  options.parallel = false;
  const absl::StatusOr<MeshBuffers> local = ReadAndTessellate(cylinder, options);
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<MeshBuffers> isolated = ImportIsolated(cylinder, options, Limits());
  ASSERT_THAT(isolated, IsOk());
  ExpectSameMesh(*isolated, *local);

  options.max_triangles = 10;  // the cylinder needs more
  EXPECT_THAT(ImportIsolated(cylinder, options, Limits()),
              StatusIs(absl::StatusCode::kResourceExhausted, ""));
  options.max_triangles = 1000;
  options.angular_deflection_rad = 4;  // the worker validates the options
  EXPECT_THAT(ImportIsolated(cylinder, options, Limits()),
              StatusIs(absl::StatusCode::kInvalidArgument, "angular_deflection_rad"));
}

TEST_F(IsolatedImportTest, MissingFileIsNotFound) {
  EXPECT_THAT(ImportIsolated((data_ / "missing.step").string(), {}, Limits()),
              StatusIs(absl::StatusCode::kNotFound, "missing.step"));
}

TEST_F(IsolatedImportTest, BadFilesAreInvalidArgument) {
  WriteBytes(data_ / "empty.step", "");
  std::mt19937 rng(1234);
  std::string random(4096, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  WriteBytes(data_ / "random.step", random);
  const std::string whole = ReadBytes(box_);
  WriteBytes(data_ / "truncated.step", whole.substr(0, whole.size() / 2));
  for (const char* name : {"empty.step", "random.step", "truncated.step"}) {
    SCOPED_TRACE(name);
    EXPECT_THAT(ImportIsolated((data_ / name).string(), {}, Limits()),
                StatusIs(absl::StatusCode::kInvalidArgument, ""));
  }
}

TEST_F(IsolatedImportTest, CrashIsInvalidArgument) {
  ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "crash");
  EXPECT_THAT(ImportIsolated(box_, {}, Limits()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "import worker crashed (signal 11, SIGSEGV) reading box.step"));
}

TEST_F(IsolatedImportTest, ExitWithoutResultIsInvalidArgument) {
  ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "exit");
  EXPECT_THAT(ImportIsolated(box_, {}, Limits()),
              StatusIs(absl::StatusCode::kInvalidArgument, "exited with code 3"));
}

TEST_F(IsolatedImportTest, HangHitsTheWallClockLimit) {
  ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "hang");
  IsolationLimits limits = Limits();
  limits.wall_seconds = 1;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "wall-clock"));
  const double elapsed = Seconds(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(elapsed, 1.0);
  EXPECT_LT(elapsed, 2.0);
}

TEST_F(IsolatedImportTest, SpinHitsTheCpuLimit) {
  ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "spin");
  IsolationLimits limits = Limits();
  limits.cpu_seconds = 1;
  limits.wall_seconds = 30;  // the machine may be busy: CPU time can lag the wall clock
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "CPU limit"));
}

TEST_F(IsolatedImportTest, OutOfMemoryIsResourceExhausted) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "RLIMIT_AS is not applied in AddressSanitizer builds";
#endif
  ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "oom");
  IsolationLimits limits = Limits();
  limits.address_space_bytes = std::size_t{256} << 20;
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kResourceExhausted, "out of memory"));
}

TEST_F(IsolatedImportTest, GarbageOutputIsInternalMalformed) {
  ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "garbage");
  EXPECT_THAT(ImportIsolated(box_, {}, Limits()),
              StatusIs(absl::StatusCode::kInternal, "malformed worker output"));
}

TEST_F(IsolatedImportTest, OutputLimitIsResourceExhausted) {
  IsolationLimits limits = Limits();
  limits.max_output_bytes = 200;  // the box needs about 800 bytes
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kResourceExhausted, "output limit"));
}

TEST_F(IsolatedImportTest, CancelKillsTheWorkerWithinASecond) {
  ScopedEnv fault("CLASH_WORKER_TEST_FAULT", "hang");
  std::atomic<bool> cancel{false};
  std::chrono::steady_clock::time_point cancelled_at;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancelled_at = std::chrono::steady_clock::now();
    cancel = true;
  });
  const absl::StatusOr<MeshBuffers> result = ImportIsolated(box_, {}, Limits(), &cancel);
  const auto returned_at = std::chrono::steady_clock::now();
  canceller.join();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kCancelled, "cancelled"));
  EXPECT_LT(Seconds(returned_at - cancelled_at).count(), 1.0);
}

TEST_F(IsolatedImportTest, MissingWorkerIsFailedPrecondition) {
  IsolationLimits limits = Limits();
  limits.worker_path = (data_ / "no-such-worker").string();
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no-such-worker"));
  limits.worker_path = box_.string();  // exists but is not executable
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kFailedPrecondition, "cannot be started"));
}

TEST_F(IsolatedImportTest, WorkerPathComesFromTheEnvironment) {
  IsolationLimits limits = Limits();
  limits.worker_path.clear();
  {
    ScopedEnv env(kWorkerPathEnv, "");
    EXPECT_EQ(fs::path(ResolveWorkerPath(limits)).filename(), "clash-cad-worker");
  }
  ScopedEnv env(kWorkerPathEnv, CLASH_CAD_WORKER_PATH);
  EXPECT_EQ(ResolveWorkerPath(limits), CLASH_CAD_WORKER_PATH);
  EXPECT_THAT(ImportIsolated(box_, {}, limits), IsOk());
}

TEST_F(IsolatedImportTest, InvalidLimitsAreRejected) {
  IsolationLimits limits = Limits();
  limits.wall_seconds = 0;
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, "wall_seconds"));
  limits = Limits();
  limits.cpu_seconds = std::nan("");
  EXPECT_THAT(ImportIsolated(box_, {}, limits),
              StatusIs(absl::StatusCode::kInvalidArgument, "cpu_seconds"));
}

TEST_F(IsolatedImportTest, ConcurrentImportsAllSucceed) {
  const absl::StatusOr<MeshBuffers> expected = ReadAndTessellate(box_, {});
  ASSERT_THAT(expected, IsOk());
  constexpr int kThreads = 8;
  constexpr int kRounds = 3;
  std::vector<absl::StatusOr<MeshBuffers>> results(kThreads * kRounds);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r)
        results[t * kRounds + r] = ImportIsolated(box_, {}, Limits());
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::StatusOr<MeshBuffers>& result : results) {
    ASSERT_THAT(result, IsOk());
    ExpectSameMesh(*result, *expected);
  }
}

TEST_F(IsolatedImportTest, CorruptedRealFileReportMatchesInProcess) {
  const fs::path path = fs::path(CLASH_CAD_DATA_DIR) / "bug32314_corrupted.stp";
  if (!fs::exists(path)) GTEST_SKIP() << "real CAD data not found at " << path;
  const absl::StatusOr<MeshBuffers> local = ReadAndTessellate(path, {});
  ASSERT_THAT(local, IsOk());
  const absl::StatusOr<MeshBuffers> isolated = ImportIsolated(path, {}, Limits());
  ASSERT_THAT(isolated, IsOk());
  EXPECT_GT(isolated->load_failures, 0);
  EXPECT_LT(isolated->faces_meshed, isolated->faces_total);
  ExpectSameMesh(*isolated, *local);
}

// ---------------------------------------------------------------------------------------------
// The result format, parsed as untrusted input.

constexpr std::size_t kNoLimit = std::size_t{1} << 40;

MeshBuffers SmallMesh() {
  MeshBuffers mesh;
  mesh.xyz = {0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
  mesh.triangles = {0, 1, 2, 0, 2, 3, 0, 3, 1};
  mesh.face_ids = {0, 1, 1};
  mesh.faces_total = 2;
  mesh.faces_meshed = 2;
  mesh.faces_reversed = 1;
  mesh.roots_total = 1;
  mesh.roots_transferred = 1;
  mesh.load_failures = 3;
  mesh.load_warnings = 4;
  mesh.deflection_mm = 0.01;
  return mesh;
}

// Checks what the parser promises for any mesh it accepts.
void ExpectParsedInvariants(const MeshBuffers& mesh) {
  ASSERT_EQ(mesh.xyz.size() % 3, 0u);
  ASSERT_EQ(mesh.triangles.size(), 3 * mesh.face_ids.size());
  for (double v : mesh.xyz) {
    ASSERT_TRUE(std::isfinite(v));
    ASSERT_LE(std::fabs(v), internal::kMaxAbsCoordinateMm);
  }
  for (uint32_t i : mesh.triangles) ASSERT_LT(i, mesh.xyz.size() / 3);
  for (uint32_t f : mesh.face_ids) ASSERT_LT(f, static_cast<uint32_t>(mesh.faces_total));
  ASSERT_LE(mesh.faces_meshed, mesh.faces_total);
  ASSERT_TRUE(std::isfinite(mesh.deflection_mm));
}

TEST(WorkerFormat, MeshRoundTrip) {
  const MeshBuffers mesh = SmallMesh();
  const std::string bytes = internal::EncodeWorkerOutput(mesh);
  EXPECT_EQ(bytes.size(), internal::EncodedMeshSize(mesh));
  EXPECT_EQ(bytes.substr(0, 8), "CLSHMSH1");
  const absl::StatusOr<MeshBuffers> parsed = internal::ParseWorkerOutput(bytes, kNoLimit);
  ASSERT_THAT(parsed, IsOk());
  ExpectSameMesh(*parsed, mesh);
}

TEST(WorkerFormat, ErrorRoundTrip) {
  const std::string bytes =
      internal::EncodeWorkerOutput(absl::NotFoundError("read: no such file: x.step"));
  EXPECT_THAT(internal::ParseWorkerOutput(bytes, kNoLimit),
              StatusIs(absl::StatusCode::kNotFound, "read: no such file: x.step"));
}

TEST(WorkerFormat, RejectsSpecificCorruptions) {
  const auto malformed = [](const std::string& bytes) {
    return internal::ParseWorkerOutput(bytes, kNoLimit);
  };
  const std::string good = internal::EncodeWorkerOutput(SmallMesh());
  constexpr std::size_t kCounts = 16 + 7 * 4 + 8;  // offset of the vertex count
  constexpr std::size_t kCoords = kCounts + 16;
  constexpr std::size_t kTriangles = kCoords + 4 * 3 * 8;
  constexpr std::size_t kFaceIds = kTriangles + 3 * 3 * 4;
  const auto patched = [&](std::size_t offset, std::string value) {
    std::string bytes = good;
    bytes.replace(offset, value.size(), value);
    return bytes;
  };
  const auto kInternal = absl::StatusCode::kInternal;
  EXPECT_THAT(malformed(""), StatusIs(kInternal, "bad magic"));
  EXPECT_THAT(malformed(patched(0, "CLSHMSH2")), StatusIs(kInternal, "bad magic"));
  EXPECT_THAT(malformed(patched(8, std::string("\x02", 1))), StatusIs(kInternal, "version"));
  EXPECT_THAT(malformed(patched(12, std::string("\x07", 1))), StatusIs(kInternal, "kind"));
  // A vertex count near 2^64 must not overflow the size check.
  EXPECT_THAT(malformed(patched(kCounts, std::string(8, '\xff'))),
              StatusIs(kInternal, "do not match"));
  EXPECT_THAT(malformed(patched(kCoords, std::string("\0\0\0\0\0\0\xf8\x7f", 8))),  // NaN
              StatusIs(kInternal, "not finite"));
  EXPECT_THAT(malformed(patched(kCoords, std::string("\0\0\0\0\0\0\xf0\x7f", 8))),  // +inf
              StatusIs(kInternal, "not finite"));
  EXPECT_THAT(malformed(patched(kTriangles, std::string("\x04", 1))),
              StatusIs(kInternal, "vertex index 4 out of range"));
  EXPECT_THAT(malformed(patched(kFaceIds, std::string("\x02", 1))),
              StatusIs(kInternal, "face id 2 out of range"));
  EXPECT_THAT(malformed(good + "x"), StatusIs(kInternal, "do not match"));
  EXPECT_THAT(internal::ParseWorkerOutput(good, good.size() - 1),
              StatusIs(kInternal, "exceed the limit"));
  // Error records: UNKNOWN and OK are never passed through.
  std::string unknown = internal::EncodeWorkerOutput(absl::UnknownError("x"));
  EXPECT_THAT(malformed(unknown), StatusIs(kInternal, "invalid status code 2"));
  unknown[16] = 0;
  EXPECT_THAT(malformed(unknown), StatusIs(kInternal, "invalid status code 0"));
}

TEST(WorkerFormat, TruncationsAreAlwaysRejected) {
  for (const absl::StatusOr<MeshBuffers>& result :
       {absl::StatusOr<MeshBuffers>(SmallMesh()),
        absl::StatusOr<MeshBuffers>(absl::InvalidArgumentError("mesh: no faces"))}) {
    const std::string bytes = internal::EncodeWorkerOutput(result);
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_THAT(internal::ParseWorkerOutput(bytes.substr(0, n), kNoLimit),
                  StatusIs(absl::StatusCode::kInternal, "malformed worker output"))
          << "prefix of " << n << " bytes";
    }
  }
}

TEST(WorkerFormat, RandomByteFlipsNeverBreakTheInvariants) {
  constexpr uint32_t kSeed = 20261122;
  SCOPED_TRACE(::testing::Message() << "seed " << kSeed);
  std::mt19937 rng(kSeed);
  const MeshBuffers mesh = SmallMesh();
  const std::string good = internal::EncodeWorkerOutput(mesh);
  int accepted = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
    }
    const absl::StatusOr<MeshBuffers> parsed = internal::ParseWorkerOutput(bytes, kNoLimit);
    if (parsed.ok()) {
      ++accepted;
      ExpectParsedInvariants(*parsed);
      ASSERT_EQ(parsed->xyz.size(), mesh.xyz.size());  // sizes are tied to the file length
    } else if (parsed.status().code() == absl::StatusCode::kInternal) {
      EXPECT_THAT(parsed.status().message(), HasSubstr("malformed worker output"));
    } else {
      ADD_FAILURE() << "a mesh file parsed as a worker error: " << parsed.status();
    }
  }
  // Flips inside the coordinates, the report counts or valid indices still give a valid mesh.
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace clash::cad
