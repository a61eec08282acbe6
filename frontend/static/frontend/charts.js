/* Draws the figures the server embedded with json_script ([data-figure] -> <script id>),
 * with the plotly.js the platform serves itself. GP.charts[id] is the drawn element. */
(function () {
  "use strict";
  var GP = (window.GP = window.GP || {});
  GP.charts = GP.charts || {};
  if (!window.Plotly) return;
  document.querySelectorAll("[data-figure]").forEach(function (el) {
    var source = document.getElementById(el.getAttribute("data-figure"));
    if (!source) return;
    var fig = JSON.parse(source.textContent);
    if (!fig) return;
    window.Plotly.newPlot(el, fig.data, fig.layout, { responsive: true, displaylogo: false });
    GP.charts[el.getAttribute("data-figure")] = el;
  });
})();
