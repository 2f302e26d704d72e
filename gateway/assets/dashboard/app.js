// Sluice dashboard: the queue page's charts (uPlot) over the history the server keeps
// (GET /dashboard/queues/<queue>/history?span=hour|day), refreshed every minute: the counts
// and the oldest message's age, and the send / receive / delete rates. Loaded with
// `defer`; no inline script anywhere, so the page's CSP allows scripts from this server only.
(function () {
  "use strict";
  var REFRESH_MS = 60000;

  function series(label, stroke, scale) {
    return { label: label, stroke: stroke, width: 2, scale: scale || "n", spanGaps: true };
  }

  function axes(right) {
    var list = [
      { stroke: "currentColor", grid: { stroke: "rgba(128,128,128,.2)" } },
      { stroke: "currentColor", scale: "n", grid: { stroke: "rgba(128,128,128,.2)" } },
    ];
    if (right) list.push({ stroke: "currentColor", scale: "s", side: 1, grid: { show: false } });
    return list;
  }

  function draw(container, data, span) {
    container.textContent = "";
    var width = Math.max(280, container.clientWidth);
    var period = span === "day" ? "Last day" : "Last hour";
    var scales = {
      // The window the span names, whatever points there are: uPlot's own range would stretch
      // a single point over years.
      x: { time: true, range: function () { return [data.from, data.to]; } },
      n: { range: function (u, min, max) { return [0, Math.max(1, max)]; } },
    };
    if (data.t.length === 0) {
      var empty = document.createElement("p");
      empty.className = "empty";
      empty.textContent = "No history yet: the server records a point a minute while this queue is followed.";
      container.appendChild(empty);
      return;
    }
    // Kept on the element (not in a global) so the browser tests can read the drawn ranges.
    container.charts = [];
    container.charts.push(new window.uPlot(
      {
        title: period,
        width: width,
        height: 220,
        series: [
          {},
          series("Visible", "#2f6fed"),
          series("In flight", "#d97706"),
          series("Delayed", "#7c3aed"),
          series("Oldest age (s)", "#16a34a", "s"),
        ],
        axes: axes(true),
        scales: scales,
      },
      [data.t, data.visible, data.in_flight, data.delayed, data.oldest_age_seconds],
      container
    ));
    container.charts.push(new window.uPlot(
      {
        title: period + ": messages per second",
        width: width,
        height: 180,
        series: [
          {},
          series("Sent/s", "#2f6fed"),
          series("Received/s", "#d97706"),
          series("Deleted/s", "#16a34a"),
        ],
        axes: axes(false),
        scales: scales,
      },
      [data.t, data.sent_per_second, data.received_per_second, data.deleted_per_second],
      container
    ));
  }

  function setUp(container) {
    var queue = container.getAttribute("data-queue");
    var buttons = document.querySelectorAll(".chart-controls button[data-span]");
    var span = "hour";
    function load() {
      var url = "/dashboard/queues/" + encodeURIComponent(queue) + "/history?span=" + span;
      fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } })
        .then(function (response) {
          if (!response.ok) throw new Error(response.status);
          return response.json();
        })
        .then(function (data) { draw(container, data, span); })
        .catch(function () { container.textContent = "The history could not be loaded."; });
    }
    buttons.forEach(function (button) {
      button.addEventListener("click", function () {
        span = button.getAttribute("data-span");
        buttons.forEach(function (b) { b.setAttribute("aria-pressed", String(b === button)); });
        load();
      });
    });
    load();
    setInterval(load, REFRESH_MS);
  }

  function start() {
    if (!window.uPlot) return;
    document.querySelectorAll(".chart[data-queue]").forEach(setUp);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
