/* Job page: state, why-pending, estimated start, timeline, placement and log tail follow the
 * job's job.status payloads without a reload.
 *
 * The page also re-reads /jobs/<id>/status/ (same shape as the payload, plus the log tail) when
 * its stream connects or reconnects, so a change published between the page render and the
 * websocket's hello is not lost; and every few seconds while the job runs, for the log. */
(function () {
  "use strict";
  var GP = window.GP;
  var root = document.querySelector("[data-job-detail]");
  if (!GP || !root) return;
  GP.want("jobs");
  var jobId = parseInt(root.getAttribute("data-job-detail"), 10);
  var statusUrl = root.getAttribute("data-status-url");
  var badge = document.getElementById("job-state");
  var timeline = document.getElementById("timeline");
  var placement = document.getElementById("placement");
  var logBox = document.getElementById("log-tail");
  // The last state the timeline shows.
  var shown = root.getAttribute("data-state");

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
        gpus.appendChild(
          GP.el("span", { role: "listitem", class: "gpu mine", title: "GPU " + index + ": this job" }, String(index))
        );
      });
      row.appendChild(gpus);
      placement.appendChild(row);
    });
  }

  function apply(msg) {
    root.setAttribute("data-state", msg.state);
    badge.className = "state big state-" + msg.state;
    badge.textContent = GP.STATE_LABELS[msg.state] || msg.state;
    document.getElementById("pending-box").hidden = msg.state !== "pending";
    if (GP.LIVE_STATES.indexOf(msg.state) < 0) {
      var cancel = document.querySelector("[data-cancel-form]");
      if (cancel) cancel.remove();
    }
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
    // Payloads without a placement (a reason update, a resize) leave the map as it is.
    var hasPlacement = msg.placement && Object.keys(msg.placement).length > 0;
    if (hasPlacement || msg.state === "pending" || GP.LIVE_STATES.indexOf(msg.state) < 0) {
      showPlacement(msg.placement);
    }
  }

  var lastLog = null;
  function refresh() {
    if (!window.fetch) return;
    window
      .fetch(statusUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        return r.ok ? r.json() : null;
      })
      .then(function (data) {
        if (!data) return;
        apply(data);
        if (data.log !== lastLog) {
          lastLog = data.log;
          logBox.textContent = data.log || "No output yet.";
          logBox.scrollTop = logBox.scrollHeight;
        }
      })
      .catch(function () {});
  }

  GP.on("job.status", function (msg) {
    if (msg.job !== jobId) return;
    apply(msg);
    refresh();
  });
  GP.on("hello", refresh);

  window.setInterval(function () {
    if (root.getAttribute("data-state") === "running" && !document.hidden) refresh();
  }, 4000);
})();
