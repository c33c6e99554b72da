"""Strict checks of the ``format`` an input schema declares, and the parse policies read.

An action's input is checked against its JSON Schema before anything is previewed, and
what passes is what the worker writes. jsonschema's own format checkers are lenient (an
``email`` is anything with an ``@``) and pass a format they do not know unchecked; here
every format is checked strictly, and a format with no strict check here refuses every
value (the catalog refuses it at load: ``schema_format_problems``). A submission checks
a format field on the value as sent, before its strings are put in Unicode normal form,
so nothing is mapped into the value that is judged and written. The same parse is
what the policies' derived attributes come from (actions/policy/engine.py): an e-mail's
domain is the domain that is written, or nothing.

What "strict" means, per format (docs/catalog.md, *Formats*):

* ``email``: exactly one ``@``; no whitespace, control, invisible formatting, private-use
  or unassigned character anywhere; a local part of at most 64 bytes already in its
  normalized form (NFKC: no compatibility characters such as fullwidth letters or
  ligatures), unquoted; a domain of dot-separated labels (at most 63 bytes each, 253 in
  all, at least two labels, no trailing dot), each LDH ASCII or a valid IDNA2008 label
  (an ``xn--`` A-label that decodes, or a U-label already in NFC that IDNA2008 allows:
  never a character that would be mapped into another), and no address literal; at most
  254 characters; then ``email_validator`` (no deliverability check) must agree and find
  the same domain. ASCII letter case in the domain is the only variation allowed.
* ``hostname``: the same domain rules, ASCII only (A-labels allowed), one label or more.
* ``uri``: RFC 3986 absolute URI (a scheme), printable ASCII only, at most 8192 characters.
* ``date-time``, ``date``, ``time``: RFC 3339 with ``T`` and ``Z`` in upper case, ASCII
  digits, and a real calendar date and time of day (no leap second).
* ``uuid``: RFC 9562 hex-and-hyphen form (8-4-4-4-12); ``ipv4`` dotted quad without
  leading zeros; ``ipv6`` without a zone; ``decimal``: a plain decimal string
  (``"120.00"``), as policies read money.
* ``int32``, ``int64``, ``float``, ``double`` (OpenAPI's): the number fits.

Nothing here imports an app (the layers contract): it is shared by the catalog, the
policies and the core.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, time
from typing import Any

import email_validator
import idna
from jsonschema import FormatChecker
from jsonschema.exceptions import FormatError
from rfc3986_validator import validate_rfc3986

MAX_EMAIL_CHARS = 254  # RFC 5321's path, less its angle brackets
MAX_LOCAL_BYTES = 64
MAX_LABEL_BYTES = 63
MAX_DOMAIN_BYTES = 253
MAX_URI_CHARS = 8192
MAX_TEXT_FORMAT_CHARS = 100  # date, time, uuid, addresses: far longer than any valid one

_LDH = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")
_ASCII_UPPER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
# A plain decimal, as policies read money (actions/policy/schema.py: DecimalType).
PLAIN_DECIMAL = re.compile(r"[+-]?[0-9]{1,30}(\.[0-9]{1,30})?")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIME = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?(Z|([+-])([0-9]{2}):([0-9]{2}))"
)
_UUID = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
_IPV4 = re.compile(r"(?:0|[1-9][0-9]{0,2})(?:\.(?:0|[1-9][0-9]{0,2})){3}")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_FLOAT_MAX = 3.4028234663852886e38


def ascii_lower(text: str) -> str:
    """``text`` with A-Z lower-cased and nothing else changed (no Unicode case mapping:
    ``"\\u212a".lower()`` is ``"k"``, and a Kelvin sign is no letter k)."""
    return text.translate(_ASCII_UPPER)


def _character_problem(text: str) -> str:
    """Why a character of ``text`` has no place in an address, or ""."""
    for char in text:
        if char.isspace():
            return f"it contains whitespace (U+{ord(char):04X})"
        category = unicodedata.category(char)
        if category == "Cc":
            return f"it contains a control character (U+{ord(char):04X})"
        if category == "Cf":
            return f"it contains an invisible formatting character (U+{ord(char):04X})"
        if category in ("Co", "Cs", "Cn"):
            return f"it contains a private-use or unassigned character (U+{ord(char):04X})"
    return ""


def _label_problem(label: str, *, unicode: bool) -> str:
    """Why one label of a domain is not strictly valid, or "" (ASCII case is free)."""
    if not label:
        return "the domain has an empty label (two dots in a row, or a dot at an end)"
    lowered = ascii_lower(label)
    if label.isascii():
        if len(label) > MAX_LABEL_BYTES:
            return f"a domain label is longer than {MAX_LABEL_BYTES} characters"
        if not _LDH.fullmatch(label):
            return "a domain label holds a character other than letters, digits and inner hyphens"
        if lowered.startswith("xn--"):
            try:
                ulabel = idna.decode(lowered)
                again = idna.encode(ulabel, uts46=False).decode("ascii")
            except (idna.IDNAError, UnicodeError):
                return f"the label {label!r} is not valid IDNA (punycode that does not decode)"
            if again != lowered:
                return f"the label {label!r} is not the IDNA form of any name"
        elif lowered[2:4] == "--":
            return f"the label {label!r} has hyphens in its 3rd and 4th positions"
        return ""
    if not unicode:
        return "a host name is ASCII: write an internationalized label as its xn-- form"
    if len(lowered.encode("punycode")) + 4 > MAX_LABEL_BYTES:
        return f"a domain label is longer than {MAX_LABEL_BYTES} characters in its xn-- form"
    if not unicodedata.is_normalized("NFC", label):
        return (
            "a domain label is not in its normalized (NFC) form: a character in it, such "
            "as the Kelvin sign, normalizes into another"
        )
    try:
        alabel = idna.encode(lowered, uts46=False).decode("ascii")
        back = idna.decode(alabel)
    except (idna.IDNAError, UnicodeError):
        return (
            "a domain label holds a character IDNA2008 does not allow (upper case beyond "
            "A-Z, a compatibility form such as a fullwidth letter or a ligature, a symbol)"
        )
    if back != lowered:
        return "a domain label is not in the form IDNA2008 keeps"
    return ""


def domain_problem(domain: str, *, unicode: bool, min_labels: int = 2) -> str:
    """Why ``domain`` is not a strictly valid domain name, or "" (``unicode``: U-labels
    allowed, as in an e-mail address)."""
    if not domain:
        return "there is no domain"
    if problem := _character_problem(domain):
        return problem
    labels = domain.split(".")
    if len(labels) < min_labels:
        return "the domain needs a dot (a name under a top-level domain)"
    for label in labels:
        if problem := _label_problem(label, unicode=unicode):
            return problem
    ascii_form = ".".join(
        label if label.isascii() else idna.encode(ascii_lower(label), uts46=False).decode()
        for label in labels
    )
    if len(ascii_form) > MAX_DOMAIN_BYTES:
        return f"the domain is longer than {MAX_DOMAIN_BYTES} characters"
    if labels[-1].isdigit():
        return "the domain ends with a number (an address literal is not a domain)"
    return ""


@dataclass(frozen=True)
class Email:
    """An address as written: ``local`` and ``domain`` are exactly its two parts."""

    local: str
    domain: str

    @property
    def domain_key(self) -> str:
        """The domain as policies compare it: as written, with A-Z lower-cased."""
        return ascii_lower(self.domain)


class FormatProblem(ValueError):
    pass


def email_parse(value: str) -> Email:
    """The strict parse of one address; FormatProblem says what is wrong (without
    repeating the value)."""
    if len(value) > MAX_EMAIL_CHARS:
        raise FormatProblem(f"longer than {MAX_EMAIL_CHARS} characters")
    if problem := _character_problem(value):
        raise FormatProblem(problem)
    count = value.count("@")
    if count == 0:
        raise FormatProblem("there is no @")
    if count > 1:
        raise FormatProblem("more than one @")
    local, domain = value.split("@")
    if not local:
        raise FormatProblem("there is nothing before the @")
    if len(local.encode("utf-8")) > MAX_LOCAL_BYTES:
        raise FormatProblem(f"the part before the @ is longer than {MAX_LOCAL_BYTES} bytes")
    if unicodedata.normalize("NFKC", local) != local:
        raise FormatProblem(
            "the part before the @ holds characters that normalize into others (a "
            "decomposed accent, a compatibility form such as a fullwidth letter or a ligature)"
        )
    if local.startswith('"'):
        raise FormatProblem("a quoted part before the @ is not accepted")
    if problem := domain_problem(domain, unicode=True):
        raise FormatProblem(problem)
    try:
        checked = email_validator.validate_email(
            value,
            check_deliverability=False,
            # Allows the reserved .test names (RFC 6761), as the demo uses; the other
            # special-use names (.local, .localhost, .invalid, .onion, .arpa) stay refused.
            test_environment=True,
            allow_quoted_local=False,
            allow_domain_literal=False,
            allow_display_name=False,
        )
    except email_validator.EmailNotValidError as exc:
        raise FormatProblem(str(exc).rstrip(".")) from None
    # The validator maps (UTS 46) where this module refuses: it must have found the
    # same address, or something was mapped that the checks above missed.
    written = ".".join(
        ascii_lower(label) if label.isascii() else idna.encode(ascii_lower(label)).decode()
        for label in domain.split(".")
    )
    if checked.local_part != local or checked.ascii_domain != written:
        raise FormatProblem("it is not in its own normalized form")
    return Email(local=local, domain=domain)


def email_problem(value: str) -> str:
    try:
        email_parse(value)
    except FormatProblem as exc:
        return str(exc)
    return ""


# --- one checker per format -------------------------------------------------------


def _hostname(value: str) -> str:
    if len(value) > MAX_DOMAIN_BYTES:
        return f"longer than {MAX_DOMAIN_BYTES} characters"
    return domain_problem(value, unicode=False, min_labels=1)


def _uri(value: str) -> str:
    if len(value) > MAX_URI_CHARS:
        return f"longer than {MAX_URI_CHARS} characters"
    if any(not (0x21 <= ord(c) <= 0x7E) for c in value):
        return "a URI is printable ASCII, without spaces (percent-encode anything else)"
    if not validate_rfc3986(value, rule="URI"):
        return "not an absolute URI (RFC 3986: a scheme, then its part)"
    return ""


def _date_problem(value: str) -> str:
    found = _DATE.fullmatch(value)
    if not found:
        return "write it as YYYY-MM-DD"
    try:
        date(int(found.group(1)), int(found.group(2)), int(found.group(3)))
    except ValueError:
        return "no such day"
    return ""


def _time_problem(value: str) -> str:
    found = _TIME.fullmatch(value)
    if not found:
        return "write it as HH:MM:SS with Z or an offset such as +02:00 (RFC 3339)"
    hour, minute, second = int(found.group(1)), int(found.group(2)), int(found.group(3))
    try:
        time(hour, minute, second)
    except ValueError:
        return "no such time of day"
    if found.group(6) and (int(found.group(7)) > 23 or int(found.group(8)) > 59):
        return "no such offset"
    return ""


def _date_time(value: str) -> str:
    if len(value) > MAX_TEXT_FORMAT_CHARS:
        return f"longer than {MAX_TEXT_FORMAT_CHARS} characters"
    day, sep, moment = value.partition("T")
    if not sep:
        return "write it as YYYY-MM-DDTHH:MM:SSZ or with an offset (RFC 3339)"
    return _date_problem(day) or _time_problem(moment)


def _date(value: str) -> str:
    return _date_problem(value[: MAX_TEXT_FORMAT_CHARS + 1])


def _time(value: str) -> str:
    return _time_problem(value[: MAX_TEXT_FORMAT_CHARS + 1])


def _uuid(value: str) -> str:
    return "" if _UUID.fullmatch(value) else "write it as 8-4-4-4-12 hexadecimal digits"


def _ipv4(value: str) -> str:
    if not _IPV4.fullmatch(value):
        return "write it as four numbers with dots, without leading zeros"
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        return "each of its four numbers is at most 255"
    return ""


def _ipv6(value: str) -> str:
    if not _IPV6.fullmatch(value):
        return "hexadecimal groups with colons, and no zone"
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return "not an IPv6 address"
    return ""


def _decimal(value: str) -> str:
    return "" if PLAIN_DECIMAL.fullmatch(value) else "write it as digits with a point, '120.00'"


def _range(low: int, high: int) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not low <= value <= high:
            return f"outside {low} to {high}"
        return ""

    return check


def _float(value: Any) -> str:
    if isinstance(value, int | float) and abs(value) > _FLOAT_MAX:
        return "too large for a 32-bit float"
    return ""


def _double(value: Any) -> str:
    return ""  # any JSON number the parser took is a finite double


@dataclass(frozen=True)
class Format:
    name: str
    what: str  # the thing it is, for "not a valid <what>: <why>"
    check: Callable[[Any], str]
    types: tuple[type, ...] = (str,)


# Each checker returns why a value of its types is not in the format, or "". A value of
# another type is left to the ``type`` keyword, as JSON Schema says.
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("email", "e-mail address", email_problem),
        Format("hostname", "host name", _hostname),
        Format("uri", "URI", _uri),
        Format("date-time", "date and time", _date_time),
        Format("date", "date", _date),
        Format("time", "time", _time),
        Format("uuid", "UUID", _uuid),
        Format("ipv4", "IPv4 address", _ipv4),
        Format("ipv6", "IPv6 address", _ipv6),
        Format("decimal", "decimal", _decimal),
        Format("int32", "32-bit integer", _range(*_INT32), (int, float)),
        Format("int64", "64-bit integer", _range(*_INT64), (int, float)),
        Format("float", "32-bit float", _float, (int, float)),
        Format("double", "number", _double, (int, float)),
    )
}


def format_problem(name: str, value: Any) -> str:
    """Why ``value`` is not in format ``name``, as a sentence, or ""."""
    known = FORMATS.get(name)
    if known is None:
        return f"the format {name!r} cannot be checked, so no value is accepted"
    if isinstance(value, bool) or not isinstance(value, known.types):
        return ""
    why = known.check(value)
    return f"not a valid {known.what}: {why}" if why else ""


class StrictFormatChecker(FormatChecker):
    """jsonschema's format hook with this module's checks, and no format let through
    unchecked."""

    def __init__(self) -> None:
        super().__init__(formats=())

    def check(self, instance: object, format: str) -> None:
        if problem := format_problem(format, instance):
            raise FormatError(problem)

    def conforms(self, instance: object, format: str) -> bool:
        return not format_problem(format, instance)


FORMAT_CHECKER = StrictFormatChecker()

# Keywords whose values are data, not schemas: a "format" key inside them is no format.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "example"})


def schema_format_problems(schema: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(pointer, message) for every ``format`` in ``schema`` that cannot be checked
    strictly here: the catalog refuses such a schema at load."""
    stack: list[tuple[Any, str]] = [(schema, where)]
    while stack:
        node, here = stack.pop()
        if isinstance(node, list):
            stack.extend((item, f"{here}/{i}") for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        name = node.get("format")
        if isinstance(name, str) and name not in FORMATS:
            yield (
                f"{here}/format",
                f"the format {name!r} cannot be checked strictly, so it would refuse every "
                f"value (formats checked: {', '.join(sorted(FORMATS))}); use a pattern",
            )
        for key, value in node.items():
            if key not in _DATA_KEYWORDS:
                token = key.replace("~", "~0").replace("/", "~1")
                stack.append((value, f"{here}/{token}"))
