// Horizon: the memory plan of a training run (`horizon info RECIPE`, and the trainer's first lines):
// the peak bytes one rank's tensors take during a step, predicted from the recipe before anything
// is allocated, so that a run that cannot fit is refused up front (CUDA) and the settings that
// matter (train.recompute, train.loss_chunk, parallel.shard_optimizer, parallel.context,
// data.batch_size) can be weighed without trying them. With parallel.context T is the rank's
// (longest) zigzag share, and each block also keeps what its route kept (the whole sequence's keys
// and values for an all-gather layer, the halos for a window layer, the ring's own block).
//
// What is counted: the tensors Horizon allocates (the CPU allocator's and the CUDA pool's
// high-water marks measure the same thing); not BLAS/cuBLAS workspaces, the CUDA context, or the
// pool's cached but free blocks. Each module states its own share, next to the code that allocates
// it (nn/cost.h: MLP::cost, AttentionLayer::cost, Block::cost, Transformer::head_cost, and a route's
// kept_bytes, e.g. the context-parallel exchanges' buffers); this file only adds them up:
//   static      parameters P p (p the bytes of a parameter); optimizer state (AdamW 2 p per element,
//               Muon p per hidden-matrix element) divided over the ranks by parallel.shard_optimizer;
//               under bf16 the bf16 copies of the weights the forward casts (2 bytes each, kept for
//               backward); the gradient-sync buckets (train.bucket_mb, world > 1).
//   forward     every block's kept bytes under train.recompute, and the head's.
//   backward    layers run from the top; while block l runs backward, blocks 0..l still hold
//               what they keep, with the gradients of the parameters of blocks l+1..L-1 and of the
//               head. Two moments of block l count: inside the MLP's backward (its whole forward
//               again when recomputed by layer, plus the MLP's transient and its output projection's
//               weight gradient), and inside the attention's backward (the MLP's activations, the
//               residual and the second normed input freed, the attention's internals again under
//               attention or layer recomputation, plus the attention's transient). The peak is the
//               largest of these, of the head's backward and of the end of backward (every
//               gradient). With train.grad_accum > 1 every gradient stays alive from the first
//               micro-batch on.
//   evaluation  the in-run and final validation (rank 0): parameters, optimizer state and buckets
//               stay; gradients are gone; a forward without gradients of eval.batch_size sequences
//               at the longest of eval.lengths, each block's no-grad working set on top of its
//               input, the head scoring in chunks of the loss's rows, and under bf16 the largest
//               weight's cast. 0 when the run never evaluates (eval.every 0, eval.final false).
//   the process  on the CPU, what a user sees in top or /usr/bin/time besides the tensors: the
//               process's resident bytes outside them, measured when the plan is made
//               (core/process.h: libraries, the binary with its embedded corpus, the data read so
//               far, thread stacks), and the allocator's reserve: the freed large blocks it keeps
//               for reuse (at most 1/8 of their high-water mark, core/cpu/backend.cpp) and the
//               freed small blocks glibc's heap keeps resident between them, with the GEMM
//               libraries' buffers allocated on first use. Counted as 1/6 of the tensors' peak:
//               measured, the process peaked at 1.03-1.35x the tensors' peak over 20 shapes (124M
//               at T 1024-8192 with every recompute and loss setting, d 256 at T 512 and 2048), and
//               outside + 7/6 x tensors was 0.89-1.14x each (docs/recipes.md has the table).
// tests/train/memory_plan_test.cpp holds the tensors' prediction to within 15% of the CPU
// allocator's measured peak over several shapes, and the process's to within 15% of its resident
// peak; scripts/bench/bench_memory.sh measures both at the 124M shape.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/transformer.h"
#include "train/recipe.h"

namespace hz::train {

struct MemoryPlan {
  int64_t parameters = 0, optimizer = 0, weight_copies = 0, buckets = 0;
  int64_t activations = 0;  // kept through the forward, all blocks and the head
  int64_t backward = 0;     // on top of the static parts at the peak of backward
  int64_t logits = 0;       // the loss's chunk of logits and their gradient
  int64_t peak = 0;         // the prediction: static + the peak of a step
  int64_t eval = 0;         // the evaluation's peak (0: the run does not evaluate)
  int64_t eval_tokens = 0;  // the evaluation batch: eval.batch_size x the longest eval length
  int64_t outside = 0;      // the process outside its tensors when planned (CPU; 0: not measured)
  int64_t run_peak() const { return peak > eval ? peak : eval; }
  // the allocator's reserve over a tensors' peak, and the process's resident peak with it (CPU;
  // without `outside` the tensors alone)
  int64_t reserve_of(int64_t tensors) const { return outside > 0 ? tensors / 6 : 0; }
  int64_t process_peak_of(int64_t tensors) const { return tensors + reserve_of(tensors) + outside; }
  int64_t process_peak() const { return process_peak_of(run_peak()); }
  // (label, bytes) rows for a table
  std::vector<std::pair<std::string, int64_t>> rows() const;
};

// The plan of one rank of a `world`-rank run of recipe r with model m (built from r). `outside`:
// the process's resident bytes outside its tensors (hz::resident_outside_tensors()) for a CPU run's
// process peak; 0 plans the tensors only (a GPU's pool, or a plan that must not depend on the process).
MemoryPlan plan_memory(const Recipe& r, const nn::Transformer& m, int world, int64_t outside = 0);

std::string format_bytes(int64_t bytes);  // "1.23 GiB", "456.0 MiB"

}  // namespace hz::train
