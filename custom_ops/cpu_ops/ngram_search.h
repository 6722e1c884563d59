// The n-gram search of ngram_match and hybrid_mtp_ngram on the CPU (docs/spec.md §5.7, §5.8): plain
// loops over one slot's history, read through an accessor so each op decides what the history is.
#pragma once
#include <cstdint>

namespace specworker {

// Start of the continuation of the longest suffix of h[0 .. length) that occurs earlier in h
// (n = max_ngram_size down to min_ngram_size; the first n with an occurrence wins, of its
// occurrences the most recent), i.e. i + n for the winning start i; -1 when no n has one.
// An occurrence starts at i <= length - n - 1 (at least one token follows it) and may overlap the
// suffix. `token(x)` returns h[x] for 0 <= x < length.
template <class Token>
int64_t NgramContinuationStart(const Token& token, int64_t length, int max_ngram_size,
                               int min_ngram_size) {
  for (int n = max_ngram_size; n >= min_ngram_size; --n) {
    if (length < n + 1) continue;  // the suffix plus an earlier start
    for (int64_t i = length - n - 1; i >= 0; --i) {
      int j = 0;
      while (j < n && token(i + j) == token(length - n + j)) ++j;
      if (j == n) return i + n;
    }
  }
  return -1;
}

}  // namespace specworker
