#include "distributed/rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

namespace hz::dist {

namespace {

constexpr uint32_t kMagic = 0x56525a48;  // "HZRV" little-endian
constexpr uint32_t kVersion = 1;
using clock = std::chrono::steady_clock;

struct Socket {
  int fd = -1;
  explicit Socket(int f = -1) : fd(f) {}
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
};

double left(clock::time_point deadline) { return std::chrono::duration<double>(deadline - clock::now()).count(); }

// Waits until fd is ready for `events` or the deadline passes (false).
bool wait_for(int fd, short events, clock::time_point deadline) {
  for (;;) {
    const double s = left(deadline);
    if (s <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min(s * 1000.0, 1000.0)) + 1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

// Exactly n bytes, or false (closed, error, deadline).
bool send_all(int fd, const void* p, size_t n, clock::time_point deadline) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    if (!wait_for(fd, POLLOUT, deadline)) return false;
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
bool recv_all(int fd, void* p, size_t n, clock::time_point deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    if (!wait_for(fd, POLLIN, deadline)) return false;
    const ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

std::string where(const std::string& addr, int port) { return addr + ":" + std::to_string(port); }

void serve(int port, int size, const void* data, size_t bytes, clock::time_point deadline, double timeout_s) {
  Socket ls(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  bool v6 = ls.fd >= 0;
  if (!v6) ls = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  HZ_CHECK(ls.fd >= 0, Error, "rendezvous: cannot open a socket: ", std::strerror(errno));
  const int one = 1, zero = 0;
  ::setsockopt(ls.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    ::setsockopt(ls.fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // IPv4 peers too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(ls.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(ls.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  HZ_CHECK(rc == 0 && ::listen(ls.fd, size) == 0, Error, "rendezvous: rank 0 cannot listen on port ", port,
           " (MASTER_PORT): ", std::strerror(errno), "; choose a free port");
  std::vector<Socket> peers(static_cast<size_t>(size));
  int joined = 1;
  while (joined < size) {
    if (!wait_for(ls.fd, POLLIN, deadline)) {
      std::string missing;
      int shown = 0;
      for (int r = 1; r < size; ++r)
        if (peers[r].fd < 0 && shown++ < 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw Error("rendezvous: rank 0 waited " + std::to_string(static_cast<int64_t>(timeout_s)) + " s on port " +
                  std::to_string(port) + " (MASTER_PORT) and rank(s) " + missing + (shown > 16 ? ", ..." : "") +
                  " of " + std::to_string(size) + " never joined: were they started, with MASTER_ADDR naming this host? "
                  "(HZ_NCCL_ID_TIMEOUT sets the wait)");
    }
    Socket c(::accept4(ls.fd, nullptr, nullptr, SOCK_CLOEXEC));
    if (c.fd < 0) continue;
    uint32_t hello[4];
    if (!recv_all(c.fd, hello, sizeof hello, std::min(deadline, clock::now() + std::chrono::seconds(10)))) continue;
    if (hello[0] != kMagic) continue;  // a stranger on the port: ignored
    const uint32_t their_size = hello[2], their_rank = hello[3];
    HZ_CHECK(hello[1] == kVersion, Error, "rendezvous: rank ", their_rank, " speaks protocol ", hello[1], ", rank 0 ",
             kVersion, ": the ranks run different Horizon builds");
    HZ_CHECK(their_size == static_cast<uint32_t>(size), Error, "rendezvous: rank ", their_rank, " was started with a world of ",
             their_size, " ranks, rank 0 with ", size, ": two launches share MASTER_ADDR:MASTER_PORT?");
    HZ_CHECK(their_rank >= 1 && their_rank < static_cast<uint32_t>(size), Error, "rendezvous: a rank ", their_rank,
             " joined a world of ", size, " (ranks 1 .. ", size - 1, " connect to rank 0)");
    HZ_CHECK(peers[their_rank].fd < 0, Error, "rendezvous: rank ", their_rank, " joined twice: two processes were given the "
             "same rank");
    peers[their_rank] = std::move(c);
    ++joined;
  }
  const uint32_t head[2] = {kMagic, static_cast<uint32_t>(bytes)};
  for (int r = 1; r < size; ++r)
    HZ_CHECK(send_all(peers[r].fd, head, sizeof head, deadline) && send_all(peers[r].fd, data, bytes, deadline), Error,
             "rendezvous: rank 0 could not send the id to rank ", r, " (it left?)");
}

void join(const std::string& addr, int port, int rank, int size, void* data, size_t bytes, clock::time_point deadline,
          double timeout_s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string last = "no answer";
  auto pause = std::chrono::milliseconds(50);
  for (;;) {
    addrinfo* res = nullptr;
    const int g = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (g != 0) {
      last = std::string("cannot resolve the host: ") + gai_strerror(g);
    } else {
      for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
        if (s.fd < 0) continue;
        if (::connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
          last = std::strerror(errno);
          continue;
        }
        ::freeaddrinfo(res);
        res = nullptr;
        const uint32_t hello[4] = {kMagic, kVersion, static_cast<uint32_t>(size), static_cast<uint32_t>(rank)};
        uint32_t head[2] = {0, 0};
        HZ_CHECK(send_all(s.fd, hello, sizeof hello, deadline) && recv_all(s.fd, head, sizeof head, deadline), Error,
                 "rendezvous: rank ", rank, " reached rank 0 at ", where(addr, port), " (MASTER_ADDR:MASTER_PORT) but got no "
                 "id within ", static_cast<int64_t>(timeout_s), " s: rank 0 refused this rank (see its message) or the "
                 "other ranks did not all join");
        HZ_CHECK(head[0] == kMagic && head[1] == bytes, Error, "rendezvous: what answered at ", where(addr, port),
                 " is not Horizon's rank 0 (or another build): expected an id of ", bytes, " bytes");
        HZ_CHECK(recv_all(s.fd, data, bytes, deadline), Error, "rendezvous: rank 0 at ", where(addr, port),
                 " closed before the whole id arrived");
        return;
      }
      if (res) ::freeaddrinfo(res);
    }
    if (left(deadline) <= 0)
      throw Error("rendezvous: rank " + std::to_string(rank) + " could not reach rank 0 at " + where(addr, port) +
                  " (MASTER_ADDR:MASTER_PORT) within " + std::to_string(static_cast<int64_t>(timeout_s)) + " s (" + last +
                  "): is rank 0 running there, and the port open between the hosts?");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace

void tcp_rendezvous(const std::string& master_addr, int master_port, int rank, int size, void* data, size_t bytes,
                    double timeout_s) {
  HZ_CHECK(size >= 1 && rank >= 0 && rank < size, ValueError, "rendezvous: rank ", rank, " of ", size);
  if (size == 1) return;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(timeout_s));
  if (rank == 0) serve(master_port, size, data, bytes, deadline, timeout_s);
  else join(master_addr, master_port, rank, size, data, bytes, deadline, timeout_s);
}

}  // namespace hz::dist
