#include "metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

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

namespace {

// One scrape connection: its request as read so far, then its answer as sent so far.
struct ScrapeConn {
  int fd = -1;
  std::chrono::steady_clock::time_point deadline;
  std::string in;
  std::string out;  // empty until the request is read
  std::size_t sent = 0;
};

// The answer to an HTTP request (only "GET /metrics" is served).
std::string Answer(const std::string& request, const Metrics& metrics) {
  std::string status = "404 Not Found";
  std::string body = "only /metrics is served here\n";
  std::string type = "text/plain";
  if (request.rfind("GET /metrics ", 0) == 0 || request.rfind("GET /metrics?", 0) == 0) {
    status = "200 OK";
    body = metrics.Render();
    type = "text/plain; version=0.0.4";
  }
  return absl::StrCat("HTTP/1.0 ", status, "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

void MetricsHttpServer::Loop() {
  // Connections are served side by side, without blocking, each within kConnSeconds of its
  // accept: an idle or never-reading client holds neither the scrapes after it nor shutdown.
  constexpr std::size_t kMaxConns = 32;
  constexpr std::size_t kMaxRequestBytes = 4096;
  constexpr auto kConnSeconds = std::chrono::seconds(5);
  std::vector<ScrapeConn> conns;
  // After a failed accept (out of descriptors, say) the listener rests a while instead of
  // reporting readable again at once.
  auto accept_after = std::chrono::steady_clock::time_point::min();
  std::vector<pollfd> fds;
  while (!stop_) {
    const auto now = std::chrono::steady_clock::now();
    fds.clear();
    const bool listening = conns.size() < kMaxConns && now >= accept_after;
    fds.push_back({listening ? fd_ : -1, POLLIN, 0});
    for (const ScrapeConn& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
    }
    if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) break;
    for (std::size_t k = 0; k < conns.size(); ++k) {
      ScrapeConn& c = conns[k];
      const short events = fds[k + 1].revents;
      if (events == 0) continue;
      if (c.out.empty() && (events & (POLLIN | POLLHUP | POLLERR)) != 0) {
        char buf[2048];
        const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        if (n > 0) c.in.append(buf, static_cast<std::size_t>(n));
        if (n == 0 || c.in.find("\r\n\r\n") != std::string::npos ||
            c.in.size() >= kMaxRequestBytes) {
          c.out = Answer(c.in, *metrics_);
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          c.deadline = now;  // closed below
        }
      }
      if (!c.out.empty() && c.sent < c.out.size()) {
        const ssize_t m =
            send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (m > 0) {
          c.sent += static_cast<std::size_t>(m);
        } else if (m < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          c.deadline = now;
        }
      }
    }
    // Close what is answered, failed or out of time.
    std::erase_if(conns, [&](const ScrapeConn& c) {
      const bool done = (!c.out.empty() && c.sent == c.out.size()) || now >= c.deadline;
      if (done) close(c.fd);
      return done;
    });
    if ((fds[0].revents & POLLIN) != 0) {
      const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (conn >= 0) {
        conns.push_back({conn, now + kConnSeconds, {}, {}, 0});
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                 errno != ECONNABORTED) {
        accept_after = now + std::chrono::milliseconds(100);
      }
    }
  }
  for (const ScrapeConn& c : conns) close(c.fd);
}

}  // namespace clash::server
