"""RFC 9162 (Certificate Transparency 2.0) Merkle trees: hashes, the compact frontier a
log keeps to append without re-reading its leaves, and consistency proofs.

A tree over entries ``D[0:n]``: ``MTH({}) = SHA-256()``, a leaf is ``SHA-256(0x00 ||
entry)``, an inner node ``SHA-256(0x01 || left || right)``, and a tree of ``n > 1``
leaves splits at ``k``, the largest power of two smaller than ``n`` (RFC 9162 §2.1.1).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaves: list[bytes]) -> bytes:
    """MTH over leaf hashes (already hashed with ``leaf_hash``)."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return node_hash(root_of(leaves[:k]), root_of(leaves[k:]))


class Frontier:
    """The right edge of a tree: the roots of its perfect subtrees, largest first (one
    per bit of the size). Enough to append and to compute the root; log2(n) hashes."""

    def __init__(self, nodes: Iterable[tuple[int, bytes]] = ()) -> None:
        self.nodes: list[tuple[int, bytes]] = list(nodes)

    @property
    def size(self) -> int:
        return sum(size for size, _ in self.nodes)

    def append(self, leaf: bytes) -> None:
        self.nodes.append((1, leaf))
        while len(self.nodes) > 1 and self.nodes[-1][0] == self.nodes[-2][0]:
            (size, right), (_, left) = self.nodes.pop(), self.nodes.pop()
            self.nodes.append((size * 2, node_hash(left, right)))

    def root(self) -> bytes:
        if not self.nodes:
            return EMPTY_ROOT
        root = self.nodes[-1][1]
        for _, left in reversed(self.nodes[:-1]):
            root = node_hash(left, root)
        return root

    def ranges(self) -> dict[tuple[int, int], bytes]:
        """Each perfect subtree as ``(start, end) -> hash``."""
        out, start = {}, 0
        for size, digest in self.nodes:
            out[(start, start + size)] = digest
            start += size
        return out

    def copy(self) -> Frontier:
        return Frontier(self.nodes)

    def to_json(self) -> list[list]:
        return [[size, digest.hex()] for size, digest in self.nodes]

    @classmethod
    def from_json(cls, value: list) -> Frontier:
        return cls((int(size), bytes.fromhex(digest)) for size, digest in value)


def consistency_proof(old: Frontier, new_leaves: list[bytes]) -> list[bytes]:
    """PROOF(m, D[0:n]) of RFC 9162 §2.1.4.1, for m = ``old.size`` and n = m + the new
    leaves. Every node such a proof holds lies wholly in the old tree (then it is one of
    the old frontier's subtrees) or wholly among the new leaves, so the old leaves are
    never needed."""
    m = old.size
    n = m + len(new_leaves)
    if m == 0 or m == n:
        return []
    known = old.ranges()

    def mth(start: int, end: int) -> bytes:
        if start >= m:
            return root_of(new_leaves[start - m : end - m])
        return known[(start, end)]

    proof: list[bytes] = []
    _subproof(m, 0, n, True, mth, proof)
    return proof


def _subproof(
    m: int, start: int, end: int, complete: bool, mth: Callable[[int, int], bytes], out: list
) -> None:
    n = end - start
    if m == n:
        if not complete:
            out.append(mth(start, end))
        return
    k = _split(n)
    if m <= k:
        _subproof(m, start, start + k, complete, mth, out)
        out.append(mth(start + k, end))
    else:
        _subproof(m - k, start + k, end, False, mth, out)
        out.append(mth(start, start + k))


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: list[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: does ``proof`` show the tree of size ``second`` with
    ``second_root`` extends the tree of size ``first`` with ``first_root``?"""
    if first > second:
        return False
    if first == second:
        return not proof and first_root == second_root
    if first == 0:
        return not proof
    path = list(proof)
    if first & (first - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, first_root)
    if not path:
        return False
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_root and sr == second_root
