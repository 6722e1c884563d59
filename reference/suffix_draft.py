"""Reference for suffix decoding's draft (specworker/spec_decode/suffix_tree.py, docs/spec.md "Suffix decoding"),
written from the rule by counting occurrences in the token lists directly: no tree.

A string s occurs at end position p of a sequence if the |s| tokens ending at p equal s. Within the depth bound
D (|s| <= D): cont(s) = occurrences of s followed by one more token, with |s| + 1 <= D; count(s + t) the
occurrences of s followed by t. The match is the longest suffix of the context, at most min(D - budget, context
length) tokens, with cont > 0; the draft then appends, while it has fewer than min(budget, floor(factor * match
length)) tokens and cont(s) > 0, the t with the largest count(s + t) (ties: the one whose last occurrence is the
latest, in insertion order of sequences), as long as the product of count(s + t) / cont(s) stays >= min_prob.
"""

from __future__ import annotations

from collections.abc import Sequence


def _ends(sequences: Sequence[Sequence[int]], s: Sequence[int]):
    """(sequence index, end position) of every occurrence of s followed by a token, in insertion order."""
    n = len(s)
    for i, seq in enumerate(sequences):
        for p in range(n - 1, len(seq) - 1):
            if list(seq[p - n + 1:p + 1]) == list(s):
                yield i, p


def ref_suffix_draft(sequences: Sequence[Sequence[int]], context: Sequence[int], max_depth: int, budget: int,
                     spec_factor: float = 1.0, min_prob: float = 0.0) -> tuple[list[int], float, int]:
    """(draft tokens, score, match length) for `context` over the occurrences in `sequences`.

    For a request's own tree, sequences = [prompt + output] and context = prompt + output as well.
    """
    max_len = min(max_depth - budget, len(context))
    for length in range(max_len, 0, -1):
        s = list(context[len(context) - length:])
        if any(True for _ in _ends(sequences, s)):
            break
    else:
        return [], 0.0, 0
    limit = min(budget, int(spec_factor * length + 1e-9))
    tokens, score, prob = [], 0.0, 1.0
    while len(tokens) < limit and len(s) < max_depth:
        ends = list(_ends(sequences, s))
        if not ends:
            break
        counts, last = {}, {}
        for order, (i, p) in enumerate(ends):
            t = sequences[i][p + 1]
            counts[t] = counts.get(t, 0) + 1
            last[t] = order
        best = max(counts, key=lambda t: (counts[t], last[t]))
        prob *= counts[best] / len(ends)
        if prob < min_prob:
            break
        tokens.append(best)
        score += prob
        s.append(best)
    return tokens, score, length
