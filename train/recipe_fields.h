// Horizon: the recipe's own fields (run, model, data, train, optim, schedule, eval, checkpoint, parallel,
// drope, swan), each with its documentation, role and range (core/fields.h); an attention layer kind's
// fields are attention/spec_fields.h's. One table read by the YAML engine (train/recipe_yaml.cpp) for
// reading, writing, the schema and the architecture comparison.
#pragma once
#include <optional>
#include <string>

#include "attention/spec.h"
#include "core/fields.h"
#include "train/recipe.h"
#include "train/surgery.h"

namespace hz::train {

// V provides: operator()(path, T& value, doc) for int64_t, double, bool, std::string and vectors
// of int64_t/double/std::string, a map<int64_t, std::string>, and
// enumeration(path, E& value, doc, parse, name) for enums, and kinds(path, kinds, doc).

template <class V>
void visit_fields(Recipe& r, V& v) {
  v("run.name", r.run.name, run_opt("run name: outputs go to <out_dir>/<name>/"));
  v("run.out_dir", r.run.out_dir, run_opt("directory holding run directories"));
  v("run.seed", r.run.seed, run_opt("seed of initialisation, data split and shuffling").in(0, 9e18));
  v("run.threads", r.run.threads, run_opt("OpenMP threads (0 = OMP_NUM_THREADS or all cores)").in(0, 4096));
  v("run.flush_denormals", r.run.flush_denormals,
    run_opt("CPU: flush subnormal floats to zero (FTZ+DAZ) on every thread; they otherwise cost a microcode assist "
            "each, and a model whose values underflow runs many times slower. false keeps IEEE subnormals"));
  v.enumeration("run.device", r.run.device, run_opt("cpu | cuda (several ranks: each uses the GPU of its local rank; NCCL all-reduces)"),
                parse_device_type, static_cast<const char* (*)(DeviceType)>(hz::name));
  v.enumeration("run.precision", r.run.precision,
    run_opt("fp32 | bf16: bf16 keeps f32 master weights and optimizer state, computes activations and GEMMs in bf16 "
    "(f32 accumulation), norms/softmax/loss/gradients in f32"),
    nn::parse_precision, static_cast<const char* (*)(nn::Precision)>(nn::name));
  v("run.tf32", r.run.tf32, run_opt("CUDA only: f32 GEMMs on TF32 tensor cores (faster, ~1e-3 relative)"));
  v("run.exact_f32_attention", r.run.exact_f32_attention,
    run_opt("CUDA, fp32 only: attention in exact f32 arithmetic (Horizon's reference kernels, 0.4-0.5 TFLOP/s on an H100) instead "
            "of the tensor cores on bf16 pairs (~2^-16 relative per product; head_dim 64 and 128)"));
  v("run.peak_tflops", r.run.peak_tflops,
    run_opt("peak TFLOP/s for the logged MFU (0 = the GPU's known dense peak for the precision; no MFU on CPU)").at_least(0));
  v.enumeration("run.attention_backend", r.run.attention_backend,
                run_opt("CUDA attention: auto (cuDNN's fused attention for the layers it expresses, Horizon's kernels for "
                        "the rest) | horizon | cudnn (refuses a layer cuDNN cannot express, naming the ingredient); "
                        "horizon info shows each layer kind's route"),
                attn::parse_attn_backend, static_cast<const char* (*)(attn::AttnBackend)>(attn::name));
  nn::ModelConfig& m = r.model.cfg;
  v("model.vocab_size", m.vocab_size, arch("vocabulary size: at least the tokenizer's (byte: 259; horizon tokenize --info TOKENIZER)").in(1, 2147483647));
  v("model.d_model", m.d_model, arch("residual width C").in(1, 1 << 20));
  v("model.n_layers", m.n_layers, arch("number of blocks").in(1, 1 << 16));
  v("model.n_heads", m.n_heads, arch("query heads H").in(1, 1 << 16));
  v("model.n_kv_heads", m.n_kv_heads, arch("key/value heads (0 = n_heads; must divide n_heads)").in(0, 1 << 16));
  v("model.head_dim", m.head_dim, arch("head dim D (0 = d_model / n_heads)").in(0, 1 << 16));
  v("model.mlp_hidden", m.mlp_hidden, arch("MLP hidden width (0 = 4C, or 8C/3 rounded to 8 for swiglu)").in(0, 1 << 24));
  v.enumeration("model.mlp", m.mlp, arch("MLP: swiglu | relu2 | gelu"), nn::parse_mlp, nn::mlp_name);
  v("model.tie_embeddings", m.tie_embeddings, arch("output head shares the embedding matrix"));
  v("model.qkv_bias", m.qkv_bias, arch("additive biases on the q, k and v projections (Qwen2)"));
  v("model.norm_eps", m.norm_eps, arch("RMSNorm epsilon").above(0));
  v("model.init_std", m.init_std, run_opt("init std (residual projections get std / sqrt(2 n_layers))").at_least(0));
  v.kinds("model.layer_kinds", m.kinds, arch("named layer kinds: name -> attention fields (below)"));
  v("model.pattern", m.pattern, arch("layer kinds repeated over the layers, e.g. [global_nope, swa_rope, swa_rope, swa_rope]"));
  v("model.overrides", m.overrides, arch("explicit per-layer kinds: {layer index: kind name}"));
  v.enumeration("data.source", r.data.source,
                run_opt("corpus: bible (King James Bible, embedded in the binary) | files (text) | jsonl | tokens (llm.c / nanoGPT .bin) | "
                "passkey | kv | niah | niah_short (RULER needles on the Bible, data/needles.h)"),
                parse_data_source, static_cast<const char* (*)(DataSource)>(name));
  v("data.files", r.data.files, run_opt("globs of the corpus files for source=files / jsonl / tokens"));
  v("data.val_files", r.data.val_files, run_opt("globs of validation files of the same kind ([] = hold out data.val_fraction of the documents)"));
  v("data.text_field", r.data.text_field, run_opt("jsonl: the string field of each line's object holding the document"));
  v("data.token_format", r.data.token_format, run_opt("tokens: auto | llmc (256-int32 header) | nanogpt (raw uint16); documents cut at EOS/BOS"));
  v("data.tokenizer", r.data.tokenizer, run_opt("tokenizer: byte | PATH/tokenizer.json (Hugging Face BPE) | PATH.model (SentencePiece)"));
  v("data.val_fraction", r.data.val_fraction, run_opt("share of documents held out for validation").in(0, 1, /*hi_open=*/true));
  v("data.seq_len", r.data.seq_len, run_opt("training length T").in(2, 1 << 24));
  v("data.batch_size", r.data.batch_size, run_opt("sequences per step per rank (before accumulation)").in(1, 1 << 24));
  v.enumeration("data.documents", r.data.documents,
                run_opt("packed documents: stream (attend across them) | masked (each token sees its own document only; "
                        "training and evaluation batches alike)"),
                attn::parse_document_mode, static_cast<const char* (*)(attn::DocumentMode)>(attn::name));
  v("data.position_reset", r.data.position_reset,
    run_opt("masked documents: positions (RoPE, SWAN rows) restart at each document's start"));
  v("data.mix_task", r.data.mix_task,
    run_opt("retrieval mixture of a corpus run: '' | passkey | kv | niah | niah_short; data.mix_share of the training "
            "batches are that synthetic task's (whole batches, spread evenly over the steps), the rest the corpus's"));
  v("data.mix_share", r.data.mix_share, run_opt("share of the training batches from data.mix_task").in(0, 1));
  v("data.cache_dir", r.data.cache_dir, run_opt("prepared shards ('' = <out_dir>/_data/<source>-<tokenizer tag>[-<corpus hash>]-s<seed>-v<val_fraction>)"));
  v.enumeration("optim.name", r.optim.name, run_opt("adamw | muon (Muon on hidden matrices, AdamW on the rest)"), parse_optimizer,
                static_cast<const char* (*)(OptimizerKind)>(name));
  v("optim.lr", r.optim.lr, run_opt("AdamW learning rate").above(0));
  v("optim.weight_decay", r.optim.weight_decay, run_opt("decoupled weight decay on 2-D weights").at_least(0));
  v("optim.beta1", r.optim.beta1, run_opt("AdamW beta1").in(0, 1, true));
  v("optim.beta2", r.optim.beta2, run_opt("AdamW beta2").in(0, 1, true));
  v("optim.eps", r.optim.eps, run_opt("AdamW epsilon").above(0));
  v("optim.muon_lr", r.optim.muon_lr, run_opt("Muon learning rate").above(0));
  v("optim.muon_momentum", r.optim.muon_momentum, run_opt("Muon momentum mu").in(0, 1, true));
  v("optim.grad_clip", r.optim.grad_clip, run_opt("global gradient-norm clip (0 = off)").at_least(0));
  v.enumeration("schedule.kind", r.schedule.kind, run_opt("constant | cosine | wsd"), optim::parse_schedule,
                static_cast<const char* (*)(optim::ScheduleKind)>(optim::name));
  v("schedule.warmup_steps", r.schedule.warmup_steps, run_opt("linear warmup steps").at_least(0));
  v("schedule.min_ratio", r.schedule.min_ratio, run_opt("final lr / peak lr").in(0, 1));
  v("schedule.decay_fraction", r.schedule.decay_fraction, run_opt("wsd: share of steps in the linear cooldown").in(0, 1));
  v("train.steps", r.train.steps, run_opt("optimizer steps").at_least(1));
  v("train.grad_accum", r.train.grad_accum, run_opt("micro-batches per step").at_least(1));
  v.enumeration("train.recompute", r.train.recompute,
                run_opt("activation recomputation: none | attention (norm1 + attention sublayer recomputed in backward) | "
                        "layer (only each block's input kept); gradients bitwise equal to none"),
                nn::parse_recompute, static_cast<const char* (*)(nn::Recompute)>(nn::name));
  v.enumeration("train.positions", r.train.positions.scheme,
                run_opt("the positions training tokens carry: index | pose (PoSE: chunks shifted by random skips over "
                        "[0, position_max)) | randomized (sorted distinct samples of [0, position_max)) | continuous "
                        "(sorted real samples of [0, position_max)); RoPE and p-RoPE rotate by them, ALiBi and "
                        "scale-invariant attention take their distances, LogN by position, SWAN's row and Llama 4's "
                        "temperature read them; masks and evaluation keep indices"),
                data::parse_position_scheme, static_cast<const char* (*)(data::PositionScheme)>(data::name));
  v("train.position_max", r.train.positions.max,
    run_opt("pose / randomized / continuous: positions lie in [0, position_max) (the target length; > data.seq_len); "
            "refused with index positions, which do not read it").in(0, 1 << 30));
  v("train.pose_chunks", r.train.positions.chunks, run_opt("pose: chunks per sequence (PoSE's N)").in(1, 1 << 20));
  v("train.loss_chunk", r.train.loss_chunk,
    run_opt("rows of LM-head logits alive at a time (-1 = automatic: about 64 MiB of them, 1 GiB on a GPU; 0 = all); "
            "f32/bf16 losses and gradients on the CPU are bitwise the same for every value").at_least(-1));
  v("train.log_every", r.train.log_every, run_opt("console / metrics.jsonl interval").at_least(1));
  v("train.bucket_mb", r.train.bucket_mb, run_opt("data parallel: gradient all-reduce bucket size in MiB").in(1, 1 << 20));
  v("train.overlap_comm", r.train.overlap_comm, run_opt("data parallel: all-reduce buckets during backward (false: after it)"));
  v("parallel.shard_optimizer", r.parallel.shard_optimizer,
    run_opt("ZeRO-1: each data-parallel rank keeps and updates 1/N of the optimizer state (AdamW by element, Muon by "
            "whole matrix); parameters bitwise those of the replicated optimizer, checkpoints the same"));
  v("parallel.context", r.parallel.context,
    run_opt("context parallelism: N consecutive ranks share each sequence, cut into 2N zigzag chunks (rank r holds "
            "chunks r and 2N-1-r); window layers exchange a halo, the others parallel.context_exchange; mpirun -np = "
            "data-parallel ranks x N").in(1, 1 << 16));
  v.enumeration("parallel.context_exchange", r.parallel.context_exchange,
    run_opt("ring | all_gather: how layers that read the whole sequence (an unbounded head, a window longer than a "
            "chunk) exchange keys under parallel.context. ring: key/value blocks go round the group, each transfer "
            "overlapping the attention of the block held, and nothing of the gathered sequence is kept; all_gather: "
            "every rank gathers the whole sequence's keys (kept for the backward)"),
    dist::parse_context_exchange, static_cast<const char* (*)(dist::ContextExchange)>(dist::name));
  v("checkpoint.every", r.checkpoint.every, run_opt("checkpoint interval in steps (0 = only at the end)").at_least(0));
  v("checkpoint.keep_last", r.checkpoint.keep_last, run_opt("checkpoints kept").at_least(1));
  v("checkpoint.resume", r.checkpoint.resume, run_opt("'' | latest | path: continue a run exactly"));
  v("checkpoint.elastic", r.checkpoint.elastic,
    run_opt("resume a checkpoint written under another world size: the data continue from the same global position "
            "(rounded up to a whole share per rank); the steps that follow are not those the old world size would take"));
  v("checkpoint.init_from", r.checkpoint.init_from, run_opt("start from another run's weights (checkpoint or run dir)"));
  v("metrics.tensorboard", r.metrics.tensorboard,
    run_opt("TensorBoard event files in the run directory (events.out.tfevents.*): every number of metrics.jsonl at "
            "its step, each evaluation's, and the resolved recipe as text; a resume starts a new file (builds "
            "without protobuf write none and say so)"));
  v("eval.every", r.eval.every, run_opt("validation interval in steps (0 = only at the end)").at_least(0));
  v("eval.final", r.eval.final,
    run_opt("validate after the last step (false with eval.every 0: the run never evaluates; horizon eval can, later)"));
  v("eval.batches", r.eval.opts.batches, infer("validation batches per length").at_least(1));
  v("eval.batch_size", r.eval.opts.batch_size, infer("validation batch size (0 = data.batch_size)").in(0, 1 << 24));
  v("eval.lengths", r.eval.opts.lengths, infer("evaluation lengths ([] = 1x 2x 4x 8x data.seq_len)").in(2, 1 << 24));
  v.enumeration("eval.rope_scaling", r.eval.opts.inference.rope_scaling,
                infer("inference RoPE scaling: '' (as trained) | none | pi | ntk | dynamic_ntk | yarn | llama3 | longrope"),
                attn::parse_scaling, static_cast<const char* (*)(attn::RopeScaling)>(attn::name));
  v("eval.longrope_long_factors", r.eval.opts.inference.longrope_long_factors,
    infer("LongRoPE's searched rescale factors for eval.rope_scaling=longrope (head_dim/2 values, w_m / lambda_m "
          "beyond data.seq_len; a list or a JSON file: a list, LongRoPE's {long_factor, short_factor}, a config.json)")
        .above(0));
  v("eval.longrope_short_factors", r.eval.opts.inference.longrope_short_factors,
    infer("LongRoPE rescale factors within data.seq_len ([] = 1; a list or a JSON file)").above(0));
  v("eval.swan_a", r.eval.opts.inference.swan_a, infer("SWAN row scaling a on global NoPE layers (0 = off)").at_least(0));
  v("eval.drope_c", r.eval.opts.inference.drope_c, infer("DroPE temperature c: beta = 1 + c ln s (0 = off)"));
  v("eval.lampe", r.eval.opts.inference.lampe, infer("LaMPE on RoPE layers"));
  v("eval.lampe_L", r.eval.opts.inference.lampe_L, infer("LaMPE mapping scale L (0 = 3/4 of seq_len)").at_least(0));
  v("eval.lampe_a", r.eval.opts.inference.lampe_a, infer("LaMPE sigmoid slope a").at_least(0));
  v("eval.lampe_b", r.eval.opts.inference.lampe_b, infer("LaMPE sigmoid offset b"));
  v("eval.lampe_local", r.eval.opts.inference.lampe_local, infer("LaMPE local region").at_least(0));
  v("eval.lampe_sink", r.eval.opts.inference.lampe_sink, infer("LaMPE sink region").at_least(0));
  v("eval.fit_drope_c", r.eval.opts.fit_drope_c, infer("candidate DroPE c values; eval reports the best per length"));
  v("eval.passkey_examples", r.eval.opts.passkey_examples, infer("passkey retrieval examples per (length, depth) (0 = off)").at_least(0));
  v("eval.passkey_depths", r.eval.opts.passkey_depths, infer("needle depths for the passkey grid (fractions of the filler)").in(0, 1));
  v("eval.fit_swan_a", r.eval.opts.fit_swan_a, infer("candidate SWAN a values; eval reports the best per length and per 128-token window").above(1));
  v("eval.needle_tasks", r.eval.opts.needles.tasks, infer("RULER needle tasks answered by greedy decoding ([] = off): niah_single_2 niah_single_word niah_multikey_1 niah_multivalue niah_multiquery passkey (lm-eval's RULER names)"));
  v("eval.needle_samples", r.eval.opts.needles.samples, infer("needle examples per (task, length, depth)").at_least(1));
  v("eval.needle_depths", r.eval.opts.needles.depths, infer("needle depths (fractions of the haystack)").in(0, 1));
  v.enumeration("eval.needle_format", r.eval.opts.needles.format, infer("needle wording: ruler (RULER's templates) | short (fewer tokens)"),
                data::parse_needle_format, static_cast<const char* (*)(data::NeedleFormat)>(data::name));
  v("eval.needle_per_example", r.eval.opts.needles.per_example,
    infer("also write every needle example's output and score (needles_examples.jsonl)"));
  v("eval.retrieval_heads", r.eval.opts.needles.retrieval_heads,
    infer("score every attention head as a retrieval head on the needle tasks' greedy answers and the passkey grid's argmax answers (retrieval_heads.csv; docs/needles.md)"));
  v("eval.probe_sequences", r.eval.opts.probe_sequences, infer("linear position probe on this many validation sequences (0 = off)").at_least(0));
  v("drope.at_step", r.drope.at_step, arch("drop position encodings at this step (-1 = never)").at_least(-1));
  v("drope.qk_norm", r.drope.qk_norm, arch("add full QK-norm at the drop (gains start at 1)"));
  v("drope.reset_optimizer", r.drope.reset_optimizer, run_opt("fresh optimizer and schedule at the drop"));
  v("drope.lr", r.drope.lr, run_opt("peak lr after a reset").above(0));
  v("drope.warmup_steps", r.drope.warmup_steps, run_opt("warmup after a reset").at_least(0));
  v("drope.keep_pairs", r.drope.keep_pairs, arch("partial DroPE: RoPE stays on these frequency pairs (0 = fastest)").at_least(0));
  v("drope.keep_fraction", r.drope.keep_fraction, arch("partial DroPE: RoPE stays on this fraction of the pairs (0 = drop all)").in(0, 1));
  v.enumeration("drope.keep_select", r.drope.keep_select, arch("partial DroPE: which pairs keep_fraction keeps: high | low | uniform"),
                attn::parse_rope_select, static_cast<const char* (*)(attn::RopeSelect)>(attn::name));
  v("swan.enabled", r.swan.enabled, arch("build a SWAN stack (global NoPE + SWA-RoPE) instead of model.pattern"));
  v("swan.pattern", r.swan.pattern, arch("SWAN layer pattern over global_nope / swa_rope"));
  v("swan.window", r.swan.window, arch("SWA window of the swa_rope layers").at_least(1));
  v("swan.rope_base", r.swan.rope_base, arch("RoPE base of the swa_rope layers (0 = as layer kind 'rope' or 10000)").at_least(0));
}

}  // namespace hz::train
