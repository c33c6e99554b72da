"""Canonical JSON: what a fingerprint hashes must have exactly one byte form."""

from __future__ import annotations

import unicodedata

import pytest

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
