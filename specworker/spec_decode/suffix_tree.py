"""SuffixTree: a suffix trie of bounded depth with occurrence counts, for suffix decoding (the design of Arctic's
SuffixDecoding, Oliaro et al. 2024: a tree per request plus one over recent requests; this implementation is our
own). Host-side Python over token ids; it owns no tensor and knows nothing about slots.

Vocabulary. Every substring of at most `max_depth` tokens of the sequences inserted is a path from the root; a
node's `count` is how many times its string occurs (end positions), `cont` how many of those occurrences are
followed by one more token inside the depth bound (the sum of the children's counts). The *context* is the end
of the current sequence; a *match* is the deepest node whose string is a suffix of the context and that has a
continuation; a *draft* walks from the match to the most frequent child again and again. The probability of a
draft token is child.count / node.cont, that of a draft prefix the product along the path, and the draft's
*score* (the number of its tokens the target is expected to accept) the sum of its prefix probabilities.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

__all__ = ["Draft", "SuffixTree"]


class _Node(dict):
    """token -> child. best / best_token: the child with the largest count (ties: the one counted last)."""

    __slots__ = ("count", "cont", "best", "best_token")

    def __init__(self) -> None:
        self.count = 0
        self.cont = 0
        self.best: _Node | None = None
        self.best_token = -1


@dataclasses.dataclass(frozen=True, slots=True)
class Draft:
    tokens: tuple[int, ...]  # the proposed continuation, most likely first
    score: float  # expected accepted tokens: sum of the prefix probabilities (0.0 for no draft)
    match_len: int  # context tokens matched (0: no match)


NO_DRAFT = Draft((), 0.0, 0)


class SuffixTree:
    """Bounded-depth suffix trie over token sequences.

    One growing sequence (`extend`: a request's prompt, then its output a step at a time; `match_own_suffix`
    then finds the match in O(max_depth)), and/or whole sequences added and removed later (`insert` / `remove`:
    the global tree over recent requests; `match` walks the context from the root). Appending one token
    updates at most max_depth nodes.

    Example (max_depth 4): extend([1, 2, 3, 1, 2]) -> the context [.., 1, 2] occurred before, followed by 3
    (count 1 of cont 1), then [.., 2, 3] by 1: draft(budget=2) = Draft((3, 1), score=2.0, match_len=2).
    """

    def __init__(self, max_depth: int):
        if max_depth < 2:
            raise ValueError(f"SuffixTree max_depth = {max_depth}; allowed: >= 2 (one context token and one draft)")
        self.max_depth = max_depth
        self.root = _Node()
        self._active: list[_Node] = []  # nodes of the own sequence's suffixes of length 1, 2, .. (< max_depth)
        self.num_tokens = 0  # tokens of the own sequence

    # ---- updates ----
    def extend(self, tokens: Iterable[int]) -> None:
        """Appends tokens to the tree's own sequence."""
        active = self._active
        n = 0
        for t in tokens:
            active = self._add(active, int(t), 1)
            n += 1
        self._active = active
        self.num_tokens += n

    def insert(self, tokens: Sequence[int]) -> None:
        """Adds a whole sequence (independent of the own sequence and of other inserted ones)."""
        active: list[_Node] = []
        for t in tokens:
            active = self._add(active, int(t), 1)

    def remove(self, tokens: Sequence[int]) -> None:
        """Takes back a sequence given to insert (nodes whose count reaches 0 are dropped)."""
        active: list[_Node] = []
        for t in tokens:
            active = self._add(active, int(t), -1)

    def _add(self, active: list[_Node], token: int, delta: int) -> list[_Node]:
        """Counts `token` after every suffix in `active` (and after the empty one); returns the new suffixes."""
        if delta < 0:
            return self._remove_one(active, token)
        keep = self.max_depth - 1  # deeper nodes get counted but never a child
        new = []
        for node in (self.root, *active):  # the hot loop of every update: kept plain
            child = node.get(token)
            if child is None:
                child = node[token] = _Node()
            count = child.count = child.count + 1
            node.cont += 1
            best = node.best
            if best is None or count >= best.count:
                node.best, node.best_token = child, token
            if len(new) < keep:
                new.append(child)
        return new

    def _remove_one(self, active: list[_Node], token: int) -> list[_Node]:
        keep = self.max_depth - 1
        new = []
        for node in (self.root, *active):
            child = node.get(token)
            if child is None:
                raise ValueError(f"SuffixTree.remove: token {token} was never inserted after this context")
            child.count -= 1
            node.cont -= 1
            if child.count == 0:
                del node[token]  # its subtree is emptied by the tokens that follow (it stays in `new`)
            if node.best is child:
                _pick_best(node)
            if len(new) < keep:
                new.append(child)
        return new

    # ---- lookups ----
    def match_own_suffix(self, max_len: int) -> tuple[_Node | None, int]:
        """The deepest suffix of the own sequence, at most max_len tokens, that occurred before with a next
        token: (node, its length), or (None, 0)."""
        for length in range(min(max_len, len(self._active)), 0, -1):
            node = self._active[length - 1]
            if node.cont > 0:
                return node, length
        return None, 0

    def match(self, context: Sequence[int], max_len: int) -> tuple[_Node | None, int]:
        """The longest suffix of `context`, at most max_len tokens, that is a path with a continuation."""
        n = len(context)
        for length in range(min(max_len, n), 0, -1):
            node = self.root
            for t in context[n - length:]:
                node = node.get(t)
                if node is None:
                    break
            if node is not None and node.cont > 0:
                return node, length
        return None, 0

    def draft(self, budget: int, *, context: Sequence[int] | None = None, spec_factor: float = 1.0,
              min_prob: float = 0.0) -> Draft:
        """The most frequent continuation of the match, at most min(budget, spec_factor * match length)
        tokens, stopping before the first token whose prefix probability would fall below min_prob.

        Args:
            budget: drafts wanted at most (k).
            context: the tokens to match (the global tree); None matches the own sequence's suffix.
            spec_factor: cap on the draft length per matched context token (short matches guess less).
            min_prob: confidence floor on the prefix probability.
        """
        max_len = self.max_depth - budget  # the match node must have budget levels below it
        if budget <= 0 or max_len < 1:
            return NO_DRAFT
        node, length = self.match_own_suffix(max_len) if context is None else self.match(context, max_len)
        if node is None:
            return NO_DRAFT
        limit = min(budget, int(spec_factor * length + 1e-9))
        tokens, score, prob = [], 0.0, 1.0
        while len(tokens) < limit and node.cont > 0:
            prob *= node.best.count / node.cont
            if prob < min_prob:
                break
            tokens.append(node.best_token)
            score += prob
            node = node.best
        return Draft(tuple(tokens), score, length)

    def num_nodes(self) -> int:
        """Nodes below the root (a walk over the whole tree: tests and memory reports only)."""
        stack, n = [self.root], 0
        while stack:
            node = stack.pop()
            n += len(node)
            stack.extend(node.values())
        return n


def _pick_best(node: _Node) -> None:
    node.best, node.best_token = None, -1
    for token, child in node.items():  # ties: the later child in insertion order
        if node.best is None or child.count >= node.best.count:
            node.best, node.best_token = child, token
