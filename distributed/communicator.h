// Horizon: collective communication between ranks.
//
// A Communicator knows its rank, the world size and the local rank (rank on this host), and
// offers in-place all-reduce (sum / average), broadcast, barrier and a non-blocking all-reduce.
// Implementations: Local (world size 1, no MPI needed: plain `horizon train`), MPI (CPU tensors;
// launched by mpirun) and NCCL (CUDA tensors; its unique id travels over MPI; one GPU per local
// rank). Every rank must issue the same collectives in the same order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hz::dist {

enum class ReduceOp : uint8_t { Sum, Average, Count };

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
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;  // t contiguous, f32/f64/i64
  virtual std::unique_ptr<Request> all_reduce_async(Tensor& t, ReduceOp op) = 0;  // t stays alive until wait()
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job now (MPI_Abort); used when one rank fails so that none hangs.
  [[noreturn]] virtual void abort(int code) noexcept = 0;

  std::vector<int64_t> all_gather(int64_t v);  // every rank's value, by rank
  double all_reduce_scalar(double v, ReduceOp op);
};

std::unique_ptr<Communicator> make_local();
// MPI_COMM_WORLD; initialises MPI (thread level FUNNELED) on first use. Throws when Horizon was
// built without MPI.
std::unique_ptr<Communicator> make_mpi();
// NCCL over the MPI world (one GPU per local rank). Throws without CUDA + NCCL + MPI support.
std::unique_ptr<Communicator> make_nccl();
bool launched_by_mpirun();  // OMPI_COMM_WORLD_SIZE / PMI_SIZE in the environment
// MPI when launched by mpirun (and built with MPI), else local.
std::unique_ptr<Communicator> from_environment();
bool mpi_compiled();
bool nccl_compiled();

}  // namespace hz::dist
