// clashd: the collision-checking service. Runs on its embedded defaults with no arguments;
// `clashd --help` lists every setting, which may also come from a TOML/INI file (--config).
#include <openssl/crypto.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "log.h"
#include "server.h"

int main(int argc, char** argv) {
  // OpenSSL (under gRPC's TLS) must not tear itself down in an atexit handler: gRPC's threads
  // may still finish after main returns, and one that does so after that cleanup can no longer
  // free its per-thread state or may call into the freed library. The first initialisation
  // decides, so this comes first. (Should it fail, OpenSSL initialises later as before.)
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  clash::server::ServerConfig config;
  CLI::App app{"clashd: collision, clearance and ray queries on CAD assemblies over gRPC"};
  app.set_config("--config", "", "Read settings from a TOML or INI file (keys = long flag names)");
  // A misspelt key (say, of a security setting) is an error, not a setting silently left out.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--listen", config.listen, "gRPC address (host:port)")->capture_default_str();
  app.add_option("--data-dir", config.data_dir, "Folder for parts, scenes and the import cache")
      ->envname("CLASHD_DATA_DIR")
      ->capture_default_str();
  app.add_option("--metrics-listen", config.metrics_listen,
                 "Prometheus /metrics HTTP address; empty disables")
      ->capture_default_str();
  app.add_flag("--reflection", config.reflection, "Serve gRPC server reflection");
  app.add_option("--query-slots", config.query_slots, "Queries running at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--query-queue", config.query_queue, "Queries waiting beyond the slots")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app.add_option("--query-helpers", config.query_helpers,
                 "Helper threads that let an interference check or a pick use idle query slots "
                 "(0: none, -1: query slots - 1)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1024));
  app.add_option("--import-slots", config.import_slots, "Import worker processes at once")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--import-queue", config.import_queue, "Imports waiting beyond the slots")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000));
  // (CLI11 reads a negative value of an unsigned option as about 2^64: each range refuses it.)
  app.add_option("--max-upload-bytes", config.max_upload_bytes, "Largest CAD upload")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 50));
  app.add_option("--max-message-bytes", config.max_message_bytes, "Largest gRPC message")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1} << 20, std::size_t{2000} << 20));
  app.add_option("--max-part-triangles", config.max_part_triangles,
                 "Triangles of one uploaded part, or of all parts of an import")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 32));
  app.add_option("--max-scene-instances", config.max_scene_instances,
                 "Instances one scene may hold")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{100'000'000}));
  app.add_option("--max-query-seconds", config.max_query_seconds,
                 "Deadline of a query when the client sets none or a later one")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-import-seconds", config.max_import_seconds,
                 "Deadline of an import (worker wall-clock limit)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-sequence-seconds", config.max_sequence_seconds,
                 "Deadline of a sequence validation when the client sets none or a later one")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--import-pool-workers", config.import_pool_workers,
                 "Import workers kept pre-started (each serves one import); 0: none")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  app.add_option("--worker", config.worker_path,
                 "clash-cad-worker executable (default: next to clashd, or $CLASH_CAD_WORKER)");
  app.add_option("--import-memory-bytes", config.import_memory_bytes,
                 "Address-space limit of an import worker (at least 256 MiB: below about 96 MiB "
                 "the worker cannot map OCCT's libraries)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{256} << 20, std::size_t{1} << 50));
  app.add_option("--shutdown-grace-seconds", config.shutdown_grace_seconds,
                 "On SIGTERM: time in-flight calls get before they are cancelled")
      ->envname("CLASHD_SHUTDOWN_GRACE_SECONDS")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tls-cert", config.tls_cert_file, "TLS certificate chain (PEM)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", config.tls_key_file, "TLS private key (PEM)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-client-ca", config.tls_client_ca_file,
                 "CA bundle (PEM): require client certificates it signed")
      ->check(CLI::ExistingFile);
  app.add_option("--tokens", config.tokens_file,
                 "Token file: lines '<sha256 hex of the token> <tenant>'; every call then needs "
                 "'authorization: Bearer <token>'")
      ->check(CLI::ExistingFile);
  app.add_flag("--health-requires-token", config.health_requires_token,
               "grpc.health.v1 needs a token too (default: open for probes)");
  app.add_option("--tenant-max-storage-bytes", config.tenant_max_storage_bytes,
                 "Per-tenant bytes on disk (0: no quota)")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 60));
  app.add_option("--import-cache-max-bytes", config.import_cache_max_bytes,
                 "Per-tenant bytes of the import cache (least recently used entries go first; "
                 "0: cache nothing)")
      ->capture_default_str()
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 60));
  app.add_option("--tenant-max-concurrent-imports", config.tenant_max_concurrent_imports,
                 "Per-tenant imports uploading, waiting or running at once (-1: with --tokens "
                 "or --tls-client-ca, half of --import-slots plus --import-queue, else no "
                 "limit; 0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 10000));
  app.add_option("--tenant-max-concurrent-queries", config.tenant_max_concurrent_queries,
                 "Per-tenant queries running or waiting for a slot at once (-1: with --tokens or "
                 "--tls-client-ca, half of --query-slots plus --query-queue, else no limit; 0: "
                 "no limit)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1000000));
  app.add_option("--tenant-requests-per-second", config.tenant_requests_per_second,
                 "Per-tenant call rate (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tenant-burst", config.tenant_burst,
                 "Calls a tenant may make at once above its rate (default: one second's worth)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cpu-latency-us", config.cpu_latency_us,
                 "Hold the CPUs' wake-up latency at most this many microseconds while serving "
                 "(Linux PM QoS, /dev/cpu_dma_latency; needs root): 0 keeps idle CPUs polling, "
                 "cutting each call's wake-ups at the cost of CPUs that never sleep; -1: leave "
                 "the machine's setting")
      ->capture_default_str()
      ->check(CLI::Range(-1, 2000000000));
  app.add_option("--cpu-latency-idle-seconds", config.cpu_latency_idle_seconds,
                 "With --cpu-latency-us: let the limit go after this long without a call and "
                 "hold it again on the next (health checks do not count); 0: hold it throughout")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pair-cache-entries", config.pair_cache_entries,
                 "Classified pairs kept for later checks, in all scenes together (about 200 "
                 "bytes each); a scene that finds them spent empties the caches of idle scenes "
                 "first, then its own; 0: none kept")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 40));
  app.add_option("--pair-cache-idle-seconds", config.pair_cache_idle_seconds,
                 "How long a scene's pair cache must go unused before another scene whose "
                 "entry finds --pair-cache-entries spent may empty it")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--unserved-scene-retry-seconds", config.unserved_scene_retry_seconds,
                 "How often to try again to load a scene kept but not served (its part did not "
                 "load, its file did not read), or to open a tenant whose folder could not be "
                 "used, backing off while it fails; 0: only at a start")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--damaged-file-retention-days", config.damaged_file_retention_days,
                 "How long a scene file set aside as damaged (<id>.pb.<time>.damaged) is kept "
                 "for an operator to recover from before clashd removes it; 0: until removed by "
                 "hand")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--quiet", config.quiet, "No per-RPC log lines");
  CLI11_PARSE(app, argc, argv);

  // Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock detection on: every
  // lock, gRPC's included, then updates a global lock-order graph under a global lock. The tests
  // keep it; the server does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // SIGTERM and SIGINT are taken by one thread, which shuts the server down gracefully.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = clash::server::ClashServer::Start(config);
  if (!server.ok()) {
    std::fprintf(stderr, "clashd: %s\n", server.status().ToString().c_str());
    return 1;
  }
  // The first signal drains (calls in flight get the grace period); a second one during the
  // drain stops the process at once, as a kill would (every write is atomic on disk).
  std::atomic<bool> stopped{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (stopped) return;  // woken by main: the server stopped for another reason
    clash::server::LogLine(
        clash::server::LogLevel::kInfo,
        absl::StrCat("signal ", sig, ": draining (the signal again stops at once)"));
    std::thread drain([&] { (*server)->Shutdown(); });
    sigwait(&signals, &sig);
    if (!stopped) {
      clash::server::LogLine(
          clash::server::LogLevel::kWarning,
          absl::StrCat("signal ", sig, " again: stopping at once, calls in flight are cut off"));
      std::_Exit(2);
    }
    drain.join();
  });
  (*server)->Wait();
  // Wake the waiter: it waits for a first signal (the server stopped for another reason) or a
  // second one (the drain is over).
  stopped = true;
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return 0;
}
