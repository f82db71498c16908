// Horizon: collective communication between ranks.
//
// A Communicator knows its rank, the world size and the local rank (rank on this host), and
// offers in-place all-reduce (sum / average), broadcast, all-gather, point-to-point exchange,
// sub-communicators (split), barrier and a non-blocking all-reduce.
// Implementations: Local (world size 1, no MPI needed: plain `horizon train`), MPI (CPU tensors;
// launched by mpirun) and NCCL (CUDA tensors; one GPU per local rank). NCCL bootstraps over MPI
// when launched by mpirun in a build with MPI, else from the environment. The ranks come from one
// launcher's variables (size, rank, local rank; the local rank picks the GPU: local rank % visible
// devices, and defaults to the rank):
//   Horizon's   HZ_WORLD_SIZE, HZ_RANK, HZ_LOCAL_RANK
//   torchrun's  WORLD_SIZE, RANK, LOCAL_RANK
//   Slurm's     SLURM_STEP_NUM_TASKS, SLURM_PROCID, SLURM_LOCALID (an srun step's tasks)
// in that precedence: Horizon's set beside another launcher's must agree with them (else refused);
// torchrun's win over Slurm's (under `srun torchrun` Slurm's describe the per-node agent). A world
// of more than one rank shares rank 0's ncclUniqueId either
//   over TCP   MASTER_ADDR, MASTER_PORT: rank 0 listens there and hands the id to every rank that
//              connects (distributed/rendezvous.h), or
//   by file    HZ_NCCL_ID_FILE, a path every rank sees (shared filesystem): rank 0 writes the id
//              there (temp name + atomic rename, removed once every rank has joined), the others
//              wait for it;
// the file when both are given. The TCP rendezvous admits only ranks that prove they hold the
// job's identity (distributed/rendezvous.h), the first of these the launch sets, the same on every
// rank (a TCP rendezvous without one is refused):
//   HZ_JOB_TOKEN                    a random token the launching script exports to every rank
//   TORCHELASTIC_RUN_ID             torchrun's run id (--rdzv-id; random with --standalone)
//   SLURM_JOB_ID (+ SLURM_STEP_ID)  an srun step
//   PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid   mpirun's job
// Either waits HZ_NCCL_ID_TIMEOUT seconds (default 120; a decimal
// number in (0, 86400]). A rank's variables without their world (HZ_RANK or HZ_LOCAL_RANK without
// HZ_WORLD_SIZE, RANK or LOCAL_RANK without WORLD_SIZE, MPI's per-process ones without mpirun's)
// are refused rather than run as a world of one, and an MPI world must match mpirun's variables.
// Every rank must issue the same collectives in the same order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/op_kinds.h"  // ReduceOp: Sum, Mean (the average over ranks), Max
#include "core/tensor.h"

namespace hz::dist {


class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;  // drives progress; true when complete
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  // t contiguous; f32/f64/i32/i64 (NCCL adds bf16); Mean (the average over ranks) only for
  // floating types
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual std::unique_ptr<Request> all_reduce_async(Tensor& t, ReduceOp op) = 0;  // t stays alive until wait()
  virtual void broadcast(Tensor& t, int root) = 0;
  // out (size() x in.numel() elements, contiguous, in's dtype and device) = every rank's `in`, by
  // rank (rank q's in out[q n, (q+1) n)); in contiguous, the same numel on every rank. f32/f64/i32/
  // i64 (NCCL adds bf16). Complete on return.
  virtual void all_gather_into(const Tensor& in, Tensor& out) = 0;
  // Point-to-point in both directions at once (a shift or a ring never deadlocks): sends `send` to
  // rank `dest` and receives into `recv` from rank `src`, ranks of this communicator, -1 for "no
  // one" that way (then the tensor is not touched). Contiguous tensors; recv holds exactly what src
  // sends (same dtype and numel). Complete on return. f32/f64/i32/i64 (NCCL adds bf16).
  virtual void send_recv(const Tensor& send, int dest, Tensor& recv, int src) = 0;
  // send_recv without waiting, to overlap the transfer with compute: complete at wait() (NCCL:
  // work queued on the compute stream after wait() runs after it); test() drives MPI's progress.
  // The request keeps both tensors alive; neither may be touched until wait().
  virtual std::unique_ptr<Request> send_recv_async(const Tensor& send, int dest, Tensor& recv, int src) = 0;
  // The ranks that call split() with the same color form a new communicator, ordered by their rank
  // here (context-parallel groups: consecutive ranks). Collective: every rank calls it. The result
  // must be destroyed before this communicator.
  virtual std::unique_ptr<Communicator> split(int color) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job now (MPI_Abort); used when one rank fails so that none hangs.
  // Without MPI (NCCL from the environment) it aborts the NCCL communicator and exits this process
  // only: the other ranks block in their next collective until their launcher ends them.
  [[noreturn]] virtual void abort(int code) noexcept = 0;

  std::vector<int64_t> all_gather(int64_t v);  // every rank's value, by rank
  double all_reduce_scalar(double v, ReduceOp op);
};

std::unique_ptr<Communicator> make_local();
// MPI_COMM_WORLD; initialises MPI (thread level FUNNELED) on first use. Throws when Horizon was
// built without MPI.
std::unique_ptr<Communicator> make_mpi();
// NCCL (one GPU per local rank): over the MPI world when launched by mpirun in a build with MPI,
// else bootstrapped from HZ_RANK / HZ_WORLD_SIZE / HZ_LOCAL_RANK / HZ_NCCL_ID_FILE (see above; all
// unset: a world of one). CPU tensors go through MPI, or without MPI through a device buffer.
// Throws without CUDA + NCCL support.
std::unique_ptr<Communicator> make_nccl();
bool launched_by_mpirun();  // OMPI_COMM_WORLD_SIZE / PMI_SIZE / PMIX_RANK in the environment
bool launched_by_env();     // a launcher's world size in the environment (HZ_, torchrun's or srun's; NCCL without mpirun)
// MPI when launched by mpirun (and built with MPI), else local. Refuses a launcher's world > 1 without
// mpirun: environment launches are NCCL's (run.device=cuda; make_nccl()).
std::unique_ptr<Communicator> from_environment();
bool mpi_compiled();
bool nccl_compiled();
std::string nccl_version();  // of the loaded libnccl, "2.28.9"; empty without NCCL support

// all_gather_into's argument check (shared by the communicators): throws ValueError.
void check_gather(const Tensor& in, const Tensor& out, int world);
// send_recv's argument check: peers inside 0 .. world-1 or -1, contiguous tensors of one device.
void check_send_recv(const Tensor& send, int dest, const Tensor& recv, int src, int world);

// The environment bootstrap's pieces (used by make_nccl(); exposed for tests).
struct EnvWorld {
  int rank = 0, size = 1, local_rank = 0;
  std::string launcher = "no launcher's";  // whose variables: "Horizon's", "torchrun's", "Slurm's"
  std::string id_file;      // HZ_NCCL_ID_FILE; empty when unset
  std::string master_addr;  // MASTER_ADDR; empty when unset
  int master_port = 0;      // MASTER_PORT; 0 when unset
  double id_timeout_s = 120;  // HZ_NCCL_ID_TIMEOUT
  // the job's identity for the TCP rendezvous (see above); empty when the launch sets none
  std::string job_identity;
  std::string job_identity_from;  // the variable(s) it came from, e.g. "TORCHELASTIC_RUN_ID"
};
// Reads and validates the variables (stray rank variables included); throws ValueError naming the
// variable and its value.
EnvWorld env_world();
// Rank 0: writes `bytes` to `path` through a temporary name and an atomic rename.
void publish_id_file(const std::string& path, const void* data, size_t bytes);
// Other ranks: waits until `path` holds `bytes` bytes (polling), then reads them; throws an Error
// naming the file after `timeout_s`.
void read_id_file(const std::string& path, void* data, size_t bytes, double timeout_s);

}  // namespace hz::dist
