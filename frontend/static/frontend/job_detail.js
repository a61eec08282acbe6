/* Job page: state, why-pending, estimated start, timeline, placement and log tail follow the
 * job's job.status payloads without a reload. The log is re-read from the backend (through
 * /jobs/<id>/log/) on every change and every few seconds while the job runs. */
(function () {
  "use strict";
  var GP = window.GP;
  var root = document.querySelector("[data-job-detail]");
  if (!GP || !root) return;
  var jobId = parseInt(root.getAttribute("data-job-detail"), 10);
  var logUrl = root.getAttribute("data-log-url");
  var badge = document.getElementById("job-state");
  var timeline = document.getElementById("timeline");
  var placement = document.getElementById("placement");
  var logBox = document.getElementById("log-tail");

  function showState(state) {
    root.setAttribute("data-state", state);
    badge.className = "state big state-" + state;
    badge.textContent = GP.STATE_LABELS[state] || state;
    document.getElementById("pending-box").hidden = state !== "pending";
    if (GP.LIVE_STATES.indexOf(state) < 0) {
      var cancel = document.querySelector("[data-cancel-form]");
      if (cancel) cancel.remove();
    }
  }

  function showPlacement(map) {
    var names = Object.keys(map || {}).sort();
    placement.textContent = "";
    if (!names.length) {
      placement.appendChild(GP.el("p", { class: "muted", id: "placement-empty" }, "No GPUs held right now."));
      return;
    }
    names.forEach(function (name) {
      var row = GP.el("div", { class: "pnode", "data-node": name });
      row.appendChild(GP.el("span", { class: "pnode-name" }, name));
      var gpus = GP.el("span", { class: "gpus", role: "list", "aria-label": "GPUs of " + name });
      map[name].forEach(function (index) {
        var gpu = GP.el("span", { role: "listitem", class: "gpu mine", title: "GPU " + index + ": this job" }, String(index));
        gpus.appendChild(gpu);
      });
      row.appendChild(gpus);
      placement.appendChild(row);
    });
  }

  var lastLog = null;
  function refreshLog() {
    if (!window.fetch) return;
    window
      .fetch(logUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        return r.ok ? r.json() : null;
      })
      .then(function (data) {
        if (!data) return;
        if (data.log !== lastLog) {
          lastLog = data.log;
          logBox.textContent = data.log || "No output yet.";
          logBox.scrollTop = logBox.scrollHeight;
        }
        if (data.state !== root.getAttribute("data-state")) showState(data.state);
      })
      .catch(function () {});
  }

  // The last state the timeline shows (a log refresh may move the badge first).
  var shown = root.getAttribute("data-state");

  GP.on("job.status", function (msg) {
    if (msg.job !== jobId) return;
    showState(msg.state);
    document.getElementById("why-pending").textContent = msg.why || "Waiting for the scheduler.";
    var est = document.getElementById("estimated-start");
    if (msg.estimated_start) {
      est.setAttribute("datetime", msg.estimated_start);
      est.textContent = msg.estimated_start.replace("T", " ").substring(0, 19) + " UTC";
    } else {
      est.removeAttribute("datetime");
      est.textContent = "not known yet";
    }
    if (msg.state !== shown) {
      shown = msg.state;
      var item = GP.el("li", { "data-kind": msg.state, "data-live": "1" });
      item.appendChild(GP.el("time", { datetime: msg.time }, GP.timeOf(msg.time)));
      item.appendChild(document.createTextNode(" "));
      item.appendChild(GP.el("strong", {}, msg.state));
      if (msg.why && msg.state === "pending") item.appendChild(document.createTextNode(" — " + msg.why));
      timeline.appendChild(item);
    }
    // Payloads that do not carry the placement (a reason update) leave the map as it is.
    var hasPlacement = msg.placement && Object.keys(msg.placement).length > 0;
    if (hasPlacement || msg.state === "pending" || GP.LIVE_STATES.indexOf(msg.state) < 0) {
      showPlacement(msg.placement);
    }
    refreshLog();
  });
  GP.on("reconnected", refreshLog);

  window.setInterval(function () {
    if (root.getAttribute("data-state") === "running" && !document.hidden) refreshLog();
  }, 4000);
})();
