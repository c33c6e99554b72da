"""Languages: the Brazilian Portuguese catalog is complete, compiled and in step with the
code; pages speak the reviewer's language (Accept-Language or the switcher), with dates
and numbers in their locale; the agent API stays English."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone, translation

from actions.lib.models import AuditEvent
from approvals.models import Plan, PlanStatus
from approvals.views.dashboard import _duration
from tests.conftest import ROOT

CATALOG = ROOT / "config" / "locale" / "pt_BR" / "LC_MESSAGES"
PO = CATALOG / "django.po"
MO = CATALOG / "django.mo"
# The same arguments as `make messages` (Makefile, MESSAGES_ARGS).
MAKEMESSAGES_ARGS = [
    "-l",
    "pt_BR",
    "--no-obsolete",
    "--ignore=tests/*",
    "--ignore=bench/*",
    "--ignore=docs/*",
    "--ignore=var/*",
]
# What makemessages needs from the checkout: the code and templates, not the rest.
NOT_COPIED = {".git", ".venv", "var", "tests", "bench", "docs", "static", "node_modules"}

PT = {"HTTP_ACCEPT_LANGUAGE": "pt-BR,pt;q=0.9"}


# --- the catalog -------------------------------------------------------------------------


@dataclass
class Entry:
    msgid: str = ""
    context: str | None = None
    plural: str | None = None
    msgstr: list[str] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)

    @property
    def key(self) -> tuple[str | None, str]:
        return (self.context, self.msgid)


def read_po(path: Path) -> list[Entry]:
    """The entries of a .po file (polib is not a dependency; this reads what msgmerge
    writes: flags, msgctxt, msgid, msgid_plural, msgstr and msgstr[n], continued lines).
    Obsolete (#~) entries and the header are left out."""
    entries = []
    for block in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
        entry, parts, current = Entry(), {}, None
        for line in block.splitlines():
            if line.startswith("#~"):
                parts = {}
                break
            if line.startswith("#,"):
                entry.flags |= {flag.strip() for flag in line[2:].split(",")}
            elif line.startswith("#"):
                continue
            elif line.startswith('"') and current:
                parts[current].append(line)
            else:
                keyword, _, value = line.partition(" ")
                current = keyword
                parts[current] = [value]
        values = {k: "".join(ast.literal_eval(v) for v in lines) for k, lines in parts.items()}
        if "msgid" not in values or values["msgid"] == "":
            continue
        entry.msgid = values["msgid"]
        entry.context = values.get("msgctxt")
        entry.plural = values.get("msgid_plural")
        entry.msgstr = [v for k, v in sorted(values.items()) if k.startswith("msgstr")]
        entries.append(entry)
    return entries


def test_the_catalog_has_no_untranslated_or_fuzzy_entries():
    entries = read_po(PO)
    assert len(entries) > 150
    assert [e.msgid for e in entries if not e.msgstr or not all(e.msgstr)] == []
    assert [e.msgid for e in entries if "fuzzy" in e.flags] == []
    assert [e.msgid for e in entries if e.plural is not None and len(e.msgstr) != 2] == []
    # gettext's own count agrees (and --check-format: every %(name)s kept).
    result = subprocess.run(
        ["msgfmt", "--check-format", "--statistics", "-o", os.devnull, str(PO)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"\d+ translated messages\.\n", result.stderr), result.stderr


def test_the_compiled_catalog_is_up_to_date(tmp_path):
    """The .mo is committed (no build step): it must be what the .po compiles to."""
    compiled = tmp_path / "django.mo"
    subprocess.run(["msgfmt", "--check-format", "-o", str(compiled), str(PO)], check=True)
    assert compiled.read_bytes() == MO.read_bytes(), "run `make messages`"


def test_every_string_marked_for_translation_is_in_the_catalog(tmp_path):
    """makemessages over a copy of the code finds nothing the committed catalog lacks (a
    new or changed string without a translation fails here), nor anything it no longer
    needs."""
    copy = tmp_path / "src"
    shutil.copytree(
        ROOT,
        copy,
        ignore=lambda where, names: [
            n
            for n in names
            if n == "__pycache__" or (Path(where) == ROOT and (n in NOT_COPIED or n[0] == "."))
        ],
    )
    env = {**os.environ, "COUNTERSIGN_VAR_DIR": str(tmp_path / "var")}
    result = subprocess.run(
        [sys.executable, "manage.py", "makemessages", *MAKEMESSAGES_ARGS],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    regenerated = {
        e.key: e for e in read_po(copy / "config" / "locale" / "pt_BR" / "LC_MESSAGES" / PO.name)
    }
    committed = {e.key for e in read_po(PO)}
    assert sorted(set(regenerated) - committed, key=str) == [], "new strings: `make messages`"
    assert sorted(committed - set(regenerated), key=str) == [], "gone strings: `make messages`"
    # msgmerge marks a changed string fuzzy (a guess from the old one): not translated.
    assert [k for k, e in regenerated.items() if "fuzzy" in e.flags] == []


# --- pages -------------------------------------------------------------------------------


@pytest.fixture
def rita(client, reviewer):
    client.force_login(reviewer)
    return client


def text_of(response) -> str:
    assert response.status_code == 200
    return response.content.decode()


def test_the_queue_speaks_portuguese(rita, make_plan):
    plan = make_plan()
    page = text_of(rita.get(reverse("approvals:queue"), **PT))
    assert '<html lang="pt-br">' in page
    assert "Planos para você decidir" in page
    assert ">Aguardando aprovação<" in page  # the status label
    with translation.override("pt-br"):
        badge = str(plan.get_consequence_class_display())
    assert badge in ("Mudança reversível", "Compromisso externo") and badge in page
    assert "Filtrar planos" in page and ">Aplicar<" in page
    assert plan.short_code in page
    # Django's own catalog words the age and the countdown.
    assert re.search(r"em \d+\xa0minutos", page), page
    assert 'data-countdown-in="em {time}"' in page


def test_the_plan_page_speaks_portuguese(rita, make_plan):
    plan = make_plan()
    page = text_of(rita.get(plan.get_absolute_url(), **PT))
    for words in (
        "Ficha da ação",
        "O que mudaria",
        f"Aprovar {plan.short_code}",
        ">Negar<",
        '<span data-testid="approval-progress">0 de 1</span>',
        "A solicitação exata que o worker enviará",
        "Impressão digital",
        # The summary line: the kind and the class in Portuguese, the object's label.
        '<span class="verb">ALTERAR</span>',
        ">reversível<",
        '<span class="label" data-testid="label">Ada Lovelace</span>',
        # The catalog's own text, per language: the title and the card.
        "Alterar o e-mail de um contato, proposto pelo agente",
        "Substitui o endereço de e-mail guardado num registro de contato.",
        "Alterar o e-mail do contato <code>c-1001</code> para <code>ada@new.example</code>.",
        "agora mesmo",  # proposed under a minute ago: never "há 0 minuto"
    ):
        assert words in page, words
    assert "Approve " not in page and "What would change" not in page
    assert "0 minuto" not in page
    title = re.search(r"<title>(.*?)</title>", page, re.S).group(1)
    assert title.startswith("ALTERAR demo /contacts/c-1001 · Ada Lovelace · reversível · 0 de 1")
    english = text_of(rita.get(plan.get_absolute_url()))
    assert "Update one contact&#x27;s email address, proposed by agent" in english
    assert "Replaces the email address stored on one contact record." in english
    assert "just now" in english and "0 minutes" not in english


def test_ages_are_just_now_then_minutes_in_both_languages(make_plan):
    from approvals.templatetags.review import ago

    now = timezone.now()
    with translation.override("pt-br"):
        assert ago(now - timedelta(seconds=10)) == "agora mesmo"
        assert ago(now - timedelta(minutes=1, seconds=5)) == "há 1\xa0minuto"
        assert ago(now - timedelta(minutes=5)) == "há 5\xa0minutos"
    with translation.override("en"):
        assert ago(now - timedelta(seconds=10)) == "just now"
        assert ago(now - timedelta(minutes=1, seconds=5)) == "1\xa0minute ago"
        assert ago(now - timedelta(hours=2, minutes=5)) == "2\xa0hours ago"


def test_the_queue_shows_the_catalogs_titles_in_the_readers_language(rita, make_plan):
    make_plan("delete_contact", {"contact_id": "c-1002"})
    page = text_of(rita.get(reverse("approvals:queue"), **PT))
    assert ">Excluir um contato permanentemente</a>" in page
    assert ">Excluir um contato permanentemente</option>" in page  # the action filter
    assert ">Delete one contact permanently</a>" in text_of(rita.get(reverse("approvals:queue")))


def test_messages_and_domain_errors_are_translated(rita, make_plan):
    plan = make_plan()
    url = reverse("approvals:plan-decide", args=[plan.id])
    data = {"decision": "deny", "fingerprint": plan.fingerprint}
    page = text_of(rita.post(url, data, follow=True, **PT))
    assert "Negado." in page
    page = text_of(rita.post(url, data, follow=True, **PT))
    # The service's English detail ("this plan is denied and can no longer be decided")
    # has no translation of its own: the page shows its type's title in Portuguese.
    assert "O plano não está num estado que permita isto" in page


def test_the_agent_api_stays_english(client, api_headers):
    response = client.get(f"/api/v1/plans/{uuid.uuid4()}", **api_headers, **PT)
    assert response.status_code == 404
    assert response.json()["title"] == "Not found"


def test_the_audit_log_shows_dates_in_the_readers_locale(rita, make_plan):
    make_plan()
    event = AuditEvent.objects.order_by("-id").first()
    local = timezone.localtime(event.at)
    page = text_of(rita.get(reverse("approvals:audit"), **PT))
    assert "Registro de auditoria" in page
    assert local.strftime("%d/%m/%Y %H:%M") in page
    assert "plan.proposed" in page  # event kinds are identifiers: never translated
    english = text_of(rita.get(reverse("approvals:audit")))
    assert "Audit log" in english
    assert local.strftime("%m/%d/%Y") in english


def test_the_dashboard_shows_numbers_in_the_readers_locale(rita, make_plan):
    plan = make_plan()
    Plan.objects.filter(id=plan.id).update(
        status=PlanStatus.DENIED, decided_at=plan.created_at + timedelta(hours=2, minutes=30)
    )
    page = text_of(rita.get(reverse("approvals:dashboard"), **PT))
    assert "Painel" in page and "últimos 14 dias" in page
    assert "aguardando uma decisão agora" in page
    assert '<strong data-testid="p50">2,5 h</strong>' in page
    assert "Negados" in page  # an outcome group
    english = text_of(rita.get(reverse("approvals:dashboard")))
    assert '<strong data-testid="p50">2.5 h</strong>' in english


def test_durations_are_localized():
    with translation.override("pt-br"):
        assert _duration(9000) == "2,5 h"
        assert _duration(600) == "10 min"
    with translation.override("en"):
        assert _duration(9000) == "2.5 h"


def test_the_login_page_speaks_portuguese(client):
    page = text_of(client.get(reverse("login"), **PT))
    assert "Nome de usuário" in page and "Senha" in page and ">Entrar<" in page


def test_the_language_switcher_sets_the_language(rita, make_plan):
    make_plan()
    page = text_of(rita.get(reverse("approvals:queue")))
    assert 'action="/i18n/setlang/"' in page and "Plans for you to decide" in page
    response = rita.post(
        reverse("set_language"), {"language": "pt-br", "next": reverse("approvals:queue")}
    )
    assert response.status_code == 302 and response["Location"] == reverse("approvals:queue")
    # The choice outlives the request: no Accept-Language needed from now on.
    page = text_of(rita.get(reverse("approvals:queue")))
    assert "Planos para você decidir" in page
    assert '<option value="pt-br" lang="pt-br" selected>' in page
    rita.post(reverse("set_language"), {"language": "en", "next": "/plans/"})
    assert "Plans for you to decide" in text_of(rita.get(reverse("approvals:queue"), **PT))


def test_the_switcher_refuses_to_redirect_elsewhere(rita):
    response = rita.post(
        reverse("set_language"), {"language": "pt-br", "next": "https://evil.example/"}
    )
    assert response.status_code == 302
    assert "evil.example" not in response["Location"]
