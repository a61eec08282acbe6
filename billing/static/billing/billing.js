/* Cost pages: live budget alerts (the stream delivers {"type": "budget.alert", ...} to the team's
 * members) and the team picker. Served as a file: the portal's Content-Security-Policy allows no
 * inline script. */
(function () {
  "use strict";
  var list = document.getElementById("budget-alerts");
  if (list && window.GP && GP.on) {
    GP.on("budget.alert", function (msg) {
      var team = list.getAttribute("data-team");
      if (team && msg.team !== team) return;
      var text = (team ? "" : msg.team + ": ") + "Budget " + msg.threshold + "% reached ($" +
        msg.spend + " of $" + msg.budget + " for " + msg.month + ")" +
        (msg.hard_stop && msg.threshold >= 100 ? "; new jobs are refused, running jobs continue" : "");
      var item = GP.el ? GP.el("li", { "class": "live-alert" }, text) : document.createElement("li");
      if (!GP.el) item.textContent = text;
      list.insertBefore(item, list.firstChild);
    });
  }
  var picker = document.getElementById("team-select");
  if (picker) {
    picker.addEventListener("change", function () {
      var month = picker.getAttribute("data-month");
      window.location.href = "/billing/teams/" + encodeURIComponent(picker.value) + "/" +
        (month ? "?month=" + encodeURIComponent(month) : "");
    });
  }
})();
