// reinloop inspect: a thread's page asks the server whether the thread moved on, and redraws its body
// when it did. No framework, nothing fetched from elsewhere.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) {
    return;
  }
  var every = parseInt(live.dataset.poll, 10) || 1500;

  function redraw() {
    return fetch(live.dataset.fragment, { cache: "no-store" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null) {
          return;
        }
        var open = Array.prototype.map.call(live.querySelectorAll("details[open]"), function (d) {
          return d.querySelector("summary").textContent;
        });
        live.innerHTML = html;
        live.querySelectorAll("details").forEach(function (d) {
          if (open.indexOf(d.querySelector("summary").textContent) >= 0) {
            d.open = true;
          }
        });
      });
  }

  function poll() {
    fetch(live.dataset.status, { cache: "no-store" })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (status) {
        if (status === null) {
          return null;
        }
        var job = status.job || "";
        if (status.checkpoint !== live.dataset.checkpoint || job !== live.dataset.job) {
          live.dataset.checkpoint = status.checkpoint;
          live.dataset.job = job;
          return redraw();
        }
        return null;
      })
      .catch(function () { /* the server stopped: try again later */ })
      .then(function () { window.setTimeout(poll, every); });
  }

  window.setTimeout(poll, every);
})();
