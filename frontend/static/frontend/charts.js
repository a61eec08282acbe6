/* Draws the figures the server embedded with json_script ([data-figure] -> <script id>) with
 * the plotly.js the platform serves itself (URL in this script tag's data-plotly).
 *
 * plotly.js is large, so it is fetched after the page's load event: the page is usable at once
 * and the charts appear when it arrives. GP.charts[id] is each drawn element; a "charts" event
 * fires once they are drawn. */
(function () {
  "use strict";
  var GP = (window.GP = window.GP || {});
  GP.charts = GP.charts || {};
  var me = document.currentScript;
  var src = me && me.getAttribute("data-plotly");
  // Stylesheets plotly.js would write inline as it loads (ids from the server, read from the
  // bundle): an empty placeholder with each id keeps them out, so the page passes its
  // Content-Security-Policy (no inline style). Its other rules go through the CSSOM.
  var styleIds = ((me && me.getAttribute("data-plotly-style-ids")) || "").split(" ");

  function draw() {
    document.querySelectorAll("[data-figure]").forEach(function (el) {
      var source = document.getElementById(el.getAttribute("data-figure"));
      var fig = source ? JSON.parse(source.textContent) : null;
      if (!fig) return;
      window.Plotly.newPlot(el, fig.data, fig.layout, { responsive: true, displaylogo: false });
      GP.charts[el.getAttribute("data-figure")] = el;
    });
    document.documentElement.setAttribute("data-charts", "drawn");
    if (GP.emit) GP.emit("charts", GP.charts);
  }

  function holdStylePlaces() {
    styleIds.forEach(function (id) {
      if (id && !document.getElementById(id)) {
        var placeholder = document.createElement("template");
        placeholder.id = id;
        document.head.appendChild(placeholder);
      }
    });
  }

  function load() {
    if (window.Plotly) return draw();
    if (!src) return;
    holdStylePlaces();
    var script = document.createElement("script");
    script.src = src;
    script.onload = draw;
    document.head.appendChild(script);
  }

  if (document.readyState === "complete") load();
  else window.addEventListener("load", load);
})();
