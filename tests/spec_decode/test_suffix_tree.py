"""SuffixTree: literal cases worked by hand, then randomized drafts against the occurrence-counting reference
(reference/suffix_draft.py) for a growing sequence, for inserted sequences and after removals."""

import numpy as np
import pytest

from specworker.spec_decode.suffix_tree import Draft, SuffixTree
from reference.suffix_draft import ref_suffix_draft


def _tree(tokens, max_depth=8):
    tree = SuffixTree(max_depth)
    tree.extend(tokens)
    return tree


def test_suffix_tree_docstring_example():
    assert _tree([1, 2, 3, 1, 2], max_depth=4).draft(2) == Draft((3, 1), 2.0, 2)


def test_suffix_tree_most_frequent_continuation_and_its_probability():
    # The longest earlier context is [9, 5] (the length-3 suffix [7, 9, 5] is new); it was followed by 6, 6, 7:
    # draft 6 with p = 2/3; [9, 5, 6] was followed by 9 both times (p stays 2/3); [9, 5, 6, 9] by 5.
    tree = _tree([9, 5, 6, 9, 5, 6, 9, 5, 7, 9, 5])
    assert tree.draft(3) == Draft((6, 9), pytest.approx(4 / 3), 2)  # spec_factor 1: <= 2 drafts for 2 tokens
    assert tree.draft(3, spec_factor=2.0) == Draft((6, 9, 5), pytest.approx(2.0), 2)


def test_suffix_tree_min_prob_cuts_the_draft():
    # [1] followed by 2, 3, 4 (once each; ties -> the latest, 4), p = 1/3 < 0.5: no draft at all.
    tree = _tree([1, 2, 1, 3, 1, 4, 9, 1])
    assert tree.draft(2, min_prob=0.5).tokens == ()
    assert tree.draft(2, min_prob=0.3) == Draft((4,), 1 / 3, 1)


def test_suffix_tree_no_match_and_depth_bound():
    assert _tree([1, 2, 3]).draft(3) == Draft((), 0.0, 0)  # nothing repeats
    assert SuffixTree(8).draft(2) == Draft((), 0.0, 0)  # empty
    # depth 3 and budget 2: matches hold one token, drafts stop at depth 3.
    tree = _tree([4, 5, 6, 7, 4], max_depth=3)
    assert tree.draft(2) == Draft((5,), 1.0, 1)  # spec_factor 1, match length 1
    assert tree.draft(2, spec_factor=5.0) == Draft((5, 6), 2.0, 1)
    assert tree.draft(3) == Draft((), 0.0, 0)  # no room for a context token above 3 drafts
    # depth 2 over [1, 2, 3]: nodes 1, 2, 3, [1 2], [2 3] and nothing deeper (memory stays O(tokens * depth))
    assert _tree([1, 2, 3], max_depth=2).num_nodes() == 5
    with pytest.raises(ValueError, match="max_depth = 1"):
        SuffixTree(1)


def test_suffix_tree_global_match_insert_and_remove():
    tree = SuffixTree(6)
    tree.insert([10, 11, 12, 13])
    tree.insert([20, 11, 12, 14, 15])
    # context [.., 11, 12]: followed by 13 (first sequence) and 14 (second, later): tie -> 14.
    assert tree.draft(2, context=[3, 11, 12]) == Draft((14, 15), 1.0, 2)
    tree.remove([20, 11, 12, 14, 15])
    assert tree.draft(2, context=[3, 11, 12]) == Draft((13,), 1.0, 2)
    tree.remove([10, 11, 12, 13])
    assert tree.num_nodes() == 0 and tree.root.cont == 0
    with pytest.raises(ValueError, match="never inserted"):
        tree.remove([1])


def _random_sequence(rng, n, vocab):
    """Random tokens with copied stretches, so matches of every length occur."""
    seq = [int(t) for t in rng.integers(0, vocab, size=4)]
    while len(seq) < n:
        if rng.random() < 0.5 and len(seq) > 4:
            start = int(rng.integers(0, len(seq) - 2))
            seq += seq[start:start + int(rng.integers(1, 8))]
        else:
            seq.append(int(rng.integers(0, vocab)))
    return seq[:n]


@pytest.mark.parametrize("seed", range(6))
def test_suffix_tree_own_sequence_matches_reference(seed):
    rng = np.random.default_rng(seed)
    max_depth = int(rng.choice([2, 3, 6, 24]))
    vocab = int(rng.choice([2, 5, 40]))
    seq = _random_sequence(rng, 120, vocab)
    tree = SuffixTree(max_depth)
    pos = 0
    while pos < len(seq):  # grown in steps of 1..4 tokens, like accepted runs
        step = int(rng.integers(1, 5))
        tree.extend(seq[pos:pos + step])
        pos += step
        for budget in {1, min(3, max_depth - 1), max_depth - 1}:
            factor, min_prob = float(rng.choice([1.0, 2.0, 0.5])), float(rng.choice([0.0, 0.1, 0.5]))
            got = tree.draft(budget, spec_factor=factor, min_prob=min_prob)
            want_tokens, want_score, want_len = ref_suffix_draft([seq[:pos]], seq[:pos], max_depth, budget, factor,
                                                                 min_prob)
            assert (list(got.tokens), got.match_len) == (want_tokens, want_len), (pos, budget)
            assert got.score == pytest.approx(want_score)


@pytest.mark.parametrize("seed", range(4))
def test_suffix_tree_inserted_sequences_match_reference_and_removal_undoes_insert(seed):
    rng = np.random.default_rng(100 + seed)
    max_depth = int(rng.choice([3, 8, 24]))
    vocab = int(rng.choice([3, 20]))
    seqs = [_random_sequence(rng, int(rng.integers(5, 60)), vocab) for _ in range(6)]
    tree = SuffixTree(max_depth)
    for s in seqs:
        tree.insert(s)
    for _ in range(20):
        context = _random_sequence(rng, int(rng.integers(1, 30)), vocab)
        budget = int(rng.integers(1, max_depth))
        got = tree.draft(budget, context=context, spec_factor=2.0)
        want = ref_suffix_draft(seqs, context, max_depth, budget, 2.0)
        assert (list(got.tokens), got.score, got.match_len) == (want[0], pytest.approx(want[1]), want[2])
    # removing the first three leaves exactly the tree of the last three (same nodes and counts)
    for s in seqs[:3]:
        tree.remove(s)
    fresh = SuffixTree(max_depth)
    for s in seqs[3:]:
        fresh.insert(s)

    def counts(node, prefix=()):
        out = {prefix: (node.count, node.cont)}
        for t, child in node.items():
            out.update(counts(child, prefix + (t,)))
        return out

    assert counts(tree.root) == counts(fresh.root)
    for node in (tree.root, *tree.root.values()):  # best is a child of the largest count after removals
        if node:
            assert node.best.count == max(c.count for c in node.values())
