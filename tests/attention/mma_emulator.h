// A host emulator of one CUDA thread block, enough to run the tensor-core attention kernels of
// attention/cuda/mma_body.h on a machine without a GPU.
//
// Every thread of the block is a fiber (ucontext), scheduled round-robin with a random lag per warp
// (warps drift apart between barriers, as on hardware), or for every third seed greedily (one warp
// as far ahead of the others as the barriers let it go: Cta); a thread runs until it reaches a
// collective operation and waits there until every participant has arrived:
//   sync()                 the block (__syncthreads);
//   ldsm_x4 / ldsm_x4_t    the warp: ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 — lanes
//                          8m..8m+7 give the rows of 8x8 matrix m, lane t receives (row t/4,
//                          columns 2(t%4), 2(t%4)+1) of each matrix, or with .trans (rows 2(t%4),
//                          2(t%4)+1, column t/4); addresses are checked to be 16-byte aligned rows
//                          inside shared memory;
//   mma                    the warp: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with PTX's
//                          fragment layouts (mma_body.h's header), products summed in double;
//   shfl_xor               the warp;
//   wgmma_ss / wgmma_rs    the warpgroup (4 warps, threads 128 w .. 128 w + 127): Hopper's
//                          wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 (Thread, below);
//                          it reads shared memory through the async proxy, so bytes a thread wrote
//                          (cp.async, or store_shared: st.shared) must have that thread's
//                          fence.proxy.async and then a block barrier behind them (.sync waits
//                          for the warp only: another warp's writes need the barrier);
//   mbar_wait, bar_sync    Hopper's asynchronous pipeline (Thread, below): an mbarrier's phase
//                          (arrivals and transaction bytes; the bulk tensor copies queued on it land
//                          when a thread waits there), a named barrier's count of threads. An
//                          arrival (mbar_arrive, bar_arrive) does not wait but gives way: the
//                          threads it releases may run before the arriving one goes on.
// All 32 lanes of a warp must call the same collective (else: "divergent collective"); a round in
// which no thread can move is a deadlock (e.g. a barrier some threads skip). Both are reported.
// A cp.async clobbers its 16 destination bytes with NaN patterns when issued and writes the data at
// the cp_wait that retires its group, and shared memory starts as NaN patterns: a read before the
// wait + barrier (read-after-write) and an overwrite of a tile another warp still reads
// (write-after-read) both turn into NaN in the results. exp2/log2 are the C library's; pack_bf16 rounds to nearest even, like
// __floats2bfloat162_rn.
#pragma once
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/bf16.h"

namespace hzt::emu {

using Counter = unsigned long long;

class Cta;

// The shared-memory bytes a wgmma read (window offsets and values), checked again when it retires.
struct WgSnap {
  std::vector<uint32_t> off;
  std::vector<uint16_t> val;
};

// The emulator's tile map of the bulk tensor copy (Thread::tma_load; on a GPU the driver's
// CUtensorMap): a 3-D bf16 tensor, contiguous, cols x rows x mats, read in boxes of 64 columns x
// box_rows rows of one matrix. encode_tile_map writes it into the 128 bytes of a kernel's tile map.
struct TmaDesc {
  const uint16_t* base;
  int64_t cols, rows, mats;
  int box_rows;
};
inline void encode_tile_map(void* map, const uint16_t* base, int64_t cols, int64_t rows, int64_t mats, int box_rows) {
  static_assert(sizeof(TmaDesc) <= 128, "a tile map is 128 bytes");
  const TmaDesc d{base, cols, rows, mats, box_rows};
  std::memset(map, 0, 128);
  std::memcpy(map, &d, sizeof(d));
}

class Thread {
 public:
  Thread(Cta* cta, int tid) : cta_(cta), tid_(tid) {}
  int tid() const { return tid_; }
  void sync();
  void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) { ldsm(r, p, false); }
  void ldsm_x4_t(uint32_t (&r)[4], const uint16_t* p) { ldsm(r, p, true); }
  void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
  float shfl_xor(float v, int m);
  void cp_async16(uint16_t* s, const uint16_t* g, bool full) {
    Copy c;
    c.dst = s;
    c.full = full;
    if (full) std::memcpy(c.bytes, g, 16);
    pending_.push_back(c);
    check_shared(s, "cp.async destination");
    std::memset(s, 0xff, 16);  // clobbered now (a reader not yet done sees NaN), written at the wait
  }
  void cp_commit() {
    groups_.push_back(pending_);
    pending_.clear();
  }
  template <int N>
  void cp_wait() {
    while (groups_.size() > static_cast<size_t>(N)) {
      for (const Copy& c : groups_.front()) {
        if (c.full) std::memcpy(c.dst, c.bytes, 16);
        else std::memset(c.dst, 0, 16);
        land(c.dst);
      }
      groups_.erase(groups_.begin());
    }
  }
  float exp2(float x) { return std::exp2(x); }
  float log2(float x) { return std::log2(x); }
  float round_bf16(float v) { return hz::bf16_bits_to_f32(hz::f32_to_bf16_bits(v)); }
  uint32_t pack_bf16(float lo, float hi) {
    return static_cast<uint32_t>(hz::f32_to_bf16_bits(lo)) | (static_cast<uint32_t>(hz::f32_to_bf16_bits(hi)) << 16);
  }
  void add_counter(Counter* c, Counter v) { *c += v; }
  // The one-pass backward's turns: blocks run one after another here, in grid order, so a turn a
  // block waits for must already be there; one that is not would hang a GPU (a block waiting on one
  // that runs after it) and is reported.
  void wait_turn(const unsigned* f, unsigned v);
  void post_turn(unsigned* f, unsigned v) { *f = v; }
  float load_cg(const float* p) { return *p; }
  void atomic_add(float* p, float v) { *p += v; }

  // ---- Hopper's warpgroup MMA (sm_90a) ----
  // Shared memory as the kernels address it for descriptors: the window offset of a byte of the
  // block's shared memory. The window starts at kWindow, not at a 1024-byte boundary, so a kernel
  // must align its swizzled tiles itself, as on a GPU (where nothing promises more than 16 bytes).
  static constexpr uint32_t kWindow = 0x230;
  uint32_t smem_u32(const void* p) const;
  // fence.proxy.async.shared::cta: the bytes this thread's cp.async landed or its store_shared wrote
  // become visible to the async proxy (wgmma reads through it), for the warpgroup after the next
  // block barrier (a read of bytes a thread wrote and did not fence, or fenced with no barrier since,
  // fails).
  void fence_proxy_async();
  // st.shared.b32, tracked for the check above (a kernel's stores to tiles that wgmma reads go
  // through it; plain C++ stores are not seen).
  void store_shared(uint32_t* p, uint32_t v) {
    check_shared(p, "st.shared destination", 4);
    *p = v;
    mark_unfenced(p, 4);
  }
  // wgmma.fence: the next batch of wgmma sees the registers as written before it. A wgmma without
  // one since the last commit fails.
  void wg_fence() { wg_fenced_ = true; }
  // wgmma.mma_async m64nNk16, D (64 x N, f32) = A B + (scale_d ? D : 0), A (64 x 16) and B (16 x N)
  // bf16. _ss: A by descriptor, K-major (kTA 0) or M-major (kTA 1: imm-trans-a); _rs: A from
  // registers (warp w of the group holds rows 16 w .. 16 w + 15 in mma.m16n8k16's A layout). B by
  // descriptor, K-major (_ss with kTB 0) or N-major (_ss with kTB 1, and _rs: imm-trans-b 1). D: warp w's rows 16 w + g (+ 8), columns 8 nt + 2 tig (+ 1) in
  // d[nt][0..3], as an mma.m16n8k16 C fragment per n-tile. Descriptors: 128-byte swizzle with base
  // offset 0 (the swizzle atoms at 1024-byte boundaries of the window), the only form modelled; they
  // and scale_d must agree across the warpgroup.
  // Asynchrony: the product is formed at issue from the shared memory and the accumulator as they
  // are then (an accumulator of an earlier wgmma still in flight: its pending result); the
  // registers of d turn to NaN and receive the result at the wg_wait that retires their group, so a
  // read before the wait shows. Operand bytes overwritten before that wait are reported, and so are
  // A registers (_rs) that changed before it (PTX: undefined while the wgmma is in flight).
  template <int N, int kTA = 0, int kTB = 0>
  void wgmma_ss(float (&d)[N / 8][4], uint64_t da, uint64_t db, int scale_d) {
    wgmma(&d[0][0], N, nullptr, da, db, scale_d, kTA != 0, kTB != 0);
  }
  template <int N>
  void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t db, int scale_d) {
    wgmma(&d[0][0], N, a, 0, db, scale_d, false, true);
  }
  void wg_commit() {
    wg_groups_.push_back(std::move(wg_open_));
    wg_open_.clear();
    wg_fenced_ = false;
  }
  template <int N>
  void wg_wait() {
    while (wg_groups_.size() > static_cast<size_t>(N)) {
      retire(wg_groups_.front());
      wg_groups_.erase(wg_groups_.begin());
    }
  }
  // the compiler-ordering fence of the device's accumulators (DeviceCta): nothing to do here
  template <class T>
  void wg_operand_fence(T&) {}

  // ---- Hopper's asynchronous pipeline (sm_90): mbarriers, named barriers, the bulk tensor copy ----
  // mbarrier.init (one thread; the others may use the barrier only after a block barrier: a use
  // before one is reported), with `count` arrivals per phase. A phase completes when its arrivals
  // are in and its transaction bytes (expect_tx, less the bytes of the copies that completed on it)
  // are zero; then the next phase starts with `count` again.
  void mbar_init(uint64_t* bar, int count);
  void mbar_fence_init() {}  // fence.mbarrier_init: what matters here is the block barrier after it
  // mbarrier.arrive (with expect_tx: the phase also waits for that many bytes of copies). The thread
  // yields after it, so the threads the arrival releases may run first.
  void mbar_arrive(uint64_t* bar) { mbar_update(bar, 0, true); }
  void mbar_arrive_expect_tx(uint64_t* bar, int bytes) { mbar_update(bar, bytes, true); }
  // mbarrier.try_wait.parity in a loop: returns once the phase of this parity has completed (the
  // barrier's current phase has the other parity; a fresh barrier is in phase 0, so waiting for
  // parity 1 returns at once). A waiter lands the copies queued on the barrier first.
  void mbar_wait(uint64_t* bar, int parity);
  // cp.async.bulk.tensor.3d...tile.mbarrier::complete_tx::bytes: the box of 64 columns from `col`
  // x box_rows rows from `row` of matrix `mat` into dst (1024-byte aligned) in the 128-byte swizzle
  // (chunk c of row r at c ^ (r % 8): sw_offset's layout), rows outside the tensor zero. The
  // destination turns to NaN patterns at issue (a reader not done with it sees them) and receives
  // the box when a thread waits on `bar`, whose phase it then completes by the box's bytes. The copy
  // engine writes through the async proxy: wgmma may read the box without a fence.
  template <class M>
  void tma_load(uint16_t* dst, const M* map, int col, int row, int mat, uint64_t* bar) {
    static_assert(sizeof(M) >= sizeof(TmaDesc), "a tile map");
    TmaDesc d;
    std::memcpy(&d, map, sizeof(d));
    tma(dst, d, col, row, mat, bar);
  }
  // bar.sync / bar.arrive on named barrier id (1-15; 0 is the block barrier of sync()) for `count`
  // threads: sync waits until count threads have arrived or synced, arrive does not wait. Counts
  // that differ among a barrier's threads are reported.
  void bar_sync(int id, int count) { named(id, count, true); }
  void bar_arrive(int id, int count) { named(id, count, false); }
  // setmaxnreg: a register budget, nothing to model here
  template <int N>
  void regs_inc() {}
  template <int N>
  void regs_dec() {}

 private:
  struct WgPending {
    float* d;
    int n;
    float v[64];
    std::shared_ptr<WgSnap> snap;
    const uint32_t* a;  // _rs: the A registers, which must hold av until the wait
    uint32_t av[4];
  };
  void wgmma(float* d, int N, const uint32_t* a, uint64_t da, uint64_t db, int scale_d, bool a_mn, bool b_mn);
  void retire(const std::vector<WgPending>& g);
  void mbar_update(uint64_t* bar, int64_t tx, bool arrive);
  void tma(uint16_t* dst, const TmaDesc& d, int col, int row, int mat, uint64_t* bar);
  void named(int id, int count, bool wait);
  std::vector<WgPending> wg_open_;
  std::vector<std::vector<WgPending>> wg_groups_;
  bool wg_fenced_ = false;
  std::vector<uint32_t> landed_;  // 4-byte words this thread wrote (cp.async, store_shared) since its last fence
  struct Copy {
    uint16_t* dst;
    bool full;
    unsigned char bytes[16];
  };
  void ldsm(uint32_t (&r)[4], const uint16_t* p, bool trans);
  void land(const void* p) { mark_unfenced(p, 16); }
  void mark_unfenced(const void* p, int bytes);
  void check_shared(const void* p, const char* what, int bytes = 16);
  Cta* cta_;
  int tid_;
  std::vector<Copy> pending_;
  std::vector<std::vector<Copy>> groups_;
};

// One thread block: `threads` fibers over `smem_bytes` of shared memory.
class Cta {
 public:
  // seed: the random lag between warps (each pass resumes each warp with probability 1/2, so warps
  // drift apart between barriers and a missing barrier shows as a race). Every third seed (seed % 3
  // == 0) schedules greedily instead: the lowest-numbered warp that can move runs alone until it
  // waits (at a block barrier or a warpgroup's wgmma), then every warp moves one step, and so on; so
  // one warp runs as far ahead of the others as the barriers allow, and a shared tile it overwrites
  // before a barrier that is missing is read, overwritten, by the warps behind it.
  Cta(int threads, size_t smem_bytes, uint64_t seed = 1)
      : greedy_(seed % 3 == 0),
        n_(threads),
        smem_(smem_bytes / 2 + 8),
        warps_((threads + 31) / 32),
        groups_((threads + 127) / 128),
        unfenced_(smem_.size() / 2 + 1, 0),
        rng_(seed * 0x9e3779b97f4a7c15ull + 1) {
    for (auto& x : smem_) x = 0xffff;  // bf16 / f32 NaN patterns
    for (auto& g : groups_) g = std::make_unique<WgColl>();
  }
  unsigned char* smem() { return reinterpret_cast<unsigned char*>(smem_.data()); }
  size_t smem_bytes() const { return smem_.size() * 2; }

  // Runs body(thread) on every thread; throws std::runtime_error on a divergent collective or a
  // deadlock.
  void run(const std::function<void(Thread&)>& body) {
    body_ = &body;
    fibers_.assign(n_, Fiber{});
    for (int t = 0; t < n_; ++t) {
      Fiber& f = fibers_[t];
      f.stack.resize(kStack);
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.data();
      f.ctx.uc_stack.ss_size = f.stack.size();
      f.ctx.uc_link = &sched_;
      makecontext(&f.ctx, reinterpret_cast<void (*)()>(&Cta::trampoline), 0);
    }
    int finished = 0;
    bool all = false;  // a pass that resumes every warp (after a pass without progress)
    while (finished < n_) {
      const uint64_t before = progress_;
      std::vector<char> skip(warps_.size(), 0);
      if (!all && greedy_) {  // the first warp with a thread left, alone
        int focus = -1;
        for (int t = 0; t < n_ && focus < 0; ++t)
          if (!fibers_[t].done) focus = t / 32;
        for (size_t w = 0; w < skip.size(); ++w) skip[w] = static_cast<int>(w) != focus;
      } else if (!all) {
        for (auto& x : skip) x = (rng_ = rng_ * 6364136223846793005ull + 1442695040888963407ull) >> 63;
      }
      for (int t = 0; t < n_; ++t) {
        if (fibers_[t].done || skip[t / 32]) continue;
        current_ = t;
        active() = this;
        swapcontext(&sched_, &fibers_[t].ctx);
        if (fibers_[t].done) {
          ++finished;
          ++progress_;
        }
        if (!error_.empty()) throw std::runtime_error(error_);
      }
      if (progress_ == before && all)
        throw std::runtime_error("deadlock: no thread can move (a barrier or collective that some threads skip)");
      all = progress_ == before;
    }
  }

 private:
  friend class Thread;
  static constexpr size_t kStack = 256 * 1024;
  struct Fiber {
    ucontext_t ctx{};
    std::vector<char> stack;
    bool done = false;
  };
  // A collective of a group (warp or block): inputs per member, outputs per member.
  struct Coll {
    int arrived = 0;
    uint64_t gen = 0;
    int op = -1;
    uint32_t in_u[32][6] = {};
    float in_f[32][4] = {};
    const void* in_p[32] = {};
    uint32_t out_u[32][4] = {};
    float out_f[32][4] = {};
  };
  // A warpgroup's wgmma: per member the accumulator in, the A fragment (_rs), the descriptors and
  // scale_d; per member the result.
  struct WgColl {
    int arrived = 0;
    uint64_t gen = 0;
    int op = -1;
    float in_d[128][64] = {};
    uint32_t in_a[128][4] = {};
    uint64_t da[128] = {}, db[128] = {};
    int sd[128] = {};
    float out[128][64] = {};
    std::shared_ptr<WgSnap> snap;
  };
  static Cta*& active() {
    static thread_local Cta* a = nullptr;
    return a;
  }
  static void trampoline() {
    Cta* c = active();
    const int t = c->current_;
    Thread th(c, t);
    (*c->body_)(th);
    c->fibers_[t].done = true;
  }
  void yield() { swapcontext(&fibers_[current_].ctx, &sched_); }
  void fail(const std::string& e) {
    if (error_.empty()) error_ = e;
    yield();  // the scheduler throws; this fiber is abandoned
  }
  // Deposit, wait until the group is complete, then read: compute runs once, in the last arrival.
  template <class C, class Dep, class Comp, class Read>
  void collective(C& c, int members, int op, int slot, Dep dep, Comp comp, Read read) {
    if (c.arrived == 0) c.op = op;
    else if (c.op != op) fail("divergent collective: op " + std::to_string(op) + " meets op " + std::to_string(c.op));
    dep(slot);
    const uint64_t gen = c.gen;
    if (++c.arrived == members) {
      comp();
      c.arrived = 0;
      ++c.gen;
      ++progress_;
    }
    while (c.gen == gen) yield();
    read(slot);
  }

  bool greedy_;
  int n_;
  std::vector<uint16_t> smem_;
  std::vector<Coll> warps_;
  std::vector<std::unique_ptr<WgColl>> groups_;
  // per 4-byte word: 1 + the thread whose write is not fenced, -1 - the thread that fenced it with no
  // block barrier since, or 0; fenced_: the words fenced since the last barrier
  std::vector<int> unfenced_;
  std::vector<uint32_t> fenced_;
  // the fenced words of these threads reach the async proxy (the block barrier: every thread)
  void publish_fenced(const std::vector<char>* threads) {
    std::vector<uint32_t> keep;
    for (uint32_t w : fenced_) {
      const int u = unfenced_[w];
      if (u >= 0) continue;
      if (threads == nullptr || (*threads)[-u - 1]) unfenced_[w] = 0;
      else keep.push_back(w);
    }
    fenced_.swap(keep);
  }
  // mbarriers by shared-memory offset: their phase, the arrivals and transaction bytes it still
  // waits for, the boxes of bulk copies queued on it (landed by a waiter)
  struct Box {
    uint16_t* dst;
    std::vector<uint16_t> data;
  };
  struct Mbar {
    int count = 0, pending = 0, phase = 0, init_thread = -1;
    int64_t tx = 0;
    uint64_t init_gen = 0;
    std::vector<Box> queued;
  };
  std::map<uint32_t, Mbar> mbars_;
  void mbar_try_complete(Mbar& m) {
    if (m.pending <= 0 && m.tx == 0) {
      m.phase ^= 1;
      m.pending += m.count;
      ++progress_;
    }
  }
  // named barriers 1-15: arrivals of the current phase, its thread count and who took part
  struct Named {
    int arrived = 0, count = 0;
    uint64_t gen = 0;
    std::vector<char> in;
  };
  Named named_[16];
  Coll block_;
  std::vector<Fiber> fibers_;
  ucontext_t sched_{};
  int current_ = 0;
  uint64_t progress_ = 0;
  std::string error_;
  const std::function<void(Thread&)>* body_ = nullptr;
  uint64_t rng_;
};

inline void Thread::check_shared(const void* p, const char* what, int bytes) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  if (b < cta_->smem() || b + bytes > cta_->smem() + cta_->smem_bytes() ||
      (reinterpret_cast<uintptr_t>(b) - reinterpret_cast<uintptr_t>(cta_->smem())) % bytes != 0)
    cta_->fail(std::string(what) + ": address outside shared memory or not " + std::to_string(bytes) +
               "-byte aligned");
}

inline void Thread::wait_turn(const unsigned* f, unsigned v) {
  if (*f != v)
    cta_->fail("ordered accumulation: a block waits for turn " + std::to_string(v) + " but the word holds " +
               std::to_string(*f) + " (on a GPU: a hang)");
}
inline void Thread::sync() {
  Cta::Coll& c = cta_->block_;
  Cta* cta = cta_;
  // fenced words reach every warp's wgmma after the barrier
  cta_->collective(c, cta_->n_, 1, 0, [](int) {}, [cta] { cta->publish_fenced(nullptr); }, [](int) {});
}

inline float bf(uint32_t bits16) { return hz::bf16_bits_to_f32(static_cast<uint16_t>(bits16 & 0xffffu)); }

inline void Thread::ldsm(uint32_t (&r)[4], const uint16_t* p, bool trans) {
  check_shared(p, "ldmatrix row");
  Cta::Coll& c = cta_->warps_[tid_ / 32];
  const int lane = tid_ % 32;
  cta_->collective(
      c, 32, trans ? 3 : 2, lane, [&](int s) { c.in_p[s] = p; },
      [&] {
        for (int t = 0; t < 32; ++t)
          for (int m = 0; m < 4; ++m) {
            auto row = [&](int rr) { return static_cast<const uint16_t*>(c.in_p[8 * m + rr]); };
            uint16_t lo, hi;
            if (!trans) {
              lo = row(t / 4)[2 * (t % 4)];
              hi = row(t / 4)[2 * (t % 4) + 1];
            } else {
              lo = row(2 * (t % 4))[t / 4];
              hi = row(2 * (t % 4) + 1)[t / 4];
            }
            c.out_u[t][m] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
          }
      },
      [&](int s) {
        for (int m = 0; m < 4; ++m) r[m] = c.out_u[s][m];
      });
}

inline void Thread::mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Cta::Coll& c = cta_->warps_[tid_ / 32];
  const int lane = tid_ % 32;
  cta_->collective(
      c, 32, 4, lane,
      [&](int s) {
        for (int i = 0; i < 4; ++i) c.in_u[s][i] = a[i];
        c.in_u[s][4] = b0;
        c.in_u[s][5] = b1;
        for (int i = 0; i < 4; ++i) c.in_f[s][i] = d[i];
      },
      [&] {
        double A[16][16], B[16][8], C[16][8];
        for (int t = 0; t < 32; ++t) {
          const int g = t / 4, q = t % 4;
          const uint32_t* u = c.in_u[t];
          A[g][2 * q] = bf(u[0]);
          A[g][2 * q + 1] = bf(u[0] >> 16);
          A[g + 8][2 * q] = bf(u[1]);
          A[g + 8][2 * q + 1] = bf(u[1] >> 16);
          A[g][2 * q + 8] = bf(u[2]);
          A[g][2 * q + 9] = bf(u[2] >> 16);
          A[g + 8][2 * q + 8] = bf(u[3]);
          A[g + 8][2 * q + 9] = bf(u[3] >> 16);
          B[2 * q][g] = bf(u[4]);
          B[2 * q + 1][g] = bf(u[4] >> 16);
          B[2 * q + 8][g] = bf(u[5]);
          B[2 * q + 9][g] = bf(u[5] >> 16);
          C[g][2 * q] = c.in_f[t][0];
          C[g][2 * q + 1] = c.in_f[t][1];
          C[g + 8][2 * q] = c.in_f[t][2];
          C[g + 8][2 * q + 1] = c.in_f[t][3];
        }
        double Dm[16][8];
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 8; ++j) {
            double s = C[i][j];
            for (int k = 0; k < 16; ++k) s += A[i][k] * B[k][j];
            Dm[i][j] = s;
          }
        for (int t = 0; t < 32; ++t) {
          const int g = t / 4, q = t % 4;
          c.out_f[t][0] = static_cast<float>(Dm[g][2 * q]);
          c.out_f[t][1] = static_cast<float>(Dm[g][2 * q + 1]);
          c.out_f[t][2] = static_cast<float>(Dm[g + 8][2 * q]);
          c.out_f[t][3] = static_cast<float>(Dm[g + 8][2 * q + 1]);
        }
      },
      [&](int s) {
        for (int i = 0; i < 4; ++i) d[i] = c.out_f[s][i];
      });
}

inline float Thread::shfl_xor(float v, int m) {
  Cta::Coll& c = cta_->warps_[tid_ / 32];
  const int lane = tid_ % 32;
  float r = 0;
  cta_->collective(
      c, 32, 5 + 16 * m, lane, [&](int s) { c.in_f[s][0] = v; },
      [&] {
        for (int t = 0; t < 32; ++t) c.out_f[t][0] = c.in_f[t ^ m][0];
      },
      [&](int s) { r = c.out_f[s][0]; });
  return r;
}

inline uint32_t Thread::smem_u32(const void* p) const {
  return static_cast<uint32_t>(reinterpret_cast<const unsigned char*>(p) - cta_->smem()) + kWindow;
}
inline void Thread::mark_unfenced(const void* p, int bytes) {
  const uint32_t w0 = static_cast<uint32_t>(reinterpret_cast<const unsigned char*>(p) - cta_->smem()) / 4;
  for (uint32_t w = w0; w < w0 + static_cast<uint32_t>(bytes) / 4; ++w) {
    cta_->unfenced_[w] = tid_ + 1;
    landed_.push_back(w);
  }
}
inline void Thread::fence_proxy_async() {
  for (uint32_t c : landed_)
    if (cta_->unfenced_[c] == tid_ + 1) {
      cta_->unfenced_[c] = -tid_ - 1;
      cta_->fenced_.push_back(c);
    }
  landed_.clear();
}

inline void Thread::wgmma(float* d, int N, const uint32_t* a, uint64_t da, uint64_t db, int scale_d, bool a_mn,
                          bool b_mn) {
  const bool rs = a != nullptr;
  if (!wg_fenced_) cta_->fail("wgmma.mma_async without a wgmma.fence since the last commit");
  if (N % 8 != 0 || N < 8 || N > 128) cta_->fail("wgmma: N = " + std::to_string(N) + " is not modelled");
  Cta::WgColl& c = *cta_->groups_[tid_ / 128];
  const int m = tid_ % 128;
  // this thread's accumulator as the instruction sees it: an earlier wgmma's pending result
  const float* cur = d;
  auto pending = [&](std::vector<WgPending>& v) {
    for (auto it = v.rbegin(); it != v.rend(); ++it)
      if (it->d == d) return static_cast<const float*>(it->v);
    return static_cast<const float*>(nullptr);
  };
  if (const float* p = pending(wg_open_)) cur = p;
  else
    for (auto g = wg_groups_.rbegin(); g != wg_groups_.rend(); ++g)
      if (const float* p = pending(*g)) {
        cur = p;
        break;
      }
  Cta* cta = cta_;
  const int ng = N / 2;
  cta->collective(
      c, 128, (rs ? 200 : 100 + 300 * a_mn + 600 * b_mn) + N, m,
      [&](int s) {
        for (int i = 0; i < ng; ++i) c.in_d[s][i] = cur[i];
        for (int i = 0; i < 4; ++i) c.in_a[s][i] = a != nullptr ? a[i] : 0;
        c.da[s] = da;
        c.db[s] = db;
        c.sd[s] = scale_d;
      },
      [&] {
        for (int s = 1; s < 128; ++s)
          if (c.db[s] != c.db[0] || c.da[s] != c.da[0] || (c.sd[s] != 0) != (c.sd[0] != 0))
            return cta->fail("wgmma: descriptors or scale-d differ across the warpgroup");
        auto snap = std::make_shared<WgSnap>();
        // a 128-byte-swizzled operand element: (row or MN index r, k) -> bf16 value
        auto read = [&](uint64_t desc, bool mn_major, int r, int k) -> double {
          const uint32_t start = static_cast<uint32_t>(desc & 0x3fff) << 4;
          const uint32_t lbo = static_cast<uint32_t>((desc >> 16) & 0x3fff) << 4;
          const uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3fff) << 4;
          if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0) {
            cta->fail("wgmma: only the 128-byte swizzle with base offset 0 is modelled");
            return 0;
          }
          const uint32_t logical = mn_major ? start + (r / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + (r % 64) * 2
                                            : start + (r / 8) * sbo + (r % 8) * 128 + k * 2;
          const uint32_t phys = logical ^ (((logical >> 7) & 7) << 4);
          if (phys < kWindow || phys + 2 > kWindow + cta->smem_bytes()) {
            cta->fail("wgmma: an operand address outside shared memory");
            return 0;
          }
          const uint32_t off = phys - kWindow;
          if (const int u = cta->unfenced_[off / 4]; u > 0) {
            cta->fail("wgmma reads shared memory that thread " + std::to_string(u - 1) +
                      " wrote (cp.async or st.shared), without that thread's fence.proxy.async");
            return 0;
          } else if (u < 0) {
            cta->fail("wgmma reads shared memory that thread " + std::to_string(-u - 1) +
                      " wrote and fenced, with no block barrier since");
            return 0;
          }
          uint16_t v;
          std::memcpy(&v, cta->smem() + off, 2);
          snap->off.push_back(off);
          snap->val.push_back(v);
          return hz::bf16_bits_to_f32(v);
        };
        std::vector<double> A(64 * 16), B(16 * N);
        for (int r = 0; r < 64; ++r)
          for (int k = 0; k < 16; ++k) {
            if (rs) {  // warp r / 16, its row g = r % 16 % 8, a[0..3] as mma's A
              const int w = r / 16, rr = r % 16, g = rr % 8, hi = rr / 8, kh = k / 8, q = (k % 8) / 2;
              const uint32_t u = c.in_a[32 * w + 4 * g + q][hi + 2 * kh];
              A[r * 16 + k] = bf(k % 2 ? u >> 16 : u);
            } else {
              A[r * 16 + k] = read(c.da[0], a_mn, r, k);
            }
          }
        for (int n = 0; n < N; ++n)
          for (int k = 0; k < 16; ++k) B[k * N + n] = read(c.db[0], b_mn, n, k);
        for (int s = 0; s < 128; ++s) {
          const int w = s / 32, g = (s % 32) / 4, q = s % 4;
          for (int i = 0; i < ng; ++i) {
            const int nt = i / 4, e = i % 4, r = 16 * w + g + 8 * (e / 2), n = 8 * nt + 2 * q + e % 2;
            double acc = c.sd[0] != 0 ? c.in_d[s][i] : 0.0;
            for (int k = 0; k < 16; ++k) acc += A[r * 16 + k] * B[k * N + n];
            c.out[s][i] = static_cast<float>(acc);
          }
        }
        c.snap = snap;
      },
      [&](int s) {
        WgPending p;
        p.d = d;
        p.n = ng;
        for (int i = 0; i < ng; ++i) p.v[i] = c.out[s][i];
        p.snap = c.snap;
        p.a = a;
        for (int i = 0; i < 4; ++i) p.av[i] = a != nullptr ? a[i] : 0;
        wg_open_.push_back(p);
      });
  for (int i = 0; i < ng; ++i) d[i] = NAN;  // in flight: undefined until the wait
}

inline void Thread::retire(const std::vector<WgPending>& g) {
  for (const WgPending& p : g) {
    if (p.a != nullptr && std::memcmp(p.a, p.av, sizeof(p.av)) != 0)
      return cta_->fail("wgmma: thread " + std::to_string(tid_) +
                        " changed its A registers before the wgmma.wait_group that retires the product");
    if (tid_ % 128 == 0)  // once per warpgroup: the operands must not have changed under the wgmma
      for (size_t i = 0; i < p.snap->off.size(); ++i) {
        uint16_t v;
        std::memcpy(&v, cta_->smem() + p.snap->off[i], 2);
        if (v != p.snap->val[i])
          return cta_->fail("wgmma: shared memory it reads was overwritten before the wgmma.wait_group that retires it");
      }
    std::memcpy(p.d, p.v, sizeof(float) * p.n);
  }
}

// ---- the asynchronous pipeline --------------------------------------------------------------------
inline void Thread::mbar_init(uint64_t* bar, int count) {
  check_shared(bar, "mbarrier", 8);
  if (count < 1) return cta_->fail("mbarrier.init: count " + std::to_string(count));
  Cta::Mbar m;
  m.count = m.pending = count;
  m.init_thread = tid_;
  m.init_gen = cta_->block_.gen;
  cta_->mbars_[smem_u32(bar)] = m;
}

inline void Thread::mbar_update(uint64_t* bar, int64_t tx, bool arrive) {
  auto it = cta_->mbars_.find(smem_u32(bar));
  if (it == cta_->mbars_.end()) return cta_->fail("mbarrier used before its mbarrier.init");
  Cta::Mbar& m = it->second;
  if (m.init_thread != tid_ && cta_->block_.gen == m.init_gen)
    return cta_->fail("thread " + std::to_string(tid_) + " uses an mbarrier that thread " +
                      std::to_string(m.init_thread) + " initialised, with no block barrier since");
  if (!arrive && tx == 0) return;  // a waiter's look
  m.tx += tx;
  if (arrive) --m.pending;
  ++cta_->progress_;
  cta_->mbar_try_complete(m);
  // a scheduling point: the threads the arrival releases may run before this one goes on (a stage
  // freed before its last read is overwritten under it)
  if (arrive) cta_->yield();
}

inline void Thread::mbar_wait(uint64_t* bar, int parity) {
  for (;;) {
    mbar_update(bar, 0, false);  // the checks
    Cta::Mbar& m = cta_->mbars_[smem_u32(bar)];
    for (const Cta::Box& b : m.queued) {  // the copies complete: written through the async proxy
      std::memcpy(b.dst, b.data.data(), b.data.size() * 2);
      const uint32_t w0 = static_cast<uint32_t>(reinterpret_cast<const unsigned char*>(b.dst) - cta_->smem()) / 4;
      for (uint32_t w = w0; w < w0 + b.data.size() / 2; ++w) cta_->unfenced_[w] = 0;
      m.tx -= static_cast<int64_t>(b.data.size()) * 2;
    }
    if (!m.queued.empty()) {
      m.queued.clear();
      ++cta_->progress_;
      cta_->mbar_try_complete(m);
    }
    if (m.phase != (parity & 1)) return;
    cta_->yield();
  }
}

inline void Thread::tma(uint16_t* dst, const TmaDesc& d, int col, int row, int mat, uint64_t* bar) {
  const size_t n = static_cast<size_t>(64) * d.box_rows;
  check_shared(dst, "bulk tensor copy destination");
  if (smem_u32(dst) % 1024 != 0) return cta_->fail("bulk tensor copy: a 128-byte-swizzled box needs a 1024-byte aligned destination");
  if (reinterpret_cast<const unsigned char*>(dst + n) > cta_->smem() + cta_->smem_bytes())
    return cta_->fail("bulk tensor copy: the box ends outside shared memory");
  auto it = cta_->mbars_.find(smem_u32(bar));
  if (it == cta_->mbars_.end()) return cta_->fail("bulk tensor copy on an mbarrier before its mbarrier.init");
  Cta::Box b;
  b.dst = dst;
  b.data.assign(n, 0);
  for (int r = 0; r < d.box_rows; ++r)
    for (int c = 0; c < 64; ++c) {
      const int64_t gr = static_cast<int64_t>(row) + r, gc = static_cast<int64_t>(col) + c;
      if (gr < 0 || gr >= d.rows || gc < 0 || gc >= d.cols || mat < 0 || mat >= d.mats) continue;
      b.data[static_cast<size_t>(r) * 64 + (((c / 8) ^ (r % 8)) * 8) + c % 8] = d.base[(mat * d.rows + gr) * d.cols + gc];
    }
  std::memset(dst, 0xff, n * 2);  // the destination's old bytes are gone from now on
  it->second.queued.push_back(std::move(b));
  ++cta_->progress_;
}

inline void Thread::named(int id, int count, bool wait) {
  if (id < 1 || id > 15) return cta_->fail("named barrier " + std::to_string(id) + ": ids 1-15 (0 is the block barrier)");
  if (count < 32 || count % 32 != 0 || count > cta_->n_)
    return cta_->fail("named barrier " + std::to_string(id) + ": " + std::to_string(count) + " threads");
  Cta::Named& b = cta_->named_[id];
  if (b.arrived == 0) {
    b.count = count;
    b.in.assign(cta_->n_, 0);
  } else if (b.count != count) {
    return cta_->fail("named barrier " + std::to_string(id) + ": " + std::to_string(count) + " threads meet " +
                      std::to_string(b.count));
  }
  b.in[tid_] = 1;
  const uint64_t gen = b.gen;
  ++cta_->progress_;
  if (++b.arrived == count) {  // the fenced words of its threads reach the async proxy
    cta_->publish_fenced(&b.in);
    b.arrived = 0;
    ++b.gen;
  }
  if (wait)
    while (b.gen == gen) cta_->yield();
  else
    cta_->yield();  // a scheduling point, as an mbarrier's arrival
}

}  // namespace hzt::emu
