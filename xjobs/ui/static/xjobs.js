// A little progressive enhancement: every page works without it.
// * forms with data-confirm ask before they post;
// * the overview refreshes its figures in place every few seconds while the box is ticked.
"use strict";
document.addEventListener("submit", function (event) {
  var form = event.target;
  var question = form.getAttribute && form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) { event.preventDefault(); }
});
(function () {
  var live = document.getElementById("live");
  if (!live) { return; }
  var seconds = parseInt(live.getAttribute("data-refresh"), 10) || 5;
  function tick() {
    var box = document.getElementById("auto-refresh");
    if (box && !box.checked) { return schedule(); }
    fetch(window.location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        var current = document.getElementById("live");
        var checked = document.getElementById("auto-refresh");
        if (fresh && current) {
          var keep = checked ? checked.checked : true;
          current.replaceWith(fresh);
          var again = document.getElementById("auto-refresh");
          if (again) { again.checked = keep; }
        }
      })
      .catch(function () {})
      .then(schedule);
  }
  function schedule() { window.setTimeout(tick, seconds * 1000); }
  schedule();
})();
