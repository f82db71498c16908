#include "distributed/rendezvous.h"

#include <arpa/inet.h>
#include <crypt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"

namespace hz::dist {

namespace {

constexpr uint32_t kMagic = 0x56525a48;  // "HZRV" little-endian
constexpr uint32_t kVersion = 2;
constexpr size_t kNonce = 16;             // crypt(3)'s longest "$6$" salt
constexpr size_t kProof = 86;             // a "$6$" hash's length
constexpr size_t kChallengeBytes = 8 + kNonce + kProof;
constexpr size_t kMaxPending = 128;       // handshakes at once; the oldest goes first beyond that
constexpr double kMaxTimeoutS = 86400;
const char kSaltChars[] = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
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

uint32_t u32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void put_u32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
bool salt_chars(const std::string& s) { return s.find_first_not_of(kSaltChars) == std::string::npos; }

double left(clock::time_point deadline) { return std::chrono::duration<double>(deadline - clock::now()).count(); }
clock::time_point after(double s) {
  return clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(s));
}
int poll_ms(clock::time_point deadline) { return static_cast<int>(std::clamp(left(deadline) * 1000.0, 0.0, 1000.0)) + 1; }

// Waits until fd is ready for `events` or the deadline passes (false).
bool wait_for(int fd, short events, clock::time_point deadline) {
  for (;;) {
    if (left(deadline) <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, poll_ms(deadline));
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
enum class Got { All, Closed, Late };  // the bytes; the peer closed (or failed); the deadline passed
Got recv_all(int fd, void* p, size_t n, clock::time_point deadline) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    if (!wait_for(fd, POLLIN, deadline)) return left(deadline) <= 0 ? Got::Late : Got::Closed;
    const ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return Got::Closed;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return Got::All;
}

std::string where(const std::string& addr, int port) { return addr + ":" + std::to_string(port); }

// "10.0.0.5:41234" (an IPv4 peer of the dual-stack socket without its "::ffff:"), "[fe80::1]:41234"
std::string peer_name(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(v4.sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
      ::inet_ntop(AF_INET, &v6.sin6_addr.s6_addr[12], host, sizeof host);
      return std::string(host) + ":" + std::to_string(ntohs(v6.sin6_port));
    }
    ::inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6.sin6_port));
  }
  return "an unknown address";
}

// kNonce characters of crypt(3)'s salt alphabet from the kernel's random source.
std::string nonce() {
  unsigned char raw[kNonce];
  size_t got = 0;
  while (got < kNonce) {
    const ssize_t r = ::getrandom(raw + got, kNonce - got, 0);
    if (r < 0 && errno == EINTR) continue;
    HZ_CHECK(r > 0, Error, "rendezvous: no random bytes from the kernel (getrandom): ", std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  std::string s(kNonce, '.');
  for (size_t i = 0; i < kNonce; ++i) s[i] = kSaltChars[raw[i] & 63];
  return s;
}

// One side's proof that it holds the identity: crypt(3)'s salted, iterated SHA-512 of the identity
// bound to this handshake (who proves, world size, rank, both nonces), salted with the verifier's
// nonce. Without the identity it can be neither computed nor replayed in another handshake.
std::string proof(const char* role, int size, uint32_t rank, const std::string& rank_nonce, const std::string& root_nonce,
                  const std::string& identity, const std::string& verifier_nonce) {
  const std::string key = std::string("HZRV2 ") + role + " " + std::to_string(size) + " " + std::to_string(rank) + " " +
                          rank_nonce + " " + root_nonce + " " + identity;
  const std::string setting = "$6$rounds=1000$" + verifier_nonce;
  auto scratch = std::make_unique<crypt_data>();  // 32 KiB: not on the stack
  const char* h = ::crypt_r(key.c_str(), setting.c_str(), scratch.get());
  const std::string out = h ? h : "";
  const size_t cut = out.rfind('$');
  HZ_CHECK(!out.empty() && out[0] == '$' && cut != std::string::npos && out.size() - cut - 1 == kProof, Error,
           "rendezvous: crypt(3) could not compute the handshake's SHA-512 digest (libcrypt without \"$6$\"?)");
  return out.substr(cut + 1);
}

// Constant time: how much of a wrong proof matched says nothing to the one who sent it.
bool same(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

void check_options(int rank, int size, const RendezvousOptions& opt) {
  HZ_CHECK(size >= 1 && rank >= 0 && rank < size, ValueError, "rendezvous: rank ", rank, " of ", size);
  HZ_CHECK(opt.timeout_s > 0 && opt.timeout_s <= kMaxTimeoutS && opt.handshake_s > 0 && opt.handshake_s <= kMaxTimeoutS,
           ValueError, "rendezvous: the timeouts (", opt.timeout_s, " s, handshake ", opt.handshake_s,
           " s) must be in (0, ", kMaxTimeoutS, "]");
  HZ_CHECK(!opt.identity.empty() && opt.identity.size() <= 400, ValueError, "rendezvous: the job identity (",
           opt.identity_from, ") must be 1 .. 400 bytes, got ", opt.identity.size());
}

// A connection rank 0 accepted, until it proved to be a rank of this job.
struct Pending {
  Socket s;
  std::string from;
  clock::time_point deadline;
  bool hello_done = false;
  std::string got;  // bytes of the current message so far
  Hello hello;
  std::string expect;  // its proof, once the challenge is sent
};

struct Joined {
  Socket s;
  std::string from;
};

void serve(int port, int size, const void* data, size_t bytes, const RendezvousOptions& opt) {
  const auto deadline = after(opt.timeout_s);
  const auto log = [&](const std::string& from, const std::string& why) {
    const std::string line = "horizon: rendezvous on port " + std::to_string(port) + ": dropped the connection from " +
                             from + ": " + why;
    if (opt.log) {
      opt.log(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    }
  };
  Socket ls(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  bool v6 = ls.fd >= 0;
  if (!v6) ls = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
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
  HZ_CHECK(rc == 0 && ::listen(ls.fd, std::max(size, 128)) == 0, Error, "rendezvous: rank 0 cannot listen on port ",
           port, " (MASTER_PORT): ", std::strerror(errno), "; choose a free port");

  std::deque<Pending> pending;  // oldest first
  std::vector<Joined> peers(static_cast<size_t>(size));
  int joined = 1;
  std::string twice;  // ranks that tried to join twice, for the timeout's message
  std::vector<int> twice_ranks;
  size_t dropped = 0;
  const auto drop = [&](Pending& p, const std::string& why) {
    log(p.from, why);
    ++dropped;
    p.s = Socket();  // closed; removed below
  };

  while (joined < size) {
    if (left(deadline) <= 0) {
      std::string missing;
      int shown = 0;
      for (int r = 1; r < size; ++r)
        if (peers[r].s.fd < 0 && shown++ < 16) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      throw Error("rendezvous: rank 0 waited " + std::to_string(static_cast<int64_t>(opt.timeout_s)) + " s on port " +
                  std::to_string(port) + " (MASTER_PORT) and rank(s) " + missing + (shown > 16 ? ", ..." : "") + " of " +
                  std::to_string(size) + " never joined: were they started, with MASTER_ADDR naming this host and " +
                  "the same " + opt.identity_from + "? (HZ_NCCL_ID_TIMEOUT sets the wait)" +
                  (twice.empty() ? "" : "; rank(s) " + twice + " tried to join twice: two processes with one rank?") +
                  (dropped ? "; " + std::to_string(dropped) + " connection(s) dropped, each logged above" : ""));
    }
    // one poll over the listener, every pending handshake and every joined rank (a joined rank's
    // socket turns readable only when it closes: it left)
    std::vector<pollfd> fds{{ls.fd, POLLIN, 0}};
    auto wake = deadline;
    for (const Pending& p : pending) {
      fds.push_back({p.s.fd, POLLIN, 0});
      wake = std::min(wake, p.deadline);
    }
    std::vector<int> joined_ranks;
    for (int r = 1; r < size; ++r)
      if (peers[r].s.fd >= 0) {
        fds.push_back({peers[r].s.fd, POLLIN, 0});
        joined_ranks.push_back(r);
      }
    const int n = ::poll(fds.data(), fds.size(), poll_ms(wake));
    HZ_CHECK(n >= 0 || errno == EINTR, Error, "rendezvous: poll failed: ", std::strerror(errno));

    for (size_t i = 0; n > 0 && i < pending.size(); ++i) {
      Pending& p = pending[i];
      if (!fds[1 + i].revents) continue;
      const size_t want = p.hello_done ? kProof : kHelloBytes;
      char buf[kHelloBytes + kProof];
      const ssize_t r = ::recv(p.s.fd, buf, want - p.got.size(), 0);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r <= 0) {
        drop(p, p.hello_done ? "it closed before proving the job identity (a rank of another job or launched with "
                               "another identity: its own message says which)"
                             : "it closed before a whole hello");
        continue;
      }
      p.got.append(buf, static_cast<size_t>(r));
      if (!p.hello_done) {
        std::string why;
        const HelloState st = read_hello(reinterpret_cast<const unsigned char*>(p.got.data()), p.got.size(), size,
                                         p.hello, why);
        if (st == HelloState::NeedMore) continue;
        if (st == HelloState::Refused) {
          drop(p, why);
          continue;
        }
        const std::string mine = nonce();
        std::string challenge;
        put_u32(challenge, kMagic);
        put_u32(challenge, kVersion);
        challenge += mine;
        challenge += proof("root", size, p.hello.rank, p.hello.nonce, mine, opt.identity, p.hello.nonce);
        p.expect = proof("rank", size, p.hello.rank, p.hello.nonce, mine, opt.identity, mine);
        // a fresh connection's send buffer takes these 110 bytes at once; one that does not is dropped
        if (::send(p.s.fd, challenge.data(), challenge.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            static_cast<ssize_t>(challenge.size())) {
          drop(p, "it could not take rank 0's answer to its hello");
          continue;
        }
        p.hello_done = true;
        p.got.clear();
        continue;
      }
      if (p.got.size() < kProof) continue;
      const int rank = static_cast<int>(p.hello.rank);
      if (!same(p.got, p.expect)) {
        drop(p, "it claimed rank " + std::to_string(rank) + " but its proof of the job identity is wrong (another job "
                "on this port, or a rank launched with another " + opt.identity_from + ")");
        continue;
      }
      if (peers[rank].s.fd >= 0) {
        if (std::find(twice_ranks.begin(), twice_ranks.end(), rank) == twice_ranks.end()) {
          twice_ranks.push_back(rank);
          twice += (twice.empty() ? "" : ", ") + std::to_string(rank);
        }
        drop(p, "it is rank " + std::to_string(rank) + " of this job, which already joined from " + peers[rank].from +
                ": two processes were given the same rank (or another launch shares this identity)");
        continue;
      }
      peers[rank] = Joined{std::move(p.s), p.from};
      ++joined;
    }
    for (size_t k = 0; n > 0 && k < joined_ranks.size(); ++k) {
      if (!fds[1 + pending.size() + k].revents) continue;
      const int r = joined_ranks[k];
      log(peers[r].from, "rank " + std::to_string(r) + " left (closed its connection) before the id was sent; it may "
                         "join again");
      ++dropped;
      peers[r].s = Socket();
      --joined;
    }
    // handshakes past their deadline, then the ones that ended above
    const auto now = clock::now();
    for (Pending& p : pending)
      if (p.s.fd >= 0 && now >= p.deadline)
        drop(p, std::string(p.hello_done ? "no proof of the job identity" : p.got.empty() ? "it sent nothing" : "no whole "
             "hello") + " within " + detail::concat_msg(opt.handshake_s) + " s");
    pending.erase(std::remove_if(pending.begin(), pending.end(), [](const Pending& p) { return p.s.fd < 0; }),
                  pending.end());
    // new connections, each with its own handshake deadline
    if (fds[0].revents) {
      for (;;) {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        Socket c(::accept4(ls.fd, reinterpret_cast<sockaddr*>(&a), &len, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (c.fd < 0) {
          // out of descriptors: the oldest handshake makes room (the listener stays readable)
          if ((errno == EMFILE || errno == ENFILE) && !pending.empty()) {
            drop(pending.front(), "rank 0 ran out of file descriptors while it waited for its handshake");
            pending.pop_front();
          }
          break;
        }
        if (pending.size() >= kMaxPending) {
          drop(pending.front(), "no handshake yet while " + std::to_string(kMaxPending) + " newer connections waited");
          pending.pop_front();
        }
        Pending p;
        p.s = std::move(c);
        p.from = peer_name(a);
        p.deadline = std::min(deadline, after(opt.handshake_s));
        pending.push_back(std::move(p));
      }
    }
  }
  for (Pending& p : pending) log(p.from, "the rendezvous completed before its handshake");
  std::string head;
  put_u32(head, kMagic);
  put_u32(head, static_cast<uint32_t>(bytes));
  for (int r = 1; r < size; ++r)
    HZ_CHECK(send_all(peers[r].s.fd, head.data(), head.size(), deadline) && send_all(peers[r].s.fd, data, bytes, deadline),
             Error, "rendezvous: rank 0 could not send the id to rank ", r, " at ", peers[r].from, " (it left?)");
}

void join(const std::string& addr, int port, int rank, int size, void* data, size_t bytes,
          const RendezvousOptions& opt) {
  const auto deadline = after(opt.timeout_s);
  const std::string at = where(addr, port) + " (MASTER_ADDR:MASTER_PORT)";
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
        // hello; rank 0's nonce and proof; this rank's proof; the id
        const std::string mine = nonce();
        std::string hello;
        put_u32(hello, kMagic);
        put_u32(hello, kVersion);
        put_u32(hello, static_cast<uint32_t>(size));
        put_u32(hello, static_cast<uint32_t>(rank));
        hello += mine;
        unsigned char ch[kChallengeBytes];
        const Got got = send_all(s.fd, hello.data(), hello.size(), deadline) ? recv_all(s.fd, ch, sizeof ch, deadline)
                                                                              : Got::Closed;
        HZ_CHECK(got != Got::Closed, Error, "rendezvous: rank ", rank, ": rank 0 at ", at, " closed the connection "
                 "during the handshake: it refused this rank (its log says why: another world size than ", size,
                 ", a rank out of range, another Horizon build)");
        HZ_CHECK(got == Got::All, Error, "rendezvous: rank ", rank, ": what answered at ", at,
                 " did not answer the handshake within ", static_cast<int64_t>(opt.timeout_s), " s: not Horizon's rank 0?");
        const std::string theirs(reinterpret_cast<const char*>(ch) + 8, kNonce);
        HZ_CHECK(u32(ch) == kMagic && u32(ch + 4) == kVersion && salt_chars(theirs), Error, "rendezvous: rank ", rank,
                 ": what answered at ", at, " is not Horizon's rank 0 of this build (rendezvous protocol ", kVersion, ")");
        const std::string claimed(reinterpret_cast<const char*>(ch) + 8 + kNonce, kProof);
        HZ_CHECK(same(claimed, proof("root", size, static_cast<uint32_t>(rank), mine, theirs, opt.identity, mine)), Error,
                 "rendezvous: rank ", rank, ": what answered at ", at, " does not know this job's identity (",
                 opt.identity_from, "): another job's rank 0 holds the port, or the ranks were launched with different "
                 "identities; this rank takes no id from it");
        const std::string answer = proof("rank", size, static_cast<uint32_t>(rank), mine, theirs, opt.identity, theirs);
        unsigned char head[8];
        const Got h = send_all(s.fd, answer.data(), answer.size(), deadline) ? recv_all(s.fd, head, sizeof head, deadline)
                                                                             : Got::Closed;
        HZ_CHECK(h == Got::All, Error, "rendezvous: rank ", rank, " joined rank 0 at ", at, " but got no id ",
                 h == Got::Late ? "within " + std::to_string(static_cast<int64_t>(opt.timeout_s)) +
                                      " s: the other ranks did not all join (rank 0 names them)"
                                : std::string("(rank 0 closed the connection): it failed, or dropped this rank (its log "
                                              "says why: this rank twice?)"));
        HZ_CHECK(u32(head) == kMagic && u32(head + 4) == bytes, Error, "rendezvous: rank 0 at ", at,
                 " sent no id of ", bytes, " bytes (another Horizon build?)");
        HZ_CHECK(recv_all(s.fd, data, bytes, deadline) == Got::All, Error, "rendezvous: rank 0 at ", at,
                 " closed before the whole id arrived");
        return;
      }
      if (res) ::freeaddrinfo(res);
    }
    if (left(deadline) <= 0)
      throw Error("rendezvous: rank " + std::to_string(rank) + " could not reach rank 0 at " + at + " within " +
                  std::to_string(static_cast<int64_t>(opt.timeout_s)) + " s (" + last +
                  "): is rank 0 running there, and the port open between the hosts?");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace

HelloState read_hello(const unsigned char* p, size_t n, int size, Hello& out, std::string& why) {
  const char* magic = "HZRV";  // kMagic's bytes: a stranger is known by its first byte that differs
  if (n > 0 && std::memcmp(p, magic, std::min<size_t>(n, 4)) != 0) {
    why = "not a Horizon rank (its first bytes are not the rendezvous' \"HZRV\")";
    return HelloState::Refused;
  }
  if (n >= 8 && u32(p + 4) != kVersion) {
    why = "a Horizon rank of another build: it speaks rendezvous protocol " + std::to_string(u32(p + 4)) +
          ", this rank 0 protocol " + std::to_string(kVersion);
    return HelloState::Refused;
  }
  if (n < kHelloBytes) return HelloState::NeedMore;
  const uint32_t their_size = u32(p + 8), their_rank = u32(p + 12);
  const std::string nonce(reinterpret_cast<const char*>(p) + 16, kNonce);
  if (their_size != static_cast<uint32_t>(size)) {
    why = "it claims rank " + std::to_string(their_rank) + " of a world of " + std::to_string(their_size) +
          " ranks; this job has " + std::to_string(size) + " (another launch on this port?)";
    return HelloState::Refused;
  }
  if (their_rank < 1 || their_rank >= static_cast<uint32_t>(size)) {
    why = "it claims rank " + std::to_string(their_rank) + ", outside 1 .. " + std::to_string(size - 1) +
          " (the ranks that connect to rank 0)";
    return HelloState::Refused;
  }
  if (!salt_chars(nonce)) {
    why = "its hello's nonce is malformed";
    return HelloState::Refused;
  }
  out.rank = their_rank;
  out.nonce = nonce;
  return HelloState::Valid;
}

void tcp_rendezvous(const std::string& master_addr, int master_port, int rank, int size, void* data, size_t bytes,
                    const RendezvousOptions& opt) {
  check_options(rank, size, opt);
  if (size == 1) return;
  if (rank == 0) serve(master_port, size, data, bytes, opt);
  else join(master_addr, master_port, rank, size, data, bytes, opt);
}

}  // namespace hz::dist
