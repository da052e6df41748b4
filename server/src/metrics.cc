#include "metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace clash::server {
namespace {

std::string Num(double v) { return absl::StrFormat("%.9g", v); }

}  // namespace

const std::vector<double>& Metrics::Buckets() {
  static const std::vector<double> b = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                        0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5,
                                        5,      10,      30,     60,    300};
  return b;
}

void Metrics::RecordRpc(std::string_view method, std::string_view code, double seconds) {
  std::lock_guard lock(mu_);
  ++requests_[{std::string(method), std::string(code)}];
  Histogram& h = latency_[std::string(method)];
  if (h.counts.empty()) h.counts.assign(Buckets().size(), 0);
  for (std::size_t i = 0; i < Buckets().size(); ++i) {
    if (seconds <= Buckets()[i]) {
      ++h.counts[i];
      break;
    }
  }
  ++h.count;
  h.sum += seconds;
}

void Metrics::AddGauge(std::string name, std::string help, std::function<double()> read) {
  std::lock_guard lock(mu_);
  gauges_.push_back({std::move(name), std::move(help), std::move(read)});
}

void Metrics::AddCounter(std::string name, std::string help, std::function<double()> read) {
  std::lock_guard lock(mu_);
  gauges_.push_back({std::move(name), std::move(help), std::move(read), "counter"});
}

std::string Metrics::Render() const {
  std::lock_guard lock(mu_);
  std::string out;
  out += "# HELP clashd_requests_total RPCs finished, by method and status code.\n";
  out += "# TYPE clashd_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    absl::StrAppend(&out, "clashd_requests_total{method=\"", key.first, "\",code=\"", key.second,
                    "\"} ", n, "\n");
  }
  out += "# HELP clashd_request_duration_seconds RPC latency at the server.\n";
  out += "# TYPE clashd_request_duration_seconds histogram\n";
  for (const auto& [method, h] : latency_) {
    uint64_t cumulative = 0;
    for (std::size_t i = 0; i < Buckets().size(); ++i) {
      cumulative += h.counts[i];
      absl::StrAppend(&out, "clashd_request_duration_seconds_bucket{method=\"", method, "\",le=\"",
                      Num(Buckets()[i]), "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out, "clashd_request_duration_seconds_bucket{method=\"", method,
                    "\",le=\"+Inf\"} ", h.count, "\n");
    absl::StrAppend(&out, "clashd_request_duration_seconds_sum{method=\"", method, "\"} ",
                    Num(h.sum), "\n");
    absl::StrAppend(&out, "clashd_request_duration_seconds_count{method=\"", method, "\"} ",
                    h.count, "\n");
  }
  for (const Gauge& g : gauges_) {
    absl::StrAppend(&out, "# HELP ", g.name, " ", g.help, "\n# TYPE ", g.name, " ", g.type, "\n",
                    g.name, " ", Num(g.read()), "\n");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, const Metrics* metrics) {
  const std::size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad metrics address '", address, "'"));
  }
  std::string host = address.substr(0, colon);
  if (host.empty() || host == "localhost") host = "127.0.0.1";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad metrics host '", host, "' (IPv4 only)"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError("metrics: socket() failed");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", address));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd, ntohs(addr.sin_port), metrics));
}

MetricsHttpServer::MetricsHttpServer(int fd, int port, const Metrics* metrics)
    : fd_(fd), port_(port), metrics_(metrics), thread_([this] { Loop(); }) {}

MetricsHttpServer::~MetricsHttpServer() {
  stop_ = true;
  thread_.join();
  close(fd_);
}

void MetricsHttpServer::Loop() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    timeval tv{2, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[2048];
    const ssize_t n = recv(conn, buf, sizeof(buf) - 1, 0);
    std::string request(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    std::string status = "404 Not Found";
    std::string body = "only /metrics is served here\n";
    std::string type = "text/plain";
    if (request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0) {
      status = "200 OK";
      body = metrics_->Render();
      type = "text/plain; version=0.0.4";
    }
    const std::string response =
        absl::StrCat("HTTP/1.0 ", status, "\r\nContent-Type: ", type,
                     "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
    std::size_t sent = 0;
    while (sent < response.size()) {
      const ssize_t m = send(conn, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (m <= 0) break;
      sent += static_cast<std::size_t>(m);
    }
    close(conn);
  }
}

}  // namespace clash::server
