"""``python -m config.release.check_cycles [--root DIR] [PACKAGE ...]``: refuse a circle of
imports between files in the product (actions, approvals, executors, config). ``make lint``
runs it.

A circle is a file that, following imports, comes back to itself. Every import counts, at
the top of a file or inside a function (it still runs, only later); relative imports are
resolved; an import under ``if TYPE_CHECKING:`` does not count (it never runs). The
import-linter contracts keep the direction between apps and rooms; this keeps each room
free of files that need each other, which can only be read, tested or moved together.

The graph is import-linter's own (grimp), so both checks read imports the same way. Each
circle is printed as a chain of files, each link with the line that imports the next::

    approvals/decisions/policies.py:439  from ..lifecycle import counted_on_commit
      -> approvals/lifecycle.py:25  from .decisions.requirements import claim_refusal
      -> approvals/decisions/requirements.py:69  from .policies import MODE as POLICY_MODE
      -> approvals/decisions/policies.py

Breaking any one link breaks that chain; a group of files with several chains lists the
shortest through each of its files.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections import deque
from itertools import pairwise
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("actions", "approvals", "executors", "config")


class NotUnderRoot(Exception):
    """A package to check is not in the tree asked for (or not found at all)."""


def import_graph(root: Path, packages: list[str]) -> tuple[dict[str, set[str]], grimp.ImportGraph]:
    """Each module of ``packages`` (found under ``root``) and the modules of the same
    packages it imports."""
    sys.path.insert(0, str(root))
    try:
        for package in packages:
            # A package this process already imported (config, to run this) is found
            # where it was imported from, whatever ``root`` says: never check another tree.
            spec = importlib.util.find_spec(package)
            origin = Path(spec.origin).resolve() if spec and spec.origin else None
            if origin is None or not origin.is_relative_to(root):
                raise NotUnderRoot(f"package {package!r} is not found under {root}")
        graph = grimp.build_graph(*packages, exclude_type_checking_imports=True, cache_dir=None)
    finally:
        sys.path.remove(str(root))
    edges = {
        module: {m for m in graph.find_modules_directly_imported_by(module) if m != module}
        for module in graph.modules
    }
    return edges, graph


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that each reach every other (Tarjan's algorithm, without
    recursion: a long chain of imports must not hit Python's recursion limit); only the
    groups of two or more, each sorted, in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return sorted(groups)


def shortest_cycle(edges: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """The shortest chain of imports from ``start`` back to it, inside ``within`` (a
    strongly connected group, so there is one): ``[start, ..., start]``."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(edges[node] & within):
            if nxt == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(came_from[chain[-1]])
                return [*reversed(chain), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise ValueError(f"{start} is in no cycle")


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """For each group of modules in a circle, the shortest chain through each of its
    modules, each chain once (the same chain from another of its modules is the same
    circle)."""
    found: list[list[str]] = []
    for group in strongly_connected(edges):
        members, seen = set(group), set()
        for module in group:
            chain = shortest_cycle(edges, module, members)
            # The same circle read from another module: rotate to its smallest first.
            ring = chain[:-1]
            first = ring.index(min(ring))
            key = tuple(ring[first:] + ring[:first])
            if key not in seen:
                seen.add(key)
                found.append([*key, key[0]])
    return found


def file_of(root: Path, module: str) -> str:
    path = root.joinpath(*module.split("."))
    if (path / "__init__.py").is_file():
        return (path / "__init__.py").relative_to(root).as_posix()
    return path.with_suffix(".py").relative_to(root).as_posix()


def link(graph: grimp.ImportGraph, root: Path, importer: str, imported: str) -> str:
    """``file:line  the import``, for the first line of ``importer`` that imports ``imported``."""
    details = graph.get_import_details(importer=importer, imported=imported)
    where = file_of(root, importer)
    if not details:
        return where
    first = min(details, key=lambda d: d["line_number"])
    return f"{where}:{first['line_number']}  {first['line_contents'].strip()}"


def chain_text(graph: grimp.ImportGraph, root: Path, chain: list[str]) -> str:
    lines = [link(graph, root, a, b) for a, b in pairwise(chain)]
    lines.append(file_of(root, chain[-1]))
    return "\n".join(("  " if i == 0 else "    -> ") + line for i, line in enumerate(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config.release.check_cycles")
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="the directory holding the packages"
    )
    parser.add_argument("packages", nargs="*", default=list(PACKAGES), metavar="PACKAGE")
    args = parser.parse_args(argv)
    root = args.root.resolve()

    try:
        edges, graph = import_graph(root, args.packages)
    except NotUnderRoot as exc:
        print(f"check_cycles: {exc}", file=sys.stderr)
        return 2
    found = circles(edges)
    names = ", ".join(args.packages)
    if found:
        print(f"Circles of imports between files in {names} ({len(found)}):")
        for chain in found:
            print(chain_text(graph, root, chain))
        print(
            "Each line imports the file on the next; break one link of each chain "
            "(docs/architecture.md, 'No circles')."
        )
        return 1
    print(f"No circles of imports between the {len(edges)} files of {names}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
