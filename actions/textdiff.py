"""Line diffs of text documents: what a reviewer reads, and what policies count.

Some plans change a text rather than a JSON record: a file's whole content (``before``
and ``after`` both strings), a file created (``before`` None) or deleted (``after``
None), or one long multi-line field of a record. A single "replace" of two huge strings
tells a reviewer nothing, so these get a unified line diff like ``git diff``: hunks of
lines with their old and new line numbers, long unchanged runs folded, counts of lines
added and removed.

Everything here is bounded, because both texts come from an upstream or an agent:

* at most ``MAX_LINES`` lines and ``MAX_BYTES`` of UTF-8 per side are compared; beyond,
  the diff says so and gives sizes only (``too_long``);
* the matching is anchored on lines unique to both sides (patience diff), with a work
  budget: a region that has no such anchor, or that is left when the budget is spent, is
  shown as wholly removed then added. Still a true diff (applying it gives ``after``),
  sometimes not the shortest one, and never quadratic (difflib's SequenceMatcher is, on
  repetitive input, so it only gets small regions, up to a total of cells);
* at most ``MAX_SHOWN_LINES`` rows are shown, and each line is cut at ``MAX_LINE_CHARS``.

What is shown is made honest: invisible and bidirectional control characters are written
out as ``⟨U+202E⟩`` (Trojan-source text must not read as something else), a line ending
that changed from CRLF to LF shows as ``␍`` on the lines concerned, and a missing final
newline is said as git says it. Plain data out: templates escape every line.
"""

from __future__ import annotations

import bisect
import difflib
import unicodedata
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MAX_BYTES",
    "MAX_LINES",
    "DiffLine",
    "Hunk",
    "TextDiff",
    "is_multiline_change",
    "is_text_document",
    "line_diff",
    "policy_text",
    "visible",
]

MAX_LINES = 20_000
MAX_BYTES = 2 * 1024 * 1024
MAX_SHOWN_LINES = 2_000
MAX_LINE_CHARS = 1_000
# The added and removed lines policies read (context.text), each at most this in UTF-8.
MAX_POLICY_TEXT_BYTES = 64 * 1024
# A region whose sides multiply to at most this is matched by difflib, which finds the
# shortest diff but is slow on few distinct lines; all such regions together at most
# DIFFLIB_CELLS (well under a second on the worst input found), then they show as replaced.
SMALL_REGION = 2_500
DIFFLIB_CELLS = 400_000
# Lines of work (anchoring, per region) the whole diff may spend, per line compared.
WORK_PER_LINE = 32

# Characters that are there but not seen, or that reorder what is seen: written out.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
_SHOWN_CONTROLS = frozenset({"\t"})


def visible(text: str) -> str:
    """``text`` with every invisible, control or bidirectional formatting character
    written as ``⟨U+XXXX⟩`` (tabs stay tabs). A reviewer then sees exactly which code
    points are there, in the order they are stored."""
    if text.isascii() and text.isprintable():
        return text
    out = []
    for char in text:
        if char not in _SHOWN_CONTROLS and unicodedata.category(char) in _HIDDEN_CATEGORIES:
            out.append(f"⟨U+{ord(char):04X}⟩")
        else:
            out.append(char)
    return "".join(out)


def is_text_document(before: Any, after: Any) -> bool:
    """A plan whose target is a text: both sides strings, or one a string and the other
    absent (a file created or deleted)."""
    if isinstance(before, str):
        return after is None or isinstance(after, str)
    return before is None and isinstance(after, str)


def is_multiline_change(before: Any, after: Any) -> bool:
    """One field that changed from a multi-line text to another."""
    return (
        isinstance(before, str)
        and isinstance(after, str)
        and ("\n" in before or "\n" in after)
        and before != after
    )


@dataclass(frozen=True)
class DiffLine:
    """One shown line. ``tag`` is "context", "added", "removed" or "fold" (a row saying
    ``hidden`` unchanged lines are not shown). ``old``/``new`` are 1-based line numbers
    (None on the side the line is not on)."""

    tag: str
    old: int | None = None
    new: int | None = None
    text: str = ""
    cut: int = 0  # characters left out of a long line
    crlf: bool = False  # an added or removed line that ends in CR LF
    no_newline: bool = False  # the last line of its side, with no final newline
    hidden: int = 0

    @property
    def sign(self) -> str:
        return {"added": "+", "removed": "-", "context": " "}.get(self.tag, "")


@dataclass(frozen=True)
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: list[DiffLine]
    folded_before: int = 0  # unchanged lines hidden between the previous hunk and this one

    @property
    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_count} +{self.new_start},{self.new_count} @@"


@dataclass
class TextDiff:
    """A unified line diff, bounded. ``too_long``: the texts were not compared line by
    line (sizes only). ``shown_cut``: rows past ``MAX_SHOWN_LINES`` left out."""

    hunks: list[Hunk] = field(default_factory=list)
    folded_after: int = 0
    lines_added: int = 0
    lines_removed: int = 0
    added: list[str] = field(default_factory=list)  # the added lines, as written
    removed: list[str] = field(default_factory=list)
    too_long: bool = False
    before_lines: int = 0
    after_lines: int = 0
    before_bytes: int = 0
    after_bytes: int = 0
    shown_cut: int = 0
    created: bool = False
    deleted: bool = False

    @property
    def identical(self) -> bool:
        return not self.too_long and not self.lines_added and not self.lines_removed

    @property
    def rows(self) -> list[DiffLine]:
        """Every row to show, folds included, in order."""
        out: list[DiffLine] = []
        for hunk in self.hunks:
            if hunk.folded_before:
                out.append(DiffLine("fold", hidden=hunk.folded_before))
            out.extend(hunk.lines)
        if self.folded_after:
            out.append(DiffLine("fold", hidden=self.folded_after))
        return out


def split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept (a CR stays part of its line: a CRLF file differs
    from an LF one); the last has none when the text has no final newline. Only ``\\n``
    ends a line: a lone CR, a form feed or U+2028 is a character to show."""
    if not text:
        return []
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


# --- matching ------------------------------------------------------------------------


def _unique_anchors(a: list[int], b: list[int]) -> list[tuple[int, int]]:
    """Pairs (i, j) of lines that occur once in ``a`` and once in ``b``, equal, in the
    longest order-preserving chain (patience sorting: n log n)."""
    seen_a: dict[int, int] = {}
    for i, line in enumerate(a):
        seen_a[line] = -1 if line in seen_a else i
    seen_b: dict[int, int] = {}
    for j, line in enumerate(b):
        seen_b[line] = -1 if line in seen_b else j
    pairs = [
        (i, seen_b[line]) for line, i in seen_a.items() if i >= 0 and seen_b.get(line, -1) >= 0
    ]
    pairs.sort()
    tails: list[int] = []  # the smallest j ending a chain of each length
    tail_at: list[int] = []  # index into pairs of that chain's end
    previous: list[int] = []
    for k, (_, j) in enumerate(pairs):
        spot = bisect.bisect_left(tails, j)
        previous.append(tail_at[spot - 1] if spot else -1)
        if spot == len(tails):
            tails.append(j)
            tail_at.append(k)
        else:
            tails[spot] = j
            tail_at[spot] = k
    chain: list[tuple[int, int]] = []
    k = tail_at[-1] if tail_at else -1
    while k >= 0:
        chain.append(pairs[k])
        k = previous[k]
    chain.reverse()
    return chain


def _match(a: list[int], b: list[int]) -> list[tuple[str, int, int, int, int]]:
    """Opcodes like difflib's (tag, i1, i2, j1, j2) from ``a`` to ``b``, bounded."""
    budget = WORK_PER_LINE * (len(a) + len(b)) + SMALL_REGION
    cells = DIFFLIB_CELLS
    out: list[tuple[str, int, int, int, int]] = []
    # An explicit stack: regions are matched in order, with no recursion depth.
    stack: list[tuple[int, int, int, int]] = [(0, len(a), 0, len(b))]
    while stack:
        a1, a2, b1, b2 = stack.pop()
        while a1 < a2 and b1 < b2 and a[a1] == b[b1]:
            out.append(("equal", a1, a1 + 1, b1, b1 + 1))
            a1, b1 = a1 + 1, b1 + 1
        tail: list[tuple[str, int, int, int, int]] = []
        while a2 > a1 and b2 > b1 and a[a2 - 1] == b[b2 - 1]:
            tail.append(("equal", a2 - 1, a2, b2 - 1, b2))
            a2, b2 = a2 - 1, b2 - 1
        if a1 == a2 or b1 == b2:
            out.extend(_changed(a1, a2, b1, b2))
            out.extend(reversed(tail))
            continue
        size = (a2 - a1) + (b2 - b1)
        product = (a2 - a1) * (b2 - b1)
        if product <= SMALL_REGION and product <= cells:
            cells -= product
            matcher = difflib.SequenceMatcher(None, a[a1:a2], b[b1:b2], autojunk=True)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes():
                out.append((tag, a1 + i1, a1 + i2, b1 + j1, b1 + j2))
            out.extend(reversed(tail))
            continue
        anchors = _unique_anchors(a[a1:a2], b[b1:b2]) if budget >= size else []
        budget -= size
        if not anchors:
            out.extend(_changed(a1, a2, b1, b2))
            out.extend(reversed(tail))
            continue
        # Regions between anchors, pushed in reverse so they pop in order; each anchor
        # and the tail are emitted by a marker region of their own.
        regions: list[tuple[int, int, int, int]] = []
        i_prev, j_prev = a1, b1
        for i, j in anchors:
            regions.append((i_prev, a1 + i, j_prev, b1 + j))
            regions.append((a1 + i, a1 + i + 1, b1 + j, b1 + j + 1))
            i_prev, j_prev = a1 + i + 1, b1 + j + 1
        regions.append((i_prev, a2, j_prev, b2))
        regions.append((a2, a2 + len(tail), b2, b2 + len(tail)))
        stack.extend(reversed(regions))
    return out


def _changed(a1: int, a2: int, b1: int, b2: int) -> list[tuple[str, int, int, int, int]]:
    if a1 == a2 and b1 == b2:
        return []
    if a1 == a2:
        return [("insert", a1, a2, b1, b2)]
    if b1 == b2:
        return [("delete", a1, a2, b1, b2)]
    return [("replace", a1, a2, b1, b2)]


# --- the diff ----------------------------------------------------------------------------


def _shown(tag: str, line: str, old: int | None, new: int | None, marks: bool) -> DiffLine:
    body = line[:-1] if line.endswith("\n") else line
    # The CR of a CR LF ending is the ending, not a character to spell out; it is marked
    # (on changed lines) when the two texts do not end their lines alike.
    crlf = marks and body.endswith("\r")
    if body.endswith("\r"):
        body = body[:-1]
    cut = max(0, len(body) - MAX_LINE_CHARS)
    return DiffLine(
        tag,
        old=old,
        new=new,
        text=visible(body[:MAX_LINE_CHARS]),
        cut=cut,
        crlf=crlf,
        no_newline=not line.endswith("\n"),
    )


def _too_long(before: str, after: str, result: TextDiff) -> bool:
    result.before_bytes = len(before.encode("utf-8", "surrogatepass"))
    result.after_bytes = len(after.encode("utf-8", "surrogatepass"))
    result.before_lines = before.count("\n") + (1 if before and not before.endswith("\n") else 0)
    result.after_lines = after.count("\n") + (1 if after and not after.endswith("\n") else 0)
    return (
        max(result.before_bytes, result.after_bytes) > MAX_BYTES
        or max(result.before_lines, result.after_lines) > MAX_LINES
    )


def _endings(text: str) -> frozenset[str]:
    """The line endings a text uses: "crlf", "lf", both, or none."""
    crlf = text.count("\r\n")
    found = set()
    if crlf:
        found.add("crlf")
    if text.count("\n") > crlf:
        found.add("lf")
    return frozenset(found)


def line_diff(before: str | None, after: str | None, *, context: int = 3) -> TextDiff:
    """The unified line diff from ``before`` to ``after`` (None: the file does not
    exist on that side), with ``context`` unchanged lines around each change and the
    rest folded. Bounded in time and memory whatever the texts (see the module)."""
    result = TextDiff(created=before is None, deleted=after is None)
    before, after = before or "", after or ""
    if _too_long(before, after, result):
        result.too_long = True
        # Counted as if every line were replaced: the most a policy could fear.
        result.lines_removed, result.lines_added = result.before_lines, result.after_lines
        return result
    a_lines, b_lines = split_lines(before), split_lines(after)
    ids: dict[str, int] = {}
    a = [ids.setdefault(line, len(ids)) for line in a_lines]
    b = [ids.setdefault(line, len(ids)) for line in b_lines]
    opcodes = _match(a, b)
    marks = len(_endings(before) | _endings(after)) > 1
    # Each line as a row: (tag, old index, new index).
    rows: list[tuple[str, int, int]] = []
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            rows.extend(("context", i1 + k, j1 + k) for k in range(i2 - i1))
            continue
        rows.extend(("removed", i, j1) for i in range(i1, i2))
        rows.extend(("added", i2, j) for j in range(j1, j2))
    result.removed = [a_lines[i].removesuffix("\n") for t, i, _ in rows if t == "removed"]
    result.added = [b_lines[j].removesuffix("\n") for t, _, j in rows if t == "added"]
    result.lines_removed, result.lines_added = len(result.removed), len(result.added)
    _hunks(result, rows, a_lines, b_lines, max(0, context), marks)
    return result


def _hunks(
    result: TextDiff,
    rows: list[tuple[str, int, int]],
    a_lines: list[str],
    b_lines: list[str],
    context: int,
    marks: bool,
) -> None:
    """Group the rows into hunks: every change with ``context`` lines either side; the
    unchanged runs between hunks folded. Stops showing at MAX_SHOWN_LINES."""
    changed = [k for k, row in enumerate(rows) if row[0] != "context"]
    if not changed:
        return
    spans: list[list[int]] = []
    for k in changed:
        start, end = max(0, k - context), min(len(rows), k + context + 1)
        # A fold that would hide a single line shows it instead.
        start = 0 if start == 1 else start
        end = len(rows) if end == len(rows) - 1 else end
        if spans and start <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    shown, previous_end = 0, 0
    for start, end in spans:
        if shown >= MAX_SHOWN_LINES:
            result.shown_cut += sum(1 for row in rows[start:end] if row[0] != "context")
            continue
        take = min(end, start + MAX_SHOWN_LINES - shown)
        lines = []
        for tag, i, j in rows[start:take]:
            if tag == "removed":
                lines.append(_shown(tag, a_lines[i], i + 1, None, marks))
            elif tag == "added":
                lines.append(_shown(tag, b_lines[j], None, j + 1, marks))
            else:
                lines.append(_shown(tag, a_lines[i], i + 1, j + 1, False))
        result.shown_cut += sum(1 for row in rows[take:end] if row[0] != "context")
        shown += len(lines)
        first_tag, first_i, first_j = rows[start]
        old = [line.old for line in lines if line.old is not None]
        new = [line.new for line in lines if line.new is not None]
        result.hunks.append(
            Hunk(
                old_start=old[0] if old else first_i,
                old_count=len(old),
                new_start=new[0] if new else first_j,
                new_count=len(new),
                lines=lines,
                folded_before=start - previous_end,
            )
        )
        previous_end = end
    result.folded_after = len(rows) - previous_end if not result.shown_cut else 0


# --- what policies read -------------------------------------------------------------------


def _capped(lines: list[str], cap: int) -> tuple[str, bool]:
    """``lines`` joined by ``\n``, at most ``cap`` bytes of UTF-8 (cut at a character
    boundary), and whether anything was left out."""
    out: list[str] = []
    used = 0
    for line in lines:
        size = len(line.encode("utf-8", "surrogatepass")) + (1 if out else 0)
        if used + size > cap:
            room = cap - used - (1 if out else 0)
            if room > 0:
                part = line.encode("utf-8", "surrogatepass")[:room]
                out.append(part.decode("utf-8", "ignore"))
            return "\n".join(out), True
        out.append(line)
        used += size
    return "\n".join(out), False


def policy_text(before: Any, after: Any) -> dict[str, Any]:
    """What policies see of a text document's change (``context.text``): whether the
    plan's target is text at all, the counts of lines added and removed, and the added
    and removed lines themselves (as written, joined by ``\n``), each capped at
    MAX_POLICY_TEXT_BYTES. ``complete`` is false when a text was cut or the documents
    were too long to compare (then every line counts as replaced). Derived from
    ``before`` and ``after`` only, so submission, the worker and the backtest agree."""
    if not is_text_document(before, after):
        return {
            "is_text": False,
            "lines_added": 0,
            "lines_removed": 0,
            "added": "",
            "removed": "",
            "complete": True,
        }
    diff = line_diff(before, after, context=0)
    added, added_cut = _capped(diff.added, MAX_POLICY_TEXT_BYTES)
    removed, removed_cut = _capped(diff.removed, MAX_POLICY_TEXT_BYTES)
    return {
        "is_text": True,
        "lines_added": diff.lines_added,
        "lines_removed": diff.lines_removed,
        "added": added,
        "removed": removed,
        "complete": not (diff.too_long or added_cut or removed_cut),
    }
