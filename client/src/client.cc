#include "clash/client/client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace clash::client {
namespace {

// UNAVAILABLE, and RESOURCE_EXHAUSTED when the server marked it transient (trailing metadata
// clash-retryable: a full queue, a tenant's concurrency or rate limit). Any other
// RESOURCE_EXHAUSTED (a size, triangle or instance limit, the storage quota, a message larger
// than this client receives) would fail again: retried, an upload would be sent again for
// nothing.
bool Retryable(const grpc::Status& status, const grpc::ClientContext& ctx) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) return true;
  if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) return false;
  const auto& trailers = ctx.GetServerTrailingMetadata();
  const auto it = trailers.find("clash-retryable");
  return it != trailers.end() && it->second == "1";
}

// Nothing, or ':' and a port of 1 to 5 decimal digits.
bool IsPortSuffix(std::string_view rest) {
  if (rest.empty()) return true;
  if (rest.front() != ':' || rest.size() < 2 || rest.size() > 6) return false;
  return std::all_of(rest.begin() + 1, rest.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// One address ("host", "host:port", "[v6]", "[v6]:port") that stays on this machine.
bool IsLoopbackAddress(std::string_view address) {
  if (address.rfind('[', 0) == 0) {
    const std::size_t close = address.find(']');
    if (close == std::string_view::npos || address.substr(1, close - 1) != "::1") return false;
    return IsPortSuffix(address.substr(close + 1));
  }
  const std::size_t colon = address.find(':');
  const std::string_view host = address.substr(0, colon);
  if (colon != std::string_view::npos && !IsPortSuffix(address.substr(colon))) return false;
  if (host == "localhost") return true;
  // 127.0.0.0/8 as four decimal octets (Debian's Abseil has its own string_view).
  std::vector<absl::string_view> octets =
      absl::StrSplit(absl::string_view(host.data(), host.size()), '.');
  if (octets.size() != 4 || octets[0] != "127") return false;
  // 1 to 3 ASCII digits each: SimpleAtoi alone also takes a sign or spaces ("127.0.0.+1").
  for (absl::string_view o : octets) {
    int v = 0;
    if (o.empty() || o.size() > 3 ||
        !std::all_of(o.begin(), o.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !absl::SimpleAtoi(o, &v) || v > 255) {
      return false;
    }
  }
  return true;
}

// Caps on the files the client reads: a token is a line, a PEM file a few certificates.
constexpr std::size_t kMaxTokenFileBytes = std::size_t{64} << 10;
constexpr std::size_t kMaxPemFileBytes = std::size_t{4} << 20;

std::string SizeText(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes % (std::size_t{1} << 10) == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " bytes");
}

absl::Status CannotRead(const std::string& path, int error) {
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot read ", path, ": ", std::error_code(error, std::generic_category()).message()));
}

// Closes a file descriptor when it goes.
struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxPemFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the ", what, " file: ", text.status().message()));
  }
  if (text->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " file '", path, "' is empty"));
  }
  return text;
}

absl::StatusOr<std::string> FirstLineOf(const std::string& path) {
  absl::StatusOr<std::string> text = ReadRegularFile(path, kMaxTokenFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read a token: ", text.status().message()));
  }
  std::string line = text->substr(0, text->find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  if (line.empty()) return absl::InvalidArgumentError(absl::StrCat("empty token in '", path, "'"));
  return line;
}

// Every page of a listing: `fetch(request)` answers one page, `take(page)` keeps its items (an
// error from it ends the listing). INTERNAL when the server hands out a page token it gave
// before: following it, the listing would never end.
template <class Request, class Fetch, class Take>
absl::Status FollowPages(Request request, const char* what, Fetch fetch, Take take) {
  std::set<std::string> seen;
  for (;;) {
    auto page = fetch(request);
    if (!page.ok()) return page.status();
    if (absl::Status st = take(*page); !st.ok()) return st;
    if (page->next_page_token().empty()) return absl::OkStatus();
    if (!seen.insert(page->next_page_token()).second) {
      return absl::InternalError(absl::StrCat("the server repeated a page token while listing ",
                                              what, ": the listing would never end"));
    }
    request.set_page_token(page->next_page_token());
  }
}

}  // namespace

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, std::size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer (fstat refuses it next).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return CannotRead(path, errno);
  const FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return CannotRead(path, errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  const auto too_large = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is larger than ", SizeText(max_bytes), ", the most read from it"));
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large();
  // Read up to the cap whatever the size said (a /proc file says 0, a file may grow).
  std::string text;
  std::string buffer(std::size_t{64} << 10, '\0');
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return CannotRead(path, errno);
    if (n == 0) return text;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes) return too_large();
    text.append(buffer.data(), static_cast<std::size_t>(n));
  }
}

bool IsLoopbackTarget(std::string_view target) {
  if (target.rfind("unix:", 0) == 0 || target.rfind("unix-abstract:", 0) == 0) return true;
  // gRPC percent-decodes a target before it splits an address list: "%2C" is a comma.
  if (target.find('%') != std::string_view::npos) return false;
  bool list = false;  // ipv4: and ipv6: targets may list several addresses
  if (target.rfind("dns:///", 0) == 0) {
    target.remove_prefix(7);
  } else if (target.rfind("ipv4:", 0) == 0 || target.rfind("ipv6:", 0) == 0) {
    target.remove_prefix(5);
    list = true;
  }
  if (target.empty()) return false;
  if (!list) return IsLoopbackAddress(target);
  for (absl::string_view address :
       absl::StrSplit(absl::string_view(target.data(), target.size()), ',')) {
    if (!IsLoopbackAddress(std::string_view(address.data(), address.size()))) return false;
  }
  return true;
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return {static_cast<absl::StatusCode>(status.error_code()), status.error_message()};
}

absl::StatusOr<std::string> FindToken(const std::string& path) {
  if (const char* env = std::getenv("CLASH_TOKEN"); env != nullptr && *env != '\0') return env;
  if (!path.empty()) return FirstLineOf(path);
  if (const char* file = std::getenv("CLASH_TOKEN_FILE"); file != nullptr && *file != '\0') {
    return FirstLineOf(file);
  }
  return std::string();
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tls_ca_file.empty()) {
      absl::StatusOr<std::string> ca = ReadPem(options.tls_ca_file, "CA");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *std::move(ca);
    }
    if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("a client certificate needs both its file and its key");
    }
    if (!options.tls_cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadPem(options.tls_cert_file, "client certificate");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem(options.tls_key_file, "client key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
    credentials = grpc::SslCredentials(ssl);
  } else {
    if (!options.tls_ca_file.empty() || !options.tls_cert_file.empty() ||
        !options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS files given but TLS is off (set tls / --tls)");
    }
    if (!options.token.empty() && !IsLoopbackTarget(options.target)) {
      return absl::InvalidArgumentError(absl::StrCat("refusing to send a token in plaintext to ",
                                                     options.target, ": use TLS (--tls)"));
    }
    // gRPC would send even a loopback call through $http_proxy/$grpc_proxy: a plaintext token
    // must not leave this machine that way.
    if (!options.token.empty()) args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    credentials = grpc::InsecureChannelCredentials();
  }
  auto channel = grpc::CreateCustomChannel(options.target, credentials, args);
  return FromChannel(std::move(channel), options);
}

void Client::Prepare(grpc::ClientContext* ctx,
                     std::chrono::system_clock::time_point deadline) const {
  ctx->set_deadline(deadline);
  if (!options_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.token);
}

std::unique_ptr<Client> Client::FromChannel(std::shared_ptr<grpc::Channel> channel,
                                            const ClientOptions& options) {
  return std::unique_ptr<Client>(new Client(std::move(channel), options));
}

Client::Client(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options)
    : options_(options),
      channel_(std::move(channel)),
      parts_(v1::PartService::NewStub(channel_)),
      scenes_(v1::SceneService::NewStub(channel_)),
      queries_(v1::QueryService::NewStub(channel_)),
      sequences_(v1::SequenceService::NewStub(channel_)) {}

template <class Request, class Response, class Method>
absl::StatusOr<Response> Client::Call(Method method, const Request& request,
                                      std::chrono::milliseconds timeout, bool idempotent) {
  const auto deadline = std::chrono::system_clock::now() + timeout;
  const int attempts = idempotent ? std::max(1, options_.max_attempts) : 1;
  std::chrono::milliseconds backoff = options_.initial_backoff;
  std::optional<std::mt19937> jitter;  // seeded only when a retry happens (seeding costs ~25 µs)
  grpc::Status status;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    Prepare(&ctx, deadline);
    Response response;
    status = method(&ctx, request, &response);
    if (status.ok()) return response;
    if (attempt >= attempts || !Retryable(status, ctx)) break;
    // Equal jitter: sleep a random time from half the backoff to all of it, never past the
    // deadline.
    if (!jitter) jitter.emplace(std::random_device{}());
    const auto sleep = std::chrono::milliseconds(
        std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(*jitter));
    if (std::chrono::system_clock::now() + sleep >= deadline) break;
    std::this_thread::sleep_for(sleep);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
  return FromGrpc(status);
}

#define CLASH_BIND(stub, name) \
  [this](grpc::ClientContext* c, const auto& req, auto* resp) { return stub->name(c, req, resp); }

absl::StatusOr<v1::ImportCadResponse> Client::ImportCad(const std::string& path,
                                                        const v1::TessellationOptions& options,
                                                        bool strict, const ProgressFn& progress) {
  // The header announces the size, so only a regular file (a pipe's or a /proc file's size
  // is not what it streams).
  // (Checked before opening it: opening a FIFO waits for a writer.)
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  }
  if (!std::filesystem::is_regular_file(st)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a regular file (an import streams a file of known size)"));
  }
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (!in || ec) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  grpc::ClientContext ctx;
  Prepare(&ctx, std::chrono::system_clock::now() + options_.import_timeout);
  v1::ImportCadResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::ImportCadRequest>> writer =
      parts_->ImportCad(&ctx, &response);
  v1::ImportCadRequest msg;
  v1::ImportCadHeader* header = msg.mutable_header();
  const std::size_t slash = path.find_last_of('/');
  header->set_file_name(slash == std::string::npos ? path : path.substr(slash + 1));
  header->set_size_bytes(size);
  *header->mutable_tessellation() = options;
  header->set_strict(strict);
  bool ok = writer->Write(msg);
  std::string buffer(options_.chunk_bytes, '\0');
  uint64_t sent = 0;
  while (ok && sent < size) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    msg.Clear();
    msg.set_chunk(buffer.data(), static_cast<std::size_t>(n));
    ok = writer->Write(msg);
    sent += static_cast<uint64_t>(n);
    if (progress) progress(sent, size);
  }
  if (ok && sent < size) {  // the file, not the server, ended the upload early
    ctx.TryCancel();
    writer->Finish();
    return absl::DataLossError(absl::StrCat("cannot read ", path, " past byte ", sent, " of ", size,
                                            ": nothing imported"));
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpc(status);
  return response;
}

absl::StatusOr<v1::Part> Client::UploadMesh(const v1::UploadMeshRequest& request) {
  // Content-addressed: repeating an upload stores nothing twice, so it is idempotent.
  return Call<v1::UploadMeshRequest, v1::Part>(CLASH_BIND(parts_, UploadMesh), request,
                                               options_.import_timeout, true);
}

absl::StatusOr<v1::Part> Client::GetPart(const std::string& part_id) {
  v1::GetPartRequest request;
  request.set_part_id(part_id);
  return Call<v1::GetPartRequest, v1::Part>(CLASH_BIND(parts_, GetPart), request,
                                            options_.edit_timeout, true);
}

absl::StatusOr<v1::PartMesh> Client::GetPartMesh(const std::string& part_id) {
  v1::GetPartMeshRequest request;
  request.set_part_id(part_id);
  return Call<v1::GetPartMeshRequest, v1::PartMesh>(CLASH_BIND(parts_, GetPartMesh), request,
                                                    options_.edit_timeout, true);
}

absl::StatusOr<std::vector<v1::Part>> Client::ListParts() {
  std::vector<v1::Part> out;
  v1::ListPartsRequest request;
  request.set_page_size(1000);
  const absl::Status st = FollowPages(
      request, "parts",
      [this](const v1::ListPartsRequest& r) {
        return Call<v1::ListPartsRequest, v1::ListPartsResponse>(CLASH_BIND(parts_, ListParts), r,
                                                                 options_.edit_timeout, true);
      },
      [&out](const v1::ListPartsResponse& page) {
        out.insert(out.end(), page.parts().begin(), page.parts().end());
        return absl::OkStatus();
      });
  if (!st.ok()) return st;
  return out;
}

absl::StatusOr<v1::Assembly> Client::GetAssembly(const std::string& assembly_id) {
  v1::GetAssemblyRequest request;
  request.set_assembly_id(assembly_id);
  return Call<v1::GetAssemblyRequest, v1::Assembly>(CLASH_BIND(parts_, GetAssembly), request,
                                                    options_.edit_timeout, true);
}

absl::Status Client::DeletePart(const std::string& part_id) {
  v1::DeletePartRequest request;
  request.set_part_id(part_id);
  return Call<v1::DeletePartRequest, v1::DeletePartResponse>(CLASH_BIND(parts_, DeletePart),
                                                             request, options_.edit_timeout, false)
      .status();
}

absl::Status Client::DeleteAssembly(const std::string& assembly_id) {
  v1::DeleteAssemblyRequest request;
  request.set_assembly_id(assembly_id);
  return Call<v1::DeleteAssemblyRequest, v1::DeleteAssemblyResponse>(
             CLASH_BIND(parts_, DeleteAssembly), request, options_.edit_timeout, false)
      .status();
}

absl::StatusOr<v1::Scene> Client::CreateScene(const std::string& name) {
  v1::CreateSceneRequest request;
  request.set_name(name);
  return Call<v1::CreateSceneRequest, v1::Scene>(CLASH_BIND(scenes_, CreateScene), request,
                                                 options_.edit_timeout, false);
}

absl::StatusOr<v1::Scene> Client::GetScene(const std::string& scene_id) {
  v1::GetSceneRequest request;
  request.set_scene_id(scene_id);
  return Call<v1::GetSceneRequest, v1::Scene>(CLASH_BIND(scenes_, GetScene), request,
                                              options_.edit_timeout, true);
}

absl::StatusOr<std::vector<v1::Scene>> Client::ListScenes() {
  std::vector<v1::Scene> out;
  v1::ListScenesRequest request;
  request.set_page_size(1000);
  const absl::Status st = FollowPages(
      request, "scenes",
      [this](const v1::ListScenesRequest& r) {
        return Call<v1::ListScenesRequest, v1::ListScenesResponse>(CLASH_BIND(scenes_, ListScenes),
                                                                   r, options_.edit_timeout, true);
      },
      [&out](const v1::ListScenesResponse& page) {
        out.insert(out.end(), page.scenes().begin(), page.scenes().end());
        return absl::OkStatus();
      });
  if (!st.ok()) return st;
  return out;
}

absl::Status Client::DeleteScene(const std::string& scene_id) {
  v1::DeleteSceneRequest request;
  request.set_scene_id(scene_id);
  return Call<v1::DeleteSceneRequest, v1::DeleteSceneResponse>(
             CLASH_BIND(scenes_, DeleteScene), request, options_.edit_timeout, false)
      .status();
}

absl::StatusOr<v1::AddInstancesResponse> Client::AddInstances(
    const v1::AddInstancesRequest& request) {
  return Call<v1::AddInstancesRequest, v1::AddInstancesResponse>(
      CLASH_BIND(scenes_, AddInstances), request, options_.edit_timeout, false);
}

absl::StatusOr<std::vector<v1::Instance>> Client::ListInstances(const std::string& scene_id) {
  v1::ListInstancesRequest request;
  request.set_scene_id(scene_id);
  request.set_page_size(10000);
  // Pages after the first continue from an instance id: if the scene changed in between, they
  // may miss instances or hold stale poses. Start again once; a scene changing that often is
  // ABORTED.
  for (int attempt = 1;; ++attempt) {
    std::vector<v1::Instance> out;
    std::optional<uint64_t> version;
    bool changed = false;
    const absl::Status st = FollowPages(
        request, "instances",
        [this](const v1::ListInstancesRequest& r) {
          return Call<v1::ListInstancesRequest, v1::ListInstancesResponse>(
              CLASH_BIND(scenes_, ListInstances), r, options_.edit_timeout, true);
        },
        [&](const v1::ListInstancesResponse& page) {
          if (version && *version != page.scene_version()) {
            changed = true;
            return absl::AbortedError(absl::StrCat(
                "scene ", scene_id, " changed while its instances were listed (version ", *version,
                ", then ", page.scene_version(), "); try again"));
          }
          version = page.scene_version();
          out.insert(out.end(), page.instances().begin(), page.instances().end());
          return absl::OkStatus();
        });
    if (st.ok()) return out;
    if (!changed || attempt >= 2) return st;
  }
}

absl::StatusOr<uint64_t> Client::SetPoses(const v1::SetPosesRequest& request) {
  auto r = Call<v1::SetPosesRequest, v1::SceneUpdateResponse>(CLASH_BIND(scenes_, SetPoses),
                                                              request, options_.edit_timeout, true);
  if (!r.ok()) return r.status();
  return r->scene_version();
}

absl::StatusOr<uint64_t> Client::RemoveInstances(const v1::RemoveInstancesRequest& request) {
  auto r = Call<v1::RemoveInstancesRequest, v1::SceneUpdateResponse>(
      CLASH_BIND(scenes_, RemoveInstances), request, options_.edit_timeout, false);
  if (!r.ok()) return r.status();
  return r->scene_version();
}

absl::StatusOr<uint64_t> Client::SetInstancesEnabled(
    const v1::SetInstancesEnabledRequest& request) {
  auto r = Call<v1::SetInstancesEnabledRequest, v1::SceneUpdateResponse>(
      CLASH_BIND(scenes_, SetInstancesEnabled), request, options_.edit_timeout, true);
  if (!r.ok()) return r.status();
  return r->scene_version();
}

absl::StatusOr<uint64_t> Client::SetGroup(const v1::SetGroupRequest& request) {
  auto r = Call<v1::SetGroupRequest, v1::SceneUpdateResponse>(CLASH_BIND(scenes_, SetGroup),
                                                              request, options_.edit_timeout, true);
  if (!r.ok()) return r.status();
  return r->scene_version();
}

absl::StatusOr<v1::InterferenceResponse> Client::CheckInterference(
    v1::InterferenceRequest request) {
  // Each page runs the check again on the server (from its pair cache): the largest page the
  // server allows, unless the caller chose one, and one deadline for the whole listing.
  if (request.page_size() == 0) request.set_page_size(10000);
  const auto deadline = std::chrono::steady_clock::now() + options_.query_timeout;
  v1::InterferenceResponse all;
  std::set<std::string> seen_tokens;
  for (bool first = true;; first = false) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return absl::DeadlineExceededError("the clash listing did not finish before its deadline");
    }
    absl::StatusOr<v1::InterferenceResponse> page =
        Call<v1::InterferenceRequest, v1::InterferenceResponse>(
            CLASH_BIND(queries_, CheckInterference), request, left, true);
    if (!page.ok()) return page.status();
    if (first) {
      all = std::move(*page);
    } else {
      for (v1::Clash& c : *page->mutable_clashes()) *all.add_clashes() = std::move(c);
      all.set_next_page_token(page->next_page_token());
    }
    if (all.next_page_token().empty()) return all;
    if (!seen_tokens.insert(all.next_page_token()).second) {
      return absl::InternalError(
          "the server repeated a page token while listing clashes: the listing would never end");
    }
    request.set_page_token(all.next_page_token());
    all.clear_next_page_token();
  }
}

absl::StatusOr<v1::DistanceResponse> Client::ComputeDistance(const v1::DistanceRequest& request) {
  return Call<v1::DistanceRequest, v1::DistanceResponse>(CLASH_BIND(queries_, ComputeDistance),
                                                         request, options_.query_timeout, true);
}

absl::StatusOr<v1::PickResponse> Client::PickRays(const v1::PickRequest& request) {
  return Call<v1::PickRequest, v1::PickResponse>(CLASH_BIND(queries_, PickRays), request,
                                                 options_.query_timeout, true);
}

absl::StatusOr<Client::SequenceReport> Client::ValidateSequence(
    const v1::ValidateSequenceRequest& request,
    const std::function<void(const v1::ValidateSequenceEvent&)>& on_event) {
  grpc::ClientContext ctx;
  Prepare(&ctx, std::chrono::system_clock::now() + options_.sequence_timeout);
  std::unique_ptr<grpc::ClientReader<v1::ValidateSequenceEvent>> reader =
      sequences_->ValidateSequence(&ctx, request);
  SequenceReport report;
  v1::ValidateSequenceEvent event;
  while (reader->Read(&event)) {
    if (on_event) on_event(event);
    if (event.has_step()) report.steps.push_back(event.step());
    if (event.has_summary()) report.summary = event.summary();
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpc(status);
  return report;
}

absl::StatusOr<Health> Client::CheckHealth(const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  auto r = Call<grpc::health::v1::HealthCheckRequest, grpc::health::v1::HealthCheckResponse>(
      [&stub](grpc::ClientContext* c, const auto& req, auto* resp) {
        return stub->Check(c, req, resp);
      },
      request, options_.health_timeout, true);
  if (!r.ok()) return r.status();
  switch (r->status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING:
      return Health::kServing;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING:
      return Health::kNotServing;
    default:
      return Health::kUnknown;
  }
}

}  // namespace clash::client
