/* Submission form: a live preview of the request in GPUs, and focus on the error summary. */
(function () {
  "use strict";
  var form = document.querySelector("[data-submit-form]");
  if (!form) return;
  var out = document.getElementById("gpu-preview");

  function num(id) {
    var input = document.getElementById(id);
    var value = input ? parseInt(input.value, 10) : NaN;
    return isNaN(value) ? null : value;
  }
  function plural(n) {
    return n + " GPU" + (n === 1 ? "" : "s");
  }
  function update() {
    var workers = num("id_workers");
    var perWorker = num("id_gpus_per_worker");
    var lo = num("id_elastic_min_workers");
    var hi = num("id_elastic_max_workers");
    if (workers === null || perWorker === null || workers < 1 || perWorker < 1) {
      out.textContent = "enter workers and GPUs per worker";
      return;
    }
    var text = plural(workers * perWorker) + " (" + workers + " × " + perWorker + ")";
    if (lo !== null && hi !== null && lo >= 1 && hi >= lo) {
      text += ", elastic " + lo * perWorker + "–" + hi * perWorker + " GPUs";
    }
    out.textContent = text;
  }
  form.addEventListener("input", update);
  update();

  var summary = document.getElementById("error-summary");
  if (summary) {
    var firstBad = form.querySelector("[aria-invalid=true]");
    (firstBad || summary).focus();
  }
})();
