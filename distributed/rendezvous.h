// Horizon: handing rank 0's bytes (the NCCL unique id) to every rank over TCP, as torchrun's
// MASTER_ADDR / MASTER_PORT rendezvous does, for ranks started without MPI (torchrun, srun, by hand).
//
// Rank 0 listens on MASTER_PORT (every interface); each other rank connects to
// MASTER_ADDR:MASTER_PORT (retrying while rank 0 is not listening yet). The handshake proves to both
// sides that the other holds the job's identity (a token every rank of one launch shares:
// communicator.h says where it comes from) without sending it: a challenge-response in which each
// side answers the other's fresh random nonce with crypt(3)'s salted SHA-512 ("$6$") of the
// identity, the role, the world size, the rank and both nonces. Protocol 2 (u32 little-endian):
//   rank -> 0   hello:  "HZRV", 2, world size, rank, the rank's nonce (16 salt characters)
//   0 -> rank   "HZRV", 2, rank 0's nonce (16), rank 0's proof (86 characters)
//   rank -> 0   the rank's proof (86 characters)
//   0 -> rank   once every rank has joined: "HZRV", the byte count, the bytes; then it closes.
// Rank 0 runs every pending handshake at once (poll), each with its own short deadline
// (`handshake_s`), so silent connections cannot use up the rendezvous' deadline. A connection
// that is not this job's rank (another program, another Horizon build, another world size, a
// rank out of range, a wrong proof, a rank that already joined) is dropped and logged once,
// naming its address and why; it never ends the rendezvous. A rank refuses a rank 0 whose proof
// is wrong (a port squatter, or another job's rank 0) and takes no bytes from it. Everything is
// bounded by `timeout_s`: then rank 0 names the ranks that never joined, another rank the address
// it could not reach.
//
// What the identity protects against: a process that does not know it (another job on the port, a
// stray or hostile connection) can neither join nor hand a rank a wrong id. Not against someone
// who knows it (a guessable identity such as a Slurm job id can be guessed: use a random
// HZ_JOB_TOKEN), nor against someone who can read or alter the traffic: the bytes travel
// unencrypted and only the handshake is authenticated.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace hz::dist {

struct RendezvousOptions {
  std::string identity;                         // the job's identity, the same on every rank; never sent
  std::string identity_from = "the job identity";  // where it came from, for messages ("HZ_JOB_TOKEN")
  double timeout_s = 120;                       // the whole rendezvous (HZ_NCCL_ID_TIMEOUT)
  double handshake_s = 5;                       // rank 0: one connection's hello and proof
  // rank 0: where a dropped connection is reported, one line each (default: stderr)
  std::function<void(const std::string&)> log;
};

// Every rank calls it with the same size and options; rank 0's `bytes` bytes at `data` end up in
// every rank's `data`. Throws hz::Error naming what failed.
void tcp_rendezvous(const std::string& master_addr, int master_port, int rank, int size, void* data, size_t bytes,
                    const RendezvousOptions& opt);

// Rank 0's reading of the first `n` bytes a connection sent (exposed for tests and the fuzz
// driver): NeedMore until a whole hello (kHelloBytes) could be judged, then Valid (rank and nonce
// set) or Refused with `why` (what the connection is, in words).
constexpr size_t kHelloBytes = 32;
struct Hello {
  uint32_t rank = 0;
  std::string nonce;
};
enum class HelloState { NeedMore, Valid, Refused };
HelloState read_hello(const unsigned char* p, size_t n, int size, Hello& out, std::string& why);

}  // namespace hz::dist
