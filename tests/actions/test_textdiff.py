"""Line diffs of text documents (actions/textdiff.py): line numbers on both sides, folds,
the final newline and CRLF made visible, hidden characters spelled out, the caps, and
adversarial input that must still finish."""

from __future__ import annotations

import random

from actions.textdiff import (
    MAX_BYTES,
    MAX_LINE_CHARS,
    MAX_LINES,
    MAX_POLICY_TEXT_BYTES,
    MAX_SHOWN_LINES,
    is_multiline_change,
    is_text_document,
    line_diff,
    policy_text,
    visible,
)


def numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


def shown(diff) -> list[tuple]:
    return [(r.tag, r.old, r.new, r.text) for r in diff.rows]


def test_a_changed_line_has_both_numbers_and_the_rest_is_folded():
    before = numbered(40)
    after = before.replace("line 20\n", "line twenty\n")
    diff = line_diff(before, after)
    assert (diff.lines_added, diff.lines_removed) == (1, 1)
    assert shown(diff) == [
        ("fold", None, None, ""),
        ("context", 17, 17, "line 17"),
        ("context", 18, 18, "line 18"),
        ("context", 19, 19, "line 19"),
        ("removed", 20, None, "line 20"),
        ("added", None, 20, "line twenty"),
        ("context", 21, 21, "line 21"),
        ("context", 22, 22, "line 22"),
        ("context", 23, 23, "line 23"),
        ("fold", None, None, ""),
    ]
    assert [r.hidden for r in diff.rows if r.tag == "fold"] == [16, 17]
    assert [h.header for h in diff.hunks] == ["@@ -17,7 +17,7 @@"]
    assert [r.sign for r in diff.rows[4:6]] == ["-", "+"]


def test_line_numbers_follow_insertions_and_deletions():
    before = numbered(30)
    after = before.replace("line 3\n", "").replace("line 25\n", "line 25\nnew A\nnew B\n")
    diff = line_diff(before, after, context=1)
    assert (diff.lines_added, diff.lines_removed) == (2, 1)
    rows = [(r.tag, r.old, r.new) for r in diff.rows if r.tag != "fold"]
    assert ("removed", 3, None) in rows
    assert ("context", 4, 3) in rows
    assert ("added", None, 25) in rows and ("added", None, 26) in rows
    assert ("context", 26, 27) in rows
    assert diff.added == ["new A", "new B"] and diff.removed == ["line 3"]


def test_nearby_changes_share_a_hunk_and_a_single_line_is_never_folded():
    before = numbered(12)
    after = before.replace("line 2\n", "two\n").replace("line 10\n", "ten\n")
    diff = line_diff(before, after)
    assert len(diff.hunks) == 1
    assert not [r for r in diff.rows if r.tag == "fold"]


def test_the_diff_applies_back_to_the_texts():
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.choice("abcdefg") for _ in range(rng.randint(0, 50))]
        b = list(a)
        for _ in range(rng.randint(0, 8)):
            if rng.random() < 0.5 and b:
                b.pop(rng.randrange(len(b)))
            else:
                b.insert(rng.randint(0, len(b)), rng.choice("abxyz"))
        diff = line_diff("".join(x + "\n" for x in a), "".join(x + "\n" for x in b), context=999)
        rows = [r for r in diff.rows if r.tag != "fold"]
        if a == b:
            assert diff.identical and not rows
            continue
        assert [r.text for r in rows if r.tag != "added"] == a
        assert [r.text for r in rows if r.tag != "removed"] == b
        assert [r.old for r in rows if r.old] == list(range(1, len(a) + 1))
        assert [r.new for r in rows if r.new] == list(range(1, len(b) + 1))


def test_a_missing_final_newline_is_said_as_git_says_it():
    diff = line_diff("a\nb\n", "a\nb")
    assert (diff.lines_added, diff.lines_removed) == (1, 1)
    last = diff.rows[-1]
    assert (last.tag, last.text, last.no_newline) == ("added", "b", True)
    assert not [r for r in diff.rows if r.tag == "removed" and r.no_newline]


def test_a_change_of_line_endings_only_is_visible():
    diff = line_diff("one\r\ntwo\r\n", "one\ntwo\n")
    assert (diff.lines_added, diff.lines_removed) == (2, 2)
    removed = [r for r in diff.rows if r.tag == "removed"]
    added = [r for r in diff.rows if r.tag == "added"]
    assert [(r.text, r.crlf) for r in removed] == [("one", True), ("two", True)]
    assert [(r.text, r.crlf) for r in added] == [("one", False), ("two", False)]


def test_a_crlf_file_edited_alike_shows_no_carriage_returns():
    diff = line_diff("one\r\ntwo\r\n", "one\r\n2\r\n")
    assert [(r.tag, r.text, r.crlf) for r in diff.rows] == [
        ("context", "one", False),
        ("removed", "two", False),
        ("added", "2", False),
    ]


def test_tabs_stay_and_a_lone_carriage_return_is_spelled_out():
    diff = line_diff(None, "\tindented\nfake\roverwrite\n")
    assert [r.text for r in diff.rows] == ["\tindented", "fake⟨U+000D⟩overwrite"]


def test_bidi_and_invisible_characters_are_spelled_out():
    trojan = 'access = "user\u202e \u2066// admin\u2069\u2066"\nzero\u200bwidth\n'
    diff = line_diff("", trojan)
    assert [r.text for r in diff.rows] == [
        'access = "user⟨U+202E⟩ ⟨U+2066⟩// admin⟨U+2069⟩⟨U+2066⟩"',
        "zero⟨U+200B⟩width",
    ]
    assert visible("plain ascii") == "plain ascii"
    assert visible("café\u00a0ok") == "café\u00a0ok"
    assert visible("a\u2028b\x1bc") == "a⟨U+2028⟩b⟨U+001B⟩c"


def test_a_long_line_is_cut_for_display_and_counted_whole():
    diff = line_diff("x\n", "y" * (MAX_LINE_CHARS + 50) + "\n")
    added = [r for r in diff.rows if r.tag == "added"][0]
    assert len(added.text) == MAX_LINE_CHARS and added.cut == 50
    assert diff.added == ["y" * (MAX_LINE_CHARS + 50)]


def test_created_and_deleted_files():
    created = line_diff(None, "a\nb\n")
    assert created.created and (created.lines_added, created.lines_removed) == (2, 0)
    assert [(r.tag, r.new) for r in created.rows] == [("added", 1), ("added", 2)]
    deleted = line_diff("a\n", None)
    assert deleted.deleted and [(r.tag, r.old) for r in deleted.rows] == [("removed", 1)]
    assert line_diff("same\n", "same\n").identical


def test_texts_over_the_caps_are_not_compared_and_say_their_sizes():
    many = "x\n" * (MAX_LINES + 1)
    diff = line_diff(many, "x\n")
    assert diff.too_long and not diff.hunks
    assert (diff.before_lines, diff.after_lines) == (MAX_LINES + 1, 1)
    assert (diff.lines_removed, diff.lines_added) == (MAX_LINES + 1, 1)
    big = line_diff("a" * (MAX_BYTES + 1), "b")
    assert big.too_long and big.before_bytes == MAX_BYTES + 1


def test_rows_past_the_display_cap_are_counted_not_shown():
    diff = line_diff(None, "z\n" * (MAX_SHOWN_LINES + 10))
    assert len(diff.rows) == MAX_SHOWN_LINES and diff.shown_cut == 10
    assert diff.lines_added == MAX_SHOWN_LINES + 10


def test_adversarial_repetitive_input_completes():
    """Inputs that make a plain SequenceMatcher quadratic: alternating lines, few
    distinct lines in random order, every line unique but shuffled."""
    rng = random.Random(3)
    alternating = "a\nb\n" * (MAX_LINES // 2)
    assert line_diff(alternating, "b\na\n" * (MAX_LINES // 2)).lines_added
    assert line_diff(alternating, alternating[2:] + "c\n").lines_added
    few = [str(rng.randrange(101)) for _ in range(MAX_LINES)]
    other = [str(rng.randrange(101)) for _ in range(MAX_LINES)]
    assert line_diff("\n".join(few), "\n".join(other)).lines_removed
    unique = [f"{i}" for i in range(MAX_LINES)]
    shuffled = list(unique)
    rng.shuffle(shuffled)
    diff = line_diff("\n".join(unique), "\n".join(shuffled))
    assert diff.lines_added == diff.lines_removed > 0

    # Unique anchors cutting the text into small regions of few distinct lines: each
    # region is where a plain SequenceMatcher is slowest.
    def blocks(period: int) -> str:
        return "".join(
            f"anchor {k}\n" + "".join(f"{i % period}\n" for i in range(50)) for k in range(370)
        )

    diff = line_diff(blocks(2), blocks(3))
    assert diff.lines_added == diff.lines_removed > 0
    same_char = "x" * MAX_LINES
    assert line_diff("\n".join(same_char), "\n".join(same_char.replace("x", "y", 1))).lines_added


def test_what_is_a_text_document():
    assert is_text_document("a", "b") and is_text_document(None, "b")
    assert is_text_document("a", None)
    assert not is_text_document(None, None) and not is_text_document({"a": 1}, "b")
    assert is_multiline_change("a\nb", "a\nc") and not is_multiline_change("a", "b")


def test_policy_text_is_bounded_and_exact():
    text = policy_text("keep\nold\n", "keep\nnew\nmore\n")
    assert text == {
        "is_text": True,
        "lines_added": 2,
        "lines_removed": 1,
        "added": "new\nmore",
        "removed": "old",
        "complete": True,
    }
    huge = policy_text(None, "é" * 40_000 + "\n" + "b" * 40_000 + "\n")
    assert len(huge["added"].encode()) <= MAX_POLICY_TEXT_BYTES
    assert huge["complete"] is False and huge["lines_added"] == 2
    assert policy_text({"a": 1}, {"a": 2})["is_text"] is False
    too_long = policy_text("x\n" * (MAX_LINES + 1), "")
    assert too_long["lines_removed"] == MAX_LINES + 1 and too_long["complete"] is False


def test_matching_stays_exact_when_its_budgets_are_spent():
    """Past the work budgets regions show as replaced: the diff is longer, never wrong."""
    from actions.textdiff import DIFFLIB_CELLS, _match

    rng = random.Random(5)
    a = [rng.randrange(3) for _ in range(MAX_LINES)]
    for k in range(0, MAX_LINES, 40):
        a[k] = 1000 + k  # unique anchors, so many small regions of three values
    b = list(a)
    for _ in range(5000):
        b[rng.randrange(len(b))] = rng.randrange(3)
    # 500 regions of about 40 by 40 lines: more than DIFFLIB_CELLS together.
    assert 500 * 39 * 39 > DIFFLIB_CELLS
    opcodes = _match(a, b)
    rebuilt: list[int] = []
    i_at = j_at = 0
    for tag, i1, i2, j1, j2 in opcodes:
        assert (i1, j1) == (i_at, j_at)
        assert tag != "equal" or a[i1:i2] == b[j1:j2]
        rebuilt.extend(a[i1:i2] if tag == "equal" else b[j1:j2])
        i_at, j_at = i2, j2
    assert (i_at, j_at) == (len(a), len(b)) and rebuilt == b
