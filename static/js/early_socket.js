// Opens the run's websocket before plotly.min.js is evaluated (a classic script placed before
// it), so that the server builds the snapshot meanwhile; stream.js's connect() adopts the
// socket and replays the messages it buffered, in order.
(function () {
  "use strict";
  var path = document.currentScript.dataset.path;
  var proto = location.protocol === "https:" ? "wss" : "ws";
  var early = { ws: new WebSocket(proto + "://" + location.host + path), messages: [], firstAt: null, opened: false, closed: false };
  early.ws.onopen = function () { early.opened = true; };
  early.ws.onmessage = function (e) {
    if (early.firstAt === null) early.firstAt = performance.now();
    early.messages.push(e);
  };
  early.ws.onclose = function () { early.closed = true; };
  window.runEarlySocket = early;
})();
