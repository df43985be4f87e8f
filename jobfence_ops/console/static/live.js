// The console's live views: every few seconds, fetch this page again and swap in the parts that changed.
//
// A page marks its live parts with `data-live` and an id; each is replaced by the part of the same id in the
// fresh page, unless the operator is using it: a form field typed into, a box ticked, or the focus inside it.
// Such a part waits (its form is never lost) and catches up once it is left alone. A page whose set of live
// parts changed (a batch finalized, a section appeared) is swapped whole, again only when nothing is in use.
// Without script the page is the same, with a `refresh` link; this script only saves the reload.
(function () {
  "use strict";
  var every = Number(document.body.getAttribute("data-live-every") || 0) * 1000;
  var status = document.getElementById("live");
  if (!every || !window.fetch || !window.DOMParser) { return; }
  if (status) { status.textContent = "live"; }

  function inUse(part) {
    if (part.contains(document.activeElement) && document.activeElement !== document.body) { return true; }
    var fields = part.querySelectorAll("input, select, textarea");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "hidden" || f.type === "submit") { continue; }
      if (f.type === "checkbox" || f.type === "radio") { if (f.checked !== f.defaultChecked) { return true; } }
      else if (f.value !== f.defaultValue) { return true; }
    }
    return false;
  }

  function ids(root) {
    return Array.prototype.map.call(root.querySelectorAll("[data-live]"), function (el) { return el.id; }).join(" ");
  }

  function openDetails(root) {
    var open = {};
    Array.prototype.forEach.call(root.querySelectorAll("details[open][id]"), function (d) { open[d.id] = true; });
    return open;
  }

  function keepOpen(open, root) {
    Array.prototype.forEach.call(root.querySelectorAll("details[id]"), function (d) {
      if (open[d.id]) { d.setAttribute("open", ""); }
    });
  }

  function apply(fresh) {
    // the page's pace may change (an open batch refreshes faster than a finalized one)
    var pace = fresh.body.getAttribute("data-live-every");
    if (Number(pace) > 0) { every = Number(pace) * 1000; document.body.setAttribute("data-live-every", pace); }
    var open = openDetails(document);
    var waiting = 0;
    if (ids(fresh) !== ids(document)) {
      if (inUse(document.body)) { return 1; }
      keepOpen(open, fresh.body);
      document.body.replaceChildren.apply(document.body, Array.prototype.slice.call(fresh.body.childNodes));
      status = document.getElementById("live");
      return 0;
    }
    Array.prototype.forEach.call(fresh.querySelectorAll("[data-live]"), function (part) {
      var old = document.getElementById(part.id);
      if (!old || old.innerHTML === part.innerHTML) { return; }
      if (inUse(old)) { waiting += 1; return; }
      keepOpen(open, part);
      old.replaceWith(part);
    });
    return waiting;
  }

  function tick() {
    if (document.visibilityState === "hidden") { return later(); }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) { throw new Error("the console answered " + response.status); }
        return response.text();
      })
      .then(function (text) {
        var waiting = apply(new DOMParser().parseFromString(text, "text/html"));
        status = document.getElementById("live");
        if (status) { status.textContent = waiting ? "live (a part you are using waits)" : "live"; }
        document.body.setAttribute("data-live-updates", String(Number(document.body.getAttribute("data-live-updates") || 0) + 1));
      })
      .catch(function (error) {
        if (status) { status.textContent = "not live: " + error.message + " (retrying)"; }
      })
      .then(later);
  }

  function later() { window.setTimeout(tick, every); }
  later();
})();
