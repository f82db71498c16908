// Horizon: the NCCL communicator for CUDA tensors. The unique id is created on rank 0 and
// broadcast over MPI; each rank drives the GPU of its local rank. Collectives run on the device's
// communication stream after an event recorded on its compute stream (so they see the gradients
// the compute stream produced and overlap the rest of the backward); a request's wait() makes the
// compute stream wait for the collective's completion event (no host stall). CPU tensors (loss
// scalars, loader cursors) go through the MPI communicator underneath.
// Compiled with HZ_CUDA + HZ_MPI when NCCL is found.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdlib>

#include "core/device.h"
#include "distributed/communicator.h"

namespace hz::dist {

namespace {

#define HZ_NCCL_CHECK(call)                                                                   \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    HZ_CHECK(r_ == ncclSuccess, DeviceError, #call, " failed: ", ncclGetErrorString(r_));    \
  } while (0)
#define HZ_CUDA_OK(call)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    HZ_CHECK(e_ == cudaSuccess, DeviceError, #call, " failed: ", cudaGetErrorString(e_));    \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: throw DTypeError("NCCL: unsupported dtype");
  }
}

class NcclRequest : public Request {
 public:
  NcclRequest(cudaEvent_t ev, Tensor t, cudaStream_t compute) : ev_(ev), t_(std::move(t)), compute_(compute) {}
  ~NcclRequest() override { cudaEventDestroy(ev_); }
  // Work queued on the compute stream from now on runs after the collective.
  void wait() override { HZ_CUDA_OK(cudaStreamWaitEvent(compute_, ev_, 0)); }
  bool test() override { return cudaEventQuery(ev_) == cudaSuccess; }

 private:
  cudaEvent_t ev_;
  Tensor t_;  // keeps the buffer alive until the collective is done
  cudaStream_t compute_;
};

class Nccl : public Communicator {
 public:
  Nccl() : mpi_(make_mpi()) {
    int ndev = 0;
    HZ_CUDA_OK(cudaGetDeviceCount(&ndev));
    HZ_CHECK(ndev > 0, DeviceError, "NCCL communicator: no CUDA device visible");
    device_ = mpi_->local_rank() % ndev;
    HZ_CUDA_OK(cudaSetDevice(device_));
    compute_ = static_cast<cudaStream_t>(cuda::compute_stream(device_));
    stream_ = static_cast<cudaStream_t>(cuda::comm_stream(device_));
    ncclUniqueId id;
    if (mpi_->rank() == 0) HZ_NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    HZ_NCCL_CHECK(ncclCommInitRank(&comm_, mpi_->size(), id, mpi_->rank()));
  }
  ~Nccl() override { ncclCommDestroy(comm_); }
  std::string name() const override { return "nccl"; }
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  int local_rank() const override { return mpi_->local_rank(); }
  void all_reduce(Tensor& t, ReduceOp op) override {
    if (t.device().is_cpu()) return mpi_->all_reduce(t, op);
    all_reduce_async(t, op)->wait();
  }
  std::unique_ptr<Request> all_reduce_async(Tensor& t, ReduceOp op) override {
    if (t.device().is_cpu()) return mpi_->all_reduce_async(t, op);
    check(t);
    // the compute stream must have produced t before the communication stream reads it
    cudaEvent_t ready, done;
    HZ_CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    HZ_CUDA_OK(cudaEventRecord(ready, compute_));
    HZ_CUDA_OK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
    HZ_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                op == ReduceOp::Average ? ncclAvg : ncclSum, comm_, stream_));
    HZ_CUDA_OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    HZ_CUDA_OK(cudaEventRecord(done, stream_));
    return std::make_unique<NcclRequest>(done, t, compute_);
  }
  void broadcast(Tensor& t, int root) override {
    if (t.device().is_cpu()) return mpi_->broadcast(t, root);
    check(t);
    cudaEvent_t ready;
    HZ_CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    HZ_CUDA_OK(cudaEventRecord(ready, compute_));
    HZ_CUDA_OK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
    HZ_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                                comm_, stream_));
    HZ_CUDA_OK(cudaStreamSynchronize(stream_));
  }
  void barrier() override { mpi_->barrier(); }
  [[noreturn]] void abort(int code) noexcept override {
    ncclCommAbort(comm_);
    mpi_->abort(code);
    std::_Exit(code);  // not reached: MPI_Abort ends the process
  }

 private:
  void check(const Tensor& t) const {
    HZ_CHECK(t.device().is_cuda(), DeviceError, "the NCCL communicator works on CUDA tensors; use MPI for CPU tensors");
    HZ_CHECK(t.is_contiguous(), ValueError, "collectives need contiguous tensors");
  }
  std::unique_ptr<Communicator> mpi_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr, compute_ = nullptr;  // Horizon's streams of the device (not owned)
};

}  // namespace

bool nccl_compiled() { return true; }
std::unique_ptr<Communicator> make_nccl() { return std::make_unique<Nccl>(); }

}  // namespace hz::dist
