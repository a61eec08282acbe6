/* Cluster view: nodes and GPUs follow node.status, cluster.utilization and (for the caller's own
 * teams) job.status payloads; admins see node.event payloads in the feed.
 *
 * Another team's job is only ever "in use" here: the cluster group's payloads carry no job names,
 * and names come only from the caller's own job.status payloads or the server's anonymised state.
 * After a reconnect, and when the stream has been quiet for a while, the grid is re-read from
 * /cluster/state/ so a missed message cannot leave it wrong for long. */
(function () {
  "use strict";
  var GP = window.GP;
  var main = document.querySelector("[data-cluster-state-url]");
  if (!GP || !main) return;
  GP.want("jobs", "cluster", "utilization");
  var stateUrl = main.getAttribute("data-cluster-state-url");
  var STATE_TEXT = { ready: "", draining: "Draining", quarantined: "Quarantined", down: "Down", retired: "Retired" };
  // What a down node holding a drain or quarantine comes back as (resume_state).
  var COMES_BACK = { draining: "drained", quarantined: "quarantined" };
  var HOLDING = ["running", "preempted"];

  // node -> gpu index -> {job, name}: GPUs held by jobs the caller may see.
  var own = {};
  document.querySelectorAll(".gpu[data-job]").forEach(function (gpu) {
    var node = gpu.closest("[data-node]").getAttribute("data-node");
    var label = gpu.getAttribute("title").split(": ").slice(1).join(": ");
    (own[node] = own[node] || {})[gpu.getAttribute("data-gpu")] = { job: gpu.getAttribute("data-job"), label: label };
  });

  function nodeEl(name) {
    return main.querySelector('li.node[data-node="' + (window.CSS && CSS.escape ? CSS.escape(name) : name) + '"]');
  }

  function paintGpu(nodeName, gpu, busy) {
    var index = gpu.getAttribute("data-gpu");
    var mine = busy && own[nodeName] && own[nodeName][index];
    gpu.className = "gpu " + (busy ? "busy" : "free") + (mine ? " mine" : "");
    if (mine) gpu.setAttribute("data-job", mine.job);
    else gpu.removeAttribute("data-job");
    if (!busy) gpu.style.removeProperty("--u");
    var util = gpu.getAttribute("data-util");
    var label = busy ? (mine ? mine.label : "in use") : "free";
    if (busy && util) label += ", " + util + "% utilized";
    gpu.setAttribute("title", nodeName + " GPU " + index + ": " + label);
  }

  function describe(li) {
    var gpus = li.querySelectorAll(".gpu");
    var busy = li.querySelectorAll(".gpu.busy").length;
    var state = li.getAttribute("data-state");
    var held = li.getAttribute("data-resume-state");
    var clusterHold = li.getAttribute("data-cluster-hold");
    var health = li.querySelector("[data-field=health]").textContent;
    li.setAttribute(
      "aria-label",
      li.getAttribute("data-node") + ": " + state + (held ? ", comes back " + comesBack(held) : "") +
        (clusterHold ? ", no new work: " + clusterHold : "") +
        ", health " + health + ", " + busy + " of " + gpus.length + " GPUs in use"
    );
  }

  function comesBack(held) {
    return held in COMES_BACK ? COMES_BACK[held] : held;
  }

  // ``held``: the payload's resume_state (a down node's drain or quarantine to come back to).
  // node.status carries no reasons, so a live update shows the hold without its reason until the
  // resync from /cluster/state/ that follows it. ``clusterHold``: why the cluster itself keeps
  // new work off a node the platform has ready (a site admin's drain, a reservation).
  function setNodeState(li, state, health, reason, held, heldReason, clusterHold) {
    held = state === "down" && held ? held : "";
    clusterHold = state === "ready" && clusterHold ? clusterHold : "";
    li.setAttribute("data-state", state);
    li.setAttribute("data-resume-state", held);
    li.setAttribute("data-cluster-hold", clusterHold);
    li.className = li.className.replace(/\bstate-\S+/, "state-" + state);
    li.querySelector("[data-field=node-state]").textContent = state in STATE_TEXT ? STATE_TEXT[state] : state;
    var tip = li.querySelector("[data-field=tip-state]");
    if (tip) {
      tip.textContent =
        state.charAt(0).toUpperCase() + state.slice(1) + (reason ? ": " + reason : "") +
        (held ? " \u2014 comes back " + comesBack(held) + (heldReason ? ": " + heldReason : "") : "") +
        (clusterHold ? " \u2014 no new work: " + clusterHold : "");
    }
    if (typeof health === "number") {
      var pct = Math.round(health * 100) + "%";
      li.querySelector("[data-field=health]").textContent = pct;
      var tipHealth = li.querySelector("[data-field=tip-health]");
      if (tipHealth) tipHealth.textContent = pct;
      li.classList.toggle("health-bad", health < 0.6);
      li.classList.toggle("health-warn", health >= 0.6 && health < 0.9);
    }
    // "held" shows Release on a down node: releasing it lifts the hold where it stands.
    var shownFor = held ? [state, "held"] : [state];
    li.querySelectorAll("form[data-show-when]").forEach(function (form) {
      var when = form.getAttribute("data-show-when").split(" ");
      form.hidden = !shownFor.some(function (s) {
        return when.indexOf(s) >= 0;
      });
    });
  }

  var chartPending = false;
  var historyPoints = null;
  function recount() {
    var inUse = 0, free = 0, unavailable = 0, total = 0;
    main.querySelectorAll("li.node").forEach(function (li) {
      // a node the cluster holds takes no new work: its idle GPUs are not free to anyone
      var ready = li.getAttribute("data-state") === "ready" && !li.getAttribute("data-cluster-hold");
      li.querySelectorAll(".gpu").forEach(function (gpu) {
        total += 1;
        if (gpu.classList.contains("busy")) inUse += 1;
        else if (ready) free += 1;
        else unavailable += 1;
      });
      describe(li);
    });
    document.getElementById("total-in-use").textContent = inUse;
    document.getElementById("total-free").textContent = free;
    document.getElementById("total-unavailable").textContent = unavailable;
    document.getElementById("total-gpus").textContent = total;
    // One chart point per second at most, however many messages arrive.
    if (!chartPending && window.Plotly && GP.charts && GP.charts["usage-figure"]) {
      chartPending = true;
      window.setTimeout(function () {
        chartPending = false;
        var now = new Date().toISOString();
        var chart = GP.charts["usage-figure"];
        // Keep the hourly history the page came with, plus the last 240 live points.
        if (historyPoints === null) historyPoints = chart.data[0].x.length;
        window.Plotly.extendTraces(
          chart,
          { x: [[now], [now]], y: [[inUse], [unavailable]] },
          [0, 1],
          historyPoints + 240
        );
      }, 1000);
    }
  }

  GP.on("node.status", function (msg) {
    var li = nodeEl(msg.node);
    if (!li) return;
    setNodeState(li, msg.state, msg.health, msg.reason, msg.resume_state, "", msg.cluster_hold);
    Object.keys(msg.gpus || {}).forEach(function (index) {
      var gpu = li.querySelector('.gpu[data-gpu="' + index + '"]');
      if (gpu) paintGpu(msg.node, gpu, msg.gpus[index] !== "free");
    });
    recount();
    resync(3000);
  });

  function paintUtilization(nodeName, samples) {
    var li = nodeEl(nodeName);
    if (!li) return;
    // A sample exists for every busy GPU of the node, so the rest are free.
    li.querySelectorAll(".gpu").forEach(function (gpu) {
      var value = samples[gpu.getAttribute("data-gpu")];
      if (value === undefined) {
        gpu.removeAttribute("data-util");
        paintGpu(nodeName, gpu, false);
        return;
      }
      var fraction = value > 1 ? value / 100 : value;
      gpu.style.setProperty("--u", fraction.toFixed(2));
      gpu.setAttribute("data-util", Math.round(fraction * 100));
      paintGpu(nodeName, gpu, true);
    });
  }

  // One message per sync for the whole cluster (or per telemetry batch for one node).
  GP.on("cluster.utilization", function (msg) {
    var nodes = msg.nodes || {};
    Object.keys(nodes).forEach(function (name) {
      paintUtilization(name, nodes[name] || {});
    });
    recount();
  });

  GP.on("job.status", function (msg) {
    // Forget the job's old GPUs, then record where it holds GPUs now.
    Object.keys(own).forEach(function (node) {
      Object.keys(own[node]).forEach(function (index) {
        if (String(own[node][index].job) === String(msg.job)) delete own[node][index];
      });
    });
    if (HOLDING.indexOf(msg.state) >= 0) {
      Object.keys(msg.placement || {}).forEach(function (node) {
        msg.placement[node].forEach(function (index) {
          (own[node] = own[node] || {})[String(index)] = { job: String(msg.job), label: msg.name + " (#" + msg.job + ")" };
          var li = nodeEl(node);
          var gpu = li && li.querySelector('.gpu[data-gpu="' + index + '"]');
          if (gpu) paintGpu(node, gpu, true);
        });
      });
      recount();
    }
    resync(1500);
  });

  var feed = document.getElementById("node-events");
  GP.on("node.event", function (msg) {
    if (!feed) return;
    var empty = feed.querySelector(".empty");
    if (empty) empty.remove();
    var item = GP.el("li", { class: "ev ev-" + msg.kind, "data-live": "1" });
    item.appendChild(GP.el("time", { datetime: msg.time }, GP.timeOf(msg.time)));
    item.appendChild(document.createTextNode(" "));
    item.appendChild(GP.el("strong", {}, msg.node));
    item.appendChild(document.createTextNode(" " + msg.kind + (msg.message ? ": " + msg.message : "")));
    feed.insertBefore(item, feed.firstChild);
    while (feed.children.length > 50) feed.removeChild(feed.lastChild);
  });

  // --- resync from the server ---------------------------------------------------------------
  var resync = GP.stateReader(
    stateUrl,
    function (data) {
      own = {};
      data.nodes.forEach(function (node) {
        node.gpus.forEach(function (g) {
          if (g.job) (own[node.node] = own[node.node] || {})[String(g.index)] = { job: String(g.job), label: g.name + " (#" + g.job + ")" };
        });
      });
      data.nodes.forEach(function (node) {
        var li = nodeEl(node.node);
        if (!li) return;
        setNodeState(
          li, node.state, node.health, node.reason, node.resume_state, node.resume_reason,
          node.cluster_hold
        );
        node.gpus.forEach(function (g) {
          var gpu = li.querySelector('.gpu[data-gpu="' + g.index + '"]');
          if (gpu) paintGpu(node.node, gpu, g.status !== "free");
        });
      });
      recount();
    },
    200
  );
  GP.on("reconnected", resync);
  window.setInterval(function () {
    if (!document.hidden) resync(0);
  }, 15000);
})();
