// Tests for the worker result format (worker_format.h), parsed as untrusted input: round trips,
// every truncation, specific corruptions and seeded random ones, for mesh and assembly files. The
// parser must reject all damage with INTERNAL "malformed worker output" and never crash (these run
// under AddressSanitizer and UBSan in CI).
#include "worker_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "assembly_fixtures.h"
#include "clash/cad/assembly.h"
#include "clash/cad/tessellate.h"
#include "testing/random_geometry.h"
#include "testing/status_matchers.h"
#include "utf8.h"

// LeakSanitizer: OCCT 7.6 never frees its one-time registrations; see tessellate_test.cc.
extern "C" const char* __lsan_default_suppressions() { return "leak:/libTK\n"; }

namespace clash::cad {
namespace {

using clash::testing::IsOk;
using clash::testing::StatusIs;
using testing::AccentedName;
using testing::ExpectSameAssembly;
using testing::ExpectSameMesh;
using ::testing::HasSubstr;
using testing::IsWellFormedUtf8;

constexpr std::size_t kNoLimit = std::size_t{1} << 40;
constexpr auto kInternal = absl::StatusCode::kInternal;

// ---------------------------------------------------------------------------------------------
// UTF-8 (utf8.h).

TEST(Utf8, WellFormedAgreesWithTheDecodingCheck) {
  // Every sequence of up to 3 bytes drawn from the bytes where table 3-7 changes, and seeded
  // random strings of lead and continuation bytes, against the test's own decoder.
  constexpr std::array<unsigned char, 20> kEdges{0x00, 0x2f, 0x7f, 0x80, 0x8f, 0x90, 0x9f,
                                                 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0,
                                                 0xed, 0xef, 0xf0, 0xf4, 0xf5, 0xff};
  std::vector<std::string> cases{""};
  for (unsigned char a : kEdges) {
    cases.push_back(std::string(1, static_cast<char>(a)));
    for (unsigned char b : kEdges) {
      cases.push_back({static_cast<char>(a), static_cast<char>(b)});
      for (unsigned char c : kEdges) {
        cases.push_back({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
      }
    }
  }
  std::mt19937 rng = clash::testing::SeededRng(20261125);
  for (int i = 0; i < clash::testing::Trials(20000); ++i) {
    std::string s(1 + rng() % 8, '\0');
    for (char& c : s) c = static_cast<char>(kEdges[rng() % kEdges.size()]);
    cases.push_back(s);
  }
  for (const std::string& s : cases) {
    ASSERT_EQ(internal::IsValidUtf8(s), IsWellFormedUtf8(s)) << ::testing::PrintToString(s);
    const std::string repaired = internal::ToValidUtf8(s);
    ASSERT_TRUE(IsWellFormedUtf8(repaired)) << ::testing::PrintToString(s);
    if (IsWellFormedUtf8(s)) {
      ASSERT_EQ(repaired, s);
    }
    for (std::size_t n = 0; n <= s.size(); ++n) {
      const std::string_view prefix = internal::Utf8Prefix(repaired, n);
      ASSERT_LE(prefix.size(), n);
      ASSERT_GE(prefix.size() + 3, std::min(n, repaired.size()));
      ASSERT_TRUE(IsWellFormedUtf8(prefix)) << ::testing::PrintToString(repaired) << " " << n;
    }
  }
}

TEST(Utf8, RepairReplacesMaximalIllFormedSubsequences) {
  // Unicode 15.0 section 3.9, "U+FFFD Substitution of Maximal Subparts".
  const std::string r = "\xef\xbf\xbd";
  EXPECT_EQ(internal::ToValidUtf8("nut\xff"), "nut" + r);
  EXPECT_EQ(internal::ToValidUtf8("\xc3\xa9"), "\xc3\xa9");
  EXPECT_EQ(internal::ToValidUtf8("a\xe2\x80z"), "a" + r + "z");        // a cut 3-byte character
  EXPECT_EQ(internal::ToValidUtf8("\xed\xa0\x80"), r + r + r);          // a surrogate: 3 subparts
  EXPECT_EQ(internal::ToValidUtf8("\xc0\xaf"), r + r);                  // an overlong '/'
  EXPECT_EQ(internal::ToValidUtf8("\xf4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
  EXPECT_EQ(internal::ToValidUtf8("\xf0\x9f\x98"), r);                  // a cut 4-byte character
}

TEST(Utf8, PrefixNeverEndsInsideACharacter) {
  const std::string s = "a\xc3\xa9\xe2\x80\x94\xf0\x9f\x98\x80";  // a, e acute, em dash, emoji
  const std::array<std::size_t, 11> expected{0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10};
  for (std::size_t n = 0; n < expected.size(); ++n) {
    EXPECT_EQ(internal::Utf8Prefix(s, n), s.substr(0, expected[n])) << n;
  }
}

// ---------------------------------------------------------------------------------------------
// Mesh files ("CLSHMSH1").

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
  const std::string bytes = internal::EncodeWorkerOutput<MeshBuffers>(mesh);
  EXPECT_EQ(bytes.size(), internal::EncodedSize(mesh));
  EXPECT_EQ(bytes.substr(0, 8), "CLSHMSH1");
  const absl::StatusOr<MeshBuffers> parsed = internal::ParseWorkerOutput(bytes, kNoLimit);
  ASSERT_THAT(parsed, IsOk());
  ExpectSameMesh(*parsed, mesh);
}

TEST(WorkerFormat, ErrorRoundTrip) {
  const std::string bytes =
      internal::EncodeWorkerOutput<MeshBuffers>(absl::NotFoundError("read: no such file: x.step"));
  EXPECT_THAT(internal::ParseWorkerOutput(bytes, kNoLimit),
              StatusIs(absl::StatusCode::kNotFound, "read: no such file: x.step"));
}

TEST(WorkerFormat, RejectsSpecificCorruptions) {
  const auto malformed = [](const std::string& bytes) {
    return internal::ParseWorkerOutput(bytes, kNoLimit);
  };
  const std::string good = internal::EncodeWorkerOutput<MeshBuffers>(SmallMesh());
  constexpr std::size_t kCounts = 16 + 7 * 4 + 8;  // offset of the vertex count
  constexpr std::size_t kCoords = kCounts + 16;
  constexpr std::size_t kTriangles = kCoords + 4 * 3 * 8;
  constexpr std::size_t kFaceIds = kTriangles + 3 * 3 * 4;
  const auto patched = [&](std::size_t offset, std::string value) {
    std::string bytes = good;
    bytes.replace(offset, value.size(), value);
    return bytes;
  };
  EXPECT_THAT(malformed(""), StatusIs(kInternal, "bad magic"));
  EXPECT_THAT(malformed(patched(0, "CLSHMSH2")), StatusIs(kInternal, "bad magic"));
  // Version 1, before assemblies had warnings: an old cache entry is refused.
  EXPECT_THAT(malformed(patched(8, std::string("\x01", 1))), StatusIs(kInternal, "version"));
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
  std::string unknown = internal::EncodeWorkerOutput<MeshBuffers>(absl::UnknownError("x"));
  EXPECT_THAT(malformed(unknown), StatusIs(kInternal, "invalid status code 2"));
  unknown[16] = 0;
  EXPECT_THAT(malformed(unknown), StatusIs(kInternal, "invalid status code 0"));
}

// Only the codes a worker reports on purpose come through an error record; any other (a code
// a client would retry on, say) is malformed output.
TEST(WorkerFormat, ErrorRecordsCarryOnlyTheCodesAWorkerReports) {
  const std::vector<absl::StatusCode> reported = {
      absl::StatusCode::kNotFound, absl::StatusCode::kInvalidArgument,
      absl::StatusCode::kResourceExhausted, absl::StatusCode::kInternal};
  for (int c = 1; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    SCOPED_TRACE(absl::StatusCodeToString(code));
    const absl::Status error(code, "read: something");
    const bool passed = std::find(reported.begin(), reported.end(), code) != reported.end();
    EXPECT_EQ(internal::IsWorkerErrorCode(code), passed);
    const absl::StatusOr<MeshBuffers> mesh =
        internal::ParseWorkerOutput(internal::EncodeWorkerOutput<MeshBuffers>(error), kNoLimit);
    const absl::StatusOr<ImportedAssembly> assembly = internal::ParseWorkerOutput<ImportedAssembly>(
        internal::EncodeWorkerOutput<ImportedAssembly>(error), kNoLimit);
    if (passed) {
      EXPECT_EQ(mesh.status(), error);
      EXPECT_EQ(assembly.status(), error);
    } else {
      const std::string why = absl::StrCat("invalid status code ", c);
      EXPECT_THAT(mesh, StatusIs(kInternal, why));
      EXPECT_THAT(assembly, StatusIs(kInternal, why));
    }
  }
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
  const std::string good = internal::EncodeWorkerOutput<MeshBuffers>(mesh);
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

// ---------------------------------------------------------------------------------------------
// Assembly files ("CLSHASM1").

// Two parts, three instances: a rotated, coloured one; one without a colour; one of the second
// part.
ImportedAssembly SmallAssembly() {
  MeshBuffers tetra = SmallMesh();
  tetra.roots_total = tetra.roots_transferred = tetra.load_failures = tetra.load_warnings = 0;
  MeshBuffers tri;
  tri.xyz = {0, 0, 0, 2, 0, 0, 0, 2, 0};
  tri.triangles = {0, 1, 2};
  tri.face_ids = {0};
  tri.faces_total = 1;
  tri.faces_meshed = 1;
  tri.deflection_mm = 0.5;

  ImportedAssembly a;
  a.roots_total = 2;
  a.roots_transferred = 2;
  a.load_failures = 1;
  a.load_warnings = 5;
  a.empty_parts = 1;
  a.parts = {{"tetra", tetra}, {"tri", tri}};
  AssemblyInstance rotated;
  rotated.path = "top/tetra:1";
  rotated.name = "tetra";
  rotated.part = 0;
  rotated.placement.rotation = {0, -1, 0, 1, 0, 0, 0, 0, 1};
  rotated.placement.translation_mm = {1, 2, 3};
  rotated.color_rgb = std::array<float, 3>{1, 0, 0.5f};
  AssemblyInstance plain;
  plain.path = "top/tetra:2";
  plain.name = "tetra";
  plain.part = 0;
  plain.placement.translation_mm = {4, 5, 6};
  AssemblyInstance other;
  other.path = "top/tri";
  other.name = "tri";
  other.part = 1;
  other.placement.translation_mm = {-7, 8.25, 1e6};
  other.color_rgb = std::array<float, 3>{0, 1, 0};
  a.instances = {rotated, plain, other};
  a.warnings = {"colours dropped: a warning", "caf\xc3\xa9"};
  return a;
}

std::string EncodedSmallAssembly() {
  return internal::EncodeWorkerOutput<ImportedAssembly>(SmallAssembly());
}

absl::StatusOr<ImportedAssembly> ParseAssembly(const std::string& bytes) {
  return internal::ParseWorkerOutput<ImportedAssembly>(bytes, kNoLimit);
}

// Checks what the parser promises for any assembly it accepts.
void ExpectParsedInvariants(const ImportedAssembly& assembly) {
  ASSERT_FALSE(assembly.parts.empty());
  ASSERT_FALSE(assembly.instances.empty());
  ASSERT_LE(assembly.roots_transferred, assembly.roots_total);
  ASSERT_LE(assembly.instances.size(), kMaxAssemblyInstances);
  for (const AssemblyPart& part : assembly.parts) {
    ASSERT_LE(part.name.size(), internal::kMaxWorkerStringBytes);
    ASSERT_TRUE(IsWellFormedUtf8(part.name));
    ExpectParsedInvariants(part.mesh);
  }
  for (const AssemblyInstance& instance : assembly.instances) {
    ASSERT_GE(instance.part, 0);
    ASSERT_LT(static_cast<std::size_t>(instance.part), assembly.parts.size());
    ASSERT_TRUE(internal::IsValidPlacement(instance.placement));
    ASSERT_LE(instance.path.size(), internal::kMaxWorkerStringBytes);
    ASSERT_TRUE(IsWellFormedUtf8(instance.path));
    ASSERT_TRUE(IsWellFormedUtf8(instance.name));
    if (instance.color_rgb.has_value()) {
      for (float c : *instance.color_rgb) {
        ASSERT_GE(c, 0.0f);
        ASSERT_LE(c, 1.0f);
      }
    }
  }
  ASSERT_LE(assembly.warnings.size(), internal::kMaxWorkerWarnings);
  for (const std::string& warning : assembly.warnings) {
    ASSERT_LE(warning.size(), internal::kMaxWorkerStringBytes);
    ASSERT_TRUE(IsWellFormedUtf8(warning));
  }
}

// `bytes` with `value`'s bytes (little-endian, as the format stores them) written at `offset`.
template <typename T>
std::string Patched(std::string bytes, std::size_t offset, T value) {
  static_assert(std::endian::native == std::endian::little);
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
  return bytes;
}

// Offset of the part index of the instance whose path is `path` (path length, path, name length,
// name, then the part index), found in the encoding of SmallAssembly().
std::size_t PartIndexOffset(const std::string& bytes, const std::string& path,
                            const std::string& name) {
  return bytes.find(path) + path.size() + 4 + name.size();
}

TEST(WorkerAssemblyFormat, RoundTrip) {
  const ImportedAssembly assembly = SmallAssembly();
  const std::string bytes = EncodedSmallAssembly();
  EXPECT_EQ(bytes.size(), internal::EncodedSize(assembly));
  EXPECT_EQ(bytes.substr(0, 8), "CLSHASM1");
  const absl::StatusOr<ImportedAssembly> parsed = ParseAssembly(bytes);
  ASSERT_THAT(parsed, IsOk());
  ExpectSameAssembly(*parsed, assembly);
  ExpectParsedInvariants(*parsed);
}

TEST(WorkerAssemblyFormat, ErrorRoundTrip) {
  const std::string bytes = internal::EncodeWorkerOutput<ImportedAssembly>(
      absl::ResourceExhaustedError("mesh: max_triangles (10) reached"));
  EXPECT_EQ(bytes.substr(0, 8), "CLSHASM1");
  EXPECT_THAT(ParseAssembly(bytes),
              StatusIs(absl::StatusCode::kResourceExhausted, "mesh: max_triangles (10) reached"));
}

TEST(WorkerAssemblyFormat, MeshAndAssemblyFilesAreNotInterchangeable) {
  EXPECT_THAT(internal::ParseWorkerOutput<MeshBuffers>(EncodedSmallAssembly(), kNoLimit),
              StatusIs(kInternal, "bad magic"));
  EXPECT_THAT(ParseAssembly(internal::EncodeWorkerOutput<MeshBuffers>(SmallMesh())),
              StatusIs(kInternal, "bad magic"));
}

TEST(WorkerAssemblyFormat, LongNamesAreCutWhenEncoding) {
  ImportedAssembly assembly = SmallAssembly();
  assembly.parts[0].name = std::string(internal::kMaxWorkerStringBytes + 10, 'n');
  assembly.instances[2].path = std::string(internal::kMaxWorkerStringBytes * 2, 'p');
  const std::string bytes = internal::EncodeWorkerOutput<ImportedAssembly>(assembly);
  EXPECT_EQ(bytes.size(), internal::EncodedSize(assembly));
  const absl::StatusOr<ImportedAssembly> parsed = ParseAssembly(bytes);
  ASSERT_THAT(parsed, IsOk());
  EXPECT_EQ(parsed->parts[0].name, std::string(internal::kMaxWorkerStringBytes, 'n'));
  EXPECT_EQ(parsed->instances[2].path, std::string(internal::kMaxWorkerStringBytes, 'p'));
}

TEST(WorkerAssemblyFormat, LongNamesAreCutOnACharacterBoundary) {
  // "a" + 40000 x "e acute" is 80001 bytes: the limit (65536) falls inside a character.
  const std::string name = AccentedName(40000);
  static_assert(internal::kMaxWorkerStringBytes == 65536);
  ImportedAssembly assembly = SmallAssembly();
  assembly.parts[0].name = name;
  assembly.instances[0].name = name;
  assembly.instances[0].path = "top/" + name;
  const std::string bytes = internal::EncodeWorkerOutput<ImportedAssembly>(assembly);
  EXPECT_EQ(bytes.size(), internal::EncodedSize(assembly));
  const absl::StatusOr<ImportedAssembly> parsed = ParseAssembly(bytes);
  ASSERT_THAT(parsed, IsOk());
  ExpectParsedInvariants(*parsed);
  // Cut before the character that straddles the limit, never inside it.
  EXPECT_EQ(parsed->parts[0].name, name.substr(0, 65535));
  EXPECT_EQ(parsed->instances[0].name, name.substr(0, 65535));
  EXPECT_EQ(parsed->instances[0].path, ("top/" + name).substr(0, 65535));
  for (const std::string* s :
       {&parsed->parts[0].name, &parsed->instances[0].name, &parsed->instances[0].path}) {
    EXPECT_TRUE(IsWellFormedUtf8(*s));
  }
}

TEST(WorkerAssemblyFormat, RefusesStringsThatAreNotUtf8) {
  // A stray byte, a lone continuation byte, a cut character, an overlong '/', a surrogate
  // (U+D800) and a code point above U+10FFFF: protobuf refuses each in a string field.
  for (const char* const bad :
       {"\xff", "nut\x80", "nut\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    SCOPED_TRACE(::testing::PrintToString(bad));
    ImportedAssembly part_name = SmallAssembly();
    part_name.parts[1].name = bad;
    EXPECT_THAT(ParseAssembly(internal::EncodeWorkerOutput<ImportedAssembly>(part_name)),
                StatusIs(kInternal, "part name is not valid UTF-8"));
    ImportedAssembly path = SmallAssembly();
    path.instances[2].path = std::string("top/") + bad;
    EXPECT_THAT(ParseAssembly(internal::EncodeWorkerOutput<ImportedAssembly>(path)),
                StatusIs(kInternal, "instance path is not valid UTF-8"));
    ImportedAssembly name = SmallAssembly();
    name.instances[1].name = bad;
    EXPECT_THAT(ParseAssembly(internal::EncodeWorkerOutput<ImportedAssembly>(name)),
                StatusIs(kInternal, "instance name is not valid UTF-8"));
  }
}

TEST(WorkerAssemblyFormat, ErrorMessagesAreValidUtf8) {
  // The writer replaces what is not UTF-8 with U+FFFD and cuts long messages on a character
  // boundary; the parser refuses a message that is not UTF-8.
  const absl::StatusOr<ImportedAssembly> repaired = ParseAssembly(
      internal::EncodeWorkerOutput<ImportedAssembly>(absl::InvalidArgumentError("bad \xff name")));
  EXPECT_THAT(repaired, StatusIs(absl::StatusCode::kInvalidArgument, "bad \xef\xbf\xbd name"));
  const std::string long_message = AccentedName(40000);
  const absl::StatusOr<ImportedAssembly> cut = ParseAssembly(
      internal::EncodeWorkerOutput<ImportedAssembly>(absl::InvalidArgumentError(long_message)));
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cut.status().message(), long_message.substr(0, internal::kMaxWorkerMessageBytes - 1));
  std::string bytes =
      internal::EncodeWorkerOutput<ImportedAssembly>(absl::InvalidArgumentError("bad name"));
  bytes[bytes.find("name")] = '\xff';
  EXPECT_THAT(ParseAssembly(bytes), StatusIs(kInternal, "error message is not valid UTF-8"));
}

TEST(WorkerAssemblyFormat, RefusesMoreInstancesThanTheCap) {
  // A well-formed file of exactly kMaxAssemblyInstances instances parses; one more is refused,
  // whatever the worker claims.
  ImportedAssembly assembly = SmallAssembly();
  assembly.instances.resize(kMaxAssemblyInstances, assembly.instances[1]);
  const absl::StatusOr<ImportedAssembly> at_cap =
      ParseAssembly(internal::EncodeWorkerOutput<ImportedAssembly>(assembly));
  ASSERT_THAT(at_cap, IsOk());
  EXPECT_EQ(at_cap->instances.size(), kMaxAssemblyInstances);
  assembly.instances.push_back(assembly.instances[2]);
  EXPECT_THAT(ParseAssembly(internal::EncodeWorkerOutput<ImportedAssembly>(assembly)),
              StatusIs(kInternal, "100001 instances exceed the cap of 100000"));
}

TEST(WorkerAssemblyFormat, RejectsSpecificCorruptions) {
  const std::string good = EncodedSmallAssembly();
  // Header: preamble (16 bytes), 5 x i32 report counts, u32 part count, u32 instance count.
  constexpr std::size_t kRootsTransferred = 16 + 4;
  constexpr std::size_t kEmptyParts = 16 + 16;
  constexpr std::size_t kPartCount = 16 + 20;
  constexpr std::size_t kInstanceCount = 16 + 24;
  constexpr std::size_t kFirstPart = 16 + 28;  // u32 name length, "tetra", u64 mesh length
  constexpr std::size_t kFirstMeshLength = kFirstPart + 4 + 5;
  const std::size_t tri = PartIndexOffset(good, "top/tri", "tri");
  const std::size_t plain = PartIndexOffset(good, "top/tetra:2", "tetra");
  const std::size_t rotation = tri + 4;
  const std::size_t translation = rotation + 9 * 8;
  const std::size_t color_flag = translation + 3 * 8;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();

  ASSERT_THAT(ParseAssembly(good), IsOk());
  // Counts: too large for the file (never allocated), zero, inconsistent.
  EXPECT_THAT(ParseAssembly(Patched(good, kPartCount, uint32_t{0xffffffff})),
              StatusIs(kInternal, "do not fit"));
  EXPECT_THAT(ParseAssembly(Patched(good, kInstanceCount, uint32_t{0xffffffff})),
              StatusIs(kInternal, "do not fit"));
  EXPECT_THAT(ParseAssembly(Patched(good, kPartCount, uint32_t{0})),
              StatusIs(kInternal, "without parts or instances"));
  EXPECT_THAT(ParseAssembly(Patched(good, kRootsTransferred, int32_t{3})),
              StatusIs(kInternal, "inconsistent"));
  EXPECT_THAT(ParseAssembly(Patched(good, kEmptyParts, int32_t{-1})),
              StatusIs(kInternal, "inconsistent"));
  // Strings: longer than the limit or than the file.
  EXPECT_THAT(ParseAssembly(Patched(good, kFirstPart, uint32_t{0xffffffff})),
              StatusIs(kInternal, "part name of 4294967295 bytes"));
  EXPECT_THAT(ParseAssembly(Patched(good, kFirstPart,
                                    static_cast<uint32_t>(internal::kMaxWorkerStringBytes + 1))),
              StatusIs(kInternal, "part name of 65537 bytes"));
  EXPECT_THAT(ParseAssembly(Patched(good, kFirstPart, uint32_t{60000})),
              StatusIs(kInternal, "truncated part name"));
  // A part's mesh record: its length must hold exactly one mesh.
  uint64_t mesh_length = 0;
  std::memcpy(&mesh_length, good.data() + kFirstMeshLength, 8);
  EXPECT_THAT(ParseAssembly(Patched(good, kFirstMeshLength, mesh_length + 1)),
              StatusIs(kInternal, "(part 0)"));
  EXPECT_THAT(ParseAssembly(Patched(good, kFirstMeshLength, mesh_length - 1)),
              StatusIs(kInternal, "(part 0)"));
  EXPECT_THAT(ParseAssembly(Patched(good, kFirstMeshLength, ~uint64_t{0})),
              StatusIs(kInternal, "truncated mesh of part 0"));
  // Mesh counts inside a part, huge enough to overflow a careless size check.
  EXPECT_THAT(ParseAssembly(Patched(good, kFirstMeshLength + 8 + 7 * 4 + 8, ~uint64_t{0})),
              StatusIs(kInternal, "do not match"));
  // Part indices.
  EXPECT_THAT(ParseAssembly(Patched(good, tri, uint32_t{2})),
              StatusIs(kInternal, "instance part index 2 out of range"));
  EXPECT_THAT(ParseAssembly(Patched(good, tri, uint32_t{0xffffffff})),
              StatusIs(kInternal, "out of range"));
  // Placements: non-finite or absurd rotation entries and translations.
  for (const double bad : {nan, inf, -inf, 1e300, -2 * internal::kMaxAbsRotationEntry}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(ParseAssembly(Patched(good, rotation + 8 * 4, bad)),
                StatusIs(kInternal, "placement not finite or out of range"));
  }
  for (const double bad : {nan, inf, 2 * internal::kMaxAbsCoordinateMm}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(ParseAssembly(Patched(good, translation + 8 * 2, bad)),
                StatusIs(kInternal, "placement not finite or out of range"));
  }
  // Colours: the flag is 0 or 1, components lie in [0, 1] and are 0 without a colour.
  EXPECT_THAT(ParseAssembly(Patched(good, color_flag, uint8_t{2})),
              StatusIs(kInternal, "colour flag 2"));
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), 1.5f, -0.25f}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(ParseAssembly(Patched(good, color_flag + 1, bad)),
                StatusIs(kInternal, "colour out of range"));
  }
  const std::size_t plain_color = plain + 4 + 12 * 8 + 1;
  EXPECT_THAT(ParseAssembly(Patched(good, plain_color, 0.5f)),
              StatusIs(kInternal, "colour out of range"));
  // Warnings, which end the file: a count above the cap or the bytes left, a warning that is not
  // UTF-8.
  const std::size_t warnings = good.find("colours dropped: a warning") - 4 - 4;
  EXPECT_THAT(ParseAssembly(Patched(good, warnings, uint32_t{3})),
              StatusIs(kInternal, "truncated warning"));
  EXPECT_THAT(ParseAssembly(Patched(good, warnings, uint32_t{0xffffffff})),
              StatusIs(kInternal, "4294967295 warnings exceed the cap of 16"));
  EXPECT_THAT(ParseAssembly(Patched(good, good.size() - 1, uint8_t{0xff})),
              StatusIs(kInternal, "warning is not valid UTF-8"));
  // Sizes.
  EXPECT_THAT(ParseAssembly(good + "x"), StatusIs(kInternal, "trailing bytes"));
  EXPECT_THAT(internal::ParseWorkerOutput<ImportedAssembly>(good, good.size() - 1),
              StatusIs(kInternal, "exceed the limit"));
}

TEST(WorkerAssemblyFormat, WarningsPastTheCapAreLeftOutWhenEncoding) {
  ImportedAssembly assembly = SmallAssembly();
  assembly.warnings.clear();
  for (std::size_t i = 0; i < internal::kMaxWorkerWarnings + 3; ++i) {
    assembly.warnings.push_back(absl::StrCat("warning ", i));
  }
  const std::string bytes = internal::EncodeWorkerOutput<ImportedAssembly>(assembly);
  EXPECT_EQ(bytes.size(), internal::EncodedSize(assembly));
  const absl::StatusOr<ImportedAssembly> parsed = ParseAssembly(bytes);
  ASSERT_THAT(parsed, IsOk());
  assembly.warnings.resize(internal::kMaxWorkerWarnings);
  EXPECT_EQ(parsed->warnings, assembly.warnings);
}

TEST(WorkerAssemblyFormat, TruncationsAreAlwaysRejected) {
  for (const std::string& bytes :
       {EncodedSmallAssembly(), internal::EncodeWorkerOutput<ImportedAssembly>(
                                    absl::InvalidArgumentError("assemble: too deep"))}) {
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_THAT(ParseAssembly(bytes.substr(0, n)), StatusIs(kInternal, "malformed worker output"))
          << "prefix of " << n << " of " << bytes.size() << " bytes";
    }
  }
}

TEST(WorkerAssemblyFormat, RandomCorruptionsNeverBreakTheInvariants) {
  constexpr uint32_t kSeed = 20261123;
  SCOPED_TRACE(::testing::Message() << "seed " << kSeed);
  std::mt19937 rng = clash::testing::SeededRng(kSeed);
  const std::string good = EncodedSmallAssembly();
  // Values that break counts, lengths and indices when written over a 32-bit field.
  constexpr std::array<uint32_t, 7> kSpecial{0, 1, 2, 3, 0x7fffffff, 0x80000000, 0xffffffff};
  const int trials = clash::testing::Trials(40000);
  int accepted = 0;
  for (int trial = 0; trial < trials; ++trial) {
    std::string bytes = good;
    if (trial % 2 == 0) {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        bytes[rng() % bytes.size()] ^= static_cast<char>(1 + rng() % 255);
      }
    } else {
      const uint32_t value = kSpecial[rng() % kSpecial.size()];
      bytes = Patched(bytes, rng() % (bytes.size() - 3), value);
    }
    const absl::StatusOr<ImportedAssembly> parsed = ParseAssembly(bytes);
    if (parsed.ok()) {
      ++accepted;
      ExpectParsedInvariants(*parsed);
    } else if (parsed.status().code() == kInternal) {
      EXPECT_THAT(parsed.status().message(), HasSubstr("malformed worker output"));
    } else {
      ADD_FAILURE() << "an assembly file parsed as a worker error: " << parsed.status();
    }
  }
  // Changes inside coordinates, names, colours or report counts can still give a valid file.
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace clash::cad
