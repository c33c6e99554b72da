// Passkeys: registering one (the passkeys page) and signing an approval with one (a plan
// whose approvals must be signed). The server derives every challenge; this script only
// hands its options to the browser's WebAuthn API and posts the answer back.
(function () {
  "use strict";

  function csrf(form) {
    var input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function show(element, text) {
    if (!element) return;
    element.textContent = text;
    element.hidden = !text;
  }

  async function post(url, form, body, json) {
    var response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: Object.assign(
        { "X-CSRFToken": csrf(form) },
        json ? { "Content-Type": "application/json" } : {}
      ),
      body: body,
    });
    var answer = await response.json().catch(function () { return {}; });
    if (!response.ok) throw new Error(answer.error || String(response.status));
    return answer;
  }

  function failed(element, error) {
    // A refusal from the authenticator (cancelled, timed out) or from the server.
    var words = element && element.getAttribute("data-failed");
    show(element, (words ? words + " " : "") + (error && error.message ? error.message : String(error)));
  }

  function register(form) {
    var error = form.querySelector("[data-testid=passkey-error]");
    form.addEventListener("submit", async function (event) {
      event.preventDefault();
      show(error, "");
      try {
        var options = await post(form.getAttribute("data-options"), form, null, false);
        var credential = await navigator.credentials.create({
          publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options),
        });
        await post(
          form.getAttribute("data-register"),
          form,
          JSON.stringify({ credential: credential.toJSON(), name: form.elements.name.value }),
          true
        );
        window.location.reload();
      } catch (e) {
        failed(error, e);
      }
    });
  }

  function sign(form) {
    var error = form.querySelector("[data-testid=signing-error]");
    form.addEventListener("submit", async function (event) {
      var submitter = event.submitter;
      if (!submitter || submitter.value !== "approve" || form.elements.assertion.value) return;
      event.preventDefault();
      show(error, "");
      try {
        var body = new FormData();
        body.append("fingerprint", form.elements.fingerprint.value);
        var answer = await post(form.getAttribute("data-passkey-sign"), form, body, false);
        var credential = await navigator.credentials.get({
          publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(answer.options),
        });
        form.elements.assertion.value = JSON.stringify(credential.toJSON());
        form.elements.nonce.value = answer.nonce;
        form.requestSubmit(submitter);
      } catch (e) {
        form.elements.assertion.value = "";
        failed(error, e);
      }
    });
  }

  function start() {
    var registration = document.getElementById("passkey-register");
    if (registration) register(registration);
    var decide = document.querySelector("form[data-passkey-sign]");
    if (decide) sign(decide);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
