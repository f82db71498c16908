// Ranks started without MPI (issue 39): which launcher's variables give the world, in one documented
// precedence with conflicts refused; rank 0's NCCL id handed over by file or over TCP
// (MASTER_ADDR / MASTER_PORT), between real processes on the CPU, and every failure named.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "distributed/communicator.h"
#include "distributed/rendezvous.h"

using namespace hz;

namespace {

const char* const kNames[] = {"HZ_RANK", "HZ_WORLD_SIZE", "HZ_LOCAL_RANK", "HZ_NCCL_ID_FILE", "HZ_NCCL_ID_TIMEOUT",
                              "RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID",
                              "SLURM_LOCALID", "MASTER_ADDR", "MASTER_PORT",
                              // MPI's (launched_by_mpirun() and the stray-variable check)
                              "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_SIZE",
                              "PMI_RANK", "PMIX_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
                              // the job identity's sources
                              "HZ_JOB_TOKEN", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE",
                              "OMPI_MCA_ess_base_jobid"};

// Sets exactly these launcher variables for its lifetime, then restores the process's own.
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& vars) {
    for (const char* n : kNames) {
      if (const char* v = std::getenv(n)) saved_[n] = v;
      unsetenv(n);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~Env() {
    for (const char* n : kNames) {
      auto it = saved_.find(n);
      if (it == saved_.end()) unsetenv(n);
      else setenv(n, it->second.c_str(), 1);
    }
  }

 private:
  std::map<std::string, std::string> saved_;
};

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no exception";
}
bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Forks a process that runs f and exits 0 when it returns, 1 when it throws.
pid_t spawn(const std::function<void()>& f) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    int code = 0;
    try {
      f();
    } catch (...) {
      code = 1;
    }
    std::_Exit(code);
  }
  return pid;
}
// Runs f in a forked process (MPI initialises once per process) and returns what it threw there,
// "no exception" when it returned.
std::string error_in_child(const std::function<void()>& f) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    ::close(fds[0]);
    std::string m = "no exception";
    try {
      f();
    } catch (const std::exception& e) {
      m = e.what();
    }
    if (::write(fds[1], m.data(), m.size()) < 0) std::_Exit(2);
    std::_Exit(0);
  }
  ::close(fds[1]);
  std::string m;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) m.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  waitpid(pid, nullptr, 0);
  return m;
}
int exit_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<unsigned char> payload() {
  std::vector<unsigned char> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<unsigned char>(i * 7 + 3);
  return id;
}

}  // namespace

TEST(Launchers, DefaultsToAWorldOfOne) {
  Env e({});
  EXPECT_FALSE(dist::launched_by_env());
  const dist::EnvWorld w = dist::env_world();
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.size, 1);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_TRUE(w.id_file.empty());
  EXPECT_EQ(w.id_timeout_s, 120);
}

TEST(Launchers, EachLaunchersVariablesAlone) {
  struct Case {
    std::map<std::string, std::string> vars;
    int size, rank, local;
    std::string who;
  };
  for (const Case& c : std::vector<Case>{
           {{{"HZ_WORLD_SIZE", "4"}, {"HZ_RANK", "3"}, {"HZ_NCCL_ID_FILE", "/shared/id"}}, 4, 3, 3, "Horizon's"},
           {{{"WORLD_SIZE", "8"}, {"RANK", "5"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"},
             {"TORCHELASTIC_RUN_ID", "r1"}},
            8, 5, 1, "torchrun's"},
           {{{"SLURM_STEP_NUM_TASKS", "16"}, {"SLURM_PROCID", "9"}, {"SLURM_LOCALID", "1"}, {"MASTER_ADDR", "n1"},
             {"MASTER_PORT", "1234"}, {"SLURM_JOB_ID", "77"}},
            16, 9, 1, "Slurm's"}}) {
    Env e(c.vars);
    EXPECT_TRUE(dist::launched_by_env());
    const dist::EnvWorld w = dist::env_world();
    EXPECT_EQ(w.size, c.size) << c.who;
    EXPECT_EQ(w.rank, c.rank) << c.who;
    EXPECT_EQ(w.local_rank, c.local) << c.who;
    EXPECT_EQ(w.launcher, c.who);
  }
  Env e({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}, {"HZ_NCCL_ID_TIMEOUT", "2.5"},
         {"TORCHELASTIC_RUN_ID", "r1"}});
  const dist::EnvWorld w = dist::env_world();
  EXPECT_EQ(w.master_addr, "h");
  EXPECT_EQ(w.master_port, 29500);
  EXPECT_EQ(w.local_rank, 1);  // defaults to the rank
  EXPECT_DOUBLE_EQ(w.id_timeout_s, 2.5);
}

TEST(Launchers, PrecedenceAndConflicts) {
  {  // srun torchrun: Slurm's describe the per-node agent; torchrun's are the worker's
    Env e({{"WORLD_SIZE", "8"}, {"RANK", "6"}, {"LOCAL_RANK", "2"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"},
           {"SLURM_LOCALID", "0"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "r1"}});
    const dist::EnvWorld w = dist::env_world();
    EXPECT_EQ(w.launcher, "torchrun's");
    EXPECT_EQ(w.size, 8);
    EXPECT_EQ(w.rank, 6);
  }
  {  // Horizon's agreeing with Slurm's
    Env e({{"HZ_WORLD_SIZE", "2"}, {"HZ_RANK", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"},
           {"HZ_NCCL_ID_FILE", "/x"}});
    EXPECT_EQ(dist::env_world().launcher, "Horizon's");
  }
  {  // Horizon's set by hand against torchrun's: refused, naming both
    Env e({{"HZ_WORLD_SIZE", "4"}, {"HZ_RANK", "1"}, {"WORLD_SIZE", "2"}, {"RANK", "0"}, {"HZ_NCCL_ID_FILE", "/x"}});
    const std::string m = error_of([] { dist::env_world(); });
    EXPECT_TRUE(has(m, "HZ_WORLD_SIZE=4 HZ_RANK=1 disagree with torchrun's WORLD_SIZE=2 RANK=0")) << m;
  }
  {
    Env e({{"HZ_WORLD_SIZE", "2"}, {"HZ_RANK", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"},
           {"HZ_NCCL_ID_FILE", "/x"}});
    EXPECT_TRUE(has(error_of([] { dist::env_world(); }), "disagree with Slurm's SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1"));
  }
}

TEST(Launchers, BadValuesAreRefusedByName) {
  const auto err = [](std::map<std::string, std::string> vars) {
    Env e(vars);
    return error_of([] { dist::env_world(); });
  };
  EXPECT_TRUE(has(err({{"HZ_WORLD_SIZE", "two"}}), "HZ_WORLD_SIZE='two' is not an integer"));
  EXPECT_TRUE(has(err({{"WORLD_SIZE", "2x"}, {"RANK", "0"}}), "WORLD_SIZE='2x' is not an integer"));
  EXPECT_TRUE(has(err({{"HZ_WORLD_SIZE", "0"}}), "at least 1"));
  EXPECT_TRUE(has(err({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}), "RANK is not set"));
  EXPECT_TRUE(has(err({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "2"}}), "SLURM_PROCID=2 is outside 0 .. 1"));
  EXPECT_TRUE(has(err({{"HZ_WORLD_SIZE", "2"}, {"HZ_RANK", "1"}, {"HZ_LOCAL_RANK", "x"}, {"HZ_NCCL_ID_FILE", "/x"}}),
                  "HZ_LOCAL_RANK='x'"));
  EXPECT_TRUE(has(err({{"WORLD_SIZE", "2"}, {"RANK", "1"}}), "needs a way to share the NCCL unique id: MASTER_ADDR"));
  EXPECT_TRUE(has(err({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                  "MASTER_PORT=70000 is not a TCP port"));
  EXPECT_TRUE(has(err({{"HZ_NCCL_ID_TIMEOUT", "-3"}}), "HZ_NCCL_ID_TIMEOUT"));
  // CPU ranks without mpirun: refused, naming the launcher's variable
  {
    Env e({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "r"}});
    EXPECT_TRUE(has(error_of([] { dist::from_environment(); }), "torchrun's world of 2 ranks (WORLD_SIZE=2)"));
  }
  {  // that refusal first, before what only NCCL's rendezvous would need
    Env e({{"WORLD_SIZE", "2"}, {"RANK", "0"}});
    EXPECT_TRUE(has(error_of([] { dist::from_environment(); }), "torchrun's world of 2 ranks (WORLD_SIZE=2)"));
  }
  Env e({{"HZ_WORLD_SIZE", "1"}, {"HZ_NCCL_ID_TIMEOUT", "inf"}});  // a world of one checks them all the same
  EXPECT_TRUE(has(error_of([] { dist::from_environment(); }), "HZ_NCCL_ID_TIMEOUT='inf'"));
}

TEST(Launchers, TheIdTimeoutIsAPlainBoundedNumber) {
  const auto err = [](const char* v) {
    Env e(std::map<std::string, std::string>{{"HZ_NCCL_ID_TIMEOUT", v}});
    return error_of([] { dist::env_world(); });
  };
  // infinite, absurd or not a decimal number: each one a deadline that never comes (or overflows)
  for (const char* bad : {"inf", "infinity", "nan", "1e400", "1e9", "86401", "abc", "", "0", "-1", "0x10", " 5", "5s"})
    EXPECT_TRUE(has(err(bad), std::string("HZ_NCCL_ID_TIMEOUT='") + bad + "' is not a number of seconds in (0, 86400]"))
        << bad << ": " << err(bad);
  for (const auto& [v, s] : std::vector<std::pair<const char*, double>>{{"2.5", 2.5}, {"86400", 86400}, {"1e2", 100}}) {
    Env e(std::map<std::string, std::string>{{"HZ_NCCL_ID_TIMEOUT", v}});
    EXPECT_DOUBLE_EQ(dist::env_world().id_timeout_s, s) << v;
  }
}

// A rank without its world (issue: hardening, third round): a launch that lost its world size, or
// MPI's variables without mpirun, used to train silently as a world of one.
TEST(Launchers, ARankWithoutItsWorldIsRefused) {
  struct Case {
    std::map<std::string, std::string> vars;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{{"HZ_RANK", "1"}}, "HZ_RANK=1 set but HZ_WORLD_SIZE is not"},
           {{{"HZ_LOCAL_RANK", "0"}, {"HZ_RANK", "3"}}, "HZ_RANK=3 HZ_LOCAL_RANK=0 set but HZ_WORLD_SIZE is not"},
           {{{"RANK", "0"}}, "RANK=0 set but WORLD_SIZE is not"},
           {{{"LOCAL_RANK", "1"}}, "LOCAL_RANK=1 set but WORLD_SIZE is not"},
           {{{"RANK", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}},
            "RANK=2 LOCAL_RANK=0 set but WORLD_SIZE is not"},
           {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}},
            "MPI's OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=1 set without OMPI_COMM_WORLD_SIZE, PMI_SIZE or "
            "PMIX_RANK"},
           {{{"PMI_RANK", "3"}}, "MPI's PMI_RANK=3 set without"},
           {{{"MV2_COMM_WORLD_SIZE", "4"}}, "MPI's MV2_COMM_WORLD_SIZE=4 set without"}}) {
    Env e(c.vars);
    EXPECT_TRUE(has(error_of([] { dist::from_environment(); }), c.says)) << error_of([] { dist::from_environment(); });
    EXPECT_TRUE(has(error_of([] { dist::env_world(); }), c.says)) << c.says;  // make_nccl's path
  }
  {  // the world's own variables beside them are fine; so is a batch script's SLURM_PROCID=0 alone
    Env e({{"HZ_WORLD_SIZE", "1"}, {"HZ_RANK", "0"}});
    EXPECT_EQ(dist::from_environment()->name(), "local");
  }
  {
    Env e({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}});
    EXPECT_EQ(dist::from_environment()->name(), "local");
  }
  if (!dist::mpi_compiled()) return;
  {  // mpirun's variables by hand: Open MPI starts a singleton world of one, which must not pass for rank 1 of 2
    Env e({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}});
    const std::string m = error_in_child([] { dist::from_environment(); });
    EXPECT_TRUE(has(m, "OMPI_COMM_WORLD_SIZE=2 says this process is one of 2 ranks, but MPI started a world of 1")) << m;
  }
  {
    Env e(std::map<std::string, std::string>{{"PMIX_RANK", "3"}});
    const std::string m = error_in_child([] { dist::from_environment(); });
    EXPECT_TRUE(has(m, "PMIX_RANK=3 says this process is rank 3, but MPI made it rank 0 of 1")) << m;
  }
}

TEST(Launchers, IdFileRoundTripAndTimeout) {
  const std::string path = (std::filesystem::temp_directory_path() / ("hz_id_" + std::to_string(getpid()))).string();
  std::filesystem::remove(path);
  const std::vector<unsigned char> id = payload();
  std::vector<unsigned char> got(id.size(), 0);
  std::thread writer([&] {  // the reader starts first and polls until rank 0's file appears
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    dist::publish_id_file(path, id.data(), id.size());
  });
  dist::read_id_file(path, got.data(), got.size(), 10.0);
  writer.join();
  EXPECT_EQ(got, id);
  { std::ofstream(path, std::ios::binary) << std::string(300, 'x'); }
  EXPECT_TRUE(has(error_of([&] { dist::read_id_file(path, got.data(), got.size(), 1.0); }), "300 bytes"));
  std::filesystem::remove(path);
  EXPECT_TRUE(has(error_of([&] { dist::read_id_file(path, got.data(), got.size(), 0.3); }), "no NCCL id file '" + path + "'"));
  EXPECT_TRUE(has(error_of([&] { dist::publish_id_file("/nonexistent_dir_hz/id", id.data(), id.size()); }),
                  "cannot write the NCCL id file"));
}

// The job identity (hardening, third round): the TCP rendezvous admits only ranks of this launch.
TEST(Launchers, TheJobIdentityComesFromTheLaunch) {
  const std::map<std::string, std::string> tcp = {{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "h"},
                                                  {"MASTER_PORT", "29500"}};
  const auto with = [&](std::map<std::string, std::string> more) {
    more.insert(tcp.begin(), tcp.end());
    return more;
  };
  {  // none: refused, naming what to set
    Env e(tcp);
    const std::string m = error_of([] { dist::env_world(); });
    EXPECT_TRUE(has(m, "meets over TCP at MASTER_ADDR:MASTER_PORT, which admits only ranks that share the job's "
                       "identity, and this launch sets none: export HZ_JOB_TOKEN")) << m;
  }
  struct Case {
    std::map<std::string, std::string> vars;
    std::string identity, from;
  };
  for (const Case& c : std::vector<Case>{
           {{{"HZ_JOB_TOKEN", "s3cret"}, {"TORCHELASTIC_RUN_ID", "r1"}, {"SLURM_JOB_ID", "77"}}, "HZ_JOB_TOKEN=s3cret",
            "HZ_JOB_TOKEN"},
           {{{"TORCHELASTIC_RUN_ID", "r1"}, {"SLURM_JOB_ID", "77"}}, "TORCHELASTIC_RUN_ID=r1", "TORCHELASTIC_RUN_ID"},
           {{{"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "3"}, {"PMIX_NAMESPACE", "ns"}}, "SLURM_JOB_ID=77 SLURM_STEP_ID=3",
            "SLURM_JOB_ID and SLURM_STEP_ID"},
           {{{"TORCHELASTIC_RUN_ID", ""}, {"PMIX_NAMESPACE", "ns"}, {"OMPI_MCA_ess_base_jobid", "9"}}, "PMIX_NAMESPACE=ns",
            "PMIX_NAMESPACE"},
           {{{"OMPI_MCA_ess_base_jobid", "9"}}, "OMPI_MCA_ess_base_jobid=9", "OMPI_MCA_ess_base_jobid"}}) {
    Env e(with(c.vars));
    const dist::EnvWorld w = dist::env_world();
    EXPECT_EQ(w.job_identity, c.identity);
    EXPECT_EQ(w.job_identity_from, c.from);
  }
  {
    Env e(with({{"HZ_JOB_TOKEN", ""}, {"TORCHELASTIC_RUN_ID", "r1"}}));
    EXPECT_TRUE(has(error_of([] { dist::env_world(); }), "HZ_JOB_TOKEN is empty"));
  }
  {
    Env e(with({{"TORCHELASTIC_RUN_ID", std::string(300, 'x')}}));
    EXPECT_TRUE(has(error_of([] { dist::env_world(); }), "TORCHELASTIC_RUN_ID has 300 bytes"));
  }
  {  // the id file needs none
    Env e({{"HZ_WORLD_SIZE", "2"}, {"HZ_RANK", "1"}, {"HZ_NCCL_ID_FILE", "/x"}});
    EXPECT_TRUE(dist::env_world().job_identity.empty());
  }
}

namespace {

dist::RendezvousOptions options(const std::string& identity, double timeout_s, double handshake_s = 5) {
  dist::RendezvousOptions o;
  o.identity = identity;
  o.identity_from = "HZ_JOB_TOKEN";
  o.timeout_s = timeout_s;
  o.handshake_s = handshake_s;
  return o;
}

// Rank 0's log lines, collected from its thread.
struct Log {
  std::mutex m;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) {
      std::lock_guard<std::mutex> g(m);
      lines.push_back(l);
    };
  }
  size_t count(const std::string& sub) {
    std::lock_guard<std::mutex> g(m);
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return has(l, sub); });
  }
  bool wait_for(const std::string& sub, size_t n, double s) {  // polls: the lines come from another thread
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
    while (count(sub) < n) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
};

// A raw connection to the rendezvous port (retrying while rank 0 starts) that sends `bytes`.
int connect_and_send(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  for (int i = 0; i < 500 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!bytes.empty() && ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
    ADD_FAILURE() << "could not send to the rendezvous";
  return fd;
}
std::string words(std::initializer_list<uint32_t> ws) {  // the protocol's u32s, little-endian
  std::string s;
  for (uint32_t v : ws) s.append(reinterpret_cast<const char*>(&v), 4);
  return s;
}
constexpr uint32_t kMagic = 0x56525a48;  // "HZRV"
std::string hello(uint32_t version, uint32_t size, uint32_t rank, const std::string& nonce = "abcdefghijklmnop") {
  return words({kMagic, version, size, rank}) + nonce;
}
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Ranks 1 .. size-1 of the job, each a process that checks it got payload(); their pids.
std::vector<pid_t> ranks(int port, int size, const std::string& identity, double timeout_s) {
  std::vector<pid_t> kids;
  for (int r = 1; r < size; ++r)
    kids.push_back(spawn([=] {
      std::vector<unsigned char> got(128, 0);
      dist::tcp_rendezvous("localhost", port, r, size, got.data(), got.size(), options(identity, timeout_s));
      if (got != payload()) throw std::runtime_error("wrong bytes");
    }));
  return kids;
}

}  // namespace

TEST(Rendezvous, RankZerosBytesReachEveryRankOverTcp) {
  const int port = free_port(), size = 4;
  const std::vector<pid_t> kids = ranks(port, size, "HZ_JOB_TOKEN=t", 20);
  std::vector<unsigned char> id = payload();
  dist::tcp_rendezvous("localhost", port, 0, size, id.data(), id.size(), options("HZ_JOB_TOKEN=t", 20));
  for (pid_t k : kids) EXPECT_EQ(exit_code(k), 0);
}

// Strangers on the port (issue: hardening, third round): each is dropped and logged once, naming its
// address and why, and the job's own ranks still meet, long before the deadline.
TEST(Rendezvous, StrangersAreDroppedAndLoggedAndTheJobCompletes) {
  const int port = free_port(), size = 3;
  const std::string identity = "HZ_JOB_TOKEN=right";
  Log log;
  dist::RendezvousOptions opt = options(identity, 20, 0.5);
  opt.log = log.sink();
  std::vector<unsigned char> id = payload();
  std::string root_error;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread root([&] { root_error = error_of([&] { dist::tcp_rendezvous("127.0.0.1", port, 0, size, id.data(), id.size(), opt); }); });
  std::vector<int> held = {
      connect_and_send(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
      connect_and_send(port, hello(1, 3, 1).substr(0, 16)),  // protocol 1's 16-byte hello
      connect_and_send(port, hello(2, 4, 1)),                // another world size
      connect_and_send(port, hello(2, 3, 7)),                // a rank out of range
      connect_and_send(port, hello(2, 3, 1, "bad nonce!!!!!!!")),
      connect_and_send(port, ""),                            // silent
  };
  // a rank of another job (another identity): rank 0's proof fails there, and it hangs up
  const std::string other = error_in_child([&] {
    std::vector<unsigned char> got(128, 0);
    dist::tcp_rendezvous("127.0.0.1", port, 1, size, got.data(), got.size(), options("HZ_JOB_TOKEN=wrong", 10));
  });
  EXPECT_TRUE(has(other, "does not know this job's identity (HZ_JOB_TOKEN): another job's rank 0 holds the port")) << other;
  EXPECT_TRUE(log.wait_for("127.0.0.1:", held.size() + 1, 10)) << "rank 0 logged " << log.count("") << " lines";
  const std::vector<pid_t> kids = ranks(port, size, identity, 20);
  root.join();
  EXPECT_EQ(root_error, "no exception");
  EXPECT_LT(since(t0), 10.0);  // the deadline is 20 s
  for (pid_t k : kids) EXPECT_EQ(exit_code(k), 0);
  for (int fd : held) ::close(fd);
  // one line per stranger, each naming its address and why
  EXPECT_EQ(log.count("dropped the connection from 127.0.0.1:"), held.size() + 1);
  EXPECT_EQ(log.count("not a Horizon rank"), 1u);
  EXPECT_EQ(log.count("it speaks rendezvous protocol 1, this rank 0 protocol 2"), 1u);
  EXPECT_EQ(log.count("it claims rank 1 of a world of 4 ranks; this job has 3"), 1u);
  EXPECT_EQ(log.count("it claims rank 7, outside 1 .. 2"), 1u);
  EXPECT_EQ(log.count("nonce is malformed"), 1u);
  EXPECT_EQ(log.count("it sent nothing within 0.5 s"), 1u);
  EXPECT_EQ(log.count("it closed before proving the job identity"), 1u);
  EXPECT_EQ(log.count(""), held.size() + 1) << "one line per connection";
}

// Without a log sink (as NCCL's bootstrap runs it) the lines go to rank 0's stderr.
TEST(Rendezvous, DroppedConnectionsAreLoggedOnStderr) {
  const int port = free_port();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::fflush(nullptr);
  const pid_t root = fork();
  if (root == 0) {
    alarm(60);
    ::close(fds[0]);
    ::dup2(fds[1], 2);
    std::vector<unsigned char> id = payload();
    int code = 0;
    try {
      dist::tcp_rendezvous("127.0.0.1", port, 0, 2, id.data(), id.size(), options("t", 10));
    } catch (...) {
      code = 1;
    }
    std::_Exit(code);
  }
  ::close(fds[1]);
  const int stranger = connect_and_send(port, "GET / HTTP/1.1\r\n\r\n");
  char c;
  EXPECT_EQ(::recv(stranger, &c, 1, 0), 0);  // rank 0 hung up on it
  ::close(stranger);
  const std::vector<pid_t> kids = ranks(port, 2, "t", 10);
  EXPECT_EQ(exit_code(root), 0);
  for (pid_t k : kids) EXPECT_EQ(exit_code(k), 0);
  std::string err;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  EXPECT_TRUE(has(err, "horizon: rendezvous on port " + std::to_string(port) + ": dropped the connection from 127.0.0.1:"))
      << err;
  EXPECT_TRUE(has(err, "not a Horizon rank")) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

// Silent connections are waited on side by side with the ranks' handshakes, each with its own
// deadline: they cannot use up the rendezvous' (hardening, third round: four of them made a 30 s
// rendezvous fail, and rank 0 blamed rank 1).
TEST(Rendezvous, SilentConnectionsCannotEatTheDeadline) {
  const int port = free_port(), size = 2;
  Log log;
  dist::RendezvousOptions opt = options("HZ_JOB_TOKEN=t", 6, 5);  // each silent one may take 5 of the 6 s
  opt.log = log.sink();
  std::vector<unsigned char> id = payload();
  std::string root_error;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread root([&] { root_error = error_of([&] { dist::tcp_rendezvous("127.0.0.1", port, 0, size, id.data(), id.size(), opt); }); });
  std::vector<int> silent;
  for (int k = 0; k < 4; ++k) silent.push_back(connect_and_send(port, ""));
  const std::vector<pid_t> kids = ranks(port, size, "HZ_JOB_TOKEN=t", 6);
  root.join();
  EXPECT_EQ(root_error, "no exception");
  EXPECT_LT(since(t0), 3.0);
  for (pid_t k : kids) EXPECT_EQ(exit_code(k), 0);
  for (int fd : silent) ::close(fd);
  EXPECT_EQ(log.count("the rendezvous completed before its handshake"), silent.size());
}

// A port squatter that answers like rank 0 without knowing the identity hands out no id.
TEST(Rendezvous, ARankTakesNoIdFromRankZeroWithoutTheIdentity) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  const int port = ntohs(a.sin_port);
  std::thread squatter([fd] {
    const int c = ::accept(fd, nullptr, nullptr);
    char h[32];
    if (::recv(c, h, sizeof h, MSG_WAITALL) != 32) return;
    // protocol 2's answer with a made-up proof, then an id of its own, unasked
    const std::string answer = words({kMagic, 2}) + "ABCDEFGHIJKLMNOP" + std::string(86, 'x') + words({kMagic, 128}) +
                               std::string(128, 'z');
    ::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
    char sink[256];
    while (::recv(c, sink, sizeof sink, 0) > 0) {
    }
    ::close(c);
  });
  std::vector<unsigned char> got(128, 0);
  const std::string m = error_of([&] {
    dist::tcp_rendezvous("127.0.0.1", port, 1, 2, got.data(), got.size(), options("HZ_JOB_TOKEN=t", 5));
  });
  squatter.join();
  ::close(fd);
  EXPECT_TRUE(has(m, "what answered at 127.0.0.1:" + std::to_string(port) + " (MASTER_ADDR:MASTER_PORT) does not know "
                     "this job's identity (HZ_JOB_TOKEN)")) << m;
  EXPECT_EQ(got, std::vector<unsigned char>(128, 0));
}

TEST(Rendezvous, EveryFailureIsNamed) {
  std::vector<unsigned char> id = payload();
  {  // rank 2 of 3 never starts: rank 0 names it after the timeout
    const int port = free_port();
    const pid_t one = spawn([=] {
      std::vector<unsigned char> got(128);
      dist::tcp_rendezvous("127.0.0.1", port, 1, 3, got.data(), got.size(), options("t", 3));
    });
    const auto t0 = std::chrono::steady_clock::now();
    const std::string m = error_of([&] { dist::tcp_rendezvous("127.0.0.1", port, 0, 3, id.data(), id.size(), options("t", 1)); });
    EXPECT_TRUE(has(m, "rank(s) 2 of 3 never joined")) << m;
    EXPECT_LT(since(t0), 5.0);
    EXPECT_EQ(exit_code(one), 1);  // and rank 1 gets no id
  }
  {  // no rank 0 at all
    const int port = free_port();
    std::vector<unsigned char> got(128);
    const std::string m = error_of([&] { dist::tcp_rendezvous("127.0.0.1", port, 1, 2, got.data(), got.size(), options("t", 0.5)); });
    EXPECT_TRUE(has(m, "could not reach rank 0 at 127.0.0.1:" + std::to_string(port))) << m;
  }
  {  // the same rank twice: the second is dropped (it might be a stranger with this identity), and
     // the timeout's message says so beside the rank that is missing
    const int port = free_port();
    std::vector<pid_t> kids;
    for (int k = 0; k < 2; ++k)
      kids.push_back(spawn([=] {
        std::vector<unsigned char> got(128);
        dist::tcp_rendezvous("127.0.0.1", port, 1, 3, got.data(), got.size(), options("t", 3));
      }));
    Log log;
    dist::RendezvousOptions opt = options("t", 1.5);
    opt.log = log.sink();
    const std::string m = error_of([&] { dist::tcp_rendezvous("127.0.0.1", port, 0, 3, id.data(), id.size(), opt); });
    EXPECT_TRUE(has(m, "rank(s) 2 of 3 never joined")) << m;
    EXPECT_TRUE(has(m, "rank(s) 1 tried to join twice: two processes with one rank?")) << m;
    EXPECT_EQ(log.count("it is rank 1 of this job, which already joined from 127.0.0.1:"), 1u);
    for (pid_t k : kids) EXPECT_EQ(exit_code(k), 1);
  }
  // bad options: refused before any socket
  std::vector<unsigned char> got(128);
  EXPECT_TRUE(has(error_of([&] { dist::tcp_rendezvous("h", 1, 1, 2, got.data(), got.size(), options("", 5)); }),
                  "the job identity (HZ_JOB_TOKEN) must be 1 .. 400 bytes"));
  EXPECT_TRUE(has(error_of([&] { dist::tcp_rendezvous("h", 1, 1, 2, got.data(), got.size(), options("t", 1e300)); }),
                  "must be in (0, 86400]"));
}

// Rank 0's reading of a hello, byte by byte: a stranger is known as early as its bytes allow.
TEST(Rendezvous, ReadHello) {
  dist::Hello h;
  std::string why;
  const std::string good = hello(2, 3, 2);
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_EQ(dist::read_hello(reinterpret_cast<const unsigned char*>(good.data()), n, 3, h, why), dist::HelloState::NeedMore) << n;
  ASSERT_EQ(dist::read_hello(reinterpret_cast<const unsigned char*>(good.data()), good.size(), 3, h, why),
            dist::HelloState::Valid);
  EXPECT_EQ(h.rank, 2u);
  EXPECT_EQ(h.nonce, "abcdefghijklmnop");
  EXPECT_EQ(dist::read_hello(reinterpret_cast<const unsigned char*>("G"), 1, 3, h, why), dist::HelloState::Refused);
  EXPECT_TRUE(has(why, "not a Horizon rank"));
  const std::string v1 = hello(1, 3, 2);
  EXPECT_EQ(dist::read_hello(reinterpret_cast<const unsigned char*>(v1.data()), 8, 3, h, why), dist::HelloState::Refused);
  EXPECT_TRUE(has(why, "protocol 1"));
  const std::string zero = hello(2, 3, 0);
  EXPECT_EQ(dist::read_hello(reinterpret_cast<const unsigned char*>(zero.data()), zero.size(), 3, h, why),
            dist::HelloState::Refused);
  EXPECT_TRUE(has(why, "it claims rank 0, outside 1 .. 2"));
}
