"""RFC 9162 Merkle trees: the frontier gives the same roots as the definition, and
consistency proofs verify exactly when the larger tree extends the smaller one."""

from __future__ import annotations

import hashlib

from actions.lib.merkle import (
    EMPTY_ROOT,
    Frontier,
    consistency_proof,
    leaf_hash,
    node_hash,
    root_of,
    verify_consistency,
)

LEAVES = [leaf_hash(f"entry {i}".encode()) for i in range(40)]


def _frontier(n: int) -> Frontier:
    frontier = Frontier()
    for leaf in LEAVES[:n]:
        frontier.append(leaf)
    return frontier


def test_the_hashes_are_rfc_9162s():
    assert EMPTY_ROOT == hashlib.sha256(b"").digest()
    assert leaf_hash(b"x") == hashlib.sha256(b"\x00x").digest()
    assert node_hash(b"a", b"b") == hashlib.sha256(b"\x01ab").digest()
    # Three leaves split 2 + 1.
    a, b, c = LEAVES[:3]
    assert root_of([a, b, c]) == node_hash(node_hash(a, b), c)


def test_the_frontier_gives_the_roots_of_the_definition():
    for n in range(len(LEAVES) + 1):
        frontier = _frontier(n)
        assert frontier.size == n
        assert frontier.root() == root_of(LEAVES[:n])
        assert Frontier.from_json(frontier.to_json()).root() == frontier.root()


def test_consistency_proofs_verify_and_catch_a_rewritten_history():
    forged = [leaf_hash(b"forged"), *LEAVES[1:]]
    for n in range(1, len(LEAVES) + 1):
        for m in range(1, n + 1):
            proof = consistency_proof(_frontier(m), LEAVES[m:n])
            old, new = root_of(LEAVES[:m]), root_of(LEAVES[:n])
            assert verify_consistency(m, n, old, new, proof), (m, n)
            if m < n:
                # The new tree does not extend the old one (its first leaf differs).
                assert not verify_consistency(m, n, old, root_of(forged[:n]), proof), (m, n)
                assert not verify_consistency(m, n, root_of(forged[:m]), new, proof), (m, n)
