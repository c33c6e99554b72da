"""The plan fingerprint: one value per meaning, a different value for any difference the
executor would act on."""

from __future__ import annotations

import random
import unicodedata

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from actions.fingerprint import fingerprint, fingerprint_document, plan_fingerprint_matches
from actions.lib.canonical import MAX_SAFE_INTEGER, normalize
from approvals.models import Plan

# Strings rich in characters whose NFC and NFD forms differ (precomposed Latin letters,
# Hangul syllables, combining marks), so the normalization property is really exercised.
_text = st.text(
    alphabet=st.one_of(
        st.sampled_from('éèüñÅçöÖ가각힣ḱṩ\u0301\u0308\u0327aZ0 /~"\\'),
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
    ),
    max_size=8,
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
_json = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(_text, children, max_size=4)
    ),
    max_leaves=8,
)
_objects = st.dictionaries(_text, _json, max_size=3)

COMPONENTS = {
    "action_name": st.text(alphabet="abcdefgh_", min_size=1, max_size=12),
    "action_version": st.integers(min_value=1, max_value=10**6),
    "action_digest": st.binary(min_size=32, max_size=32).map(bytes.hex),
    "agent_id": st.uuids().map(str),
    "target": _objects,
    "input": _objects,
    "after": _json,
    "precondition": _objects,
    "policy": _objects,
    "write_request": _objects,
}


def _nfc(value):
    """The value as the canonicalizer sees it; skip examples it would refuse (key
    collisions after normalization are refused, which is tested elsewhere)."""
    try:
        return normalize(value)
    except ValueError:
        assume(False)


def _deep_map_strings(value, form: str):
    if isinstance(value, str):
        return unicodedata.normalize(form, value)
    if isinstance(value, list):
        return [_deep_map_strings(v, form) for v in value]
    if isinstance(value, dict):
        return {
            unicodedata.normalize(form, k): _deep_map_strings(v, form) for k, v in value.items()
        }
    return value


def _deep_shuffle(value, rnd: random.Random):
    """The same value with every object's insertion order shuffled (lists keep order)."""
    if isinstance(value, list):
        return [_deep_shuffle(v, rnd) for v in value]
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _deep_shuffle(v, rnd) for k, v in items}
    return value


def _document(**components):
    return fingerprint_document(**components)


@settings(max_examples=60, deadline=None)
@given(components=st.fixed_dictionaries(COMPONENTS), seed=st.integers())
def test_fingerprint_is_stable_under_key_order(components, seed):
    components = {k: _nfc(v) for k, v in components.items()}
    document = _document(**components)
    shuffled = _deep_shuffle(document, random.Random(seed))
    assert fingerprint(shuffled) == fingerprint(document)


@settings(max_examples=60, deadline=None)
@given(components=st.fixed_dictionaries(COMPONENTS))
def test_fingerprint_is_stable_under_unicode_normalization(components):
    components = {k: _nfc(v) for k, v in components.items()}
    nfc = _deep_map_strings(_document(**components), "NFC")
    nfd = _deep_map_strings(_document(**components), "NFD")
    text, digest = fingerprint(nfd)
    assert (text, digest) == fingerprint(nfc)
    assert text == unicodedata.normalize("NFC", text)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(components=st.fixed_dictionaries(COMPONENTS), data=st.data())
def test_fingerprint_differs_when_any_component_differs(components, data):
    components = {k: _nfc(v) for k, v in components.items()}
    name = data.draw(st.sampled_from(sorted(COMPONENTS)), label="component")
    other = _nfc(data.draw(COMPONENTS[name], label="other value"))
    # Python equality is at least as coarse as canonical equality (1 == 1.0, key order
    # ignored), so "not equal" here really means a different meaning.
    assume(other != components[name])
    changed = {**components, name: other}
    assert fingerprint(_document(**changed))[1] != fingerprint(_document(**components))[1]


def test_the_document_names_every_component_the_executor_relies_on():
    document = _document(
        action_name="a",
        action_version=2,
        action_digest="d" * 64,
        agent_id="agent",
        target={"path": "/x"},
        input={"i": 1},
        after={"a": 1},
        precondition={"kind": "none"},
        policy={"mode": "per_call"},
        write_request={"method": "PATCH"},
    )
    assert document["action"] == {"name": "a", "version": 2, "digest": "d" * 64}
    assert set(document) == {
        "fingerprint_version",
        "action",
        "agent",
        "target",
        "input",
        "after",
        "precondition",
        "policy",
        "write",
    }


# --- stored plans ----------------------------------------------------------------------


def test_a_stored_plan_matches_its_fingerprint(make_plan):
    plan = make_plan()
    assert plan_fingerprint_matches(Plan.objects.get(pk=plan.pk))


@pytest.mark.parametrize(
    "column, value",
    [
        ("after", {"id": "c-1001", "email": "mallory@evil.example"}),
        ("input", {"contact_id": "c-1002", "email": "ada@new.example"}),
        ("target", {"connector": "demo", "base_url": "http://evil.example", "path": "/x"}),
        ("precondition", {"kind": "none", "expected": None, "enforced_by": "none"}),
        ("policy", {"mode": "per_call", "approvers_required": 0}),
        ("write_request", {"method": "DELETE", "path": "/contacts/c-1001", "headers": {}}),
        ("action_version", 99),
        ("action_digest", "0" * 64),
        ("canonical", "{}"),
        ("fingerprint", "f" * 64),
    ],
)
def test_a_tampered_column_is_detected(make_plan, column, value):
    plan = make_plan()
    Plan.objects.filter(pk=plan.pk).update(**{column: value})
    assert not plan_fingerprint_matches(Plan.objects.get(pk=plan.pk))


def test_a_plan_moved_to_another_agent_is_detected(make_plan, other_agent):
    plan = make_plan()
    Plan.objects.filter(pk=plan.pk).update(agent=other_agent[0])
    assert not plan_fingerprint_matches(Plan.objects.get(pk=plan.pk))


def test_rewriting_both_columns_and_stored_bytes_needs_the_new_fingerprint(make_plan):
    """An attacker who edits ``after`` and ``canonical`` consistently still needs to
    replace the fingerprint; the reviewer approves the fingerprint they saw."""
    from actions.fingerprint import plan_fingerprint_document

    plan = make_plan()
    original = plan.fingerprint
    plan.after = {**plan.after, "email": "mallory@evil.example"}
    text, digest = fingerprint(plan_fingerprint_document(plan))
    Plan.objects.filter(pk=plan.pk).update(after=plan.after, canonical=text)
    assert not plan_fingerprint_matches(Plan.objects.get(pk=plan.pk))
    assert digest != original


def test_plans_for_different_inputs_have_different_fingerprints(make_plan):
    one = make_plan()
    two = make_plan(input={"contact_id": "c-1001", "email": "ada@other.example"})
    three = make_plan()
    assert one.fingerprint != two.fingerprint
    # Same agent, same input, same upstream state: the same fingerprint, so while the
    # first awaits a decision the proposal is a repeat and gives the same plan back.
    assert one.fingerprint == three.fingerprint
    assert one.id == three.id
