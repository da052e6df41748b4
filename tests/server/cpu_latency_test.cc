// CpuLatencyHold: the limit reaches the device as the kernel reads it, errors name the device,
// and on a machine where /dev/cpu_dma_latency can be opened (root) the kernel's limit in force
// follows the hold and comes back when it is released.
#include "cpu_latency.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>

#include "server.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace clash::server {
namespace {

using ::clash::testing::IsOk;
using ::clash::testing::StatusIs;

// The bytes of a file.
std::string ReadAll(const std::string& path) {
  std::string out;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[64];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return out;
}

std::string Int32Bytes(int32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

class CpuLatencyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = clash::testing::MakeTempDir(std::filesystem::temp_directory_path(), "clash-qos-");
    ASSERT_FALSE(dir_.empty());
    path_ = dir_ + "/device";
    std::ofstream(path_).flush();
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_, path_;
};

TEST_F(CpuLatencyFile, WritesTheLimitAsTheKernelReadsIt) {
  auto hold = CpuLatencyHold::Acquire(37, path_);
  ASSERT_THAT(hold.status(), IsOk());
  EXPECT_EQ(hold->microseconds(), 37);
  EXPECT_EQ(ReadAll(path_), Int32Bytes(37));
  auto read = CpuLatencyHold::Current(path_);
  ASSERT_THAT(read.status(), IsOk());
  EXPECT_EQ(*read, 37);
}

TEST_F(CpuLatencyFile, AMovedHoldKeepsItsLimit) {
  auto hold = CpuLatencyHold::Acquire(5, path_);
  ASSERT_THAT(hold.status(), IsOk());
  CpuLatencyHold moved = std::move(*hold);
  EXPECT_EQ(moved.microseconds(), 5);
  auto other = CpuLatencyHold::Acquire(9, path_);
  ASSERT_THAT(other.status(), IsOk());
  moved = std::move(*other);
  EXPECT_EQ(moved.microseconds(), 9);
}

TEST_F(CpuLatencyFile, BadLimitsAndDevicesAreClearErrors) {
  EXPECT_THAT(CpuLatencyHold::Acquire(-1, path_).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "negative"));
  EXPECT_THAT(CpuLatencyHold::Acquire(0, dir_ + "/missing").status(),
              StatusIs(absl::StatusCode::kNotFound, "/missing"));
  EXPECT_THAT(CpuLatencyHold::Current(dir_ + "/missing").status(),
              StatusIs(absl::StatusCode::kNotFound, "/missing"));
  // A device that takes nothing: the write fails, and no hold is returned.
  EXPECT_THAT(CpuLatencyHold::Acquire(0, "/dev/full").status(),
              StatusIs(absl::StatusCode::kUnavailable, "cannot write /dev/full"));
  // Too short to be a limit.
  std::ofstream(path_) << "x";
  EXPECT_THAT(CpuLatencyHold::Current(path_).status(),
              StatusIs(absl::StatusCode::kUnavailable, "short read"));
}

// Serialises the tests that change the machine's limit: the build and the sanitizer build run
// their tests at the same time, and each must see only its own hold come and go.
class MachineLimitLock {
 public:
  MachineLimitLock()
      : fd_(open("/tmp/clash-cpu-latency-test.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ >= 0) flock(fd_, LOCK_EX);
  }
  ~MachineLimitLock() {
    if (fd_ >= 0) close(fd_);
  }
  MachineLimitLock(const MachineLimitLock&) = delete;
  MachineLimitLock& operator=(const MachineLimitLock&) = delete;

 private:
  int fd_;
};

TEST(CpuLatencyDevice, TheKernelHoldsTheLimitUntilItIsReleased) {
  MachineLimitLock lock;
  auto before = CpuLatencyHold::Current();
  auto hold = CpuLatencyHold::Acquire(123);
  if (!before.ok() || !hold.ok()) {
    GTEST_SKIP() << "no access to " << kCpuLatencyDevice << " here ("
                 << (before.ok() ? hold.status() : before.status()).ToString() << ")";
  }
  auto during = CpuLatencyHold::Current();
  ASSERT_THAT(during.status(), IsOk());
  EXPECT_LE(*during, 123);
  EXPECT_EQ(*during, std::min(*before, 123));
  { CpuLatencyHold released = std::move(*hold); }
  auto after = CpuLatencyHold::Current();
  ASSERT_THAT(after.status(), IsOk());
  EXPECT_EQ(*after, *before);
}

// clashd holds --cpu-latency-us while it serves and lets go when it stops.
TEST(CpuLatencyDevice, ClashdHoldsItsLimitWhileServing) {
  MachineLimitLock lock;
  auto before = CpuLatencyHold::Current();
  if (!before.ok() || !CpuLatencyHold::Acquire(0).ok()) {
    GTEST_SKIP() << "no access to " << kCpuLatencyDevice << " here";
  }
  const std::string dir =
      clash::testing::MakeTempDir(std::filesystem::temp_directory_path(), "clash-qos-");
  ASSERT_FALSE(dir.empty());
  ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "";
  config.data_dir = dir + "/data";
  config.worker_path = CLASH_CAD_WORKER_PATH;
  config.import_pool_workers = 0;
  config.quiet = true;
  config.cpu_latency_us = 0;
  {
    auto server = ClashServer::Start(config);
    ASSERT_THAT(server.status(), IsOk());
    auto during = CpuLatencyHold::Current();
    ASSERT_THAT(during.status(), IsOk());
    EXPECT_EQ(*during, 0);
  }
  auto after = CpuLatencyHold::Current();
  ASSERT_THAT(after.status(), IsOk());
  EXPECT_EQ(*after, *before);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace clash::server
