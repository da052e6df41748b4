// The C++ client of clashd: one call per RPC, absl::StatusOr results, a default deadline per
// kind of call, and retries with exponential backoff for idempotent calls that failed with
// UNAVAILABLE, or with RESOURCE_EXHAUSTED that the server marked transient (trailing metadata
// clash-retryable: a full queue, a tenant's concurrency or rate limit). Listing calls follow
// every page (INTERNAL when the server hands out a page token it gave before: the listing
// would never end).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "clash/v1/parts.grpc.pb.h"
#include "clash/v1/queries.grpc.pb.h"
#include "clash/v1/scenes.grpc.pb.h"
#include "clash/v1/sequences.grpc.pb.h"
#include "grpcpp/channel.h"

namespace clash::client {

struct ClientOptions {
  /// Server address, "host:port".
  std::string target = "127.0.0.1:50051";
  /// Default deadlines: reads and edits, queries, imports and uploads, sequences.
  std::chrono::milliseconds edit_timeout{30'000};
  std::chrono::milliseconds query_timeout{60'000};
  std::chrono::milliseconds import_timeout{600'000};
  /// Sequence validations (batch work; the server caps them with --max-sequence-seconds).
  std::chrono::milliseconds sequence_timeout{1'800'000};
  /// Health checks.
  std::chrono::milliseconds health_timeout{5'000};
  /// Attempts of an idempotent call (1: no retry) and the first backoff (doubled each time,
  /// with jitter, capped at 5 s).
  int max_attempts = 4;
  std::chrono::milliseconds initial_backoff{100};
  /// Bytes per ImportCad chunk.
  std::size_t chunk_bytes = std::size_t{1} << 20;
  /// Largest message the client accepts.
  int max_message_bytes = 256 << 20;
  /// TLS to the server (needed for any server not on loopback). With tls_ca_file empty the
  /// system's roots verify the server; tls_server_name overrides the name checked in its
  /// certificate. A client certificate (mutual TLS) is given by tls_cert_file + tls_key_file.
  bool tls = false;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_server_name;
  /// Bearer token sent with every call as "authorization: Bearer <token>" ("" sends none).
  /// Never sent in plaintext to a server that is not on loopback.
  std::string token;
};

/// A token for ClientOptions::token: $CLASH_TOKEN when set, else the first line of the file
/// `path` (when not empty), else of the file named by $CLASH_TOKEN_FILE, else "" (no token).
/// A token file must be a regular file of at most 64 KiB (INVALID_ARGUMENT otherwise).
[[nodiscard]] absl::StatusOr<std::string> FindToken(const std::string& path = "");

/// The contents of the regular file at `path`, at most `max_bytes` of them. INVALID_ARGUMENT
/// when it cannot be opened or read, is not a regular file (a FIFO would wait for a writer,
/// /dev/zero never end) or holds more; every message names the file.
[[nodiscard]] absl::StatusOr<std::string> ReadRegularFile(const std::string& path,
                                                          std::size_t max_bytes);

/// Upload progress: bytes sent so far and the file size.
using ProgressFn = std::function<void(uint64_t sent, uint64_t total)>;

/// Serving status from grpc.health.v1.
enum class Health { kServing, kNotServing, kUnknown };

class Client {
 public:
  /// A client on a new channel to options.target, plaintext or TLS. INVALID_ARGUMENT when a
  /// TLS file cannot be read (or is not a regular file of at most 4 MiB) or a token would go in
  /// plaintext to a non-loopback address.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const ClientOptions& options);
  /// A client on an existing channel (in-process servers, custom credentials).
  [[nodiscard]] static std::unique_ptr<Client> FromChannel(std::shared_ptr<grpc::Channel> channel,
                                                           const ClientOptions& options = {});

  // Parts.
  /// Streams the file at `path` and imports it. Not retried (the upload is a stream).
  [[nodiscard]] absl::StatusOr<v1::ImportCadResponse> ImportCad(
      const std::string& path, const v1::TessellationOptions& options = {}, bool strict = false,
      const ProgressFn& progress = {});
  [[nodiscard]] absl::StatusOr<v1::Part> UploadMesh(const v1::UploadMeshRequest& request);
  [[nodiscard]] absl::StatusOr<v1::Part> GetPart(const std::string& part_id);
  /// A part's cleaned mesh (part frame, mm). RESOURCE_EXHAUSTED when it exceeds the server's
  /// or this client's message size limit.
  [[nodiscard]] absl::StatusOr<v1::PartMesh> GetPartMesh(const std::string& part_id);
  [[nodiscard]] absl::StatusOr<std::vector<v1::Part>> ListParts();
  [[nodiscard]] absl::StatusOr<v1::Assembly> GetAssembly(const std::string& assembly_id);
  /// FAILED_PRECONDITION while a scene places the part or an assembly holds it.
  [[nodiscard]] absl::Status DeletePart(const std::string& part_id);
  [[nodiscard]] absl::Status DeleteAssembly(const std::string& assembly_id);

  // Scenes.
  [[nodiscard]] absl::StatusOr<v1::Scene> CreateScene(const std::string& name);
  [[nodiscard]] absl::StatusOr<v1::Scene> GetScene(const std::string& scene_id);
  [[nodiscard]] absl::StatusOr<std::vector<v1::Scene>> ListScenes();
  [[nodiscard]] absl::Status DeleteScene(const std::string& scene_id);
  [[nodiscard]] absl::StatusOr<v1::AddInstancesResponse> AddInstances(
      const v1::AddInstancesRequest& request);
  /// Every instance, from pages of one scene version: when the version changes between pages,
  /// the listing starts again, once; ABORTED when it changes again.
  [[nodiscard]] absl::StatusOr<std::vector<v1::Instance>> ListInstances(
      const std::string& scene_id);
  [[nodiscard]] absl::StatusOr<uint64_t> SetPoses(const v1::SetPosesRequest& request);
  [[nodiscard]] absl::StatusOr<uint64_t> RemoveInstances(const v1::RemoveInstancesRequest& request);
  [[nodiscard]] absl::StatusOr<uint64_t> SetInstancesEnabled(
      const v1::SetInstancesEnabledRequest& request);
  [[nodiscard]] absl::StatusOr<uint64_t> SetGroup(const v1::SetGroupRequest& request);

  // Queries.
  /// Every page of the answer, merged (FAILED_PRECONDITION if the scene changes meanwhile).
  [[nodiscard]] absl::StatusOr<v1::InterferenceResponse> CheckInterference(
      v1::InterferenceRequest request);
  [[nodiscard]] absl::StatusOr<v1::DistanceResponse> ComputeDistance(
      const v1::DistanceRequest& request);
  [[nodiscard]] absl::StatusOr<v1::PickResponse> PickRays(const v1::PickRequest& request);

  // Sequences.
  /// Everything ValidateSequence streamed: one result per step run, and the summary.
  struct SequenceReport {
    std::vector<v1::StepResult> steps;
    v1::SequenceSummary summary;
  };
  /// Validates a sequence; `on_event` (optional) sees every streamed event as it arrives
  /// (progress bars). Not retried. Deadline: the sequence timeout.
  [[nodiscard]] absl::StatusOr<SequenceReport> ValidateSequence(
      const v1::ValidateSequenceRequest& request,
      const std::function<void(const v1::ValidateSequenceEvent&)>& on_event = {});

  /// grpc.health.v1 status of `service` ("" for the whole server).
  [[nodiscard]] absl::StatusOr<Health> CheckHealth(const std::string& service = "");

  [[nodiscard]] const ClientOptions& options() const { return options_; }

 private:
  Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options);
  template <class Request, class Response, class Method>
  absl::StatusOr<Response> Call(Method method, const Request& request,
                                std::chrono::milliseconds timeout, bool idempotent);
  // Deadline and credentials of one call.
  void Prepare(grpc::ClientContext* ctx, std::chrono::system_clock::time_point deadline) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PartService::Stub> parts_;
  std::unique_ptr<v1::SceneService::Stub> scenes_;
  std::unique_ptr<v1::QueryService::Stub> queries_;
  std::unique_ptr<v1::SequenceService::Stub> sequences_;
};

/// The absl status of a gRPC status (same code and message).
[[nodiscard]] absl::Status FromGrpc(const grpc::Status& status);

/// Whether every address of a gRPC target is on this machine, so that a token may go to it
/// without TLS: unix sockets, "localhost", "[::1]" and 127.0.0.0/8 written as four decimal
/// octets, with a port of 1-5 digits or none, bare or after "dns:///", "ipv4:" or "ipv6:" (an
/// address list only when every address is one of these). Anything else is not: a host name
/// that merely starts with "127." or "localhost", or a target with a '%' (gRPC decodes "%2C" to
/// a comma before it splits a list).
[[nodiscard]] bool IsLoopbackTarget(std::string_view target);

}  // namespace clash::client
