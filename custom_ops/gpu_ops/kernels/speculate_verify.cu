// speculate_verify CUDA kernels: decide which draft tokens of one step are accepted and emit
// each slot's tokens (accepted drafts, then one correction or bonus token) in place.
// Semantics are those of the op (cpu_ops/speculate_verify.cc, docs/spec.md §4.5); shapes are listed in
// speculate_verify.h. Per slot b with s = cu_seqlens_q_output[b], L = seq_lens_this_time[b], draft
// draft_tokens[b, i + 1] is checked against output row s + i for i < L - 1, stopping at the first
// rejection; the correction/bonus token comes from the row where the walk stopped. topp reads
// only the first min(actual_candidate_len, C) candidates of a row (the top-p set); verify_window
// is validated and has no effect (see cpu_ops/speculate_verify.cc: restricted to the top-p set,
// FastDeploy's verify-window fallback can never change an outcome).
//
// Parallelization:
//   greedy / target_match / topp: one thread per slot (VerifyScalarKernel, kScalarThreads per
//     block, grid ceil(bsz / kScalarThreads)); a slot's work is <= k compares and one draw over
//     <= C candidates.
//   rejection: one block of kRejectThreads per slot (VerifyRejectionKernel). Thread 0 walks the
//     drafts (two scalar reads each); then the block draws the correction/bonus token over V:
//     every thread sums the integer weights (counter_rng.h units) of a contiguous chunk of the
//     vocabulary, a block scan of the chunk sums finds the one chunk holding the threshold, and
//     that chunk's thread rescans it. Integer sums make the result independent of the reduction
//     order, so it equals the CPU kernel and the numpy reference exactly.
// Any bsz (grid over slots), no allocation, no host sync: the launch is graph-capturable.
// Bounds: the kernels cannot raise, so a slot whose rows or lengths fall outside the tensors is
// not verified (accept_num 0, nothing else written) and a draft id outside [0, V) is rejected by
// the rejection strategy; emitted ids come from the inputs or from [0, V).
#include "speculate_verify.h"
#include "block_scan.cuh"
#include "counter_rng.h"

namespace {

constexpr int kScalarThreads = 128;
constexpr int kRejectThreads = 512;

struct Params {
  const int64_t* sampled;
  int64_t* accept_tokens;
  int32_t* accept_num;
  int64_t* step_idx;
  bool* stop_flags;
  const int32_t* encoder;
  const int64_t* draft;
  const int32_t* lens;
  const int64_t* cand_ids;
  const float* cand_scores;
  const int64_t* max_dec_len;
  const int64_t* end_tokens;
  const bool* block_step;
  const int32_t* cu_out;
  const int32_t* cand_len;
  const float* topp;
  const float* target_probs;
  const float* draft_probs;
  const int64_t* seed;
  const int32_t* reasoning;
  int bsz, D, rows, C, V, E, strategy, policy, enable_topp;
};

// Where a verifiable slot's rows are; false for block-step, stopped, idle or out-of-range slots.
struct SlotPlan {
  int s;        // first output row
  int L;        // seq_lens_this_time
  bool drafts;  // phase 1 runs (decode slot, not reject-all, reasoning status != 1)
};

__device__ bool PlanSlot(const Params& a, int b, SlotPlan* pl) {
  if (a.block_step[b] || a.stop_flags[b]) return false;
  const int L = a.lens[b];
  if (L <= 0) return false;
  const bool prefill = a.encoder[b] > 0;
  if (!prefill && L > a.D) return false;
  const int rows_used = prefill ? 1 : L;
  const int s = a.cu_out[b];
  if (s < 0 || s > a.rows - rows_used) return false;
  pl->s = s;
  pl->L = L;
  pl->drafts = !prefill && a.policy != SPECWORKER_REJECT_ALL &&
               !(a.reasoning != nullptr && a.reasoning[b] == 1);
  return true;
}

// Token-by-token emission: every token advances the step; EOS or max_dec_len stops the slot
// (a length stop on a non-EOS token writes end_tokens[0] instead, as FastDeploy).
struct Emitter {
  int64_t* out;
  int n;
  int64_t step;
  int64_t max_dec;
  bool stopped;

  __device__ bool Emit(int64_t tok, const Params& a) {
    ++step;
    bool eos = false;
    for (int e = 0; e < a.E; ++e) eos |= a.end_tokens[e] == tok;
    if (eos || step >= max_dec) {
      stopped = true;
      if (!eos && a.E > 0) tok = a.end_tokens[0];
    }
    out[n++] = tok;
    return stopped;
  }

  __device__ void Finish(const Params& a, int b) {
    for (int j = n; j < a.D; ++j) out[j] = -1;
    a.accept_num[b] = n;
    a.step_idx[b] = step;
    if (stopped) a.stop_flags[b] = true;
  }
};

__device__ Emitter StartSlot(const Params& a, int b) {
  return Emitter{a.accept_tokens + static_cast<int64_t>(b) * a.D, 0, a.step_idx[b],
                 a.max_dec_len[b], false};
}

__device__ int64_t SlotSeed(const Params& a, int b) { return a.seed ? a.seed[b] : b; }

__device__ bool InCandidates(const Params& a, int64_t r, int64_t x) {
  const int n = min(max(a.cand_len[r], 0), a.C);
  for (int m = 0; m < n; ++m) {
    if (a.cand_ids[r * a.C + m] == x) return true;
  }
  return false;
}

// topp bonus: inverse CDF over the first min(actual_candidate_len, C) candidates with mass
// min(units(top_p), candidate mass); candidate 0 when that mass is zero.
__device__ int64_t SampleCandidates(const Params& a, int64_t r, float top_p, uint32_t bits) {
  using namespace specworker::rng;
  const int64_t* ids = a.cand_ids + r * a.C;
  const float* scores = a.cand_scores + r * a.C;
  const int n = min(max(a.cand_len[r], 0), a.C);
  uint64_t mass = 0;
  for (int m = 0; m < n; ++m) mass += ProbUnits(scores[m]);
  const uint64_t cap = min(ProbUnits(top_p), mass);
  if (cap == 0) return ids[0];
  const uint64_t t = ScaleToMass(bits, cap);
  uint64_t cum = 0;
  for (int m = 0; m < n; ++m) {
    cum += ProbUnits(scores[m]);
    if (cum > t) return ids[m];
  }
  return ids[0];  // unreachable: t < cap <= mass
}

__global__ void VerifyScalarKernel(Params a) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= a.bsz) return;
  SlotPlan pl;
  if (!PlanSlot(a, b, &pl)) {
    a.accept_num[b] = 0;
    return;
  }
  Emitter em = StartSlot(a, b);
  const int64_t step0 = em.step;
  const int64_t* dr = a.draft + static_cast<int64_t>(b) * a.D;
  int i = 0;
  while (pl.drafts && i < pl.L - 1) {
    const int64_t x = dr[i + 1];
    const int64_t r = pl.s + i;
    bool ok = a.policy == SPECWORKER_ACCEPT_ALL;
    if (!ok) {
      if (a.strategy == SPECWORKER_VERIFY_GREEDY) {
        ok = a.cand_ids[r * a.C] == x;
      } else if (a.strategy == SPECWORKER_VERIFY_TARGET_MATCH) {
        ok = a.sampled[r] == x;
      } else {  // topp: only the top-p set counts (no verify-window fallback, see the header)
        ok = InCandidates(a, r, x);
      }
    }
    if (!ok || em.Emit(x, a)) break;
    ++i;
  }
  if (!em.stopped) {
    const int64_t r = pl.s + i;
    int64_t tok;
    if (a.strategy == SPECWORKER_VERIFY_TARGET_MATCH) {
      tok = a.sampled[r];
    } else if (a.strategy == SPECWORKER_VERIFY_TOPP && a.enable_topp) {
      const uint32_t bits = specworker::rng::CounterBits(SlotSeed(a, b), step0 + i, i, 1);
      tok = SampleCandidates(a, r, a.topp[b], bits);
    } else {
      tok = a.cand_ids[r * a.C];
    }
    em.Emit(tok, a);
  }
  em.Finish(a, b);
}

enum DrawMode : int { kNoDraw = 0, kDrawTarget = 1, kDrawResidual = 2 };

// Rejection sampling (Leviathan et al.): accept draft x at row r with probability
// min(1, p(x) / q(x)); at the first rejection resample from norm(max(p - q, 0)) (from p if that
// mass is 0); when every draft passes, the bonus token comes from p at row s + L - 1.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) VerifyRejectionKernel(Params a) {
  using namespace specworker::rng;
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block must be whole warps");
  __shared__ specworker::BlockScanStorage<uint64_t, kThreads> scan;
  __shared__ int mode;
  __shared__ int64_t row, draft_id, qrow;
  __shared__ uint32_t bits;
  __shared__ int64_t token;
  const int b = blockIdx.x;
  Emitter em;  // thread 0's
  if (threadIdx.x == 0) {
    mode = kNoDraw;
    SlotPlan pl;
    if (!PlanSlot(a, b, &pl)) {
      a.accept_num[b] = 0;
    } else {
      em = StartSlot(a, b);
      const int64_t step0 = em.step;
      const int64_t seed = SlotSeed(a, b);
      const int64_t* dr = a.draft + static_cast<int64_t>(b) * a.D;
      int i = 0;
      bool rejected = false;
      while (pl.drafts && i < pl.L - 1) {
        const int64_t x = dr[i + 1];
        bool ok = a.policy == SPECWORKER_ACCEPT_ALL;
        if (!ok && x >= 0 && x < a.V) {
          const float p = a.target_probs[(pl.s + i) * static_cast<int64_t>(a.V) + x];
          const float q =
              a.draft_probs
                  ? a.draft_probs[(static_cast<int64_t>(b) * (a.D - 1) + i) * a.V + x]
                  : 1.0f;
          ok = AcceptDraft(CounterBits(seed, step0 + i, i, 0), p, q);
        }
        if (!ok) {
          rejected = true;
          break;
        }
        if (em.Emit(x, a)) break;
        ++i;
      }
      if (em.stopped) {
        em.Finish(a, b);
      } else {
        mode = rejected ? kDrawResidual : kDrawTarget;
        row = pl.s + i;
        draft_id = rejected ? dr[i + 1] : -1;
        qrow = (rejected && a.draft_probs) ? static_cast<int64_t>(b) * (a.D - 1) + i : -1;
        bits = CounterBits(seed, step0 + i, i, 1);
        token = 0;  // kept when the row has no mass at all
      }
    }
  }
  __syncthreads();
  if (mode == kNoDraw) return;

  const float* p = a.target_probs + row * a.V;
  const float* q = qrow >= 0 ? a.draft_probs + qrow * a.V : nullptr;
  const bool residual = mode == kDrawResidual;
  const int chunk = (a.V + kThreads - 1) / kThreads;
  const int lo = min(a.V, static_cast<int>(threadIdx.x) * chunk);
  const int hi = min(a.V, lo + chunk);
  // Residual weight of id v: units(p) - units(q) where positive; q is one-hot at the draft
  // when draft_probs is absent.
  auto residual_w = [&](int v, uint64_t pu) -> uint64_t {
    const uint64_t qu = q ? ProbUnits(q[v]) : (v == draft_id ? kProbOne : 0);
    return pu > qu ? pu - qu : 0;
  };
  uint64_t mine_p = 0, mine_r = 0;
  for (int v = lo; v < hi; ++v) {
    const uint64_t pu = ProbUnits(p[v]);
    mine_p += pu;
    if (residual) mine_r += residual_w(v, pu);
  }
  uint64_t total_p, total_r = 0, excl_r = 0;
  // Exclusive scans: the mass before this thread's ids.
  const uint64_t excl_p = specworker::BlockInclusiveScan<kThreads>(mine_p, scan, &total_p) - mine_p;
  if (residual) excl_r = specworker::BlockInclusiveScan<kThreads>(mine_r, scan, &total_r) - mine_r;
  const bool use_r = total_r > 0;
  const uint64_t total = use_r ? total_r : total_p;
  const uint64_t excl = use_r ? excl_r : excl_p;
  const uint64_t mine = use_r ? mine_r : mine_p;
  if (total > 0) {
    const uint64_t t = ScaleToMass(bits, total);
    if (mine > 0 && excl <= t && t - excl < mine) {  // exactly one thread holds the threshold
      uint64_t cum = excl;
      int pick = -1;
      for (int v = lo; v < hi; ++v) {
        const uint64_t pu = ProbUnits(p[v]);
        const uint64_t w = use_r ? residual_w(v, pu) : pu;
        if (w > 0) pick = v;  // defensive: last id with mass if the scan ever overshoots
        cum += w;
        if (cum > t) break;
      }
      token = pick;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    em.Emit(token, a);
    em.Finish(a, b);
  }
}

}  // namespace

extern "C" int specworker_speculate_verify_launch(
    const int64_t* sampled_token_ids, int64_t* accept_tokens, int32_t* accept_num,
    int64_t* step_idx, bool* stop_flags, const int32_t* seq_lens_encoder,
    const int64_t* draft_tokens, const int32_t* seq_lens_this_time, const int64_t* verify_tokens,
    const float* verify_scores, const int64_t* max_dec_len, const int64_t* end_tokens,
    const bool* is_block_step, const int32_t* cu_seqlens_q_output,
    const int32_t* actual_candidate_len, const float* topp, const float* target_probs,
    const float* draft_probs, const int64_t* infer_seed, const int32_t* reasoning_status, int bsz,
    int max_draft_tokens, int num_rows, int max_candidate_len, int vocab_size, int num_end_tokens,
    int verify_window, int verify_strategy, int accept_policy, int enable_topp,
    cudaStream_t stream) {
  const bool rejection = verify_strategy == SPECWORKER_VERIFY_REJECTION;
  const bool reads_candidates = verify_strategy == SPECWORKER_VERIFY_GREEDY ||
                                verify_strategy == SPECWORKER_VERIFY_TOPP;
  if (bsz < 0 || max_draft_tokens < 1 || num_rows < 0 || max_candidate_len < 0 ||
      num_end_tokens < 0 || verify_window < 0 || verify_strategy < SPECWORKER_VERIFY_TOPP ||
      verify_strategy > SPECWORKER_VERIFY_REJECTION || accept_policy < SPECWORKER_ACCEPT_NORMAL ||
      accept_policy > SPECWORKER_REJECT_ALL || (reads_candidates && max_candidate_len < 1) ||
      (rejection && (target_probs == nullptr || vocab_size < 1 ||
                     vocab_size > specworker::rng::kMaxCdfEntries))) {
    return static_cast<int>(cudaErrorInvalidValue);
  }
  if (bsz == 0) return static_cast<int>(cudaSuccess);
  const Params a{sampled_token_ids, accept_tokens, accept_num, step_idx, stop_flags,
                 seq_lens_encoder, draft_tokens, seq_lens_this_time, verify_tokens,
                 verify_scores, max_dec_len, end_tokens, is_block_step, cu_seqlens_q_output,
                 actual_candidate_len, topp, target_probs, draft_probs, infer_seed,
                 reasoning_status, bsz, max_draft_tokens, num_rows, max_candidate_len,
                 vocab_size, num_end_tokens, verify_strategy, accept_policy, enable_topp};
  if (rejection) {
    VerifyRejectionKernel<kRejectThreads><<<bsz, kRejectThreads, 0, stream>>>(a);
  } else {
    VerifyScalarKernel<<<(bsz + kScalarThreads - 1) / kScalarThreads, kScalarThreads, 0,
                         stream>>>(a);
  }
  return static_cast<int>(cudaGetLastError());
}
