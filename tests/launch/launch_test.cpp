// Ranks started without MPI (issue 39): which launcher's variables give the world, in one documented
// precedence with conflicts refused; rank 0's NCCL id handed over by file or over TCP
// (MASTER_ADDR / MASTER_PORT), between real processes on the CPU, and every failure named.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
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
                              "PMI_RANK", "PMIX_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"};

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
           {{{"WORLD_SIZE", "8"}, {"RANK", "5"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}},
            8, 5, 1, "torchrun's"},
           {{{"SLURM_STEP_NUM_TASKS", "16"}, {"SLURM_PROCID", "9"}, {"SLURM_LOCALID", "1"}, {"MASTER_ADDR", "n1"},
             {"MASTER_PORT", "1234"}},
            16, 9, 1, "Slurm's"}}) {
    Env e(c.vars);
    EXPECT_TRUE(dist::launched_by_env());
    const dist::EnvWorld w = dist::env_world();
    EXPECT_EQ(w.size, c.size) << c.who;
    EXPECT_EQ(w.rank, c.rank) << c.who;
    EXPECT_EQ(w.local_rank, c.local) << c.who;
    EXPECT_EQ(w.launcher, c.who);
  }
  Env e({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}, {"HZ_NCCL_ID_TIMEOUT", "2.5"}});
  const dist::EnvWorld w = dist::env_world();
  EXPECT_EQ(w.master_addr, "h");
  EXPECT_EQ(w.master_port, 29500);
  EXPECT_EQ(w.local_rank, 1);  // defaults to the rank
  EXPECT_DOUBLE_EQ(w.id_timeout_s, 2.5);
}

TEST(Launchers, PrecedenceAndConflicts) {
  {  // srun torchrun: Slurm's describe the per-node agent; torchrun's are the worker's
    Env e({{"WORLD_SIZE", "8"}, {"RANK", "6"}, {"LOCAL_RANK", "2"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"},
           {"SLURM_LOCALID", "0"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "29500"}});
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
  Env e({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
  EXPECT_TRUE(has(error_of([] { dist::from_environment(); }), "torchrun's world of 2 ranks (WORLD_SIZE=2)"));
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

TEST(Rendezvous, RankZerosBytesReachEveryRankOverTcp) {
  const int port = free_port(), size = 4;
  std::vector<pid_t> kids;
  for (int r = 1; r < size; ++r)
    kids.push_back(spawn([=] {
      std::vector<unsigned char> got(128, 0);
      dist::tcp_rendezvous("localhost", port, r, size, got.data(), got.size(), 20);
      if (got != payload()) throw std::runtime_error("wrong bytes");
    }));
  std::vector<unsigned char> id = payload();
  dist::tcp_rendezvous("localhost", port, 0, size, id.data(), id.size(), 20);
  for (pid_t k : kids) EXPECT_EQ(exit_code(k), 0);
}

TEST(Rendezvous, EveryFailureIsNamed) {
  std::vector<unsigned char> id = payload();
  {  // rank 2 of 3 never starts: rank 0 names it after the timeout
    const int port = free_port();
    const pid_t one = spawn([=] {
      std::vector<unsigned char> got(128);
      dist::tcp_rendezvous("127.0.0.1", port, 1, 3, got.data(), got.size(), 3);
    });
    const auto t0 = std::chrono::steady_clock::now();
    const std::string m = error_of([&] { dist::tcp_rendezvous("127.0.0.1", port, 0, 3, id.data(), id.size(), 1.0); });
    EXPECT_TRUE(has(m, "rank(s) 2 of 3 never joined")) << m;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
    EXPECT_EQ(exit_code(one), 1);  // and rank 1 gets no id
  }
  {  // no rank 0 at all
    const int port = free_port();
    std::vector<unsigned char> got(128);
    const std::string m = error_of([&] { dist::tcp_rendezvous("127.0.0.1", port, 1, 2, got.data(), got.size(), 0.5); });
    EXPECT_TRUE(has(m, "could not reach rank 0 at 127.0.0.1:" + std::to_string(port))) << m;
  }
  {  // a rank from another launch (another world size)
    const int port = free_port();
    const pid_t other = spawn([=] {
      std::vector<unsigned char> got(128);
      dist::tcp_rendezvous("127.0.0.1", port, 1, 3, got.data(), got.size(), 3);
    });
    const std::string m = error_of([&] { dist::tcp_rendezvous("127.0.0.1", port, 0, 2, id.data(), id.size(), 5); });
    EXPECT_TRUE(has(m, "rank 1 was started with a world of 3 ranks, rank 0 with 2")) << m;
    EXPECT_EQ(exit_code(other), 1);
  }
  {  // the same rank twice
    const int port = free_port();
    std::vector<pid_t> kids;
    for (int k = 0; k < 2; ++k)
      kids.push_back(spawn([=] {
        std::vector<unsigned char> got(128);
        dist::tcp_rendezvous("127.0.0.1", port, 1, 3, got.data(), got.size(), 3);
      }));
    const std::string m = error_of([&] { dist::tcp_rendezvous("127.0.0.1", port, 0, 3, id.data(), id.size(), 5); });
    EXPECT_TRUE(has(m, "rank 1 joined twice")) << m;
    for (pid_t k : kids) EXPECT_EQ(exit_code(k), 1);
  }
}
