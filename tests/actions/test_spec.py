"""The typed action definition: form bodies and the pairs they are sent as."""

from __future__ import annotations

import pytest

from actions.connectors.http.forms import form_pairs
from actions.spec import TemplateError


def test_form_pairs_in_the_form_style():
    body = {"To": "+15551234567", "Tags": ["a", "b"], "flash": True, "count": 3, "note": None}
    assert form_pairs(body) == [
        ["To", "+15551234567"],
        ["Tags", "a"],
        ["Tags", "b"],
        ["flash", "true"],
        ["count", "3"],
        ["note", ""],
    ]


def test_form_pairs_in_the_deep_object_style():
    body = {
        "email": "a@b.c",
        "address": {"city": "Paris"},
        "expand": ["x", "y"],
        "items": [{"p": 1}],
    }
    assert form_pairs(body, "deep_object") == [
        ["email", "a@b.c"],
        ["address[city]", "Paris"],
        ["expand[0]", "x"],
        ["expand[1]", "y"],
        ["items[0][p]", "1"],
    ]


@pytest.mark.parametrize("body", [{"address": {"city": "Paris"}}, {"t": [["a"]]}, ["a"]])
def test_form_pairs_refuse_what_the_form_style_cannot_carry(body):
    with pytest.raises(TemplateError):
        form_pairs(body)
