// clashd: the gRPC service over the part store, the scene store and the query engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"

namespace clash::server {

/// Everything clashd can be told. Defaults are the embedded defaults: plaintext on loopback, a
/// data folder in the working directory.
struct ServerConfig {
  /// gRPC listen address.
  std::string listen = "127.0.0.1:50051";
  /// Parts, assemblies, scenes, the import cache and upload temporaries live here.
  std::string data_dir = "clashd-data";
  /// Prometheus metrics over HTTP ("" disables).
  std::string metrics_listen = "127.0.0.1:9464";
  /// Serve grpc.reflection.v1alpha.
  bool reflection = false;
  /// Queries running at once, and waiting beyond them before RESOURCE_EXHAUSTED.
  int query_slots = 2;
  int query_queue = 64;
  /// An interference check classifies its pairs, a pick casts its rays, on its own slot and on
  /// slots that are idle, through at most this many helper threads (0: each query on its own
  /// slot only; -1: query_slots - 1).
  int query_helpers = -1;
  /// Imports (worker processes) running at once, and waiting.
  int import_slots = 2;
  int import_queue = 8;
  /// Largest accepted upload (file bytes) and gRPC message.
  std::size_t max_upload_bytes = std::size_t{512} << 20;
  std::size_t max_message_bytes = std::size_t{256} << 20;
  /// Triangle cap: per part for uploads, over all parts of the assembly for imports.
  std::size_t max_part_triangles = 20'000'000;
  /// Instances one scene may hold (AddInstances beyond it: RESOURCE_EXHAUSTED).
  std::size_t max_scene_instances = 1'000'000;
  /// Server-side deadline when the client sends none (or a later one), per kind of call.
  double max_query_seconds = 60;
  double max_import_seconds = 300;
  double max_sequence_seconds = 600;
  /// Import worker limits (see clash::cad::IsolationLimits); "" finds clash-cad-worker.
  std::string worker_path;
  /// Import workers kept pre-started (clash::cad::WorkerPool); each serves one import and is
  /// replaced. 0: every import starts a fresh worker.
  int import_pool_workers = 2;
  std::size_t import_memory_bytes = std::size_t{4} << 30;
  /// On SIGTERM: time in-flight calls get before they are cancelled.
  double shutdown_grace_seconds = 10;
  /// TLS on the listener: PEM certificate chain and key files. Without them clashd listens in
  /// plaintext, which it does only on loopback addresses.
  std::string tls_cert_file;
  std::string tls_key_file;
  /// PEM CA bundle: clients must present a certificate it signed (mutual TLS).
  std::string tls_client_ca_file;
  /// Bearer tokens and their tenants (see TokenTable in auth.h). Without it every call is
  /// tenant "local" (or, with client certificates, the certificate's common name).
  std::string tokens_file;
  /// grpc.health.v1 needs a token too (default: health is open, for probes).
  bool health_requires_token = false;
  /// Per-tenant quotas (0: none): bytes on disk, imports at once, calls per second and burst.
  std::uint64_t tenant_max_storage_bytes = 0;
  /// Bytes of a tenant's import cache (least recently used entries go first; 0: no entries).
  std::uint64_t import_cache_max_bytes = std::uint64_t{1} << 30;
  /// Imports per tenant uploading, waiting for an import slot or running at once; -1: with
  /// tokens or client certificates (several tenants), half of import_slots + import_queue (at
  /// least 1), and otherwise no limit; 0: no limit.
  int tenant_max_concurrent_imports = -1;
  /// Queries (and part builds) per tenant running or waiting for a query slot at once; -1:
  /// with tokens or client certificates (several tenants), half of query_slots + query_queue
  /// (at least 1), so that one tenant's flood leaves room for the others, and otherwise no
  /// limit; 0: no limit.
  int tenant_max_concurrent_queries = -1;
  double tenant_requests_per_second = 0;
  double tenant_burst = 0;
  /// Linux PM QoS: while serving, hold the CPUs' wake-up latency at most this many µs through
  /// /dev/cpu_dma_latency (see cpu_latency.h; -1: leave the machine's setting). 0 keeps idle
  /// CPUs polling, which takes the wake-ups out of every call's latency at the cost of CPUs
  /// that never sleep. Start fails when the device cannot be opened (it needs root, and in a
  /// container the device).
  int cpu_latency_us = -1;
  /// With cpu_latency_us: let the limit go after this long without a call (health checks do
  /// not count), and hold it again on the next one, so that the CPUs sleep between interactive
  /// sessions; 0 holds it for the server's whole life.
  double cpu_latency_idle_seconds = 10;
  /// How often clashd tries again to load the scenes it keeps but does not serve (a part that
  /// did not load, uploaded again; a file readable again), and to open a tenant whose folder
  /// could not be used (on its next call), each at most this often and, while it still fails,
  /// at doubling intervals up to an hour; 0: only at a start.
  double unserved_scene_retry_seconds = 30;
  /// How long a scene file set aside as damaged ("<id>.pb.<time>.damaged") is kept before
  /// clashd removes it (at a tenant's open and every hour after), counted from the time in its
  /// name; 0: kept until an operator removes it. Damaged files do not count against a tenant's
  /// storage quota.
  double damaged_file_retention_days = 30;
  /// Classified pairs kept for reuse by later checks, in all scenes together (about 200 bytes
  /// each): a scene whose entry finds the budget spent empties the caches of scenes idle for
  /// pair_cache_idle_seconds first, least recently used first, then its own.
  std::size_t pair_cache_entries = std::size_t{1} << 20;
  /// How long a scene's pair cache must go unused before another scene may empty it.
  double pair_cache_idle_seconds = 10;
  /// No per-RPC log lines (tests).
  bool quiet = false;
};

/// The shortest period of the retries of unserved scenes (a smaller one is taken as this).
inline constexpr double kMinUnservedRetrySeconds = 0.01;

/// Longest instance path or name, and part name, in bytes (a scene's file is read back with a
/// cap, so acknowledged edits must not grow it without bound).
inline constexpr std::size_t kMaxInstanceTextBytes = 64 * 1024;

class ClashServer {
 public:
  /// Opens the stores and starts listening. UNAVAILABLE when the address cannot be bound.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ClashServer>> Start(
      const ServerConfig& config);
  ~ClashServer();

  /// The bound gRPC port (useful with port 0).
  [[nodiscard]] int port() const;
  /// The bound metrics port, 0 when disabled.
  [[nodiscard]] int metrics_port() const;
  /// The gRPC server (in-process channels for tests).
  [[nodiscard]] grpc::Server* grpc_server();
  /// Health NOT_SERVING, stop accepting calls, give in-flight calls the grace period, cancel
  /// the rest (which kills their import workers), and return.
  void Shutdown();
  /// Blocks until Shutdown finished.
  void Wait();

  struct Impl;

 private:
  explicit ClashServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace clash::server
