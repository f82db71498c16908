// Horizon: handing rank 0's bytes (the NCCL unique id) to every rank over TCP, as torchrun's
// MASTER_ADDR / MASTER_PORT rendezvous does, for ranks started without MPI (torchrun, srun, by hand).
//
// Rank 0 listens on MASTER_PORT (every interface) and waits for the other size - 1 ranks; each
// connects to MASTER_ADDR:MASTER_PORT (retrying while rank 0 is not listening yet) and says who it
// is: "HZRV", protocol version, world size, rank (u32 little-endian each). Once all have joined,
// rank 0 sends each "HZRV", the byte count and the bytes, and closes. Everything is bounded by
// `timeout_s`: rank 0 then names the ranks that never joined, another rank the address it could
// not reach. Rank 0 refuses a rank that claims another world size, a rank out of range, or a rank
// number twice (two launches mixed up), naming it.
#pragma once
#include <cstddef>
#include <string>

namespace hz::dist {

void tcp_rendezvous(const std::string& master_addr, int master_port, int rank, int size, void* data, size_t bytes,
                    double timeout_s);

}  // namespace hz::dist
