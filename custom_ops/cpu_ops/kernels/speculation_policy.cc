// The adaptive speculation policy's per-step host arithmetic (specworker/spec_decode/policy.py, AdaptivePolicy;
// docs/adaptive.md "Cost of the choice itself"), called through ctypes with the policy's own numpy arrays.
//
// Not an op: no tensor, no device. The policy runs on the host between two steps, and inside a running worker each
// numpy call it made cost ~3-5 us (the model's step leaves the caches cold), ~8 a step and ~60-80 a drain decision.
// One call here costs ~2-9 us there. The numpy formulas these follow stay in the tests
// (tests/spec_decode/policy_reference.py) and are checked against these to 1e-12.
//
// Layouts (float64 unless said; N slots, K = k_max, row-major): slot_counts, slot_raw [2, N, K] (reaches,
// successes); totals, first_totals, fill [2, K]; k_totals [2, K, K] ([., k - 1, j]); k_shift [K, K]; carry [5]
// (sum x, sum y, sum x y, sum x^2, reaches); scalars [1] (pending_decay); allowed, prev_allowed, cap [N] int64;
// fresh [N] bool (one byte).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int64_t kMaxK = 64;  // the wrapper refuses a larger k_max (SpeculativeConfig allows far fewer)

struct PolicyState {
  int64_t num_slots;
  int64_t k_max;
  double* slot_counts;
  double* slot_raw;
  double* totals;
  double* first_totals;
  double* k_totals;
  double* k_shift;
  double* carry;
  double* fill;
  double* scalars;
  int64_t* allowed;
  int64_t* prev_allowed;
  int64_t* cap;
  uint8_t* fresh;
};

// p_j: the worker's Laplace-smoothed acceptance per position, (successes + 1) / (reaches + 2).
void Prior(const PolicyState& s, double* p) {
  const int64_t k = s.k_max;
  for (int64_t j = 0; j < k; ++j) p[j] = (s.totals[k + j] + 1.0) / (s.totals[j] + 2.0);
}

}  // namespace

// One verify step counted (AdaptivePolicy.observe). drafted, emitted: [N] int64, the step's drafts verified and
// tokens emitted per slot. Returns 0 when no slot was allowed or drafted a draft (only the decay is owed: scalars[0]
// *= decay, prev_allowed := 0), else 1. flags: bit 0 by_anchor (k_shift kept), bit 1 the fill is counted.
extern "C" int specworker_policy_count(const PolicyState* state, const int64_t* drafted, const int64_t* emitted,
                                       double decay, double prior_weight, int64_t flags) {
  const PolicyState& s = *state;
  const int64_t n = s.num_slots, k = s.k_max;
  if (k < 1 || k > kMaxK) return -1;
  bool any = false;
  for (int64_t b = 0; b < n && !any; ++b) any = s.allowed[b] != 0 || drafted[b] != 0;
  if (!any) {
    s.scalars[0] *= decay;
    std::fill(s.prev_allowed, s.prev_allowed + n, int64_t{0});
    return 0;
  }
  const double factor = s.scalars[0] * decay;  // what this step's counting decays the counts before it by
  s.scalars[0] = 1.0;
  double p[kMaxK];
  Prior(s, p);  // the totals before this step
  const bool by_anchor = flags & 1, count_fill = flags & 2;
  const int64_t plane = n * k;
  for (int64_t b = 0; b < n; ++b) {
    // positions count from what the slot was allowed; both bounds hold by construction, clamped all the same
    const int64_t allowed = std::min(std::max(s.allowed[b], drafted[b]), k);
    const int64_t em = std::min(std::max(emitted[b], int64_t{0}), k + 1);
    const int64_t prev = s.prev_allowed[b];
    s.prev_allowed[b] = em > 0 ? allowed : 0;
    const bool first = s.fresh[b] && s.prev_allowed[b] > 0;  // the request's first verification of drafts
    if (first) s.fresh[b] = 0;
    if (count_fill) {
      const int64_t offered = em > 0 ? allowed : 0;
      const int64_t fed = std::min(std::max(drafted[b], int64_t{0}), offered);
      for (int64_t j = 0; j < offered; ++j) s.fill[j] += 1.0;
      for (int64_t j = 0; j < fed; ++j) s.fill[k + j] += 1.0;
    }
    const int64_t reached = std::min(allowed, em), accepted = std::min(allowed, em - 1);
    double* reaches = s.slot_counts + b * k;
    double* successes = s.slot_counts + plane + b * k;
    for (int64_t j = 0; j < k; ++j) {
      const double r = j < reached ? 1.0 : 0.0, a = j < accepted ? 1.0 : 0.0;
      if (first) {
        s.first_totals[j] += r;
        s.first_totals[k + j] += a;
      } else if (r > 0.0) {
        // the slot's acceptance above the prior as known before the step, against the outcome (carry)
        const double above = (successes[j] + prior_weight * p[j]) / (reaches[j] + prior_weight) - p[j];
        const double outcome = a - p[j];
        s.carry[0] += above;
        s.carry[1] += outcome;
        s.carry[2] += outcome * above;
        s.carry[3] += above * above;
        s.carry[4] += 1.0;
        if (prev > 0 && prev <= k) {
          if (by_anchor) s.k_shift[(prev - 1) * k + j] += above;
          s.k_totals[(prev - 1) * k + j] += 1.0;
          s.k_totals[k * k + (prev - 1) * k + j] += a;
        }
        s.totals[j] += 1.0;
        s.totals[k + j] += a;
        s.slot_raw[b * k + j] += 1.0;
        s.slot_raw[plane + b * k + j] += a;
      }
      const bool counted = !first && r > 0.0;
      reaches[j] = reaches[j] * factor + (counted ? 1.0 : 0.0);
      successes[j] = successes[j] * factor + (counted ? a : 0.0);
    }
  }
  return 1;
}

// E and the reach probabilities of every slot at every K (AdaptivePolicy.expected_by_k of acceptance(), with
// prior_by_k raised / lowered by `confidence` standard errors when sign is +1 / -1). gain: [N, K + 1]; reach:
// [K + 1, N, K]. params: prior_weight, k_prior_weight, confidence, carry_prior. Returns 0, or -1 for a bad k_max.
extern "C" int specworker_policy_expected(const PolicyState* state, int64_t sign, int64_t by_anchor,
                                          const double* params, double* gain, double* reach) {
  const PolicyState& s = *state;
  const int64_t n = s.num_slots, k = s.k_max;
  if (k < 1 || k > kMaxK) return -1;
  const double w = params[0], wk = params[1], confidence = params[2], carry_prior = params[3];
  double p[kMaxK];
  Prior(s, p);
  // ratio[kk][j] = by_k[kk - 1][j] / p_j (row 0: 1), by_k the per-anchor acceptance (prior_by_k), bounded
  std::vector<double> ratio((k + 1) * k, 1.0);
  for (int64_t kk = 1; kk <= k; ++kk) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = (kk - 1) * k + j;
      double by_k = p[j], reaches = s.totals[j];
      if (by_anchor) {
        const double expected = s.k_totals[at] * p[j] + s.k_shift[at];
        by_k = std::min(p[j] * (s.k_totals[k * k + at] + wk * p[j]) / (expected + wk * p[j]), 1.0);
        reaches = s.k_totals[at];
      }
      if (sign != 0) {
        const double error = std::sqrt(by_k * (1.0 - by_k) / (reaches + wk));
        by_k = std::min(std::max(by_k + static_cast<double>(sign) * confidence * error, 0.0), 1.0);
      }
      ratio[kk * k + j] = by_k / p[j];
    }
  }
  // carry: the least-squares slope of outcomes on the slots' leads, shrunk to 1 by carry_prior, in [0, 1]
  double carry = 1.0;
  const double* c = s.carry;
  if (c[4] > 0.0) {
    const double covariance = c[2] - c[0] * c[1] / c[4], variance = c[3] - c[0] * c[0] / c[4];
    carry = std::min(std::max((covariance + carry_prior) / (variance + carry_prior), 0.0), 1.0);
  }
  const double decay = s.scalars[0];
  const int64_t plane = n * k;
  double accept[kMaxK];
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t j = 0; j < k; ++j) {
      const double own = (decay * s.slot_counts[plane + b * k + j] + w * p[j]) /
                         (decay * s.slot_counts[b * k + j] + w);
      accept[j] = p[j] + carry * (own - p[j]);
    }
    for (int64_t kk = 0; kk <= k; ++kk) {
      double* row = reach + (kk * n + b) * k;
      double product = 1.0, sum = 1.0;
      for (int64_t j = 0; j < k; ++j) {
        product *= std::min(accept[j] * ratio[kk * k + j], 1.0);
        row[j] = product;
        if (j < kk) sum += product;
      }
      gain[b * (k + 1) + kk] = sum;
    }
  }
  return 0;
}

// D(K) for K = 0..k_max: predicted seconds until every live slot has emitted its remaining tokens, the batch
// drafting K throughout (AdaptivePolicy.drain_seconds; docs/adaptive.md "Draining batches"). gain, reach:
// specworker_policy_expected's; live [N] bool; remaining [N] int64; seconds [B, K + 1] T(B - i, K) of segment i;
// spread [K + 1] the population's spread of E; scores [B] Blom's scores; out [K + 1]. B = the live slots, >= 1.
extern "C" int specworker_policy_drain(const PolicyState* state, const double* gain, const double* reach,
                                       const uint8_t* live, const int64_t* remaining, const double* seconds,
                                       const double* spread, const double* scores, double prior_weight,
                                       int64_t num_live, double* out) {
  const PolicyState& s = *state;
  const int64_t n = s.num_slots, k = s.k_max;
  if (k < 1 || k > kMaxK) return -1;
  std::vector<int64_t> rows;
  rows.reserve(num_live);
  for (int64_t b = 0; b < n; ++b) {
    if (live[b]) rows.push_back(b);
  }
  const int64_t size = static_cast<int64_t>(rows.size());
  if (size != num_live || size < 1) return -2;
  std::vector<double> needed(size), sd(size), steps(size);
  std::vector<int64_t> order(size);
  for (int64_t kk = 0; kk <= k; ++kk) {
    for (int64_t i = 0; i < size; ++i) {
      const int64_t b = rows[i];
      const int64_t k_b = std::min(kk, std::max(s.cap[b], int64_t{0}));
      const double mean = gain[b * (k + 1) + k_b];
      // E[X^2] = 1 + sum_j (2j + 1) P(draft j accepted), j 1-based, over the k_b drafts
      double square = 1.0;
      const double* row = reach + (k_b * n + b) * k;
      for (int64_t j = 0; j < k_b; ++j) square += (2.0 * (j + 1) + 1.0) * row[j];
      const double variance = std::max(square - mean * mean, 0.0);
      const double tokens = static_cast<double>(std::max(remaining[b], int64_t{1}));
      // the slot's E is uncertain by the population's spread, shrunk by its own reaches of position 1
      const double unknown = prior_weight / (s.scalars[0] * s.slot_counts[b * k] + prior_weight);
      needed[i] = tokens / mean;
      const double unsure = needed[i] / mean * unknown * spread[k_b];
      sd[i] = std::sqrt(needed[i] * variance / (mean * mean) + unsure * unsure);
      order[i] = i;
    }
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return needed[a] < needed[b] || (needed[a] == needed[b] && a < b);
    });
    // the i-th slot to finish at its mean plus its spread times the i-th order statistic's score, non-decreasing;
    // each segment pays T at the slots still decoding in it
    double total = 0.0, last = 0.0;
    for (int64_t i = 0; i < size; ++i) {
      const int64_t o = order[i];
      const double at = std::max(std::max(needed[o] + sd[o] * scores[i], 0.0), last);
      total += (at - last) * seconds[i * (k + 1) + kk];
      last = at;
    }
    out[kk] = total;
  }
  return 0;
}

// The population's spread of E(K) for K = 0..k_max (AdaptivePolicy.population_spread): over `count` finished
// requests (profiles [count, 2, K]: each one's reaches and successes over its life), the standard deviation of E(K)
// less what the binomial noise of each request's own estimate would spread them by. Request r reads position j as
// a_j = s_j / n_j (the worker prior p_j where n_j = 0), with noise variance a_j (1 - a_j) / max(n_j, 1), carried to
// E(K) = 1 + sum_{i < K} prod_{l <= i} a_l by its derivative dE(K) / da_j = sum_{i = j}^{K - 1} prod_{l <= i, l != j}
// a_l. out [K + 1] = sqrt(max(Var_r E(K) - mean_r noise(K), 0)); zeros below two requests. Returns 0, or -1 for a
// bad k_max or count.
extern "C" int specworker_policy_spread(const PolicyState* state, const double* profiles, int64_t count,
                                        double* out) {
  const PolicyState& s = *state;
  const int64_t k = s.k_max;
  if (k < 1 || k > kMaxK || count < 0) return -1;
  std::fill(out, out + k + 1, 0.0);
  if (count < 2) return 0;
  double p[kMaxK];
  Prior(s, p);
  std::vector<double> e(count * (k + 1)), noise(count * (k + 1), 0.0);
  for (int64_t r = 0; r < count; ++r) {
    const double* reaches = profiles + r * 2 * k;
    const double* successes = reaches + k;
    double own[kMaxK], var[kMaxK];
    for (int64_t j = 0; j < k; ++j) {
      own[j] = reaches[j] > 0.0 ? successes[j] / reaches[j] : p[j];
      var[j] = own[j] * (1.0 - own[j]) / std::max(reaches[j], 1.0);
    }
    double* row = e.data() + r * (k + 1);
    double* row_noise = noise.data() + r * (k + 1);
    double product = 1.0, sum = 1.0;
    row[0] = 1.0;
    for (int64_t i = 0; i < k; ++i) {
      product *= own[i];
      sum += product;
      row[i + 1] = sum;
    }
    double before = 1.0;  // prod_{l < j} a_l
    for (int64_t j = 0; j < k; ++j) {
      double without = before, grad = 0.0;  // prod_{l <= i, l != j} a_l at i = j, and its running sum
      for (int64_t i = j; i < k; ++i) {
        if (i > j) without *= own[i];
        grad += without;
        row_noise[i + 1] += grad * grad * var[j];
      }
      before *= own[j];
    }
  }
  for (int64_t kk = 0; kk <= k; ++kk) {
    double mean = 0.0, mean_noise = 0.0;
    for (int64_t r = 0; r < count; ++r) {
      mean += e[r * (k + 1) + kk];
      mean_noise += noise[r * (k + 1) + kk];
    }
    mean /= static_cast<double>(count);
    mean_noise /= static_cast<double>(count);
    double spread = 0.0;
    for (int64_t r = 0; r < count; ++r) {
      const double d = e[r * (k + 1) + kk] - mean;
      spread += d * d;
    }
    out[kk] = std::sqrt(std::max(spread / static_cast<double>(count) - mean_noise, 0.0));
  }
  return 0;
}
