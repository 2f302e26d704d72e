// Sluice dashboard: charts (uPlot) over the server-kept history, when a page has a chart.
