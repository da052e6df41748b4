#include "server.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "auth.h"
#include "clash/cad/assembly.h"
#include "clash/cad/durable_file.h"
#include "clash/cad/import_cache.h"
#include "clash/cad/isolated_import.h"
#include "clash/geom/status_macros.h"
#include "clash/v1/parts.grpc.pb.h"
#include "clash/v1/queries.grpc.pb.h"
#include "clash/v1/scenes.grpc.pb.h"
#include "clash/v1/sequences.grpc.pb.h"
#include "convert.h"
#include "cpu_latency.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/server_credentials.h"
#include "health.h"
#include "import_store.h"
#include "limiter.h"
#include "log.h"
#include "metrics.h"
#include "parallel.h"
#include "part_store.h"
#include "query_engine.h"
#include "scene.h"
#include "sequence_engine.h"
#include "storage.h"
#include "tenant.h"

namespace clash::server {
namespace {

constexpr const char* kServiceNames[] = {"clash.v1.PartService", "clash.v1.SceneService",
                                         "clash.v1.QueryService", "clash.v1.SequenceService"};

const char* CodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "UNKNOWN";
}

// The time a call must finish by: the client's deadline, capped by the server's maximum.
absl::Time CallDeadline(const grpc::ServerContext* ctx, double max_seconds) {
  const absl::Time server_max = absl::Now() + absl::Seconds(max_seconds);
  const auto client = ctx->deadline();
  if (client == std::chrono::system_clock::time_point::max()) return server_max;
  return std::min(server_max, absl::FromChrono(client));
}

// Runs a task every `period` on a thread of its own until stopped (or destroyed).
class Periodic {
 public:
  Periodic(absl::Duration period, std::function<void()> task)
      : thread_([this, period, task = std::move(task)] {
          absl::MutexLock lock(&mu_);
          while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), period)) {
            mu_.Unlock();
            task();
            mu_.Lock();
          }
        }) {}
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;
  ~Periodic() { Stop(); }
  /// Waits for a running task to end; no task starts after.
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  absl::Mutex mu_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

// Cancels a call when its deadline passes, from a thread of its own. A server stream's Write
// has no deadline: to a client that stops reading (its flow-control window full) it blocks for
// good, holding the call's query slot and its scene's lock; cancelled, it returns.
class CancelAtDeadline {
 public:
  CancelAtDeadline(grpc::ServerContext* ctx, absl::Time deadline)
      : thread_([this, ctx, deadline] {
          absl::MutexLock lock(&mu_);
          if (!mu_.AwaitWithDeadline(absl::Condition(&done_), deadline)) {
            fired_ = true;
            ctx->TryCancel();
          }
        }) {}
  CancelAtDeadline(const CancelAtDeadline&) = delete;
  CancelAtDeadline& operator=(const CancelAtDeadline&) = delete;
  ~CancelAtDeadline() {
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
    }
    thread_.join();
  }
  /// Stops the watch; returns whether it cancelled the call first. A call that answers OK
  /// must ask this before: the watch cannot cancel it afterwards.
  [[nodiscard]] bool Finish() {
    absl::MutexLock lock(&mu_);
    done_ = true;
    return fired_;
  }

 private:
  absl::Mutex mu_;
  bool done_ = false;   // guarded by mu_
  bool fired_ = false;  // guarded by mu_
  std::thread thread_;
};

// Tenant::part_uses_mu as `Lock` (std::unique_lock for DeletePart; std::shared_lock for a call
// that may begin a use of a part, taken before a query slot by every caller alike), waited for
// until `deadline`: whichever holds it costs the other a call's time, never a thread for good.
template <typename Lock>
absl::StatusOr<Lock> LockPartUses(Tenant& t, absl::Time deadline) {
  Lock lock(t.part_uses_mu, absl::ToChronoTime(deadline));
  if (!lock.owns_lock()) {
    return absl::DeadlineExceededError(
        std::is_same_v<Lock, std::unique_lock<std::shared_timed_mutex>>
            ? "the tenant's imports, uploads or instance additions still run: nothing deleted; "
              "try again"
            : "a DeletePart of the tenant still runs; try again");
  }
  return lock;
}
using SharedPartUses = std::shared_lock<std::shared_timed_mutex>;
using AllPartUses = std::unique_lock<std::shared_timed_mutex>;

// CANCELLED when the client cancelled the call (asks gRPC: ~20 µs, see MakeStop).
absl::Status CancelledByClient(const grpc::ServerContext* ctx) {
  return ctx->IsCancelled() ? absl::CancelledError("call cancelled by the client")
                            : absl::OkStatus();
}

// The client's cancellation is asked at most once every 5 ms, the first time 5 ms after the
// call starts (ServerContext::IsCancelled costs ~20 µs here, as much as a small query: asked per
// pair or per chunk of rays it doubled their cost, asked once before every query it added
// 30-40 µs to a pick or a cached pair query through gRPC, and asked once a millisecond it added
// ~15 µs to the p50 of a 1 ms move-and-check), the deadline on every call. A call cancelled
// before its work starts is noticed at the first check after those 5 ms (the work between two
// checks: a pair, 16 rays, a pose of a sweep); one whose work ends sooner completes, and the
// client, gone, never sees its answer. Safe to call from several threads: the throttle is a
// relaxed atomic, at worst asking twice.
StopCheck MakeStop(const grpc::ServerContext* ctx, absl::Time deadline) {
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::rep kCancelCheckEvery =
      std::chrono::duration_cast<Clock::duration>(std::chrono::milliseconds(5)).count();
  auto next_cancel_check = std::make_shared<std::atomic<Clock::rep>>(
      Clock::now().time_since_epoch().count() + kCancelCheckEvery);
  return [ctx, deadline, next_cancel_check]() -> absl::Status {
    const Clock::rep now = Clock::now().time_since_epoch().count();
    if (now >= next_cancel_check->load(std::memory_order_relaxed)) {
      next_cancel_check->store(now + kCancelCheckEvery, std::memory_order_relaxed);
      CLASH_RETURN_IF_ERROR(CancelledByClient(ctx));
    }
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("deadline exceeded");
    return absl::OkStatus();
  };
}

// Group names: 1 to 256 bytes (SetGroup and the groups of AddInstances alike).
absl::Status CheckGroupName(const std::string& group) {
  if (group.empty() || group.size() > 256) {
    return absl::InvalidArgumentError("group names have 1 to 256 bytes");
  }
  return absl::OkStatus();
}

// Groups a scene may have: GetScene lists each with its size.
constexpr std::size_t kMaxSceneGroups = 10'000;

absl::Status CheckGroupCount(const Scene& scene, std::size_t more) {
  if (scene.groups.size() + more > kMaxSceneGroups) {
    return absl::ResourceExhaustedError(absl::StrCat("scene ", scene.id(), " would have ",
                                                     scene.groups.size() + more,
                                                     " groups; at most ", kMaxSceneGroups));
  }
  return absl::OkStatus();
}

// A tenant's query ticket and a slot of the shared query limiter, released together (the slot
// first).
struct QuerySlot {
  Tenant::QueryTicket ticket;
  WorkLimiter::Permit permit;
};

// A duration flag (checked >= 0 at start) as milliseconds, capped at about 30 years so that an
// infinite one neither overflows the cast nor the clock it is added to.
std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::min(seconds, 1e9) * 1e3));
}

// What an upload of unannounced size sets aside of its tenant's storage quota at a time.
constexpr std::uint64_t kUploadStorageStep = std::uint64_t{4} << 20;

absl::Status CheckInstanceText(const char* what, const std::string& text) {
  if (text.size() > kMaxInstanceTextBytes) {
    return absl::InvalidArgumentError(absl::StrCat("instance ", what, " has ", text.size(),
                                                   " bytes; at most ", kMaxInstanceTextBytes));
  }
  return absl::OkStatus();
}

// Page tokens of listings: the last id of the previous page.
absl::StatusOr<std::size_t> PageSize(int requested, int fallback, int max) {
  if (requested < 0) return absl::InvalidArgumentError("page_size must be >= 0");
  return static_cast<std::size_t>(requested == 0 ? fallback : std::min(requested, max));
}

// The base name of the client's file name, kept to [A-Za-z0-9._-] and 100 bytes, no leading
// dot; "upload" when nothing is left.
std::string UploadName(const std::string& file_name) {
  const std::size_t slash = file_name.find_last_of("/\\");
  std::string name;
  for (char c : slash == std::string::npos ? file_name : file_name.substr(slash + 1)) {
    if (name.size() == 100) break;
    const bool ok =
        absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (ok && !(name.empty() && c == '.')) name += c;
  }
  return name.empty() ? "upload" : name;
}

// Part names (UploadMesh) and import file names: at most 64 KiB, as instance paths and names
// (part and assembly files keep them, and every listing copies them).
absl::Status CheckNameSize(const char* field, const std::string& name) {
  if (name.size() <= kMaxInstanceTextBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " has ", name.size(), " bytes; at most ", kMaxInstanceTextBytes));
}

// The size of GetPartMesh's reply for `mesh`, to the byte, without building it: each field is
// a tag byte, a varint length and its payload (part_id's bytes, 8 bytes per coordinate, one
// varint per index and per face id), and is left out when empty.
std::size_t PartMeshBytes(const std::string& part_id, const geom::TriangleMesh& mesh) {
  using google::protobuf::io::CodedOutputStream;
  const auto field = [](std::size_t payload) -> std::size_t {
    return payload == 0 ? 0 : 1 + CodedOutputStream::VarintSize64(payload) + payload;
  };
  std::size_t indices = 0;
  std::size_t faces = 0;
  for (std::size_t t = 0; t < mesh.num_triangles(); ++t) {
    for (uint32_t i : mesh.triangles()[t]) indices += CodedOutputStream::VarintSize32(i);
    faces += CodedOutputStream::VarintSize32(mesh.tags()[t]);
  }
  return field(part_id.size()) + field(3 * sizeof(double) * mesh.vertices().size()) +
         field(indices) + field(faces);
}

// Plaintext only on loopback; TLS (optionally requiring client certificates) everywhere else,
// and then some way to tell callers apart (tokens or client certificates).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ListenerCredentials(
    const ServerConfig& config) {
  const bool tls = !config.tls_cert_file.empty() || !config.tls_key_file.empty();
  if (!tls) {
    if (!config.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    if (!IsLoopbackListen(config.listen)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing plaintext on ", config.listen,
          ", which is not a loopback address: give --tls-cert and --tls-key (see README, "
          "Deployment)"));
    }
    return grpc::InsecureServerCredentials();
  }
  if (config.tls_cert_file.empty() || config.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  if (!IsLoopbackListen(config.listen) && config.tokens_file.empty() &&
      config.tls_client_ca_file.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve ", config.listen,
        " without authentication: give --tokens or --tls-client-ca (see README, Deployment)"));
  }
  auto read = [](const std::string& path, const char* what) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::string> text = ReadFileCapped(path, std::size_t{1} << 20);
    if (!text.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read the ", what, " file ", path, ": ",
                                                     std::string(text.status().message())));
    }
    return text;
  };
  grpc::SslServerCredentialsOptions options(
      config.tls_client_ca_file.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  CLASH_ASSIGN_OR_RETURN(pair.private_key, read(config.tls_key_file, "TLS key"));
  CLASH_ASSIGN_OR_RETURN(pair.cert_chain, read(config.tls_cert_file, "TLS certificate"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!config.tls_client_ca_file.empty()) {
    CLASH_ASSIGN_OR_RETURN(options.pem_root_certs, read(config.tls_client_ca_file, "client CA"));
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace

struct ClashServer::Impl {
  explicit Impl(const ServerConfig& c)
      : config(c),
        query_limiter("query", c.query_slots, c.query_queue),
        query_helpers(c.query_helpers < 0 ? c.query_slots - 1 : c.query_helpers, &query_limiter),
        // (Imports wait only once their file is in, and each holds its upload place until it
        // has a slot: the upload places bound the waiting, which is never turned away.)
        import_limiter("import", c.import_slots, c.import_slots + c.import_queue),
        upload_limiter("upload", c.import_slots + c.import_queue, 0),
        parts_service(this),
        scenes_service(this),
        queries_service(this),
        sequences_service(this),
        health_service([this](grpc::ServerContext* ctx) { return AdmitHealth(ctx); }) {}

  // Runs one RPC body: catches everything, logs one line, records metrics.
  template <class Body>
  grpc::Status Serve(grpc::ServerContext* ctx, const char* method, Body&& body) {
    const auto start = std::chrono::steady_clock::now();
    if (cpu_latency) cpu_latency->Touch();
    std::string tenant_name;
    const grpc::Status status = Guarded(method, [&] {
      absl::StatusOr<std::shared_ptr<Tenant>> tenant = Admit(ctx);
      absl::Status answer = tenant.status();
      if (tenant.ok()) {
        tenant_name = (*tenant)->name();
        answer = body(**tenant);
      }
      if (IsTransient(answer)) ctx->AddTrailingMetadata(kRetryableMetadata, "1");
      return ToGrpc(answer);
    });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const char* code = CodeName(status.error_code());
    metrics.RecordRpc(method, code, seconds);
    const LogLevel level = status.ok() || status.error_code() == grpc::StatusCode::NOT_FOUND
                               ? LogLevel::kInfo
                               : LogLevel::kWarning;
    if (level != LogLevel::kInfo || InfoLogged()) {  // --quiet: no line to format
      std::string line =
          absl::StrFormat("rpc=%s peer=%s tenant=%s code=%s ms=%.3f", method, ctx->peer(),
                          tenant_name.empty() ? "-" : tenant_name, code, seconds * 1e3);
      if (!status.ok()) absl::StrAppend(&line, " error=", LogQuote(status.error_message()));
      LogLine(level, line);
    }
    return status;
  }

  class PartsService final : public v1::PartService::Service {
   public:
    explicit PartsService(Impl* impl) : impl_(impl) {}
    grpc::Status ImportCad(grpc::ServerContext* ctx,
                           grpc::ServerReader<v1::ImportCadRequest>* reader,
                           v1::ImportCadResponse* response) override {
      return impl_->Serve(ctx, "ImportCad",
                          [&](Tenant& t) { return impl_->DoImportCad(t, ctx, reader, response); });
    }
    grpc::Status UploadMesh(grpc::ServerContext* ctx, const v1::UploadMeshRequest* request,
                            v1::Part* response) override {
      return impl_->Serve(ctx, "UploadMesh", [&](Tenant& t) -> absl::Status {
        CLASH_RETURN_IF_ERROR(CheckNameSize("name", request->name()));
        PartInput in;
        in.name = request->name();
        in.xyz_mm = {request->vertices_mm().data(),
                     static_cast<std::size_t>(request->vertices_mm_size())};
        in.triangles = {request->triangles().data(),
                        static_cast<std::size_t>(request->triangles_size())};
        in.face_ids = {request->face_ids().data(),
                       static_cast<std::size_t>(request->face_ids_size())};
        in.deflection_mm = request->deflection_mm();
        if (in.xyz_mm.size() % 3 != 0 || in.triangles.size() % 3 != 0) {
          return absl::InvalidArgumentError(
              "vertices_mm and triangles must hold 3 values per vertex and per triangle");
        }
        // Held while the part is built and written (its file is about the request's size).
        CLASH_ASSIGN_OR_RETURN(Tenant::StorageReservation room,
                               t.ReserveStorage(request->ByteSizeLong()));
        // Welding and the hierarchy (up to --max-part-triangles) are query-sized CPU work: they
        // take a query slot, so that uploads cannot oversubscribe the cores.
        const absl::Time deadline = CallDeadline(ctx, impl_->config.max_query_seconds);
        // No DeletePart between the lookup of an equal part and the store.
        CLASH_ASSIGN_OR_RETURN(SharedPartUses uses, LockPartUses<SharedPartUses>(t, deadline));
        const StopCheck stop = MakeStop(ctx, deadline);
        CLASH_ASSIGN_OR_RETURN(QuerySlot slot, impl_->AcquireQuerySlot(t, stop));
        CLASH_ASSIGN_OR_RETURN(std::shared_ptr<const PartEntry> entry, t.parts().Put(in));
        *response = entry->info;
        return absl::OkStatus();
      });
    }
    grpc::Status GetPart(grpc::ServerContext* ctx, const v1::GetPartRequest* request,
                         v1::Part* response) override {
      return impl_->Serve(ctx, "GetPart", [&](Tenant& t) -> absl::Status {
        if (!PartStore::IsPartId(request->part_id())) {
          return absl::NotFoundError(absl::StrCat("no part '", request->part_id(), "'"));
        }
        CLASH_ASSIGN_OR_RETURN(std::shared_ptr<const PartEntry> entry,
                               impl_->LoadPart(t, ctx, request->part_id()));
        *response = entry->info;
        return absl::OkStatus();
      });
    }
    grpc::Status GetPartMesh(grpc::ServerContext* ctx, const v1::GetPartMeshRequest* request,
                             v1::PartMesh* response) override {
      return impl_->Serve(ctx, "GetPartMesh", [&](Tenant& tenant) -> absl::Status {
        if (!PartStore::IsPartId(request->part_id())) {
          return absl::InvalidArgumentError(
              absl::StrCat("part_id '", request->part_id(), "' is not \"p\" + 32 hex digits"));
        }
        CLASH_ASSIGN_OR_RETURN(std::shared_ptr<const PartEntry> entry,
                               impl_->LoadPart(tenant, ctx, request->part_id()));
        const geom::TriangleMesh& mesh = entry->geom->mesh();
        // Measured before it is built: a reply that cannot be sent takes no memory.
        const std::size_t bytes = PartMeshBytes(request->part_id(), mesh);
        if (bytes > impl_->config.max_message_bytes) {
          return absl::ResourceExhaustedError(
              absl::StrCat("the mesh of ", request->part_id(), " takes ", bytes,
                           " bytes, above the server's --max-message-bytes (",
                           impl_->config.max_message_bytes, ")"));
        }
        response->set_part_id(request->part_id());
        auto* xyz = response->mutable_vertices_mm();
        xyz->Reserve(static_cast<int>(3 * mesh.vertices().size()));
        for (const geom::Vec3& v : mesh.vertices()) {
          for (int k = 0; k < 3; ++k) xyz->AddAlreadyReserved(v[k]);
        }
        // In upload order (the part keeps its triangles in hierarchy order).
        const std::vector<uint32_t> order = mesh.InSourceOrder();
        auto* tris = response->mutable_triangles();
        tris->Reserve(static_cast<int>(3 * order.size()));
        auto* faces = response->mutable_face_ids();
        faces->Reserve(static_cast<int>(order.size()));
        for (uint32_t id : order) {
          for (uint32_t i : mesh.triangles()[id]) tris->AddAlreadyReserved(i);
          faces->AddAlreadyReserved(mesh.tags()[id]);
        }
        return absl::OkStatus();
      });
    }
    grpc::Status ListParts(grpc::ServerContext* ctx, const v1::ListPartsRequest* request,
                           v1::ListPartsResponse* response) override {
      return impl_->Serve(ctx, "ListParts", [&](Tenant& t) -> absl::Status {
        CLASH_ASSIGN_OR_RETURN(std::size_t n, PageSize(request->page_size(), 100, 1000));
        // A token is the last part id listed; anything else would read as the end of the list.
        if (!request->page_token().empty() && !PartStore::IsPartId(request->page_token())) {
          return absl::InvalidArgumentError("malformed page_token");
        }
        const std::vector<std::string> ids = t.parts().ListIds(request->page_token(), n + 1);
        const StopCheck stop = MakeStop(ctx, CallDeadline(ctx, impl_->config.max_query_seconds));
        for (std::size_t i = 0; i < ids.size() && i < n; ++i) {
          std::shared_ptr<const PartEntry> entry = t.parts().Loaded(ids[i]);
          if (entry == nullptr && !t.parts().Known(ids[i])) continue;  // deleted meanwhile
          if (entry == nullptr) {
            // Running out of slots or time fails the page; a part that no longer loads (a
            // damaged file, or above a lowered --max-part-triangles) is left out and logged.
            CLASH_ASSIGN_OR_RETURN(QuerySlot slot, impl_->AcquireQuerySlot(t, stop));
            CLASH_RETURN_IF_ERROR(stop());
            absl::StatusOr<std::shared_ptr<const PartEntry>> got = t.parts().Get(ids[i]);
            if (!got.ok() && !t.parts().Known(ids[i])) continue;  // deleted meanwhile
            // A file that cannot be read now (INTERNAL) fails the page: left out, the part
            // would look gone to a client listing its parts.
            if (absl::IsInternal(got.status())) return got.status();
            if (!got.ok()) {
              LogLine(LogLevel::kWarning, absl::StrCat("ListParts: part ", ids[i],
                                                       " left out: ", got.status().message()));
              continue;
            }
            entry = *std::move(got);
          }
          *response->add_parts() = entry->info;
        }
        if (ids.size() > n) response->set_next_page_token(ids[n - 1]);
        return absl::OkStatus();
      });
    }
    grpc::Status GetAssembly(grpc::ServerContext* ctx, const v1::GetAssemblyRequest* request,
                             v1::Assembly* response) override {
      return impl_->Serve(ctx, "GetAssembly", [&](Tenant& t) -> absl::Status {
        CLASH_ASSIGN_OR_RETURN(*response, t.parts().GetAssembly(request->assembly_id()));
        return absl::OkStatus();
      });
    }
    grpc::Status DeletePart(grpc::ServerContext* ctx, const v1::DeletePartRequest* request,
                            v1::DeletePartResponse*) override {
      return impl_->Serve(ctx, "DeletePart", [&](Tenant& t) -> absl::Status {
        const std::string& id = request->part_id();
        if (!PartStore::IsPartId(id) || !t.parts().Known(id)) {
          return absl::NotFoundError(absl::StrCat("no part '", id, "'"));
        }
        const absl::Time deadline = CallDeadline(ctx, impl_->config.max_query_seconds);
        CLASH_ASSIGN_OR_RETURN(AllPartUses no_new_uses, LockPartUses<AllPartUses>(t, deadline));
        CLASH_ASSIGN_OR_RETURN(std::optional<std::string> user,
                               t.scenes().FirstUserOf(id, deadline));
        if (!user) {
          CLASH_ASSIGN_OR_RETURN(user, t.parts().FirstAssemblyWith(id, deadline));
        }
        if (user) {
          return absl::FailedPreconditionError(absl::StrCat("part ", id, " is in use by ", *user));
        }
        return t.parts().Remove(id);
      });
    }
    grpc::Status DeleteAssembly(grpc::ServerContext* ctx, const v1::DeleteAssemblyRequest* request,
                                v1::DeleteAssemblyResponse*) override {
      // No lock of the part uses: deleting an assembly only ends uses, and an import storing
      // the same assembly at once leaves it stored or not, as if one call came first.
      return impl_->Serve(ctx, "DeleteAssembly", [&](Tenant& t) -> absl::Status {
        return t.parts().RemoveAssembly(request->assembly_id());
      });
    }

   private:
    Impl* impl_;
  };

  class ScenesService final : public v1::SceneService::Service {
   public:
    explicit ScenesService(Impl* impl) : impl_(impl) {}

    grpc::Status CreateScene(grpc::ServerContext* ctx, const v1::CreateSceneRequest* request,
                             v1::Scene* response) override {
      return impl_->Serve(ctx, "CreateScene", [&](Tenant& t) -> absl::Status {
        if (request->name().size() > 1024) {
          return absl::InvalidArgumentError("scene name longer than 1024 bytes");
        }
        CLASH_RETURN_IF_ERROR(t.CheckStorage(0).status());  // over the quota: refused cheaply
        Tenant::StorageReservation room;                    // held until the file is written
        CLASH_ASSIGN_OR_RETURN(std::shared_ptr<Scene> scene,
                               t.scenes().Create(request->name(), ReserveInto(t, &room)));
        std::shared_lock lock(scene->mu);
        scene->ToProto(response);
        return absl::OkStatus();
      });
    }
    grpc::Status GetScene(grpc::ServerContext* ctx, const v1::GetSceneRequest* request,
                          v1::Scene* response) override {
      return impl_->Serve(ctx, "GetScene", [&](Tenant& t) -> absl::Status {
        CLASH_ASSIGN_OR_RETURN(std::shared_ptr<Scene> scene, t.scenes().Get(request->scene_id()));
        CLASH_ASSIGN_OR_RETURN(std::shared_lock<std::shared_timed_mutex> lock,
                               t.scenes().LockCurrentForRead(
                                   &scene, CallDeadline(ctx, impl_->config.max_query_seconds)));
        scene->ToProto(response);
        return absl::OkStatus();
      });
    }
    grpc::Status ListScenes(grpc::ServerContext* ctx, const v1::ListScenesRequest* request,
                            v1::ListScenesResponse* response) override {
      return impl_->Serve(ctx, "ListScenes", [&](Tenant& t) -> absl::Status {
        CLASH_ASSIGN_OR_RETURN(std::size_t n, PageSize(request->page_size(), 100, 1000));
        // A token is the last scene id listed; anything else would read as the end of the list.
        if (!request->page_token().empty() && !IsHexId(request->page_token(), 's')) {
          return absl::InvalidArgumentError("malformed page_token");
        }
        const auto scenes = t.scenes().List(request->page_token(), n + 1);
        const absl::Time deadline = CallDeadline(ctx, impl_->config.max_query_seconds);
        std::size_t bytes = 0;
        for (std::size_t i = 0; i < scenes.size() && i < n; ++i) {
          if (bytes > impl_->PageBytes()) {  // the rest on the next page
            response->set_next_page_token(scenes[i - 1]->id());
            return absl::OkStatus();
          }
          std::shared_ptr<Scene> scene = scenes[i];
          absl::StatusOr<std::shared_lock<std::shared_timed_mutex>> lock =
              t.scenes().LockCurrentForRead(&scene, deadline);
          if (absl::IsDeadlineExceeded(lock.status())) return lock.status();
          if (!lock.ok()) continue;  // deleted, or no longer served, meanwhile
          v1::Scene* out = response->add_scenes();
          scene->ToProto(out);
          bytes += out->ByteSizeLong() + 8;
        }
        if (scenes.size() > n) response->set_next_page_token(scenes[n - 1]->id());
        return absl::OkStatus();
      });
    }
    grpc::Status DeleteScene(grpc::ServerContext* ctx, const v1::DeleteSceneRequest* request,
                             v1::DeleteSceneResponse*) override {
      return impl_->Serve(ctx, "DeleteScene", [&](Tenant& t) {
        return t.scenes().Delete(request->scene_id(),
                                 CallDeadline(ctx, impl_->config.max_query_seconds));
      });
    }
    grpc::Status AddInstances(grpc::ServerContext* ctx, const v1::AddInstancesRequest* request,
                              v1::AddInstancesResponse* response) override {
      return impl_->Serve(ctx, "AddInstances", [&](Tenant& t) {
        return impl_->DoAddInstances(t, ctx, *request, response);
      });
    }
    grpc::Status ListInstances(grpc::ServerContext* ctx, const v1::ListInstancesRequest* request,
                               v1::ListInstancesResponse* response) override {
      return impl_->Serve(ctx, "ListInstances", [&](Tenant& t) -> absl::Status {
        CLASH_ASSIGN_OR_RETURN(std::shared_ptr<Scene> scene, t.scenes().Get(request->scene_id()));
        CLASH_ASSIGN_OR_RETURN(std::size_t n, PageSize(request->page_size(), 1000, 10000));
        // A token names the scene and the last instance id listed: "<scene id>/<id>".
        uint64_t after = 0;
        if (!request->page_token().empty()) {
          const std::vector<std::string> parts = absl::StrSplit(request->page_token(), '/');
          if (parts.size() == 1 && absl::SimpleAtoi(parts[0], &after)) {  // an older server's
            return absl::FailedPreconditionError(
                "page_token is of an older server's form: start the listing again");
          }
          if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &after)) {
            return absl::InvalidArgumentError("malformed page_token");
          }
          if (parts[0] != request->scene_id()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "page_token is from a listing of scene ", parts[0], ", not ", request->scene_id()));
          }
        }
        CLASH_ASSIGN_OR_RETURN(std::shared_lock<std::shared_timed_mutex> lock,
                               t.scenes().LockCurrentForRead(
                                   &scene, CallDeadline(ctx, impl_->config.max_query_seconds)));
        // A page ends at n instances, or at about a quarter of the message limit (paths, names and
        // groups can be long).
        std::size_t count = 0;
        std::size_t bytes = 0;
        for (auto it = scene->instances.upper_bound(after); it != scene->instances.end(); ++it) {
          if (count == n || bytes > impl_->PageBytes()) {
            response->set_next_page_token(
                absl::StrCat(request->scene_id(), "/", std::prev(it)->first));
            break;
          }
          v1::Instance* out = response->add_instances();
          Scene::InstanceToProto(it->second, out);
          bytes += out->ByteSizeLong() + 8;
          ++count;
        }
        response->set_scene_version(scene->version);
        return absl::OkStatus();
      });
    }
    grpc::Status SetPoses(grpc::ServerContext* ctx, const v1::SetPosesRequest* request,
                          v1::SceneUpdateResponse* response) override {
      return impl_->Serve(ctx, "SetPoses", [&](Tenant& t) {
        return impl_->EditScene(
            t, ctx, request->scene_id(), response, false, [&](Scene& scene) -> absl::Status {
              std::vector<std::pair<InstanceRec*, geom::RigidTransform>> updates;
              for (const v1::PoseUpdate& u : request->poses()) {
                InstanceRec* rec = scene.Find(u.instance_id());
                if (rec == nullptr) {
                  return absl::NotFoundError(absl::StrCat("no instance ", u.instance_id()));
                }
                CLASH_ASSIGN_OR_RETURN(geom::RigidTransform X,
                                       PoseFromUpdate(u, absl::StrCat("pose of ", rec->path)));
                CLASH_RETURN_IF_ERROR(
                    scene.CheckPlaceable(*rec->part, X, absl::StrCat("pose of ", rec->path)));
                updates.emplace_back(rec, X);
              }
              for (auto& [rec, X] : updates) scene.SetPose(*rec, X);
              return absl::OkStatus();
            });
      });
    }
    grpc::Status RemoveInstances(grpc::ServerContext* ctx,
                                 const v1::RemoveInstancesRequest* request,
                                 v1::SceneUpdateResponse* response) override {
      return impl_->Serve(ctx, "RemoveInstances", [&](Tenant& t) {
        return impl_->EditScene(t, ctx, request->scene_id(), response, false,
                                [&](Scene& scene) -> absl::Status {
                                  for (uint64_t id : request->instance_ids()) {
                                    if (scene.Find(id) == nullptr) {
                                      return absl::NotFoundError(absl::StrCat("no instance ", id));
                                    }
                                  }
                                  for (uint64_t id : request->instance_ids()) scene.Remove(id);
                                  return absl::OkStatus();
                                });
      });
    }
    grpc::Status SetInstancesEnabled(grpc::ServerContext* ctx,
                                     const v1::SetInstancesEnabledRequest* request,
                                     v1::SceneUpdateResponse* response) override {
      return impl_->Serve(ctx, "SetInstancesEnabled", [&](Tenant& t) {
        return impl_->EditScene(t, ctx, request->scene_id(), response, false,
                                [&](Scene& scene) -> absl::Status {
                                  std::vector<InstanceRec*> recs;
                                  for (uint64_t id : request->instance_ids()) {
                                    InstanceRec* rec = scene.Find(id);
                                    if (rec == nullptr)
                                      return absl::NotFoundError(absl::StrCat("no instance ", id));
                                    recs.push_back(rec);
                                  }
                                  for (InstanceRec* rec : recs)
                                    scene.SetEnabled(*rec, request->enabled());
                                  return absl::OkStatus();
                                });
      });
    }
    grpc::Status SetGroup(grpc::ServerContext* ctx, const v1::SetGroupRequest* request,
                          v1::SceneUpdateResponse* response) override {
      return impl_->Serve(ctx, "SetGroup", [&](Tenant& t) {
        CLASH_RETURN_IF_ERROR(CheckGroupName(request->group()));
        // (Deleting a group, no members, only shrinks the scene: never refused for the quota.)
        const bool grows = !request->instance_ids().empty();
        return impl_->EditScene(
            t, ctx, request->scene_id(), response, grows, [&](Scene& scene) -> absl::Status {
              std::set<uint64_t> members;
              for (uint64_t id : request->instance_ids()) {
                if (scene.Find(id) == nullptr) {
                  return absl::NotFoundError(absl::StrCat("no instance ", id));
                }
                members.insert(id);
              }
              if (!members.empty() && !scene.groups.contains(request->group())) {
                CLASH_RETURN_IF_ERROR(CheckGroupCount(scene, 1));
              }
              scene.SetGroup(request->group(), members);
              return absl::OkStatus();
            });
      });
    }

   private:
    Impl* impl_;
  };

  class QueriesService final : public v1::QueryService::Service {
   public:
    explicit QueriesService(Impl* impl) : impl_(impl) {}
    grpc::Status CheckInterference(grpc::ServerContext* ctx, const v1::InterferenceRequest* request,
                                   v1::InterferenceResponse* response) override {
      return impl_->Serve(ctx, "CheckInterference", [&](Tenant& t) {
        return impl_->RunQuery(
            t, ctx, request->scene_id(), [&](const Scene& scene, const StopCheck& stop) {
              CLASH_ASSIGN_OR_RETURN(
                  *response,
                  RunInterference(scene, *request, stop, impl_->Limits(), &impl_->query_helpers));
              return absl::OkStatus();
            });
      });
    }
    grpc::Status ComputeDistance(grpc::ServerContext* ctx, const v1::DistanceRequest* request,
                                 v1::DistanceResponse* response) override {
      return impl_->Serve(ctx, "ComputeDistance", [&](Tenant& t) {
        return impl_->RunQuery(
            t, ctx, request->scene_id(), [&](const Scene& scene, const StopCheck& stop) {
              CLASH_ASSIGN_OR_RETURN(*response, RunDistance(scene, *request, stop));
              return absl::OkStatus();
            });
      });
    }
    grpc::Status PickRays(grpc::ServerContext* ctx, const v1::PickRequest* request,
                          v1::PickResponse* response) override {
      return impl_->Serve(ctx, "PickRays", [&](Tenant& t) {
        return impl_->RunQuery(
            t, ctx, request->scene_id(), [&](const Scene& scene, const StopCheck& stop) {
              CLASH_ASSIGN_OR_RETURN(*response, RunPick(scene, *request, stop, impl_->Limits(),
                                                        &impl_->query_helpers));
              return absl::OkStatus();
            });
      });
    }

   private:
    Impl* impl_;
  };

  class SequencesService final : public v1::SequenceService::Service {
   public:
    explicit SequencesService(Impl* impl) : impl_(impl) {}
    grpc::Status ValidateSequence(grpc::ServerContext* ctx,
                                  const v1::ValidateSequenceRequest* request,
                                  grpc::ServerWriter<v1::ValidateSequenceEvent>* writer) override {
      return impl_->Serve(ctx, "ValidateSequence", [&](Tenant& t) {
        // A second after RunQuery's deadline: a sequence whose client reads ends at that
        // deadline by itself, with DEADLINE_EXCEEDED.
        CancelAtDeadline watchdog(
            ctx, CallDeadline(ctx, impl_->config.max_sequence_seconds) + absl::Seconds(1));
        absl::Status status = impl_->RunQuery(
            t, ctx, request->scene_id(),
            [&](const Scene& scene, const StopCheck& stop) {
              // A write that fails (the client gone, the call cancelled) stops the work.
              std::atomic<bool> closed = false;
              // An event gRPC could not send (a step moving or blocked by very many instances
              // with long paths) ends the call with a status that says so, not a closed stream.
              absl::Status unsendable;
              const StopCheck stop_or_closed = [&]() -> absl::Status {
                if (!unsendable.ok()) return unsendable;
                if (closed) return absl::CancelledError("the stream to the client is closed");
                return stop();
              };
              absl::Status run = RunSequence(
                  scene, *request, stop_or_closed, [&](const v1::ValidateSequenceEvent& e) {
                    if (!unsendable.ok() || closed) return;
                    const std::size_t bytes = e.ByteSizeLong();
                    if (bytes > impl_->config.max_message_bytes) {
                      unsendable = absl::ResourceExhaustedError(absl::StrCat(
                          e.has_step()
                              ? absl::StrCat("step ", e.step().step_index() + 1, "'s result")
                              : std::string("an event"),
                          " takes ", bytes, " bytes, above the server's --max-message-bytes (",
                          impl_->config.max_message_bytes,
                          "): its movers or blockers are too many, or their paths too long; "
                          "split the step"));
                      return;
                    }
                    if (!writer->Write(e)) closed = true;
                  });
              return unsendable.ok() ? run : unsendable;
            },
            impl_->config.max_sequence_seconds);
        if (watchdog.Finish()) {
          return absl::DeadlineExceededError(
              "the client did not read the results before the deadline (call cancelled)");
        }
        return status;
      });
    }

   private:
    Impl* impl_;
  };

  // A query slot for tenant t: first the tenant's own ticket (RESOURCE_EXHAUSTED at once when
  // it has its maximum of queries running or waiting), then a slot of the shared limiter.
  absl::StatusOr<QuerySlot> AcquireQuerySlot(Tenant& t, const StopCheck& stop) {
    QuerySlot slot;
    CLASH_ASSIGN_OR_RETURN(slot.ticket, t.StartQuery());
    CLASH_ASSIGN_OR_RETURN(slot.permit, query_limiter.Acquire(stop));
    return slot;
  }

  // Runs a read-only query on a scene under the query limiter and the call's deadline.
  template <class Fn>
  absl::Status RunQuery(Tenant& t, grpc::ServerContext* ctx, const std::string& scene_id, Fn&& fn,
                        double max_seconds = 0) {
    const absl::Time deadline =
        CallDeadline(ctx, max_seconds > 0 ? max_seconds : config.max_query_seconds);
    const StopCheck stop = MakeStop(ctx, deadline);
    CLASH_ASSIGN_OR_RETURN(std::shared_ptr<Scene> scene, t.scenes().Get(scene_id));
    CLASH_ASSIGN_OR_RETURN(QuerySlot slot, AcquireQuerySlot(t, stop));
    CLASH_RETURN_IF_ERROR(stop());
    CLASH_ASSIGN_OR_RETURN(std::shared_lock<std::shared_timed_mutex> lock,
                           t.scenes().LockCurrentForRead(&scene, deadline));
    return fn(*scene, stop);
  }

  // A stored part for a request: from memory, or read and built under a query slot (its
  // hierarchy, for up to --max-part-triangles, is query-sized work, which the limiter bounds as it
  // does for uploads). RESOURCE_EXHAUSTED when no slot frees in time, as for a query.
  absl::StatusOr<std::shared_ptr<const PartEntry>> LoadPart(Tenant& t, const StopCheck& stop,
                                                            const std::string& id) {
    if (std::shared_ptr<const PartEntry> entry = t.parts().Loaded(id)) return entry;
    // An unknown id is NOT_FOUND at once, however busy the slots are.
    if (!t.parts().Known(id)) return absl::NotFoundError(absl::StrCat("no part ", id));
    CLASH_ASSIGN_OR_RETURN(QuerySlot slot, AcquireQuerySlot(t, stop));
    CLASH_RETURN_IF_ERROR(stop());
    return t.parts().Get(id);
  }
  absl::StatusOr<std::shared_ptr<const PartEntry>> LoadPart(Tenant& t,
                                                            const grpc::ServerContext* ctx,
                                                            const std::string& id) {
    return LoadPart(t, MakeStop(ctx, CallDeadline(ctx, config.max_query_seconds)), id);
  }

  // The bytes at which a listing's page ends (the rest on the next page), far within the
  // message limit.
  [[nodiscard]] std::size_t PageBytes() const { return config.max_message_bytes / 4; }
  /// The queries' limits: pages of a quarter of the message limit, as the listings, and a
  /// pick's answer within it (with room for the response's own fields).
  [[nodiscard]] QueryLimits Limits() const {
    QueryLimits limits;
    limits.max_page_bytes = PageBytes();
    limits.max_answer_bytes = config.max_message_bytes - (std::size_t{64} << 10);
    return limits;
  }

  // Applies an all-or-nothing edit: `edit` validates before it changes anything; the change is
  // on disk before the reply. An edit that changes nothing keeps the version and writes nothing.
  // The scene's lock is waited for until the call's deadline (a query or a sequence may hold
  // it): an edit that answers DEADLINE_EXCEEDED has changed nothing. `grows`: the edit adds to
  // the scene (instances, groups), so it is refused (RESOURCE_EXHAUSTED, nothing changed) when
  // the tenant is over its storage quota, cheaply before the edit, and when the bytes its file
  // grows by would pass the quota, which are set aside before the file is written (so that
  // such edits running at once cannot together pass it). Other edits (removals, poses,
  // enabling) are never refused for the quota, so that a tenant over it can still free space; a
  // pose or an enable grows the file by at most ~30 bytes per instance it names.
  // `response` is any answer with a scene_version (SceneUpdateResponse, AddInstancesResponse).
  template <class Response, class Edit>
  absl::Status EditScene(Tenant& t, const grpc::ServerContext* ctx, const std::string& scene_id,
                         Response* response, bool grows, Edit&& edit) {
    CLASH_ASSIGN_OR_RETURN(std::shared_ptr<Scene> scene, t.scenes().Get(scene_id));
    if (grows) CLASH_RETURN_IF_ERROR(t.CheckStorage(0).status());
    CLASH_ASSIGN_OR_RETURN(
        std::unique_lock<std::shared_timed_mutex> lock,
        t.scenes().LockCurrentForWrite(&scene, CallDeadline(ctx, config.max_query_seconds)));
    try {
      const uint64_t changes_before = scene->changes;
      CLASH_RETURN_IF_ERROR(edit(*scene));
      const bool changed = scene->changes != changes_before;
      if (!changed && !scene->unsynced) {
        // Nothing changed (poses re-sent as they are, say): the version stays and nothing is
        // written, so a plugin that sends every pose after each edit pays no disk write for them.
        response->set_scene_version(scene->version);
        return absl::OkStatus();
      }
      // (A retry of an edit whose write was not synced changes nothing but is written again.)
      if (changed) scene->Touch();
      Tenant::StorageReservation room;  // held until the file is written
      CLASH_RETURN_IF_ERROR(t.scenes().Commit(*scene, grows ? ReserveInto(t, &room) : nullptr));
    } catch (...) {
      // (Out of memory, say) half an edit, or a whole one unwritten, is not left in memory.
      t.scenes().Undo(*scene, "an edit failed part-way");
      throw;
    }
    response->set_scene_version(scene->version);
    return absl::OkStatus();
  }

  // A scene store's growth check that sets the bytes aside of the tenant's storage quota in
  // *room (to be held until the file is written).
  static SceneStore::GrowthCheck ReserveInto(Tenant& t, Tenant::StorageReservation* room) {
    return [&t, room](std::uint64_t growth) -> absl::Status {
      CLASH_ASSIGN_OR_RETURN(*room, t.ReserveStorage(growth));
      return absl::OkStatus();
    };
  }

  // Who is calling (see auth.h), and whether their rate budget admits the call.
  absl::StatusOr<std::shared_ptr<Tenant>> Admit(const grpc::ServerContext* ctx);
  grpc::Status AdmitHealth(grpc::ServerContext* ctx);

  absl::Status DoAddInstances(Tenant& t, const grpc::ServerContext* ctx,
                              const v1::AddInstancesRequest& request,
                              v1::AddInstancesResponse* response);
  absl::Status DoImportCad(Tenant& t, grpc::ServerContext* ctx,
                           grpc::ServerReader<v1::ImportCadRequest>* reader,
                           v1::ImportCadResponse* response);

  // Held until every other member is gone (declared first, destroyed last).
  std::optional<DataFolderLock> data_lock;
  ServerConfig config;
  // Released last, once every thread serving calls has finished.
  std::optional<CpuLatencyGovernor> cpu_latency;
  std::optional<TokenTable> tokens;
  std::shared_ptr<PairCacheBudget> pair_cache_budget;
  std::optional<TenantRegistry> tenants;
  Metrics metrics;
  WorkLimiter query_limiter;
  QueryHelpers query_helpers;  // after query_limiter: joined before it goes
  WorkLimiter import_limiter;
  // Uploads in progress, and finished ones waiting for an import slot: as many as imports may
  // run and wait (import_slots + import_queue), never queued. An upload takes no import slot,
  // so that stalled uploads cannot hold the workers from imports whose files are in.
  WorkLimiter upload_limiter;
  PartsService parts_service;
  ScenesService scenes_service;
  QueriesService queries_service;
  SequencesService sequences_service;
  HealthService health_service;
  // Pre-started import workers. Declared before `server`, so that it outlives the calls using it.
  std::unique_ptr<cad::WorkerPool> worker_pool;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<MetricsHttpServer> metrics_http;
  int port = 0;
  std::atomic<bool> draining{false};
  std::mutex shutdown_mu;
  bool shut_down = false;
  std::atomic<bool> retry_stopping{false};  // the retries of unserved scenes end
  std::atomic<double> last_unserved{0};     // the gauge's last count
  std::atomic<double> last_damaged{0};      // clashd_damaged_files's last count
  // Removes the damaged scene files kept past their retention, hourly (and at each tenant's
  // open). Declared last with the retries: stopped before what it uses.
  std::optional<Periodic> damaged_sweep;
  // Tries the scenes kept but not served again (declared last: stopped before what it uses).
  std::optional<Periodic> unserved_retry;
};

absl::StatusOr<std::shared_ptr<Tenant>> ClashServer::Impl::Admit(const grpc::ServerContext* ctx) {
  std::string name = "local";
  if (tokens) {
    const auto& md = ctx->client_metadata();
    const auto it = md.find("authorization");
    if (it == md.end())
      return absl::UnauthenticatedError("no bearer token (authorization metadata)");
    CLASH_ASSIGN_OR_RETURN(absl::string_view token,
                           BearerToken(absl::string_view(it->second.data(), it->second.size())));
    std::optional<std::string> tenant = tokens->TenantOf(token);
    if (!tenant) return absl::UnauthenticatedError("unknown bearer token");
    name = std::move(*tenant);
  } else if (!config.tls_client_ca_file.empty()) {
    // Mutual TLS without tokens: the verified client certificate's common name is the tenant.
    const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
    const std::vector<grpc::string_ref> cn =
        auth ? auth->FindPropertyValues("x509_common_name") : std::vector<grpc::string_ref>{};
    if (cn.empty()) return absl::UnauthenticatedError("no verified client certificate");
    name = std::string(cn.front().data(), cn.front().size());
    if (!IsTenantName(name)) {
      return absl::PermissionDeniedError(
          "the client certificate's common name is not a valid tenant name");
    }
  }
  CLASH_ASSIGN_OR_RETURN(std::shared_ptr<Tenant> tenant, tenants->Get(name));
  CLASH_RETURN_IF_ERROR(tenant->AdmitCall());
  return tenant;
}

grpc::Status ClashServer::Impl::AdmitHealth(grpc::ServerContext* ctx) {
  if (!config.health_requires_token) return grpc::Status::OK;
  absl::StatusOr<std::shared_ptr<Tenant>> tenant = Admit(ctx);
  if (tenant.ok()) return grpc::Status::OK;
  // A spent rate budget is worth retrying, as on every other call.
  if (IsTransient(tenant.status())) ctx->AddTrailingMetadata(kRetryableMetadata, "1");
  return ToGrpc(tenant.status());
}

absl::Status ClashServer::Impl::DoAddInstances(Tenant& t, const grpc::ServerContext* ctx,
                                               const v1::AddInstancesRequest& request,
                                               v1::AddInstancesResponse* response) {
  const absl::Time deadline = CallDeadline(ctx, config.max_query_seconds);
  // An unknown scene is answered before any part is built.
  CLASH_RETURN_IF_ERROR(t.scenes().Get(request.scene_id()).status());
  // No part these instances place can be deleted until they are stored.
  CLASH_ASSIGN_OR_RETURN(SharedPartUses uses, LockPartUses<SharedPartUses>(t, deadline));
  // Resolve everything (parts, assemblies, poses) before taking the scene's lock; ids and
  // broad-phase fields are set when the instances are added.
  std::vector<InstanceRec> pending;
  const StopCheck stop = MakeStop(ctx, deadline);
  // Counted as they are resolved, so that a request placing a large assembly many times is
  // refused before it is built: the instances (at most --max-scene-instances) and the answer,
  // which lists each (path, name, groups and ~250 bytes of ids, pose and box), within the
  // message limit, so that an edit is never stored with an answer gRPC cannot send.
  std::size_t answer_bytes = 0;
  const auto admit = [&](const InstanceRec& item) -> absl::Status {
    answer_bytes += 250 + item.path.size() + item.name.size();
    for (const std::string& g : item.groups) answer_bytes += g.size() + 2;
    if (pending.size() + 1 > config.max_scene_instances) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the request places more than ", config.max_scene_instances,
                       " instances, the most a scene may hold (--max-scene-instances)"));
    }
    if (answer_bytes > config.max_message_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the answer would list ", pending.size() + 1, " instances in more than ",
          config.max_message_bytes, " bytes (--max-message-bytes): add fewer per call"));
    }
    return stop();
  };
  for (int i = 0; i < request.parts_size(); ++i) {
    const v1::PartPlacement& p = request.parts(i);
    InstanceRec item;
    if (!PartStore::IsPartId(p.part_id())) {
      return absl::NotFoundError(absl::StrCat("no part '", p.part_id(), "'"));
    }
    CLASH_ASSIGN_OR_RETURN(item.part, LoadPart(t, stop, p.part_id()));
    CLASH_ASSIGN_OR_RETURN(item.X_WP, PoseFromProto(p.pose(), absl::StrCat("parts[", i, "].pose")));
    item.path = p.path();
    item.name = p.name().empty() ? item.part->info.name() : p.name();
    item.enabled = !p.disabled();
    for (const std::string& g : p.groups()) CLASH_RETURN_IF_ERROR(CheckGroupName(g));
    item.groups.insert(p.groups().begin(), p.groups().end());
    CLASH_RETURN_IF_ERROR(admit(item));
    pending.push_back(std::move(item));
  }
  std::map<std::string, v1::Assembly> assemblies;  // each read once
  for (int i = 0; i < request.assemblies_size(); ++i) {
    const v1::AssemblyPlacement& a = request.assemblies(i);
    auto read = assemblies.find(a.assembly_id());
    if (read == assemblies.end()) {
      CLASH_ASSIGN_OR_RETURN(v1::Assembly assembly, t.parts().GetAssembly(a.assembly_id()));
      read = assemblies.emplace(a.assembly_id(), std::move(assembly)).first;
    }
    const v1::Assembly& assembly = read->second;
    CLASH_ASSIGN_OR_RETURN(geom::RigidTransform X_WA,
                           PoseFromProto(a.pose(), absl::StrCat("assemblies[", i, "].pose")));
    for (const std::string& g : a.groups()) CLASH_RETURN_IF_ERROR(CheckGroupName(g));
    for (const v1::AssemblyInstance& inst : assembly.instances()) {
      InstanceRec item;
      CLASH_ASSIGN_OR_RETURN(item.part, LoadPart(t, stop, inst.part_id()));
      CLASH_ASSIGN_OR_RETURN(geom::RigidTransform X_AP, PoseFromProto(inst.pose(), inst.path()));
      item.X_WP = X_WA * X_AP;
      item.path =
          a.path_prefix().empty() ? inst.path() : absl::StrCat(a.path_prefix(), "/", inst.path());
      item.name = inst.name();
      item.groups.insert(a.groups().begin(), a.groups().end());
      CLASH_RETURN_IF_ERROR(admit(item));
      pending.push_back(std::move(item));
    }
  }
  return EditScene(t, ctx, request.scene_id(), response, true, [&](Scene& scene) -> absl::Status {
    if (scene.instances.size() + pending.size() > config.max_scene_instances) {
      return absl::ResourceExhaustedError(
          absl::StrCat("scene ", scene.id(), " would hold ",
                       scene.instances.size() + pending.size(), " instances, above the limit of ",
                       config.max_scene_instances, " (--max-scene-instances)"));
    }
    std::set<std::string> new_paths;
    std::set<std::string_view> new_groups;
    const auto taken = [&](const std::string& path) {
      return scene.by_path.contains(path) || new_paths.contains(path);
    };
    // The caller's paths, to keep the paths made from names clear of them (later ones too).
    std::set<std::string_view> given_paths;
    for (const InstanceRec& item : pending) {
      if (!item.path.empty()) given_paths.insert(item.path);
    }
    uint64_t next_id = scene.next_instance_id;
    for (InstanceRec& item : pending) {
      CLASH_RETURN_IF_ERROR(CheckInstanceText("name", item.name));
      CLASH_RETURN_IF_ERROR(CheckInstanceText("path", item.path));
      CLASH_RETURN_IF_ERROR(scene.CheckPlaceable(
          *item.part, item.X_WP,
          absl::StrCat("the pose of ", item.path.empty() ? item.name : item.path)));
      // A path made from a name (at most ~40 bytes longer than the limit) that a caller's path
      // holds gets a suffix: "<name>:<id>~2", "~3", ...
      if (item.path.empty()) {
        const auto held = [&](const std::string& path) {
          return taken(path) || given_paths.contains(path);
        };
        item.path = absl::StrCat(item.name, ":", next_id);
        for (int k = 2; held(item.path); ++k) {
          item.path = absl::StrCat(item.name, ":", next_id, "~", k);
        }
      }
      ++next_id;
      if (taken(item.path)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "an instance with path '", item.path, "' ",
            scene.by_path.contains(item.path) ? "exists already" : "comes twice in this request"));
      }
      new_paths.insert(item.path);
      for (const std::string& g : item.groups) {
        if (!scene.groups.contains(g)) new_groups.insert(g);
      }
    }
    CLASH_RETURN_IF_ERROR(CheckGroupCount(scene, new_groups.size()));
    for (InstanceRec& rec : pending) {
      rec.id = scene.next_instance_id++;
      const uint64_t id = rec.id;
      scene.Add(std::move(rec));
      Scene::InstanceToProto(*scene.Find(id), response->add_instances());
    }
    return absl::OkStatus();
  });
}

absl::Status ClashServer::Impl::DoImportCad(Tenant& t, grpc::ServerContext* ctx,
                                            grpc::ServerReader<v1::ImportCadRequest>* reader,
                                            v1::ImportCadResponse* response) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = CallDeadline(ctx, config.max_import_seconds);
  const StopCheck stop = MakeStop(ctx, deadline);
  // Watches the call from its start. At the server's deadline during the upload it cancels the
  // call, so that a client that stalls its upload (a Read that would wait forever) frees the
  // upload place and the tenant's ticket; once the file is in, it tells the worker about the
  // client's cancellation or a drain (IsCancelled is not asked while this thread reads the
  // stream), and the deadline is the worker's own wall-clock limit (DEADLINE_EXCEEDED, "limit").
  // Joined however the import ends, exceptions included.
  struct Watch {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::atomic<bool> uploaded{false};
    std::atomic<bool> cancel{false};
    std::thread thread;
    void Stop() {
      {
        std::lock_guard lock(mu);
        done = true;
      }
      cv.notify_all();
      if (thread.joinable()) thread.join();
    }
    ~Watch() { Stop(); }
  } watch;
  watch.thread = std::thread([&] {
    std::unique_lock lock(watch.mu);
    while (!watch.cv.wait_for(lock, std::chrono::milliseconds(20), [&] { return watch.done; })) {
      if (!watch.uploaded && absl::Now() >= deadline) {  // then the worker's own limit
        ctx->TryCancel();
        watch.cancel = true;
        return;
      }
      if (watch.uploaded && (ctx->IsCancelled() || draining)) {
        watch.cancel = true;
        return;
      }
    }
  });
  // The end of the stream, early: the deadline (the watch cancelled the call), or the client's
  // cancellation (the stop check asks gRPC only from 5 ms into the call), not a bad upload.
  const auto ended_early = [&]() -> absl::Status {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("the upload did not finish before the deadline");
    }
    return CancelledByClient(ctx);
  };
  CLASH_ASSIGN_OR_RETURN(Tenant::ImportTicket ticket, t.StartImport());
  // The upload's bytes are set aside as they come (all at once when the header announces
  // them), so that uploads running at once cannot together pass the tenant's quota.
  CLASH_ASSIGN_OR_RETURN(Tenant::StorageReservation upload_room, t.ReserveStorage(0));
  CLASH_ASSIGN_OR_RETURN(WorkLimiter::Permit upload_permit, upload_limiter.Acquire(stop));

  v1::ImportCadRequest msg;
  if (!reader->Read(&msg) || !msg.has_header()) {
    CLASH_RETURN_IF_ERROR(ended_early());
    return absl::InvalidArgumentError("the first ImportCad message must carry the header");
  }
  const v1::ImportCadHeader header = msg.header();
  CLASH_RETURN_IF_ERROR(CheckNameSize("file_name", header.file_name()));
  const std::string want_sha = absl::AsciiStrToLower(header.sha256());  // either case
  if (!want_sha.empty() && !(want_sha.size() == 64 && IsLowerHex(want_sha))) {
    return absl::InvalidArgumentError("header sha256 must be 64 hexadecimal digits");
  }
  cad::TessellationOptions options;
  const v1::TessellationOptions& tess = header.tessellation();
  if (tess.linear_deflection_mm() != 0) options.linear_deflection_mm = tess.linear_deflection_mm();
  if (tess.relative_deflection() != 0) options.relative_deflection = tess.relative_deflection();
  if (tess.angular_deflection_rad() != 0)
    options.angular_deflection_rad = tess.angular_deflection_rad();
  options.max_triangles = config.max_part_triangles;
  if (tess.max_triangles() != 0)
    options.max_triangles = std::min<std::size_t>(tess.max_triangles(), options.max_triangles);
  // Checked as the worker checks them, before the upload is read and a worker started.
  CLASH_RETURN_IF_ERROR(cad::ValidateTessellationOptions(options));
  if (header.size_bytes() > config.max_upload_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("file of ", header.size_bytes(),
                                                     " bytes is above the upload limit of ",
                                                     config.max_upload_bytes));
  }
  // A refusal of the upload's room by the quota, said of the upload (a failed count of the
  // tenant's files is passed on as it is, not as a full quota).
  const auto room_refused = [](const absl::Status& room, const std::string& what) {
    if (!absl::IsResourceExhausted(room)) return room;
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " is above the tenant's free storage (", room.message(), ")"));
  };
  if (const absl::Status room = upload_room.Grow(header.size_bytes()); !room.ok()) {
    return room_refused(room, absl::StrCat("file of ", header.size_bytes(), " bytes"));
  }

  // The upload goes to a private folder that is removed whatever happens.
  const std::string dir = absl::StrCat(t.tmp_dir(), "/upload-", RandomHex(4));
  CLASH_RETURN_IF_ERROR(MakeDirs(dir));
  struct RemoveDir {
    std::string dir;
    void Now() const {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
    ~RemoveDir() { Now(); }
  } remove_dir{dir};
  // Named after the user's file (sanitised), so that error messages name it.
  const std::string file = absl::StrCat(dir, "/", UploadName(header.file_name()));
  {
    const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return cad::WriteError("cannot create the upload file", errno);
    const cad::ScopedFd close_fd(fd);
    std::size_t total = 0;
    while (reader->Read(&msg)) {
      if (msg.payload_case() != v1::ImportCadRequest::kChunk) {
        return absl::InvalidArgumentError("only the first ImportCad message may carry a header");
      }
      total += msg.chunk().size();
      if (total > config.max_upload_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("upload is above the limit of ", config.max_upload_bytes, " bytes"));
      }
      if (msg.chunk().size() > upload_room.held()) {
        // A size not announced: set aside the chunk and, room permitting, a step ahead (fewer
        // walks of the tenant's folder).
        const std::uint64_t need = msg.chunk().size() - upload_room.held();
        if (const absl::Status room = upload_room.Grow(need, kUploadStorageStep); !room.ok()) {
          return room_refused(room, "upload");
        }
      }
      const char* p = msg.chunk().data();
      std::size_t left = msg.chunk().size();
      while (left > 0) {
        const ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return cad::WriteError("cannot write the upload to disk", errno);
        p += n;
        left -= static_cast<std::size_t>(n);
      }
      upload_room.Written(msg.chunk().size());
      CLASH_RETURN_IF_ERROR(stop());
    }
    {
      // From here the watch no longer cancels the call at the deadline. Under its mutex: a
      // cancellation it made before lies in the past of the deadline, which ended_early sees.
      std::lock_guard lock(watch.mu);
      watch.uploaded = true;
    }
    CLASH_RETURN_IF_ERROR(ended_early());
    CLASH_RETURN_IF_ERROR(stop());
    if (header.size_bytes() != 0 && total != header.size_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("upload has ", total, " bytes; the header announced ", header.size_bytes()));
    }
    if (total == 0) return absl::InvalidArgumentError("read: the uploaded file is empty");
  }
  // The file is on disk, where the quota counts it: what an unannounced upload set aside ahead
  // is given back.
  upload_room = Tenant::StorageReservation();
  // (The server's own file: a failure to read it is not the client's.)
  absl::StatusOr<std::string> sha = cad::Sha256OfFile(file);
  if (!sha.ok()) {
    return absl::InternalError(
        absl::StrCat("the upload cannot be read back: ", sha.status().message()));
  }
  if (!want_sha.empty() && want_sha != *sha) {
    return absl::InvalidArgumentError("upload does not match the sha256 in its header");
  }
  // The file is in: the import waits for its slot (in the queue, until the deadline) and the
  // next upload may start.
  CLASH_ASSIGN_OR_RETURN(WorkLimiter::Permit permit, import_limiter.Acquire(stop));
  upload_permit = WorkLimiter::Permit();

  cad::IsolationLimits limits;
  limits.worker_path = config.worker_path;
  limits.wall_seconds = std::max(0.001, absl::ToDoubleSeconds(deadline - absl::Now()));
  limits.cpu_seconds = limits.wall_seconds;
  limits.address_space_bytes = config.import_memory_bytes;
  // The result file is read whole into memory: bounded by what this import's triangles can need.
  limits.max_output_bytes = MaxWorkerOutputBytes(options.max_triangles);
  limits.temp_dir = t.tmp_dir();    // emptied when the tenant is opened, so never left behind
  limits.pool = worker_pool.get();  // null: a fresh worker per import
  // The import cache is read here rather than through cad::ImportAssemblyWithCache, so that a
  // fresh entry is written last: after the upload is removed and the parts are stored, taking
  // only the room they leave under the quota (an entry yields to real data).
  const std::string cache_key = cad::ImportCacheKey(*sha, options, cad::ImportKind::kAssembly);
  CLASH_ASSIGN_OR_RETURN(std::optional<cad::ImportedAssembly> cached,
                         t.import_cache().LoadAssembly(cache_key));
  const bool from_cache = cached.has_value();
  absl::StatusOr<cad::ImportedAssembly> imported =
      from_cache ? *std::move(cached)
                 : cad::ImportAssemblyIsolated(file, options, limits, &watch.cancel);
  watch.Stop();  // the rest is quick and never asks the client
  // The upload is read: removed now, so that the import's parts do not need room beside it.
  remove_dir.Now();
  if (absl::IsFailedPrecondition(imported.status())) {
    LogLine(LogLevel::kError, absl::StrCat("import worker: ", imported.status().message()));
  }
  if (!imported.ok()) return imported.status();
  ImportFacts facts;
  facts.file_name = header.file_name();
  facts.sha256 = *sha;
  facts.cache_key = cache_key;
  facts.from_cache = from_cache;
  facts.strict = header.strict();
  facts.options = options;
  facts.start = start;
  // The parts and the assembly are set aside before the first is written (and held until
  // they all are): an import that would pass the quota stores nothing.
  absl::Status stored;
  {
    // No DeletePart of a part this import stores or its assembly names until both are stored.
    CLASH_ASSIGN_OR_RETURN(SharedPartUses uses, LockPartUses<SharedPartUses>(t, deadline));
    Tenant::StorageReservation output_room;
    stored = StoreImportedAssembly(
        *imported, facts, t.parts(),
        [&](std::uint64_t bytes) -> absl::Status {
          CLASH_ASSIGN_OR_RETURN(output_room, t.ReserveStorage(bytes));
          return absl::OkStatus();
        },
        response);
  }  // (what was set aside is written, or not: on disk, counted there)
  // Cached even when storing was refused, for the retry. An entry the cache cannot take (its
  // bound, the quota, a full disk) only costs a worker run next time.
  if (!from_cache) (void)t.import_cache().StoreAssembly(cache_key, *imported);
  return stored;
}

absl::StatusOr<std::unique_ptr<ClashServer>> ClashServer::Start(const ServerConfig& config) {
  SetQuietLogging(config.quiet);
  // (The flags' checks let NaN through: it compares false with every bound. A NaN deadline
  // would be no deadline at all.)
  for (const auto& [flag, value] :
       {std::pair{"--pair-cache-idle-seconds", config.pair_cache_idle_seconds},
        std::pair{"--cpu-latency-idle-seconds", config.cpu_latency_idle_seconds},
        std::pair{"--shutdown-grace-seconds", config.shutdown_grace_seconds},
        std::pair{"--unserved-scene-retry-seconds", config.unserved_scene_retry_seconds},
        std::pair{"--damaged-file-retention-days", config.damaged_file_retention_days},
        std::pair{"--tenant-requests-per-second", config.tenant_requests_per_second},
        std::pair{"--tenant-burst", config.tenant_burst}}) {
    if (!(value >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " must be a number >= 0, got ", value));
    }
  }
  for (const auto& [flag, seconds] :
       {std::pair{"--max-query-seconds", config.max_query_seconds},
        std::pair{"--max-import-seconds", config.max_import_seconds},
        std::pair{"--max-sequence-seconds", config.max_sequence_seconds}}) {
    if (!(seconds > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " must be a number of seconds > 0, got ", seconds));
    }
  }
  // The data folder is locked before anything in it is touched: a second server on it would
  // empty the first's temporary folders as it opened the tenants, then overwrite its edits.
  CLASH_RETURN_IF_ERROR(MakeDirs(config.data_dir));
  CLASH_ASSIGN_OR_RETURN(DataFolderLock data_lock, DataFolderLock::Acquire(config.data_dir));
  auto impl = std::make_unique<Impl>(config);
  impl->data_lock.emplace(std::move(data_lock));
  if (config.cpu_latency_us >= 0) {
    absl::StatusOr<CpuLatencyHold> hold = CpuLatencyHold::Acquire(config.cpu_latency_us);
    if (!hold.ok()) {
      return absl::Status(
          hold.status().code(),
          absl::StrCat("--cpu-latency-us ", config.cpu_latency_us, ": ", hold.status().message(),
                       " (the device needs root; in a container, the device "
                       "itself, or the limit set on the host)"));
    }
    const std::chrono::milliseconds idle = Millis(config.cpu_latency_idle_seconds);
    impl->cpu_latency.emplace(std::move(*hold), idle);
    LogLine(LogLevel::kInfo,
            absl::StrCat("holding the CPU wake-up latency at ", config.cpu_latency_us, " us (",
                         kCpuLatencyDevice, ")",
                         idle.count() > 0
                             ? absl::StrCat(" while calls come, let go after ",
                                            config.cpu_latency_idle_seconds, " s without one")
                             : std::string()));
  }
  CLASH_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                         ListenerCredentials(config));
  if (!config.tokens_file.empty()) {
    CLASH_ASSIGN_OR_RETURN(impl->tokens, TokenTable::Load(config.tokens_file));
  }
  TenantLimits limits;
  limits.max_storage_bytes = config.tenant_max_storage_bytes;
  limits.import_cache_max_bytes = config.import_cache_max_bytes;
  // The default caps a tenant only where there can be several (tokens, or client
  // certificates): a single tenant keeps every slot and place in the queue.
  const bool several_tenants = !config.tokens_file.empty() || !config.tls_client_ca_file.empty();
  limits.max_concurrent_imports =
      config.tenant_max_concurrent_imports >= 0 ? config.tenant_max_concurrent_imports
      : several_tenants ? std::max(1, (config.import_slots + config.import_queue) / 2)
                        : 0;
  limits.max_concurrent_queries =
      config.tenant_max_concurrent_queries >= 0 ? config.tenant_max_concurrent_queries
      : several_tenants ? std::max(1, (config.query_slots + config.query_queue) / 2)
                        : 0;
  limits.requests_per_second = config.tenant_requests_per_second;
  limits.burst = config.tenant_burst;
  limits.damaged_file_retention = config.damaged_file_retention_days > 0
                                      ? absl::Hours(24 * config.damaged_file_retention_days)
                                      : absl::InfiniteDuration();
  impl->pair_cache_budget = std::make_shared<PairCacheBudget>(
      config.pair_cache_entries,
      absl::Seconds(config.pair_cache_idle_seconds));  // (+inf: never idle)
  // A tenant whose folder cannot be used is tried again on a call, as unserved scenes are.
  const absl::Duration retry_unusable =
      config.unserved_scene_retry_seconds > 0
          ? absl::Seconds(std::max(config.unserved_scene_retry_seconds, kMinUnservedRetrySeconds))
          : absl::InfiniteDuration();
  impl->tenants.emplace(config.data_dir, config.max_part_triangles, limits, impl->pair_cache_budget,
                        retry_unusable);
  CLASH_RETURN_IF_ERROR(MakeDirs(impl->tenants->root()));
  // Tenants found on disk are opened now: their scenes load (and damaged files are reported)
  // at start, not on a first call. One whose folder cannot be used is logged and not served
  // (its calls answer why), alone: the others are.
  CLASH_RETURN_IF_ERROR(ForEachInFolder(
      impl->tenants->root(), [&](const std::filesystem::directory_entry& entry) -> absl::Status {
        const std::string name = entry.path().filename().string();
        std::error_code ec;
        if (!entry.is_directory(ec) || !IsTenantName(name)) return absl::OkStatus();
        (void)impl->tenants->Get(name);  // (logged by Get when it fails)
        return absl::OkStatus();
      }));

  Impl* raw = impl.get();
  impl->metrics.AddGauge("clashd_query_running", "Queries running.",
                         [raw] { return raw->query_limiter.running(); });
  impl->metrics.AddGauge("clashd_query_waiting", "Queries waiting for a slot.",
                         [raw] { return raw->query_limiter.waiting(); });
  impl->metrics.AddCounter(
      "clashd_query_helped_items_total",
      "Items of queries (pairs, chunks of 16 rays) run on idle query slots since the start.",
      [raw] { return static_cast<double>(raw->query_helpers.helped()); });
  impl->metrics.AddGauge("clashd_query_helper_slots", "Query slots lent to helper threads.",
                         [raw] { return raw->query_limiter.spare_in_use(); });
  impl->metrics.AddGauge(
      "clashd_cpu_latency_limit_us",
      "CPU wake-up latency limit clashd holds now (PM QoS, microseconds); -1 when none.",
      [raw] { return raw->cpu_latency ? raw->cpu_latency->held_microseconds() : -1.0; });
  impl->metrics.AddGauge(
      "clashd_pair_cache_entries",
      "Classified pairs kept for reuse, in all scenes (at most --pair-cache-entries).",
      [raw] { return static_cast<double>(raw->pair_cache_budget->used()); });
  impl->metrics.AddGauge(
      "clashd_scenes_unserved",
      "Scenes kept on disk but not served (a part or the file does not load); retried.", [raw] {
        // (Not waiting for the registry, which a tenant's opening holds: the last count then.)
        std::optional<std::vector<std::shared_ptr<Tenant>>> open = raw->tenants->OpenedIfFree();
        if (!open) return raw->last_unserved.load();
        double n = 0;
        for (const std::shared_ptr<Tenant>& t : *open) {
          n += static_cast<double>(t->scenes().unserved());
        }
        raw->last_unserved.store(n);
        return n;
      });
  impl->metrics.AddGauge(
      "clashd_damaged_files",
      "Scene files set aside as damaged in all open tenants' folders (counted at each scrape; "
      "kept for --damaged-file-retention-days, not counted by storage quotas).",
      [raw] {
        // (Not waiting for the registry, which a tenant's opening holds: the last count then.)
        std::optional<std::vector<std::shared_ptr<Tenant>>> open = raw->tenants->OpenedIfFree();
        if (!open) return raw->last_damaged.load();
        double n = 0;
        for (const std::shared_ptr<Tenant>& t : *open) n += static_cast<double>(t->damaged_files());
        raw->last_damaged.store(n);
        return n;
      });
  impl->metrics.AddGauge(
      "clashd_tenants_unserved",
      "Tenants not served because their folder cannot be used (their calls answer "
      "FAILED_PRECONDITION naming it); retried.",
      [raw] { return static_cast<double>(raw->tenants->unusable()); });
  impl->metrics.AddGauge("clashd_import_running", "Imports (worker processes) running.",
                         [raw] { return raw->import_limiter.running(); });
  impl->metrics.AddGauge("clashd_import_waiting", "Imports waiting for a slot.",
                         [raw] { return raw->import_limiter.waiting(); });
  impl->metrics.AddGauge("clashd_uploads_in_progress",
                         "ImportCad calls uploading their file, or waiting with it for an import "
                         "slot.",
                         [raw] { return raw->upload_limiter.running(); });

  cad::IsolationLimits probe;
  probe.worker_path = config.worker_path;
  const bool worker_ok = access(cad::ResolveWorkerPath(probe).c_str(), X_OK) == 0;
  // Health is set before the pool starts, which may turn clash.v1.PartService NOT_SERVING when
  // it cannot start workers (an executable that does not run: a missing shared library) and
  // SERVING again when it can. Nobody can ask before the server listens.
  HealthService* health = &impl->health_service;
  health->Set("", true);
  for (const char* name : kServiceNames) health->Set(name, true);
  if (!worker_ok) {
    LogLine(LogLevel::kWarning, "clash-cad-worker not found: CAD imports are unavailable");
    health->Set("clash.v1.PartService", false);
  }
  if (worker_ok && config.import_pool_workers > 0) {
    cad::WorkerPoolOptions pool_options;
    pool_options.worker_path = cad::ResolveWorkerPath(probe);
    pool_options.idle_workers = config.import_pool_workers;
    pool_options.on_can_start_changed = [health](bool can_start) {
      if (!can_start) {
        LogLine(LogLevel::kError,
                "import workers fail to start: CAD imports are unavailable until they do");
      }
      health->Set("clash.v1.PartService", can_start);
    };
    impl->worker_pool = std::make_unique<cad::WorkerPool>(std::move(pool_options));
    cad::WorkerPool* pool = impl->worker_pool.get();
    impl->metrics.AddGauge("clashd_import_pool_idle", "Pre-started import workers waiting.",
                           [pool] { return pool->idle(); });
  }

  grpc::EnableDefaultHealthCheckService(false);
  if (config.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, credentials, &impl->port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  // Another process on the same port is an error at start, not a silent share of its calls.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 128);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 5);
  grpc::ResourceQuota quota("clashd");
  quota.SetMaxThreads(256);
  builder.SetResourceQuota(quota);
  builder.RegisterService(&impl->parts_service);
  builder.RegisterService(&impl->scenes_service);
  builder.RegisterService(&impl->queries_service);
  builder.RegisterService(&impl->sequences_service);
  builder.RegisterService(&impl->health_service);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", config.listen));
  }
  if (!config.metrics_listen.empty()) {
    CLASH_ASSIGN_OR_RETURN(impl->metrics_http,
                           MetricsHttpServer::Start(config.metrics_listen, &impl->metrics));
  }
  if (config.unserved_scene_retry_seconds > 0) {
    // Each part a read builds takes a query slot when one is free and nobody waits for one (a
    // pass stops when none is, or when the server stops): a query that comes meanwhile waits
    // for at most that one part's build.
    const absl::Duration period =
        absl::Seconds(std::max(config.unserved_scene_retry_seconds, kMinUnservedRetrySeconds));
    impl->unserved_retry.emplace(period, [raw, period] {
      const auto stopping = [raw] { return raw->retry_stopping.load(); };
      for (const std::shared_ptr<Tenant>& t : raw->tenants->Opened()) {
        if (stopping()) return;
        t->scenes().RetryUnserved(
            period,
            [raw]() -> std::shared_ptr<void> {
              std::optional<WorkLimiter::Permit> slot = raw->query_limiter.TryAcquire();
              if (!slot) return nullptr;
              return std::make_shared<WorkLimiter::Permit>(std::move(*slot));
            },
            stopping);
      }
    });
  }
  if (limits.damaged_file_retention != absl::InfiniteDuration()) {
    // Hourly, or as often as the retention when it is shorter (at least every second).
    const absl::Duration period =
        std::clamp(limits.damaged_file_retention, absl::Seconds(1), absl::Hours(1));
    impl->damaged_sweep.emplace(period, [raw] {
      for (const std::shared_ptr<Tenant>& t : raw->tenants->Opened()) {
        if (raw->retry_stopping.load()) return;
        t->SweepDamagedFiles();
      }
    });
  }
  LogLine(LogLevel::kInfo,
          absl::StrCat("clashd listening on ", config.listen, " (port ", impl->port, "), data in ",
                       config.data_dir,
                       impl->metrics_http
                           ? absl::StrCat(", metrics on port ", impl->metrics_http->port())
                           : std::string()));
  return std::unique_ptr<ClashServer>(new ClashServer(std::move(impl)));
}

ClashServer::ClashServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClashServer::~ClashServer() { Shutdown(); }

int ClashServer::port() const { return impl_->port; }

int ClashServer::metrics_port() const {
  return impl_->metrics_http ? impl_->metrics_http->port() : 0;
}

grpc::Server* ClashServer::grpc_server() { return impl_->server.get(); }

void ClashServer::Shutdown() {
  std::lock_guard lock(impl_->shutdown_mu);
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  LogLine(LogLevel::kInfo, "clashd shutting down");
  impl_->health_service.Shutdown();
  impl_->retry_stopping = true;  // (its pass ends at its next part or tenant; joined below)
  const auto deadline =
      std::chrono::system_clock::now() + Millis(impl_->config.shutdown_grace_seconds);
  // In-flight calls get the grace period; then gRPC cancels them, and a cancelled import kills
  // its worker.
  impl_->server->Shutdown(deadline);
  impl_->draining = true;
  impl_->server->Wait();
  if (impl_->unserved_retry) impl_->unserved_retry->Stop();
  if (impl_->damaged_sweep) impl_->damaged_sweep->Stop();
  impl_->metrics_http.reset();
  impl_->worker_pool.reset();  // kills and reaps the idle workers
  LogLine(LogLevel::kInfo, "clashd stopped");
}

void ClashServer::Wait() { impl_->server->Wait(); }

}  // namespace clash::server
