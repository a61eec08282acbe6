/* Job tables (home, job list): rows follow job.status payloads without a reload.
 *
 * A table marked data-live-jobs updates the state and "why pending" cells of its rows. A job it
 * has not seen is added at the top when the table shows every job (no filter) or its
 * data-live-states include the job's state. Only the caller's teams' payloads ever arrive. */
(function () {
  "use strict";
  var GP = window.GP;
  if (!GP) return;
  var tables = document.querySelectorAll("table[data-live-jobs]");
  if (!tables.length) return;
  var filtered = window.location.search.length > 1;

  function setState(row, msg) {
    var badge = row.querySelector("[data-field=state]");
    if (badge) {
      badge.className = "state state-" + msg.state;
      badge.textContent = GP.STATE_LABELS[msg.state] || msg.state;
    }
    var why = row.querySelector("[data-field=why]");
    if (why) why.textContent = msg.state === "pending" ? msg.why || "" : "";
    row.setAttribute("data-state", msg.state);
  }

  function newRow(table, msg) {
    var cols = table.querySelectorAll("thead th").length;
    var row = GP.el("tr", { "data-job": String(msg.job) });
    var head = GP.el("th", { scope: "row" });
    head.appendChild(GP.el("a", { href: "/jobs/" + msg.job + "/" }, msg.name));
    head.appendChild(document.createTextNode(" "));
    head.appendChild(GP.el("span", { class: "muted" }, "#" + msg.job));
    row.appendChild(head);
    row.appendChild(GP.el("td", {}, msg.team));
    if (cols === 7) row.appendChild(GP.el("td", { class: "muted" }, "—"));
    row.appendChild(GP.el("td", { class: "num" }, "—"));
    var stateCell = GP.el("td");
    stateCell.appendChild(GP.el("span", { "data-field": "state" }));
    row.appendChild(stateCell);
    row.appendChild(GP.el("td", { class: "why", "data-field": "why" }));
    row.appendChild(GP.el("td", { class: "muted" }, GP.timeOf(msg.time)));
    return row;
  }

  // On (re)connect, re-read the shown rows' states: a change published between the page render
  // and the socket's hello would otherwise be missed.
  function resync() {
    var ids = [];
    tables.forEach(function (table) {
      table.querySelectorAll("tr[data-job]").forEach(function (row) {
        ids.push(row.getAttribute("data-job"));
      });
    });
    if (!ids.length || !window.fetch) return;
    window
      .fetch("/jobs/states/?ids=" + ids.join(","), { credentials: "same-origin" })
      .then(function (r) {
        return r.ok ? r.json() : null;
      })
      .then(function (data) {
        if (!data) return;
        tables.forEach(function (table) {
          table.querySelectorAll("tr[data-job]").forEach(function (row) {
            var job = data.jobs[row.getAttribute("data-job")];
            if (job) setState(row, job);
          });
        });
      })
      .catch(function () {});
  }
  GP.on("hello", resync);

  GP.on("job.status", function (msg) {
    tables.forEach(function (table) {
      var wanted = (table.getAttribute("data-live-states") || "").split(",").filter(Boolean);
      var row = table.querySelector('tr[data-job="' + msg.job + '"]');
      if (!row) {
        var fits = wanted.length ? wanted.indexOf(msg.state) >= 0 : !filtered;
        if (!fits) return;
        row = newRow(table, msg);
        var body = table.tBodies[0];
        var empty = body.querySelector("tr.empty");
        if (empty) empty.remove();
        body.insertBefore(row, body.firstChild);
      }
      setState(row, msg);
      if (wanted.length && wanted.indexOf(msg.state) < 0) row.classList.add("leaving");
      else row.classList.remove("leaving");
    });
  });
})();
