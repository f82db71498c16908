#include "distributed/communicator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "core/ops.h"

#ifdef HZ_HAVE_MPI
#include <mpi.h>
#endif

namespace hz::dist {

std::vector<int64_t> Communicator::all_gather(int64_t v) {
  Tensor t = Tensor::zeros({size()}, DType::I64);
  t.data<int64_t>()[rank()] = v;
  all_reduce(t, ReduceOp::Sum);
  std::vector<int64_t> out(size());
  for (int r = 0; r < size(); ++r) out[r] = t.data<int64_t>()[r];
  return out;
}

double Communicator::all_reduce_scalar(double v, ReduceOp op) {
  Tensor t = Tensor::full({1}, v, DType::F64);
  all_reduce(t, op);
  return t.data<double>()[0];
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

namespace {

// An integer environment variable; `fallback` when unset. Throws on anything but a whole number.
long env_int(const char* name, long fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr) return fallback;
  errno = 0;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  HZ_CHECK(*v != '\0' && end != v && *end == '\0' && errno == 0 && x >= -(1L << 30) && x <= (1L << 30), ValueError,
           name, "='", v, "' is not an integer");
  return x;
}

// One launcher's variables: its world size, rank and local rank.
struct Launcher {
  const char* name;
  const char* size;
  const char* rank;
  const char* local;
};
constexpr Launcher kHorizon{"Horizon's", "HZ_WORLD_SIZE", "HZ_RANK", "HZ_LOCAL_RANK"};
constexpr Launcher kTorchrun{"torchrun's", "WORLD_SIZE", "RANK", "LOCAL_RANK"};
// an srun step's tasks (SLURM_STEP_NUM_TASKS: set by srun, not in the batch script itself)
constexpr Launcher kSlurm{"Slurm's", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID"};

bool present(const Launcher& l) { return std::getenv(l.size) != nullptr; }

// Reads and checks one launcher's variables into w (rank required when the size is above 1).
void read_launcher(const Launcher& l, EnvWorld& w) {
  const long size = env_int(l.size, 1);
  HZ_CHECK(size >= 1, ValueError, l.size, "=", size, ": the number of ranks must be at least 1");
  HZ_CHECK(size == 1 || std::getenv(l.rank) != nullptr, ValueError, l.size, "=", size, " but ", l.rank,
           " is not set: give every process its rank (0 .. ", size - 1, ")");
  const long rank = env_int(l.rank, 0);
  HZ_CHECK(rank >= 0 && rank < size, ValueError, l.rank, "=", rank, " is outside 0 .. ", size - 1, " (", l.size, "=",
           size, std::getenv(l.size) ? "" : ", unset", ")");
  const long local = env_int(l.local, rank);
  HZ_CHECK(local >= 0 && local < size, ValueError, l.local, "=", local, " is outside 0 .. ", size - 1, " (", l.size,
           "=", size, ")");
  w.size = static_cast<int>(size);
  w.rank = static_cast<int>(rank);
  w.local_rank = static_cast<int>(local);
  w.launcher = l.name;
}

// A rank without its world: Horizon's or torchrun's rank or local rank set while that launcher's
// world size is not (a launch that lost a variable), or MPI's per-process variables without the
// ones mpirun sets (launched_by_mpirun()). Either would silently train as a world of one. Slurm's
// are left alone: a batch script's own shell has SLURM_PROCID=0 without an srun step's task count.
void check_no_stray_rank_variables() {
  for (const Launcher* l : {&kHorizon, &kTorchrun}) {
    if (present(*l)) continue;
    std::string found;
    for (const char* v : {l->rank, l->local})
      if (const char* x = std::getenv(v)) found += (found.empty() ? "" : " ") + std::string(v) + "=" + x;
    HZ_CHECK(found.empty(), ValueError, found, " set but ", l->size, " is not: this process would train alone as a "
             "world of one. Give every rank ", l->size, " (the number of ranks) too, or unset ", found.find(' ') ==
             std::string::npos ? "it" : "them");
  }
  if (launched_by_mpirun()) return;
  std::string found;
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "MPI_LOCALRANKID",
                        "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"})
    if (const char* x = std::getenv(v)) found += (found.empty() ? "" : " ") + std::string(v) + "=" + x;
  HZ_CHECK(found.empty(), ValueError, "MPI's ", found, " set without OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK "
           "(what mpirun or srun --mpi sets): this process was not started by mpirun and would train alone as a world "
           "of one. Start the ranks with mpirun, or unset these variables");
}

#ifdef HZ_HAVE_MPI
// An MPI world must be the one the launcher's variables describe: Open MPI started without mpirun
// (its variables set by hand or inherited) initialises a singleton world of one instead. The
// variables are read before MPI_Init, which rewrites some of them for a singleton.
struct MpiClaims {
  std::vector<std::pair<const char*, long>> sizes, ranks;
  MpiClaims() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
      if (std::getenv(v)) sizes.emplace_back(v, env_int(v, 0));
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
      if (std::getenv(v)) ranks.emplace_back(v, env_int(v, 0));
  }
  void check(int rank, int size) const {
    for (const auto& [v, n] : sizes)
      HZ_CHECK(n == size, ValueError, v, "=", n, " says this process is one of ", n, " ranks, but MPI started a world of ",
               size, ": it was not started by that many processes of one mpirun (variables set by hand or inherited?)");
    for (const auto& [v, r] : ranks)
      HZ_CHECK(r == rank, ValueError, v, "=", r, " says this process is rank ", r, ", but MPI made it rank ", rank, " of ",
               size, ": it was not started by mpirun (variables set by hand or inherited?)");
  }
};
#endif

}  // namespace

namespace {

constexpr double kMaxIdTimeoutS = 86400;

// The job's identity for the TCP rendezvous: the first source the launch set (communicator.h).
// Each is prefixed with its name, so ranks that read different sources never agree by accident.
void read_job_identity(EnvWorld& w) {
  if (const char* t = std::getenv("HZ_JOB_TOKEN")) {  // set by hand: empty is a mistake, not "unset"
    HZ_CHECK(*t != '\0', ValueError, "HZ_JOB_TOKEN is empty: set it to one random value shared by every rank of the "
             "launch, e.g. export HZ_JOB_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')");
  }
  const std::string slurm_step = std::getenv("SLURM_STEP_ID") ? std::getenv("SLURM_STEP_ID") : "";
  for (const char* v : {"HZ_JOB_TOKEN", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PMIX_NAMESPACE",
                        "OMPI_MCA_ess_base_jobid"}) {
    const char* x = std::getenv(v);
    if (x == nullptr || *x == '\0') continue;
    HZ_CHECK(std::strlen(x) <= 256, ValueError, v, " has ", std::strlen(x), " bytes; the job identity takes 256 at most");
    const bool slurm = std::strcmp(v, "SLURM_JOB_ID") == 0;
    w.job_identity = std::string(v) + "=" + x + (slurm ? " SLURM_STEP_ID=" + slurm_step : "");
    w.job_identity_from = slurm ? "SLURM_JOB_ID and SLURM_STEP_ID" : v;
    return;
  }
}

}  // namespace

bool launched_by_env() { return present(kHorizon) || present(kTorchrun) || present(kSlurm); }

namespace {

// The launcher's part of env_world(): size, rank, local rank and whose they are.
EnvWorld launcher_world() {
  check_no_stray_rank_variables();
  EnvWorld w;
  // Horizon's own variables, else torchrun's, else an srun step's. torchrun's win over Slurm's
  // without a check: `srun torchrun` makes Slurm's describe the per-node agent, not the worker.
  // Horizon's set by hand beside another launcher's must agree with them.
  if (present(kHorizon)) {
    read_launcher(kHorizon, w);
    for (const Launcher* other : {&kTorchrun, &kSlurm}) {
      if (!present(*other)) continue;
      EnvWorld o;
      read_launcher(*other, o);
      HZ_CHECK(o.size == w.size && o.rank == w.rank, ValueError, kHorizon.size, "=", w.size, " ", kHorizon.rank, "=",
               w.rank, " disagree with ", other->name, " ", other->size, "=", o.size, " ", other->rank, "=", o.rank,
               ": one launcher starts the ranks; unset the other's variables");
      if (other == &kTorchrun) break;  // Slurm's then describe torchrun's agent (srun torchrun)
    }
  } else if (present(kTorchrun)) {
    read_launcher(kTorchrun, w);
  } else if (present(kSlurm)) {
    read_launcher(kSlurm, w);
  }
  return w;
}

}  // namespace

EnvWorld env_world() {
  EnvWorld w = launcher_world();
  if (const char* f = std::getenv("HZ_NCCL_ID_FILE")) w.id_file = f;
  if (const char* a = std::getenv("MASTER_ADDR")) w.master_addr = a;
  if (std::getenv("MASTER_PORT")) {
    const long port = env_int("MASTER_PORT", 0);
    HZ_CHECK(port >= 1 && port <= 65535, ValueError, "MASTER_PORT=", port, " is not a TCP port (1 .. 65535)");
    w.master_port = static_cast<int>(port);
  }
  HZ_CHECK(w.size == 1 || !w.id_file.empty() || (!w.master_addr.empty() && w.master_port > 0), ValueError,
           w.launcher, " world of ", w.size, " ranks needs a way to share the NCCL unique id: MASTER_ADDR and MASTER_PORT "
           "(rank 0's host and a free port: a TCP rendezvous, as torchrun sets them) or HZ_NCCL_ID_FILE (a path every "
           "rank sees)");
  read_job_identity(w);
  HZ_CHECK(w.size == 1 || !w.id_file.empty() || !w.job_identity.empty(), ValueError, w.launcher, " world of ", w.size,
           " ranks meets over TCP at MASTER_ADDR:MASTER_PORT, which admits only ranks that share the job's identity, "
           "and this launch sets none: export HZ_JOB_TOKEN with one random value to every rank (e.g. export "
           "HZ_JOB_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')), or launch with torchrun "
           "(TORCHELASTIC_RUN_ID) or srun (SLURM_JOB_ID)");
  if (const char* t = std::getenv("HZ_NCCL_ID_TIMEOUT")) {
    // a plain decimal number: strtod alone would take "inf", "nan", "0x10" and " 5", and a wait of
    // years (or an overflowing deadline) is a typo, not a rendezvous
    const bool decimal = *t != '\0' && std::strspn(t, "0123456789.eE+-") == std::strlen(t);
    char* end = nullptr;
    errno = 0;
    const double s = decimal ? std::strtod(t, &end) : 0.0;
    HZ_CHECK(decimal && *end == '\0' && errno == 0 && s > 0 && s <= kMaxIdTimeoutS, ValueError, "HZ_NCCL_ID_TIMEOUT='",
             t, "' is not a number of seconds in (0, ", kMaxIdTimeoutS, "] (a day at most)");
    w.id_timeout_s = s;
  }
  return w;
}

void publish_id_file(const std::string& path, const void* data, size_t bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  HZ_CHECK(f != nullptr, Error, "cannot write the NCCL id file '", tmp, "' (HZ_NCCL_ID_FILE=", path,
           "): ", std::strerror(errno));
  const bool ok = std::fwrite(data, 1, bytes, f) == bytes && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  const int err = errno;
  std::fclose(f);
  if (!ok) {
    std::remove(tmp.c_str());
    throw Error("cannot write the NCCL id file '" + tmp + "': " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw Error("cannot rename '" + tmp + "' to the NCCL id file '" + path + "': " + std::strerror(e));
  }
}

void read_id_file(const std::string& path, void* data, size_t bytes, double timeout_s) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      HZ_CHECK(static_cast<size_t>(st.st_size) <= bytes, Error, "'", path, "' (HZ_NCCL_ID_FILE) has ", st.st_size,
               " bytes; an NCCL unique id has ", bytes, ": not an id file written by Horizon's rank 0?");
      if (static_cast<size_t>(st.st_size) == bytes) {  // smaller: still arriving (network filesystems)
        FILE* f = std::fopen(path.c_str(), "rb");
        if (f != nullptr) {
          const size_t got = std::fread(data, 1, bytes, f);
          std::fclose(f);
          if (got == bytes) return;
        }
      }
    }
    const double waited = std::chrono::duration<double>(clock::now() - t0).count();
    HZ_CHECK(waited < timeout_s, Error, "no NCCL id file '", path, "' (HZ_NCCL_ID_FILE) after ", timeout_s,
             " s: rank 0 writes it when it starts; is rank 0 running, with the same HZ_NCCL_ID_FILE on a filesystem "
             "this rank sees? (HZ_NCCL_ID_TIMEOUT sets the wait)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(200));
  }
}

void check_gather(const Tensor& in, const Tensor& out, int world) {
  HZ_CHECK(in.defined() && out.defined() && in.is_contiguous() && out.is_contiguous(), ValueError,
           "all_gather: needs defined, contiguous tensors");
  HZ_CHECK(out.numel() == in.numel() * world && out.dtype() == in.dtype() && out.device() == in.device(), ValueError,
           "all_gather: the output must hold ", world, " x ", in.numel(), " elements of ", dtype_name(in.dtype()), " on ",
           in.device().str(), ", got ", out.numel(), " of ", dtype_name(out.dtype()), " on ", out.device().str());
}

void check_send_recv(const Tensor& send, int dest, const Tensor& recv, int src, int world) {
  HZ_CHECK(dest >= -1 && dest < world && src >= -1 && src < world, ValueError, "send_recv: peers ", dest, " and ", src,
           " must be ranks 0 .. ", world - 1, " or -1");
  HZ_CHECK(dest < 0 || (send.defined() && send.is_contiguous()), ValueError, "send_recv: the sent tensor must be contiguous");
  HZ_CHECK(src < 0 || (recv.defined() && recv.is_contiguous()), ValueError, "send_recv: the receiving tensor must be contiguous");
  HZ_CHECK(dest < 0 || src < 0 || send.device() == recv.device(), ValueError, "send_recv: tensors on ", send.device().str(),
           " and ", recv.device().str());
}

namespace {

class DoneRequest : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class Local : public Communicator {
 public:
  std::string name() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  void all_reduce(Tensor&, ReduceOp) override {}
  std::unique_ptr<Request> all_reduce_async(Tensor&, ReduceOp) override { return std::make_unique<DoneRequest>(); }
  void broadcast(Tensor&, int) override {}
  void all_gather_into(const Tensor& in, Tensor& out) override {
    check_gather(in, out, 1);
    out.copy_(in.reshape(out.shape()));
  }
  void send_recv(const Tensor& send, int dest, Tensor& recv, int src) override {
    check_send_recv(send, dest, recv, src, 1);
    HZ_CHECK((dest < 0) == (src < 0), ValueError, "send_recv: a world of one rank sends only to itself");
    if (dest == 0) {
      HZ_CHECK(send.numel() == recv.numel() && send.dtype() == recv.dtype(), ValueError,
               "send_recv: sent and received tensors differ in size or dtype");
      recv.copy_(send.reshape(recv.shape()));
    }
  }
  std::unique_ptr<Request> send_recv_async(const Tensor& send, int dest, Tensor& recv, int src) override {
    send_recv(send, dest, recv, src);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Communicator> split(int) override { return std::make_unique<Local>(); }
  void barrier() override {}
  [[noreturn]] void abort(int code) noexcept override { std::_Exit(code); }
};

#ifdef HZ_HAVE_MPI
void mpi_check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw Error(std::string(what) + " failed: " + std::string(msg, len));
  }
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    default: throw DTypeError(std::string("MPI collectives support f32/f64/i32/i64, got ") + dtype_name(t));
  }
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }  // Mean: a sum, then scaled

void check_buffer(const Tensor& t) {
  HZ_CHECK(t.device().is_cpu(), DeviceError, "the MPI communicator works on CPU tensors; use NCCL for ", t.device().str());
  HZ_CHECK(t.is_contiguous(), ValueError, "collectives need contiguous tensors");
}

void scale_average(Tensor& t, int world) {
  if (world == 1) return;
  if (t.dtype() == DType::F32) {
    float* p = t.data<float>();
    const float s = 1.0f / world;
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= s;
  } else if (t.dtype() == DType::F64) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] /= world;
  } else {
    throw DTypeError("average of an integer tensor");
  }
}

// Up to two posted MPI operations, complete at wait(); `finish` runs once with their statuses (the
// all-reduce's averaging, send_recv's size check). Keeps the tensors alive until then.
class MpiRequest : public Request {
 public:
  using Finish = std::function<void(const MPI_Status*)>;
  MpiRequest(std::vector<MPI_Request> reqs, std::vector<Tensor> keep, Finish finish)
      : reqs_(std::move(reqs)), keep_(std::move(keep)), finish_(std::move(finish)), st_(reqs_.size()) {}
  ~MpiRequest() override {
    if (!done_) {
      try {
        wait();
      } catch (...) {
      }
    }
  }
  void wait() override {
    if (done_) return;
    mpi_check(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), st_.data()), "MPI_Waitall");
    finish();
  }
  bool test() override {
    if (done_) return true;
    int flag = 0;
    mpi_check(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, st_.data()), "MPI_Testall");
    if (flag) finish();
    return done_;
  }

 private:
  void finish() {
    done_ = true;
    if (finish_) finish_(st_.data());
  }
  std::vector<MPI_Request> reqs_;
  std::vector<Tensor> keep_;
  Finish finish_;
  std::vector<MPI_Status> st_;
  bool done_ = false;
};

class Mpi : public Communicator {
 public:
  Mpi() {
    const MpiClaims claims;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      owner_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    init(MPI_COMM_WORLD);
    try {
      claims.check(rank_, size_);
    } catch (...) {
      if (owner_) MPI_Finalize();
      throw;
    }
  }
  // a sub-communicator (split): owns comm
  explicit Mpi(MPI_Comm comm) : own_comm_(true) {
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    init(comm);
  }
  ~Mpi() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (own_comm_ && !finalized) MPI_Comm_free(&comm_);
    if (owner_ && !finalized) MPI_Finalize();
  }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  void all_reduce(Tensor& t, ReduceOp op) override {
    check_buffer(t);
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()), mpi_type(t.dtype()), mpi_op(op),
                            comm_),
              "MPI_Allreduce");
    if (op == ReduceOp::Mean) scale_average(t, size_);
  }
  std::unique_ptr<Request> all_reduce_async(Tensor& t, ReduceOp op) override {
    check_buffer(t);
    MPI_Request req;
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, t.raw_data(), static_cast<int>(t.numel()), mpi_type(t.dtype()), mpi_op(op),
                             comm_, &req),
              "MPI_Iallreduce");
    MpiRequest::Finish avg;
    if (op == ReduceOp::Mean) avg = [t, n = size_](const MPI_Status*) mutable { scale_average(t, n); };
    return std::make_unique<MpiRequest>(std::vector<MPI_Request>{req}, std::vector<Tensor>{t}, std::move(avg));
  }
  void broadcast(Tensor& t, int root) override {
    check_buffer(t);
    mpi_check(MPI_Bcast(t.raw_data(), static_cast<int>(t.numel() * dtype_size(t.dtype())), MPI_BYTE, root, comm_),
              "MPI_Bcast");
  }
  void all_gather_into(const Tensor& in, Tensor& out) override {
    check_buffer(in);
    check_buffer(out);
    check_gather(in, out, size_);
    const int64_t bytes = in.numel() * dtype_size(in.dtype());
    HZ_CHECK(bytes <= INT32_MAX, ValueError, "all_gather: ", bytes, " bytes per rank exceed MPI's int count; gather in parts");
    mpi_check(MPI_Allgather(in.raw_data(), static_cast<int>(bytes), MPI_BYTE, out.raw_data(), static_cast<int>(bytes),
                            MPI_BYTE, comm_),
              "MPI_Allgather");
  }
  void send_recv(const Tensor& send, int dest, Tensor& recv, int src) override {
    send_recv_async(send, dest, recv, src)->wait();
  }
  std::unique_ptr<Request> send_recv_async(const Tensor& send, int dest, Tensor& recv, int src) override {
    check_send_recv(send, dest, recv, src, size_);
    if (dest >= 0) check_buffer(send);
    if (src >= 0) check_buffer(recv);
    const int64_t sb = dest >= 0 ? send.numel() * dtype_size(send.dtype()) : 0;
    const int64_t rb = src >= 0 ? recv.numel() * dtype_size(recv.dtype()) : 0;
    HZ_CHECK(sb <= INT32_MAX && rb <= INT32_MAX, ValueError, "send_recv: more bytes than MPI's int count; send in parts");
    MPI_Request rr = MPI_REQUEST_NULL, sr = MPI_REQUEST_NULL;
    if (src >= 0) mpi_check(MPI_Irecv(recv.raw_data(), static_cast<int>(rb), MPI_BYTE, src, 8, comm_, &rr), "MPI_Irecv");
    if (dest >= 0)
      mpi_check(MPI_Isend(send.raw_data(), static_cast<int>(sb), MPI_BYTE, dest, 8, comm_, &sr), "MPI_Isend");
    return std::make_unique<MpiRequest>(
        std::vector<MPI_Request>{sr, rr}, std::vector<Tensor>{send, recv}, [rb, src](const MPI_Status* st) {
          if (src < 0) return;
          int got = 0;
          MPI_Get_count(&st[1], MPI_BYTE, &got);
          HZ_CHECK(got == rb, ValueError, "send_recv: rank ", src, " sent ", got, " bytes, ", rb, " expected");
        });
  }
  std::unique_ptr<Communicator> split(int color) override {
    MPI_Comm sub;
    mpi_check(MPI_Comm_split(comm_, color, rank_, &sub), "MPI_Comm_split");
    return std::make_unique<Mpi>(sub);
  }
  void barrier() override { mpi_check(MPI_Barrier(comm_), "MPI_Barrier"); }
  [[noreturn]] void abort(int code) noexcept override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  void init(MPI_Comm comm) {
    comm_ = comm;
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm local;
    mpi_check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local), "MPI_Comm_split_type");
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_free(&local);
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  bool owner_ = false, own_comm_ = false;
};
#endif

}  // namespace

std::unique_ptr<Communicator> make_local() { return std::make_unique<Local>(); }

bool mpi_compiled() {
#ifdef HZ_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> make_mpi() {
#ifdef HZ_HAVE_MPI
  return std::make_unique<Mpi>();
#else
  throw Error("this Horizon build has no MPI support; reconfigure with -DHZ_MPI=ON (package libopenmpi-dev)");
#endif
}

std::unique_ptr<Communicator> from_environment() {
  if (launched_by_mpirun()) {
    HZ_CHECK(mpi_compiled(), Error, "launched by mpirun but this Horizon build has no MPI support; rebuild with -DHZ_MPI=ON");
    return make_mpi();
  }
  // the launcher's variables alone: CPU ranks are refused before what only NCCL's rendezvous needs
  const EnvWorld w = launcher_world();
  HZ_CHECK(w.size == 1, Error, w.launcher, " world of ", w.size, " ranks (", w.launcher == "Horizon's" ? "HZ_WORLD_SIZE"
           : w.launcher == "torchrun's" ? "WORLD_SIZE" : "SLURM_STEP_NUM_TASKS", "=", w.size, ") launches ranks through "
           "NCCL, which needs CUDA tensors (run.device=cuda); CPU ranks run under mpirun (or srun --mpi=pmix)");
  if (launched_by_env()) (void)env_world();  // the rest of the variables, checked all the same
  return make_local();
}

}  // namespace hz::dist
