"""Strict formats (actions/lib/formats.py): the hostile-value corpus refused with a reason
that says what is wrong, the good addresses kept exactly as written, every other format
the catalog may declare checked strictly, and a format nothing checks refused at load."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actions.catalog import load_catalog
from actions.lib.formats import (
    FORMATS,
    Email,
    FormatProblem,
    ascii_lower,
    email_parse,
    format_problem,
    schema_format_problems,
)
from actions.models import Action
from actions.spec import input_validator_for
from tests.actions.test_catalog import demo_document, dump, load_refused, problems_by_pointer

# (value, what the reason must say): every one of them has been written upstream, or
# approved with no person, by a lenient check.
HOSTILE_EMAILS = [
    ("grace@evil.example@example.test", "more than one @"),
    ("grace@@example.test", "more than one @"),
    ("grace.example.test", "there is no @"),
    ("@example.test", "nothing before the @"),
    ("grace@", "there is no domain"),
    ("grace@evil.example\n@example.test", "whitespace (U+000A)"),
    ("grace@example.test ", "whitespace (U+0020)"),
    (" grace@example.test", "whitespace (U+0020)"),
    ("gr ace@example.test", "whitespace (U+0020)"),
    ("grace@example.test\t", "whitespace (U+0009)"),
    ("grace@example.test\r", "whitespace (U+000D)"),
    ("grace@example.test\u00a0", "whitespace (U+00A0)"),
    ("grace@example.test\u2028", "whitespace (U+2028)"),
    ("grace\x00@example.test", "control character (U+0000)"),
    ("grace@exam\x7fple.test", "control character (U+007F)"),
    ("grace@example.test\x1b", "control character (U+001B)"),
    ("grace@example.test\u200b", "invisible formatting character (U+200B)"),
    ("grace@exam\u202eple.test", "invisible formatting character (U+202E)"),
    ("grace@example.test\u00ad", "invisible formatting character (U+00AD)"),
    ("grace@example.test\ue000", "private-use or unassigned character (U+E000)"),
    ("grace\ud800@example.test", "private-use or unassigned character (U+D800)"),
    # Compatibility characters: never mapped into the letters they look like.
    ("kat@\u212ait.example", "Kelvin sign"),
    ("kat@\u212aIT.example", "Kelvin sign"),
    ("grace@\uff45xample.test", "fullwidth"),
    ("\uff47race@example.test", "fullwidth"),
    ("\ufb01le@example.test", "ligature"),
    ("grace@\ufb01le.test", "fullwidth"),
    ("grace@B\u00dcCHER.example", "IDNA2008"),  # upper case beyond A-Z
    ("grace@bu\u0308cher.example", "normalized (NFC)"),
    ("e\u0301@example.test", "normalize into others"),
    # IDNA forms.
    ("grace@xn--zz.test", "not valid IDNA"),
    ("grace@xn--example.test", "not valid IDNA"),
    ("grace@XN--ZZ.test", "not valid IDNA"),
    ("grace@ab--cd.test", "3rd and 4th positions"),
    ("grace@b\u00fccher.xn--", "letters, digits and inner hyphens"),
    # Shapes an address may not take here.
    ("grace@example.test.", "empty label"),
    ("grace@.example.test", "empty label"),
    ("grace@example..test", "empty label"),
    ("grace@-example.test", "letters, digits and inner hyphens"),
    ("grace@example-.test", "letters, digits and inner hyphens"),
    ("grace@exa_mple.test", "letters, digits and inner hyphens"),
    ("grace@localhost", "needs a dot"),
    ("grace@127.0.0.1", "ends with a number"),
    ("grace@[127.0.0.1]", "letters, digits and inner hyphens"),
    ('"grace hopper"@example.test', "whitespace"),
    ('"grace"@example.test', "quoted"),
    ("grace..hopper@example.test", "two periods"),
    ("grace@example.local", "special-use"),
    ("grace@example.invalid", "special-use"),
    # Overlong.
    ("g" * 65 + "@example.test", "longer than 64 bytes"),
    ("\u00e9" * 33 + "@example.test", "longer than 64 bytes"),
    ("grace@" + "a" * 64 + ".test", "longer than 63 characters"),
    ("grace@" + "\u00e9" * 60 + ".test", "longer than 63 characters in its xn-- form"),
    ("g" * 60 + "@" + ("a" * 60 + ".") * 3 + "example.test", "longer than 254 characters"),
    ("g@" + "a" * 1_000_000 + ".test", "longer than 254 characters"),
]

GOOD_EMAILS = [
    ("grace@example.test", "example.test"),
    ("g.hopper+news@example.test", "example.test"),
    ("grace@EXAMPLE.Test", "example.test"),
    ("grace@mail.example.test", "mail.example.test"),
    ("grace@b\u00fccher.example", "b\u00fccher.example"),
    ("grace@B\u00fccher.example", "b\u00fccher.example"),  # ASCII case only
    ("grace@xn--bcher-kva.example", "xn--bcher-kva.example"),
    ("grace@XN--BCHER-KVA.example", "xn--bcher-kva.example"),
    ("jos\u00e9@example.test", "example.test"),
    ("g" * 64 + "@" + "a" * 63 + ".test", "a" * 63 + ".test"),
]


@pytest.mark.parametrize(("value", "reason"), HOSTILE_EMAILS, ids=range(len(HOSTILE_EMAILS)))
def test_a_hostile_address_is_refused_saying_what_is_wrong(value, reason):
    problem = format_problem("email", value)
    assert problem.startswith("not a valid e-mail address: "), problem
    assert reason in problem, problem
    with pytest.raises(FormatProblem):
        email_parse(value)
    # The agent reads it in a problem document: readable, never jsonschema's repr.
    assert "is not a 'email'" not in problem


@pytest.mark.parametrize(("value", "domain"), GOOD_EMAILS, ids=range(len(GOOD_EMAILS)))
def test_a_good_address_parses_into_exactly_what_is_written(value, domain):
    assert format_problem("email", value) == ""
    parsed = email_parse(value)
    assert parsed.local + "@" + parsed.domain == value  # nothing stripped, nothing mapped
    assert parsed.domain_key == domain


def test_confusable_scripts_are_other_domains():
    # A Cyrillic "е" makes a valid internationalized name: accepted, and never the same
    # domain as the Latin one a policy compares it with.
    cyrillic = email_parse("grace@\u0435xample.test")
    assert cyrillic.domain_key == "\u0435xample.test" != "example.test"
    assert email_parse("grace@xn--xample-2of.test").domain_key != "example.test"
    assert email_parse("grace@ex\u0430mple.test").domain_key != "example.test"


def test_only_ascii_letters_change_case():
    assert ascii_lower("EXAMPLE.Test") == "example.test"
    assert ascii_lower("\u212a\u0130\u00c9") == "\u212a\u0130\u00c9"  # Kelvin, İ, É untouched
    assert "\u212a".lower() == "k"  # what a Unicode lower-casing would have done
    assert Email("kat", "\u212aIT.example").domain_key == "\u212ait.example"


def test_overlong_values_are_refused_by_every_format():
    # Two million characters: each check looks at a bounded prefix or refuses on length
    # before walking the value.
    for name in ("email", "hostname", "uri", "date-time", "date", "time", "uuid", "decimal"):
        assert format_problem(name, "a" * 2_000_000 + "@").startswith("not a valid "), name
        assert format_problem(name, "1" * 2_000_000).startswith("not a valid "), name


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        (
            "hostname",
            ["example.test", "localhost", "xn--bcher-kva.example", "A-1.example"],
            [
                "b\u00fccher.example",
                "exa mple.test",
                "example.test.",
                "-a.test",
                "a_b.test",
                "xn--zz.test",
                "a" * 64 + ".test",
                ("a" * 60 + ".") * 5 + "test",
                "",
            ],
        ),
        (
            "uri",
            ["https://example.test/a?b=c#d", "mailto:grace@example.test", "urn:isbn:0"],
            [
                "example.test/a",
                "https://exa mple.test",
                "https://example.test/\u00e9",
                "https://example.test/\n",
                "/relative",
                "http://[::1",
                "",
                "https://example.test/" + "a" * 9000,
            ],
        ),
        (
            "date-time",
            ["2026-12-04T10:00:00Z", "2026-12-04T10:00:00.5+05:30"],
            [
                "2026-12-04t10:00:00z",
                "2026-12-04 10:00:00Z",
                "2026-02-30T10:00:00Z",
                "2026-12-04T24:00:00Z",
                "2026-12-04T10:00:60Z",
                "2026-12-04T10:00:00",
                "2026-12-04T10:00:00+24:00",
                "\uff12026-12-04T10:00:00Z",
                "2026-12-04T10:00:00Z ",
                "\u0662026-12-04T10:00:00Z",
            ],
        ),
        (
            "date",
            ["2026-12-04", "2024-02-29"],
            [
                "2026-2-4",
                "2025-02-29",
                "2026-13-01",
                "2026-12-04 ",
                "\u0662026-12-04",
            ],
        ),
        ("time", ["10:00:00Z", "23:59:59.999+01:00"], ["10:00", "25:00:00Z", "10:00:00"]),
        (
            "uuid",
            ["0f0e0d0c-0b0a-4908-8706-050403020100"],
            [
                "{0f0e0d0c-0b0a-4908-8706-050403020100}",
                "0f0e0d0c0b0a49088706050403020100",
                "urn:uuid:0f0e0d0c-0b0a-4908-8706-050403020100",
            ],
        ),
        ("ipv4", ["192.0.2.1", "0.0.0.0"], ["192.0.2.01", "256.0.0.1", "192.0.2", " 192.0.2.1"]),
        ("ipv6", ["2001:db8::1", "::1"], ["fe80::1%eth0", "2001:db8:::1", "192.0.2.1"]),
        ("decimal", ["120.00", "-0.5", "7"], ["1e5", "1,50", " 1.50", "\u0661.5", "NaN", ".5"]),
        ("int32", [0, 2**31 - 1, -(2**31), 2.0], [2**31, -(2**31) - 1]),
        ("int64", [2**63 - 1], [2**63]),
        ("float", [1.5, 3.4e38], [1e39]),
    ],
)
def test_every_checked_format_is_strict(name, good, bad):
    for value in good:
        assert format_problem(name, value) == "", (name, value)
    for value in bad:
        assert format_problem(name, value).startswith("not a valid "), (name, value)


def test_a_format_of_another_type_leaves_the_value_to_the_type_keyword():
    assert format_problem("email", 7) == ""
    assert format_problem("int32", "not a number") == ""
    assert format_problem("int32", True) == ""


def test_a_format_nothing_checks_refuses_every_value():
    assert "cannot be checked" in format_problem("phone-number", "+1 202 555 0142")
    errors = list(
        input_validator_for({"type": "string", "format": "phone-number"}).iter_errors("x")
    )
    assert len(errors) == 1 and "cannot be checked" in errors[0].message


def test_the_input_validator_reports_the_reason_at_the_fields_pointer():
    schema = {
        "type": "object",
        "properties": {
            "email": {"type": "string", "format": "email"},
            "at": {"type": "string", "format": "date-time"},
        },
    }
    errors = sorted(
        input_validator_for(schema).iter_errors({"email": "not-an-email", "at": "tomorrow"}),
        key=lambda e: list(e.absolute_path),
    )
    assert [(list(e.absolute_path), e.message) for e in errors] == [
        (
            ["at"],
            "not a valid date and time: write it as YYYY-MM-DDTHH:MM:SSZ or with an "
            "offset (RFC 3339)",
        ),
        (["email"], "not a valid e-mail address: there is no @"),
    ]


def test_schema_format_problems_name_each_pointer():
    schema = {
        "type": "object",
        "properties": {
            "to": {"type": "string", "format": "phone-number"},
            "list": {"type": "array", "items": {"type": "string", "format": "binary"}},
            "ok": {"type": "string", "format": "email"},
            "data": {"enum": [{"format": "not a schema"}]},
        },
    }
    found = dict(schema_format_problems(schema, "/input_schema"))
    assert set(found) == {
        "/input_schema/properties/to/format",
        "/input_schema/properties/list/items/format",
    }
    assert (
        "'phone-number' cannot be checked strictly" in found["/input_schema/properties/to/format"]
    )


def test_a_catalog_declaring_a_format_nothing_checks_is_refused_at_load(db):
    document = demo_document()
    email = document["actions"]["update_contact_email"]
    email["input_schema"]["properties"]["email"]["format"] = "idn-email"
    document["actions"]["update_contact_phone"]["input_schema"]["properties"]["phone"]["format"] = (
        "phone-number"
    )
    email["document"]["properties"]["phone"]["format"] = "phone"
    problems = problems_by_pointer(load_refused(document))
    assert set(problems) == {
        "/actions/update_contact_email/input_schema/properties/email/format",
        "/actions/update_contact_email/document/properties/phone/format",
        "/actions/update_contact_phone/input_schema/properties/phone/format",
    }
    assert (
        "the format 'idn-email' cannot be checked strictly"
        in problems["/actions/update_contact_email/input_schema/properties/email/format"]
    )


def test_a_catalog_with_checked_formats_loads(db):
    document = demo_document()
    properties = document["actions"]["create_contact"]["input_schema"]["properties"]
    properties["website"] = {"type": "string", "format": "uri", "maxLength": 200}
    properties["born"] = {"type": "string", "format": "date", "maxLength": 10}
    load_catalog(dump(document), base_urls={"demo": "http://127.0.0.1:1"})
    spec = Action.objects.get(name="create_contact").spec
    assert spec.input_schema["properties"]["born"]["format"] == "date"
    errors = list(spec.input_validator().iter_errors({"born": "2026-02-30"}))
    assert "not a valid date: no such day" in [e.message for e in errors]


@settings(max_examples=400, deadline=None)
@given(
    value=st.text(max_size=80)
    | st.from_regex(r"[a-z.\u00e9\u212a\uff45-]{1,20}@[a-zA-Z0-9.\u00fc\u0435\u212a_-]{0,30}"),
    name=st.sampled_from(sorted(FORMATS)),
)
def test_no_value_makes_a_check_raise(value, name):
    problem = format_problem(name, value)
    assert isinstance(problem, str)
    if name == "email" and not problem:
        parsed = email_parse(value)
        assert f"{parsed.local}@{parsed.domain}" == value
