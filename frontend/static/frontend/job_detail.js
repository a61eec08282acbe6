/* Job page: state, why-pending, estimated start, timeline and placement follow the job's
 * job.status payloads without a reload; the page re-reads /jobs/<id>/status/ (same shape as the
 * payload) when its stream connects or reconnects, so a change published between the page render
 * and the websocket's hello is not lost.
 *
 * The output pane is live over its own socket, /ws/jobs/<id>/log/ (frontend/log_consumer.py):
 * the tail of the attempt, then each new piece as the job writes it, following the job from
 * attempt to attempt; the Attempts table's "Output" buttons pin the pane to one attempt. */
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

  var refresh = GP.stateReader(statusUrl, apply, 0);

  GP.on("job.status", function (msg) {
    if (msg.job !== jobId) return;
    apply(msg);
    refresh();
  });
  GP.on("hello", refresh);

  // --- the output pane ---------------------------------------------------------------------
  var logPane = document.querySelector("[data-log-socket]");
  var logAttempt = document.getElementById("log-attempt");
  var logStatus = document.getElementById("log-status");
  var LOG_MAX_CHARS = 200000;
  var logSocket = null;
  var pinned = null;
  var logDelay = 1000;
  var fresh = true;

  function nearBottom() {
    return logBox.scrollHeight - logBox.scrollTop - logBox.clientHeight < 40;
  }

  function appendLog(text) {
    var follow = nearBottom();
    if (fresh) {
      logBox.textContent = "";
      fresh = false;
    }
    logBox.textContent += text;
    if (logBox.textContent.length > LOG_MAX_CHARS) {
      logBox.textContent = logBox.textContent.slice(-LOG_MAX_CHARS);
    }
    if (follow) logBox.scrollTop = logBox.scrollHeight;
  }

  function openLog(attempt) {
    if (!logPane || !window.WebSocket) return;
    pinned = attempt;
    if (logSocket) {
      logSocket.onclose = null;
      logSocket.close();
    }
    var url = GP.wsUrl(logPane.getAttribute("data-log-socket"));
    if (attempt) url += "?attempt=" + attempt;
    var socket = (logSocket = new WebSocket(url));
    var ended = false;
    socket.onmessage = function (event) {
      var msg;
      try {
        msg = JSON.parse(event.data);
      } catch (err) {
        return;
      }
      if (msg.type === "log.attempt") {
        fresh = true;
        logAttempt.textContent = "attempt " + msg.attempt + (pinned ? "" : " (live)");
        logStatus.textContent = "";
      } else if (msg.type === "log") {
        logDelay = 1000;
        appendLog(msg.text);
      } else if (msg.type === "log.unavailable") {
        logStatus.textContent = "(the cluster did not answer; retrying)";
      } else if (msg.type === "log.end") {
        ended = true;
        logStatus.textContent = pinned ? "(attempt over)" : "(job " + msg.state + ")";
        if (fresh) logBox.textContent = "No output.";
      }
    };
    socket.onclose = function (event) {
      if (ended || event.code === 4401 || event.code === 4404) return;
      if (event.code === GP.CLOSE_SSO_RECHECK) {
        GP.recheckSignIn();
        return;
      }
      window.setTimeout(function () {
        if (logSocket === socket) openLog(pinned);
      }, logDelay);
      logDelay = Math.min(logDelay * 2, 15000);
    };
  }

  document.querySelectorAll("[data-show-attempt]").forEach(function (button) {
    button.addEventListener("click", function () {
      fresh = true;
      openLog(parseInt(button.getAttribute("data-show-attempt"), 10));
    });
  });
  openLog(null);
})();
