"""Canonical JSON: what a fingerprint hashes must have exactly one byte form."""

from __future__ import annotations

import unicodedata

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from actions.lib.canonical import (
    MAX_SAFE_INTEGER,
    CanonicalJSONError,
    canonical_bytes,
    digest,
    loads_strict,
    normalize,
)

NFD_CAFE = unicodedata.normalize("NFD", "café")
NFC_CAFE = unicodedata.normalize("NFC", "café")


def test_nfd_and_nfc_fixtures_really_differ():
    assert NFD_CAFE != NFC_CAFE


def test_it_refuses_duplicate_keys():
    with pytest.raises(CanonicalJSONError, match="duplicate key 'a'"):
        loads_strict('{"a": 1, "a": 2}')


def test_it_refuses_duplicate_keys_in_nested_objects():
    with pytest.raises(CanonicalJSONError, match="duplicate"):
        loads_strict(b'{"outer": {"x": 1, "x": 1}}')


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_it_refuses_non_finite_numbers_when_parsing(constant):
    with pytest.raises(CanonicalJSONError, match="not valid JSON"):
        loads_strict(f'{{"n": {constant}}}')


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_it_refuses_non_finite_numbers_when_normalizing(value):
    with pytest.raises(CanonicalJSONError) as info:
        normalize({"a": [1, value]})
    assert info.value.pointer == "/a/1"


def test_it_refuses_malformed_json():
    with pytest.raises(CanonicalJSONError, match="malformed JSON"):
        loads_strict(b'{"a": ')


def test_it_refuses_invalid_utf8():
    with pytest.raises(CanonicalJSONError):
        loads_strict(b'{"a": "\xff"}')


def test_it_keeps_the_largest_safe_integer():
    assert loads_strict(str(MAX_SAFE_INTEGER)) == MAX_SAFE_INTEGER
    assert loads_strict(str(-MAX_SAFE_INTEGER)) == -MAX_SAFE_INTEGER


@pytest.mark.parametrize("value", [MAX_SAFE_INTEGER + 1, -(MAX_SAFE_INTEGER + 1), 10**30])
def test_it_refuses_integers_beyond_2_53_with_a_pointer(value):
    with pytest.raises(CanonicalJSONError) as info:
        loads_strict(f'{{"invoice": {{"lines": [1, {value}]}}}}')
    assert info.value.pointer == "/invoice/lines/1"
    assert "strings" in info.value.message


def test_pointers_escape_slash_and_tilde():
    with pytest.raises(CanonicalJSONError) as info:
        normalize({"a/b": {"c~d": 2**60}})
    assert info.value.pointer == "/a~1b/c~0d"


def test_it_normalizes_keys_and_values_to_nfc():
    parsed = loads_strict(f'{{"{NFD_CAFE}": "{NFD_CAFE}", "list": ["{NFD_CAFE}"]}}')
    assert parsed == {NFC_CAFE: NFC_CAFE, "list": [NFC_CAFE]}
    assert NFD_CAFE not in parsed


def test_keys_that_collide_after_normalization_are_refused():
    with pytest.raises(CanonicalJSONError, match="collide"):
        normalize({NFD_CAFE: 1, NFC_CAFE: 2})


def test_non_string_keys_and_non_json_values_are_refused():
    with pytest.raises(CanonicalJSONError):
        normalize({1: "a"})
    with pytest.raises(CanonicalJSONError) as info:
        normalize({"a": {1, 2}})
    assert info.value.pointer == "/a"


def test_canonical_bytes_equal_for_reordered_keys():
    one = {"b": 1, "a": {"y": [1, 2], "x": "é"}}
    two = {"a": {"x": "é", "y": [1, 2]}, "b": 1}
    assert canonical_bytes(one) == canonical_bytes(two)
    assert canonical_bytes(one) == '{"a":{"x":"é","y":[1,2]},"b":1}'.encode()
    assert digest(one) == digest(two)


def test_canonical_bytes_equal_for_nfd_and_nfc():
    assert canonical_bytes({NFD_CAFE: NFD_CAFE}) == canonical_bytes({NFC_CAFE: NFC_CAFE})


def test_list_order_matters():
    assert canonical_bytes([1, 2]) != canonical_bytes([2, 1])


def test_big_numbers_as_strings_are_kept_exactly():
    assert canonical_bytes({"amount": "12345678901234567890.01"}) == (
        b'{"amount":"12345678901234567890.01"}'
    )


def test_strings_can_be_kept_as_sent_and_are_checked_all_the_same():
    sent = '{"email": "kat@\\u212ait.example", "memo": "cafe\\u0301"}'
    assert loads_strict(sent) == {"email": "kat@Kit.example", "memo": "caf\u00e9"}
    assert loads_strict(sent, nfc=False) == {"email": "kat@\u212ait.example", "memo": "cafe\u0301"}
    for refused in ('{"a": 1, "a": 2}', '{"a": NaN}', '{"a": 9007199254740993}'):
        with pytest.raises(CanonicalJSONError):
            loads_strict(refused, nfc=False)


# --- the json module's encoder where it writes what rfc8785 writes ----------------------

# Strings weighted towards what encoders get wrong: escapes, controls, combining marks,
# the private use area and characters beyond U+FFFF (whose UTF-16 order differs).
_TRICKY = 'a"\\\x00\x1f\x7f\u2028e\u0301\u00e9\ue000\uffff\U0001f600'
_TEXT = st.text(st.sampled_from(_TRICKY) | st.characters())
_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)

VARIED = [
    {"b": 1, "a": [1, 2, {"d": None, "c": True}], "": False},
    {"café": "é", NFD_CAFE + "x": "naïve ✓", "日本": "語", "emoji": "🙂 𝄞"},
    {"\ue000": 1, "\U0001f600": 2, "\uffff": 3, "z": 4},  # UTF-16 order differs here
    {'quote"back\\slash': "\x00\x01\x07\x08\t\n\x0b\x0c\r\x1f\x7f\u2028\u2029"},
    {"floats": [0.0, -0.0, 1.0, -1.5, 1e21, 1e-7, 123456789.125, 5e-324, 1.7976931348623157e308]},
    {"ints": [0, -1, MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 10**15]},
    {"nested": [[[[{"a": [[], {}, ""]}]]]]},
    ["top", "level", 1, None],
    "just a string",
    12345,
    (1, (2, 3)),
]


@pytest.mark.parametrize("value", VARIED)
def test_the_fast_encoder_writes_the_bytes_rfc8785_writes(value):
    assert canonical_bytes(value) == rfc8785.dumps(normalize(value))


@given(_JSON_VALUES)
@settings(max_examples=500, deadline=None)
def test_the_fast_encoder_writes_the_bytes_rfc8785_writes_for_any_value(value):
    try:
        expected = rfc8785.dumps(normalize(value))
    except (CanonicalJSONError, rfc8785.CanonicalizationError, UnicodeEncodeError) as exc:
        with pytest.raises(type(exc)):
            canonical_bytes(value)
        return
    assert canonical_bytes(value) == expected


def test_the_fast_path_refuses_what_normalize_refuses_and_says_where():
    with pytest.raises(CanonicalJSONError) as refused:
        canonical_bytes({"a": [1, {"b": 2**53}]})
    assert refused.value.pointer == "/a/1/b"
    # A lone surrogate is no UTF-8: refused as rfc8785 refuses it, in a value or a key.
    with pytest.raises(rfc8785.CanonicalizationError):
        canonical_bytes({"a": "\ud800"})
    with pytest.raises(UnicodeEncodeError):
        canonical_bytes({"\udc00": 1, "b": 2})


def test_plain_values_do_not_go_through_rfc8785(monkeypatch):
    """The fast path is taken (it is what makes sealing and submitting cheaper)."""
    calls = []
    monkeypatch.setattr(rfc8785, "dumps", lambda value: calls.append(value) or b"")
    assert canonical_bytes({"b": ["é", 2, None], "a": {"c": True}}) == (
        '{"a":{"c":true},"b":["é",2,null]}'.encode()
    )
    assert calls == []
    canonical_bytes({"a": 1.5})
    assert calls == [{"a": 1.5}]
