/* What-if run page: the progress bar and its sentence follow whatif.progress payloads of this
 * run (the "whatif" topic; only platform admins' sockets hear it). When the run ends the page
 * reloads to show the result (or why it failed, or that it was cancelled). Once the socket is
 * open (and after every reconnect) the run is read from the API (GP.stateReader: retried, and
 * read again when progress arrives meanwhile), so an end that came before the socket joined is
 * not missed. */
(function () {
  "use strict";
  var GP = window.GP;
  var box = document.getElementById("whatif-status");
  if (!GP || !box) return;
  var LIVE = ["queued", "running"];
  if (LIVE.indexOf(box.getAttribute("data-status")) < 0) return;
  GP.want("whatif");
  var run = Number(box.getAttribute("data-run"));
  var bar = document.getElementById("whatif-progress");
  var text = document.getElementById("whatif-progress-text");
  var statusText = document.getElementById("whatif-status-text");
  function show(msg) {
    if (bar) {
      bar.value = msg.fraction;
      bar.textContent = Math.round(msg.fraction * 100) + " %";
    }
    if (text) text.textContent = msg.text;
    if (statusText) statusText.textContent = msg.status.charAt(0).toUpperCase() + msg.status.slice(1);
    box.setAttribute("data-fraction", String(msg.fraction));
    if (LIVE.indexOf(msg.status) < 0) window.location.reload();
  }
  var reread = GP.stateReader(
    "/api/v1/policy/whatif/" + run,
    function (data) {
      show({ status: data.status, fraction: data.progress_fraction, text: data.progress_text });
    },
    0
  );
  GP.on("whatif.progress", function (msg) {
    if (msg.run !== run) return;
    if (reread.inFlight()) reread();
    show(msg);
  });
  GP.on("hello", reread);
})();
