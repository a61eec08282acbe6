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
  GP.want("jobs");
  var filtered = window.location.search.length > 1;

  function setState(row, msg) {
    GP.paintJobRow(row, msg);
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
    row.appendChild(
      GP.el("td", { class: "why", "data-field": "why", "data-shows-estimate": "" })
    );
    row.appendChild(GP.el("td", { class: "muted" }, GP.timeOf(msg.time)));
    return row;
  }

  // On (re)connect, re-read the shown rows' states: a change published between the page render
  // and the socket's hello would otherwise be missed.
  var resync = GP.jobRowsReader("table[data-live-jobs] tr[data-job]", setState, 0);
  GP.on("hello", resync);
  // An array's cancel is announced once for the array, not per job: its rows are re-read.
  GP.on("array.status", function (msg) {
    if (document.querySelector('table[data-live-jobs] tr[data-job][data-array="' + msg.array + '"]')) {
      resync();
    }
  });

  GP.on("job.status", function (msg) {
    if (resync.inFlight()) resync();
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

/* Job arrays: header counts ([data-array-counts]) follow array.status messages and the members'
 * job.status changes; the array page's member table ([data-array-members]) follows its rows; a
 * job list marked data-live-arrays gets a header row for an array submitted after it loaded.
 * An array.status payload carries what changed, not the totals, so the counts are re-read from
 * /arrays/<id>/state/ (debounced per array: a sweep's members change in bursts). */
(function () {
  "use strict";
  var GP = window.GP;
  if (!GP) return;
  var sel = "[data-array-counts], table[data-array-members], table[data-live-arrays]";
  if (!document.querySelector(sel)) return;
  if (GP.want) GP.want("jobs"); // array.status and job.status come with the jobs topic
  var filtered = window.location.search.length > 1;

  function renderCounts(box, counts) {
    var all = box.hasAttribute("data-all-states");
    var items = [];
    Object.keys(GP.STATE_LABELS).forEach(function (state) {
      var n = counts[state] || 0;
      if (!n && !all) return;
      var badge = GP.el(
        "span",
        { class: "state state-" + state, "data-count": state },
        n + " " + GP.STATE_LABELS[state].toLowerCase()
      );
      items.push(box.tagName === "UL" ? wrap(badge) : badge);
    });
    box.textContent = "";
    items.forEach(function (item) {
      box.appendChild(item);
      if (box.tagName !== "UL") box.appendChild(document.createTextNode(" "));
    });
  }

  function wrap(node) {
    var li = GP.el("li");
    li.appendChild(node);
    return li;
  }

  function applyCounts(id, data) {
    document.querySelectorAll('[data-array-counts="' + id + '"]').forEach(function (box) {
      renderCounts(box, data.counts);
    });
    var live = GP.LIVE_STATES.reduce(function (sum, state) {
      return sum + (data.counts[state] || 0);
    }, 0);
    var cancel = document.querySelector("[data-array-cancel]");
    if (!live && cancel) cancel.remove();
  }

  // One reader per shown array, 500 ms after the first change of a burst.
  var readers = {};
  function refresh(id) {
    if (!readers[id]) {
      readers[id] = GP.stateReader("/arrays/" + id + "/state/", function (data) {
        applyCounts(id, data);
      }, 500);
    }
    readers[id]();
  }

  function shownArrays() {
    var ids = {};
    document.querySelectorAll("[data-array-counts]").forEach(function (box) {
      ids[box.getAttribute("data-array-counts")] = true;
    });
    return Object.keys(ids);
  }

  function newArrayRow(table, msg) {
    var row = GP.el("tr", { class: "array-group", "data-array": String(msg.array) });
    var head = GP.el("th", {
      scope: "rowgroup",
      colspan: String(table.querySelectorAll("thead th").length)
    });
    var link = "Job array #" + msg.array + " · " + msg.name;
    head.appendChild(GP.el("a", { href: "/arrays/" + msg.array + "/" }, link));
    head.appendChild(document.createTextNode(" "));
    head.appendChild(GP.el("span", { class: "muted" }, msg.size + " jobs:"));
    head.appendChild(document.createTextNode(" "));
    var counts = GP.el("span", { class: "array-counts", "data-array-counts": String(msg.array) });
    renderCounts(counts, msg.counts || {});
    head.appendChild(counts);
    head.appendChild(GP.el("span", { class: "muted" }, "new: reload to list its jobs"));
    row.appendChild(head);
    return row;
  }

  // The array page's member rows, re-read after an array.status (see the job tables' resync).
  var members = GP.jobRowsReader("table[data-array-members] tr[data-job]", GP.paintJobRow, 500);

  GP.on("array.status", function (msg) {
    if (document.querySelector('table[data-array-members] tr[data-array="' + msg.array + '"]')) {
      members();
    }
    if (!document.querySelector('[data-array-counts="' + msg.array + '"]') && !filtered) {
      document.querySelectorAll("table[data-live-arrays]").forEach(function (table) {
        var body = table.tBodies[0];
        var empty = body.querySelector("tr.empty");
        if (empty) empty.remove();
        body.insertBefore(newArrayRow(table, msg), body.firstChild);
      });
    }
    if (document.querySelector('[data-array-counts="' + msg.array + '"]')) refresh(msg.array);
  });

  GP.on("job.status", function (msg) {
    document.querySelectorAll('tr[data-job="' + msg.job + '"][data-array]').forEach(function (row) {
      var id = row.getAttribute("data-array");
      if (document.querySelector('[data-array-counts="' + id + '"]')) refresh(id);
      if (!row.closest("table[data-array-members]")) return; // data-live-jobs tables do their own
      if (members.inFlight()) members();
      GP.paintJobRow(row, msg);
    });
  });

  // After a (re)connect, changes published while disconnected are re-read.
  GP.on("hello", function () {
    shownArrays().forEach(refresh);
  });
})();
