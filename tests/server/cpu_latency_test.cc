// CpuLatencyHold: the limit reaches the device as the kernel reads it, errors name the device,
// and on a machine where /dev/cpu_dma_latency can be opened (root) the kernel's limit in force
// follows the hold and comes back when it is released.
#include "cpu_latency.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "clash/client/client.h"
#include "grpcpp/grpcpp.h"
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

TEST_F(CpuLatencyFile, SetWritesTheNewLimit) {
  auto hold = CpuLatencyHold::Acquire(5, path_);
  ASSERT_THAT(hold.status(), IsOk());
  ASSERT_THAT(hold->Set(kNoCpuLatencyLimit), IsOk());
  EXPECT_EQ(hold->microseconds(), kNoCpuLatencyLimit);
  EXPECT_EQ(ReadAll(path_), Int32Bytes(5) + Int32Bytes(kNoCpuLatencyLimit));
}

// Waits until pred() holds; false after a time only a bug reaches.
template <class Pred>
bool WaitFor(Pred&& pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST_F(CpuLatencyFile, AGovernorWithoutIdleHoldsTheLimitThroughout) {
  auto hold = CpuLatencyHold::Acquire(7, path_);
  ASSERT_THAT(hold.status(), IsOk());
  CpuLatencyGovernor governor(std::move(*hold), std::chrono::milliseconds(0));
  EXPECT_EQ(governor.held_microseconds(), 7);
  governor.Touch();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(governor.held_microseconds(), 7);
  EXPECT_EQ(ReadAll(path_), Int32Bytes(7));  // nothing written after the first limit
}

// The device's value is the last one written: the limit while calls come, none once idle.
TEST_F(CpuLatencyFile, AGovernorLetsTheLimitGoWhenIdleAndHoldsItOnTheNextCall) {
  auto hold = CpuLatencyHold::Acquire(3, path_);
  ASSERT_THAT(hold.status(), IsOk());
  CpuLatencyGovernor governor(std::move(*hold), std::chrono::milliseconds(30));
  const std::string none = Int32Bytes(kNoCpuLatencyLimit), limit = Int32Bytes(3);
  EXPECT_EQ(governor.held_microseconds(), -1);
  EXPECT_EQ(ReadAll(path_), limit + none);
  for (int session = 0; session < 2; ++session) {
    governor.Touch();
    governor.Touch();  // while held: nothing written
    EXPECT_EQ(governor.held_microseconds(), 3);
    const std::string after_touch = ReadAll(path_);
    EXPECT_EQ(after_touch.substr(after_touch.size() - 8), none + limit);
    ASSERT_TRUE(WaitFor([&] { return governor.held_microseconds() == -1; }));
    const std::string after_idle = ReadAll(path_);
    EXPECT_EQ(after_idle.size(), after_touch.size() + 4);
    EXPECT_EQ(after_idle.substr(after_idle.size() - 4), none);
  }
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

// clashd on the real device, where it can be opened; the limit in force before is restored.
class ClashdOnTheDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    auto before = CpuLatencyHold::Current();
    if (!before.ok() || !CpuLatencyHold::Acquire(0).ok()) {
      GTEST_SKIP() << "no access to " << kCpuLatencyDevice << " here";
    }
    before_ = *before;
    on_device_ = true;
    dir_ = clash::testing::MakeTempDir(std::filesystem::temp_directory_path(), "clash-qos-");
    ASSERT_FALSE(dir_.empty());
  }
  void TearDown() override {
    if (on_device_) {
      EXPECT_EQ(Current(), before_) << "the limit in force after clashd stopped";
    }
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  // clashd at --cpu-latency-us 0 with the given idle time.
  ServerConfig Config(double idle_seconds) const {
    ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "";
    config.data_dir = dir_ + "/data";
    config.worker_path = CLASH_CAD_WORKER_PATH;
    config.import_pool_workers = 0;
    config.quiet = true;
    config.cpu_latency_us = 0;
    config.cpu_latency_idle_seconds = idle_seconds;
    return config;
  }
  static int32_t Current() {
    auto now = CpuLatencyHold::Current();
    EXPECT_THAT(now.status(), IsOk());
    return now.ok() ? *now : -1;
  }

  MachineLimitLock lock_;
  bool on_device_ = false;
  int32_t before_ = 0;
  std::string dir_;
};

// Without an idle time, clashd holds --cpu-latency-us while it serves and lets go when it stops.
TEST_F(ClashdOnTheDevice, HoldsItsLimitWhileServing) {
  auto server = ClashServer::Start(Config(0));
  ASSERT_THAT(server.status(), IsOk());
  EXPECT_EQ(Current(), 0);
}

// With an idle time, clashd holds the limit from a call until that long after the last one.
TEST_F(ClashdOnTheDevice, HoldsItsLimitWhileCallsCome) {
  // Long enough that the check right after a call comes before the limit is let go.
  auto server = ClashServer::Start(Config(1));
  ASSERT_THAT(server.status(), IsOk());
  EXPECT_EQ(Current(), before_);  // no call yet
  grpc::ChannelArguments args;
  auto client = client::Client::FromChannel((*server)->grpc_server()->InProcessChannel(args));
  for (int session = 0; session < 2; ++session) {
    ASSERT_THAT(client->ListScenes().status(), IsOk());
    EXPECT_EQ(Current(), 0);
    ASSERT_TRUE(WaitFor([&] { return Current() == before_; }));
  }
}

}  // namespace
}  // namespace clash::server
