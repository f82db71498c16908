// Horizon: the NCCL communicator for CUDA tensors; each rank drives the GPU of its local rank.
// Collectives run on the device's communication stream after an event recorded on its compute
// stream (so they see the gradients the compute stream produced and overlap the rest of the
// backward); a request's wait() makes the compute stream wait for the collective's completion
// event (no host stall).
//
// Bootstrap: launched by mpirun in a build with MPI, rank 0 makes the unique id and broadcasts it
// over MPI, and CPU tensors (loss scalars, loader cursors) go through the MPI communicator
// underneath. Otherwise the world comes from a launcher's variables and the id travels through the
// file HZ_NCCL_ID_FILE or the TCP rendezvous (communicator.h); CPU tensors then take NCCL too,
// staged through a device buffer (synchronous), and barrier() is a one-element all-reduce.
// Compiled with HZ_CUDA when NCCL is found (MPI optional).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#ifdef HZ_HAVE_MPI
#include <mpi.h>
#endif

#include "core/device.h"
#include "distributed/communicator.h"
#include "distributed/rendezvous.h"

namespace hz::dist {

namespace {

#define HZ_NCCL_CHECK(call)                                                                   \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    HZ_CHECK(r_ == ncclSuccess, DeviceError, #call, " failed: ", ncclGetErrorString(r_));    \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: throw DTypeError(std::string("NCCL collectives support f32/f64/bf16/i32/i64, got ") + dtype_name(t));
  }
}

class NcclRequest : public Request {
 public:
  NcclRequest(cudaEvent_t ev, Tensor t, cudaStream_t compute, Tensor t2 = Tensor())
      : ev_(ev), t_(std::move(t)), t2_(std::move(t2)), compute_(compute) {}
  // Dropped without wait() (an exception between posting and waiting): the compute stream still
  // waits for the transfer before the buffers go back to its pool, where the next allocation could
  // take them while NCCL writes.
  ~NcclRequest() override {
    if (!waited_ && cudaStreamWaitEvent(compute_, ev_, 0) != cudaSuccess) cudaGetLastError();
    cudaEventDestroy(ev_);
  }
  // Work queued on the compute stream from now on runs after the collective.
  void wait() override {
    HZ_CUDA_CHECK(cudaStreamWaitEvent(compute_, ev_, 0));
    waited_ = true;
  }
  bool test() override {
    const cudaError_t e = cudaEventQuery(ev_);
    if (e == cudaSuccess) return true;
    // "not ready" is left as the runtime's last error, which the next kernel launch's check would
    // report as a failure: clear it
    HZ_CHECK(e == cudaErrorNotReady, DeviceError, "cudaEventQuery on an NCCL transfer failed: ", cudaGetErrorName(e));
    cudaGetLastError();
    return false;
  }

 private:
  cudaEvent_t ev_;
  Tensor t_, t2_;  // keep the buffers alive until the collective is done
  cudaStream_t compute_;
  bool waited_ = false;
};

class DoneRequest : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class Nccl : public Communicator {
 public:
  Nccl() {
    // 1. who we are: the MPI world under mpirun (with MPI compiled in), else the environment
    const bool by_mpi = launched_by_mpirun() && mpi_compiled();
    HZ_CHECK(by_mpi || !launched_by_mpirun() || launched_by_env(), Error,
             "launched by mpirun but this Horizon build has no MPI support: rebuild with -DHZ_MPI=ON, or launch "
             "the ranks with HZ_RANK / HZ_WORLD_SIZE / HZ_NCCL_ID_FILE instead (docs/parallel.md: CUDA ranks without MPI)");
    EnvWorld env;
    if (by_mpi) {
      mpi_ = make_mpi();
      rank_ = mpi_->rank();
      size_ = mpi_->size();
      local_rank_ = mpi_->local_rank();
    } else {
      env = env_world();
      rank_ = env.rank;
      size_ = env.size;
      local_rank_ = env.local_rank;
    }
    // 2. the GPU of the local rank
    const int ndev = cuda::device_count();
    HZ_CHECK(ndev > 0, DeviceError, "the NCCL communicator (run.device=cuda with several ranks) needs a GPU, but no "
             "CUDA device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    device_ = local_rank_ % ndev;
    const bool shared_gpu = local_rank_ >= ndev;  // local rank local_rank_ - ndev has it too
    if (shared_gpu)
      std::fprintf(stderr,
                   "horizon: rank %d (local rank %d) shares CUDA device %d with local rank %d: %d device(s) visible "
                   "for more local ranks; NCCL may refuse two ranks on one GPU\n",
                   rank_, local_rank_, device_, local_rank_ - ndev, ndev);
    HZ_CUDA_CHECK(cudaSetDevice(device_));
    compute_ = static_cast<cudaStream_t>(cuda::compute_stream(device_));
    stream_ = static_cast<cudaStream_t>(cuda::comm_stream(device_));
    // 3. the unique id, from rank 0
    ncclUniqueId id;
    if (rank_ == 0) HZ_NCCL_CHECK(ncclGetUniqueId(&id));
    if (by_mpi) {
#ifdef HZ_HAVE_MPI
      MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
    } else if (size_ > 1 && !env.id_file.empty()) {
      if (rank_ == 0) publish_id_file(env.id_file, &id, sizeof(id));
      else read_id_file(env.id_file, &id, sizeof(id), env.id_timeout_s);
    } else if (size_ > 1) {  // MASTER_ADDR / MASTER_PORT (env_world() checked one of the two is given)
      RendezvousOptions opt;
      opt.identity = env.job_identity;
      opt.identity_from = env.job_identity_from;
      opt.timeout_s = env.id_timeout_s;
      tcp_rendezvous(env.master_addr, env.master_port, rank_, size_, &id, sizeof(id), opt);
    }
    // 4. the communicator (collective: returns once every rank has joined)
    const ncclResult_t r = ncclCommInitRank(&comm_, size_, id, rank_);
    // a failed start leaves no id file behind: a rerun's rank 1 must not read this one's id
    if (r != ncclSuccess && !by_mpi && size_ > 1 && rank_ == 0 && !env.id_file.empty()) std::remove(env.id_file.c_str());
    if (r == ncclInvalidUsage)
      throw DeviceError(std::string("ncclCommInitRank failed: ") + ncclGetErrorString(r) + " (rank " +
                        std::to_string(rank_) + " of " + std::to_string(size_) + ", local rank " +
                        std::to_string(local_rank_) + " on CUDA device " + std::to_string(device_) + " of " +
                        std::to_string(ndev) +
                        " visible). The usual cause is two ranks on one GPU, which NCCL refuses (\"Duplicate GPU "
                        "detected\", NCCL_DEBUG=WARN shows it): run one rank per GPU (local ranks 0 .. " +
                        std::to_string(ndev - 1) +
                        " here). To try several ranks on one GPU anyway, give each a distinct NCCL_HOSTID (they then "
                        "talk over sockets, e.g. NCCL_HOSTID=hz$HZ_RANK NCCL_SOCKET_IFNAME=lo).");
    HZ_CHECK(r == ncclSuccess, DeviceError, "ncclCommInitRank failed: ", ncclGetErrorString(r), " (rank ", rank_,
             " of ", size_, ", CUDA device ", device_, "; NCCL_DEBUG=WARN says more)");
    // every rank has read the id: rank 0 removes the file, so a later job cannot pick up a stale one
    if (!by_mpi && size_ > 1 && rank_ == 0 && !env.id_file.empty()) std::remove(env.id_file.c_str());
  }
  // a sub-communicator (split)
  Nccl(ncclComm_t comm, std::unique_ptr<Communicator> mpi, int local_rank, int device, cudaStream_t compute,
       cudaStream_t stream)
      : mpi_(std::move(mpi)), local_rank_(local_rank), device_(device), comm_(comm), stream_(stream), compute_(compute) {
    HZ_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    HZ_NCCL_CHECK(ncclCommCount(comm_, &size_));
  }
  // Destroy waits for the communicator's queued work; while an exception unwinds (a rank that failed
  // mid-step, a transfer posted that its peer will never match) that could wait forever before the
  // error is printed, so the communicator is aborted instead.
  ~Nccl() override {
    if (std::uncaught_exceptions() > 0) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }
  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  void all_reduce(Tensor& t, ReduceOp op) override {
    if (t.device().is_cpu()) {
      if (mpi_) return mpi_->all_reduce(t, op);
      return staged(t, [&](Tensor& d) { all_reduce_async(d, op)->wait(); });
    }
    all_reduce_async(t, op)->wait();
  }
  std::unique_ptr<Request> all_reduce_async(Tensor& t, ReduceOp op) override {
    if (t.device().is_cpu()) {
      if (mpi_) return mpi_->all_reduce_async(t, op);
      all_reduce(t, op);  // staged through the device: complete on return
      return std::make_unique<DoneRequest>();
    }
    check(t);
    HZ_CHECK(op != ReduceOp::Mean || is_floating(t.dtype()), DTypeError, "average of an integer tensor");
    after_compute();
    HZ_NCCL_CHECK(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                                op == ReduceOp::Mean ? ncclAvg : op == ReduceOp::Max ? ncclMax : ncclSum, comm_, stream_));
    cudaEvent_t done;
    HZ_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    HZ_CUDA_CHECK(cudaEventRecord(done, stream_));
    return std::make_unique<NcclRequest>(done, t, compute_);
  }
  void broadcast(Tensor& t, int root) override {
    if (t.device().is_cpu()) {
      if (mpi_) return mpi_->broadcast(t, root);
      return staged(t, [&](Tensor& d) { broadcast(d, root); });
    }
    check(t);
    HZ_CHECK(root >= 0 && root < size_, ValueError, "broadcast root ", root, " is outside 0 .. ", size_ - 1);
    after_compute();
    HZ_NCCL_CHECK(ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root,
                                comm_, stream_));
    HZ_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void all_gather_into(const Tensor& in, Tensor& out) override {
    if (in.device().is_cpu()) {
      if (mpi_) return mpi_->all_gather_into(in, out);
      check_gather(in, out, size_);
      Tensor d_out = Tensor::empty(out.shape(), out.dtype(), Device::cuda(device_));
      all_gather_into(in.to(Device::cuda(device_)), d_out);  // staged through the device
      out.copy_(d_out);
      return;
    }
    check(in);
    check(out);
    check_gather(in, out, size_);
    after_compute();
    HZ_NCCL_CHECK(ncclAllGather(in.raw_data(), out.raw_data(), static_cast<size_t>(in.numel()), nccl_type(in.dtype()),
                                comm_, stream_));
    HZ_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void send_recv(const Tensor& send, int dest, Tensor& recv, int src) override {
    check_send_recv(send, dest, recv, src, size_);
    const bool cpu = (dest >= 0 && send.device().is_cpu()) || (src >= 0 && recv.device().is_cpu());
    if (cpu) {
      if (mpi_) return mpi_->send_recv(send, dest, recv, src);
      Tensor d_recv = src >= 0 ? Tensor::empty(recv.shape(), recv.dtype(), Device::cuda(device_)) : Tensor();
      send_recv(dest >= 0 ? send.to(Device::cuda(device_)) : Tensor(), dest, d_recv, src);  // staged
      if (src >= 0) recv.copy_(d_recv);
      return;
    }
    post_send_recv(send, dest, recv, src);
    HZ_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  std::unique_ptr<Request> send_recv_async(const Tensor& send, int dest, Tensor& recv, int src) override {
    check_send_recv(send, dest, recv, src, size_);
    const bool cpu = (dest >= 0 && send.device().is_cpu()) || (src >= 0 && recv.device().is_cpu());
    if (cpu) {
      if (mpi_) return mpi_->send_recv_async(send, dest, recv, src);
      send_recv(send, dest, recv, src);  // staged through the device: complete on return
      return std::make_unique<DoneRequest>();
    }
    post_send_recv(send, dest, recv, src);
    cudaEvent_t done;
    HZ_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    HZ_CUDA_CHECK(cudaEventRecord(done, stream_));
    return std::make_unique<NcclRequest>(done, send, compute_, recv);
  }
  std::unique_ptr<Communicator> split(int color) override {
    std::unique_ptr<Communicator> mpi_sub = mpi_ ? mpi_->split(color) : nullptr;
    ncclComm_t sub = nullptr;
    HZ_NCCL_CHECK(ncclCommSplit(comm_, color, rank_, &sub, nullptr));
    return std::make_unique<Nccl>(sub, std::move(mpi_sub), local_rank_, device_, compute_, stream_);
  }
  void barrier() override {
    if (mpi_) return mpi_->barrier();
    // a one-element all-reduce completes only once every rank has reached it
    Tensor one = Tensor::zeros({1}, DType::F32, Device::cuda(device_));
    all_reduce_async(one, ReduceOp::Sum);
    HZ_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  [[noreturn]] void abort(int code) noexcept override {
    ncclCommAbort(comm_);
    if (mpi_) mpi_->abort(code);  // ends every rank (MPI_Abort)
    std::_Exit(code);             // without MPI: this rank only
  }

 private:
  static bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16; }
  void check(const Tensor& t) const {
    HZ_CHECK(t.device().is_cuda(), DeviceError, "the NCCL communicator works on CUDA tensors; use MPI for CPU tensors");
    HZ_CHECK(t.device().index == device_, DeviceError, "NCCL communicator of CUDA device ", device_, " given a tensor on ",
             t.device().str());
    HZ_CHECK(t.is_contiguous(), ValueError, "collectives need contiguous tensors");
  }
  // the compute stream must have produced the buffer before the communication stream reads it
  // Queues a send to dest and a receive from src (-1: none) on the communication stream, after the
  // compute stream's queued work (device tensors).
  void post_send_recv(const Tensor& send, int dest, Tensor& recv, int src) {
    if (dest >= 0) check(send);
    if (src >= 0) check(recv);
    // the types first: a throw between ncclGroupStart and ncclGroupEnd would leave the group open
    const ncclDataType_t st = dest >= 0 ? nccl_type(send.dtype()) : ncclFloat32;
    const ncclDataType_t rt = src >= 0 ? nccl_type(recv.dtype()) : ncclFloat32;
    after_compute();
    HZ_NCCL_CHECK(ncclGroupStart());
    ncclResult_t r = ncclSuccess;
    if (dest >= 0) r = ncclSend(send.raw_data(), static_cast<size_t>(send.numel()), st, dest, comm_, stream_);
    if (r == ncclSuccess && src >= 0) r = ncclRecv(recv.raw_data(), static_cast<size_t>(recv.numel()), rt, src, comm_, stream_);
    const ncclResult_t end = ncclGroupEnd();
    HZ_NCCL_CHECK(r);
    HZ_NCCL_CHECK(end);
  }
  void after_compute() {
    cudaEvent_t ready;
    HZ_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    HZ_CUDA_CHECK(cudaEventRecord(ready, compute_));
    HZ_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
  }
  // A CPU tensor through NCCL: copy to the device (compute stream), run `op` on the copy, copy back
  // (the download waits for the compute stream, which waits for the collective).
  template <class F>
  void staged(Tensor& t, F op) {
    HZ_CHECK(t.is_contiguous(), ValueError, "collectives need contiguous tensors");
    nccl_type(t.dtype());  // refuse an unsupported dtype before any copy
    Tensor d = t.to(Device::cuda(device_));
    op(d);
    t.copy_(d);
  }
  std::unique_ptr<Communicator> mpi_;  // under mpirun (MPI builds): the MPI world and CPU collectives
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr, compute_ = nullptr;  // Horizon's streams of the device (not owned)
};

}  // namespace

bool nccl_compiled() { return true; }
std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before)
  if (v >= 20900) return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 1000) + "." + std::to_string(v / 100 % 10) + "." + std::to_string(v % 100);
}
std::unique_ptr<Communicator> make_nccl() { return std::make_unique<Nccl>(); }

}  // namespace hz::dist
