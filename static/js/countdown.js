// Expiry countdowns: every element with data-expires-at (ISO 8601) shows the time left,
// updated each second. The server renders the first value, so this is only a nicety.
// The words come from <body data-countdown-in / data-countdown-expired>, translated there.
(function () {
  "use strict";
  var SOON_MS = 10 * 60 * 1000;

  function words() {
    var body = document.body;
    return {
      left: (body && body.getAttribute("data-countdown-in")) || "in {time}",
      expired: (body && body.getAttribute("data-countdown-expired")) || "expired",
    };
  }

  function format(ms) {
    if (ms <= 0) return words().expired;
    var s = Math.floor(ms / 1000);
    var h = Math.floor(s / 3600);
    var m = Math.floor((s % 3600) / 60);
    var parts = [];
    if (h) parts.push(h + "h");
    if (h || m) parts.push(m + "m");
    parts.push((s % 60) + "s");
    return words().left.replace("{time}", parts.join(" "));
  }

  function tick() {
    var now = Date.now();
    var nodes = document.querySelectorAll("[data-expires-at]");
    for (var i = 0; i < nodes.length; i++) {
      var el = nodes[i];
      var at = Date.parse(el.getAttribute("data-expires-at"));
      if (isNaN(at)) continue;
      var left = at - now;
      el.textContent = format(left);
      el.classList.toggle("soon", left > 0 && left < SOON_MS);
      el.classList.toggle("expired", left <= 0);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", tick);
  } else {
    tick();
  }
  window.setInterval(tick, 1000);
})();
