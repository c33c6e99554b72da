// The reviewer pages from the keyboard, and what keeps a decision deliberate. Everything
// here is an enhancement: without JavaScript the links, forms and the server's checks
// do the same work (the server refuses an irreversible approval without the typed
// confirmation too).
//
//   queue:     j / k move between plans, Enter opens the focused one
//   plan page: a focuses Approve (or the confirmation to type), d focuses Deny
//   anywhere:  ? opens or closes the list of keys (<details id="keys-help">)
(function () {
  "use strict";

  function typing(target) {
    if (!target || !target.tagName) return false;
    var tag = target.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable;
  }

  function planLinks() {
    return Array.prototype.slice.call(document.querySelectorAll("tr.plan-row a.open-plan"));
  }

  function move(step) {
    var links = planLinks();
    if (!links.length) return;
    var at = links.indexOf(document.activeElement);
    var next = at < 0 ? (step > 0 ? 0 : links.length - 1) : at + step;
    next = Math.max(0, Math.min(links.length - 1, next));
    links[next].focus();
  }

  function focusDecision(which) {
    var button = document.getElementById(which);
    if (!button) return;
    if (which === "approve" && button.disabled) {
      var confirm = document.getElementById(button.getAttribute("data-needs-confirm") || "");
      if (confirm) {
        confirm.focus();
        return;
      }
    }
    button.focus();
  }

  function toggleHelp() {
    var help = document.getElementById("keys-help");
    if (!help) return;
    help.open = !help.open;
    if (help.open) {
      var summary = help.querySelector("summary");
      if (summary) summary.focus();
    }
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    if (typing(event.target)) return;
    var handled = true;
    switch (event.key) {
      case "j":
        move(1);
        break;
      case "k":
        move(-1);
        break;
      case "a":
        focusDecision("approve");
        break;
      case "d":
        focusDecision("deny");
        break;
      case "?":
        toggleHelp();
        break;
      default:
        handled = false;
    }
    if (handled) event.preventDefault();
  });

  // --- typing to confirm an irreversible plan --------------------------------------------

  function folded(text) {
    return (text || "").split(/\s+/).filter(Boolean).join(" ").toLowerCase();
  }

  function guard(button) {
    var input = document.getElementById(button.getAttribute("data-needs-confirm"));
    if (!input) return;
    var label = document.querySelector('label[for="' + input.id + '"]');
    var words = Array.prototype.map.call(
      (label || document).querySelectorAll(".confirm-word"),
      function (el) {
        return folded(el.textContent);
      }
    );
    function update() {
      button.disabled = words.indexOf(folded(input.value)) < 0;
    }
    input.addEventListener("input", update);
    update();
  }

  function guardAll(root) {
    var buttons = (root || document).querySelectorAll("button[data-needs-confirm]");
    for (var i = 0; i < buttons.length; i++) guard(buttons[i]);
  }

  // --- the queue's refresh keeps the reviewer's place ---------------------------------------
  // htmx puts focus back on an element with the same id after a swap; rows' links have
  // ids, and this also covers a focus it could not restore (and keeps the scroll).

  var kept = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    var active = document.activeElement;
    var target = event.detail && event.detail.target;
    kept = null;
    if (active && active.id && target && target.contains(active)) {
      kept = { id: active.id, x: window.scrollX, y: window.scrollY };
    }
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    guardAll(event.target);
    if (!kept) return;
    var again = document.getElementById(kept.id);
    if (again && document.activeElement !== again) {
      again.focus({ preventScroll: true });
      window.scrollTo(kept.x, kept.y);
    }
    kept = null;
  });

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () {
      guardAll(document);
    });
  } else {
    guardAll(document);
  }
})();
