"""Catalog text per language: the best match for a reader, English for agents, refused
without an English text; labels filled in from the target."""

from __future__ import annotations

from actions.catalog import load_catalog
from actions.models import Action
from actions.text import localized, localized_card, render_label
from tests.actions.test_catalog import demo_document, dump, load_refused, problems_by_pointer

TITLE = {"en": "Delete one contact", "pt-BR": "Excluir um contato"}


def test_a_plain_string_is_the_same_in_every_language():
    assert localized("Delete one contact", "pt-br") == "Delete one contact"


def test_the_readers_language_then_its_primary_subtag_then_english():
    assert localized(TITLE, "pt-br") == "Excluir um contato"  # Django's spelling
    assert localized(TITLE, "pt-BR") == "Excluir um contato"
    assert localized(TITLE, "pt") == "Excluir um contato"  # regional text for the primary
    assert localized({"en": "Delete", "pt": "Excluir"}, "pt-br") == "Excluir"
    assert localized(TITLE, "de") == "Delete one contact"
    assert localized(TITLE, None) == "Delete one contact"
    assert localized({"pt-BR": "Excluir"}, "en") == "Excluir"  # the only one there is
    assert localized(None, "en") == "" and localized({}, "en") == ""


def test_a_card_in_one_language():
    card = {"effect": {"en": "Deletes.", "pt-BR": "Exclui."}, "scope": "One contact."}
    assert localized_card(card, "pt-br") == {"effect": "Exclui.", "scope": "One contact."}


def test_a_label_from_a_pointer_or_a_template():
    record = {"name": "Grace Hopper", "amount": "120.00", "currency": "EUR", "tags": ["x"]}
    assert render_label("/name", record) == "Grace Hopper"
    assert render_label("{/amount} {/currency}", record) == "120.00 EUR"
    assert render_label("{/missing}, {/amount}", record) == "120.00"
    assert render_label("/tags", record) == ""  # only scalars
    assert render_label("Send {id}", record, target_id="inv-1") == "Send inv-1"
    assert render_label("/name", None) == ""
    assert len(render_label("/name", {"name": "x" * 500})) == 120


def test_agents_and_the_stored_title_get_english_and_pages_any_language(catalog):
    action = Action.objects.get(name="delete_contact")
    assert action.title == "Delete one contact permanently"
    assert action.spec.title == "Delete one contact permanently"
    assert action.spec.card["effect"] == "Deletes one contact record; it cannot be restored."
    assert localized(action.definition["title"], "pt-br") == "Excluir um contato permanentemente"
    email = Action.objects.get(name="update_contact_email")
    assert email.spec.summary == "Change the email of contact {contact_id} to {email}."
    sentence = email.spec.render_summary(
        {"contact_id": "c-1", "email": "a@b.example"},
        localized(email.definition["summary"], "pt-br"),
    )
    assert sentence == "Alterar o e-mail do contato `c-1` para `a@b.example`."


def test_a_text_per_language_needs_an_english_one(catalog):
    def without_english(document):
        document["actions"]["delete_contact"]["title"] = {"pt-BR": "Excluir"}
        document["actions"]["delete_contact"]["card"]["effect"] = {"pt-BR": "Exclui."}
        return document

    error = load_refused(without_english(demo_document()))
    problems = problems_by_pointer(error)
    assert "needs an 'en' one" in problems["/actions/delete_contact/title"]
    assert "needs an 'en' one" in problems["/actions/delete_contact/card/effect"]


def test_an_enabled_action_needs_every_language_of_its_card(catalog):
    document = demo_document()
    document["actions"]["delete_contact"]["card"]["scope"] = {"en": "One.", "pt-BR": " "}
    problems = problems_by_pointer(load_refused(document))
    assert "complete card" in problems["/actions/delete_contact/card/scope"]


def test_a_bad_language_tag_is_refused(catalog):
    document = demo_document()
    document["actions"]["delete_contact"]["title"] = {"en": "Delete", "not a tag": "x"}
    assert "/actions/delete_contact/title" in problems_by_pointer(load_refused(document))


def test_a_plain_catalog_still_loads(db):
    document = demo_document()
    document["actions"]["delete_contact"]["title"] = "Delete one contact"
    document["actions"]["delete_contact"]["card"] = {
        key: "plain" for key in ("effect", "scope", "result", "consent", "retry")
    }
    load_catalog(dump(document), base_urls={"demo": "http://127.0.0.1:1"})
    assert Action.objects.get(name="delete_contact").spec.card["effect"] == "plain"
