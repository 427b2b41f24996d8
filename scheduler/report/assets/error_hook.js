// Installed before anything else runs: every script error, rejected promise and console.error
// call is written into #js-errors, so a test reading the DOM (and a reader) can see it.
(function () {
  var pending = [];
  function record(text) {
    var box = document.getElementById("js-errors");
    if (!box) { pending.push(text); return; }
    while (pending.length) { append(box, pending.shift()); }
    append(box, text);
  }
  function append(box, text) {
    var line = document.createElement("div");
    line.className = "js-error";
    line.textContent = String(text);
    box.appendChild(line);
  }
  window.addEventListener("error", function (ev) {
    record("error: " + ev.message + " at " + (ev.filename || "") + ":" + ev.lineno + ":" + ev.colno);
  });
  window.addEventListener("unhandledrejection", function (ev) {
    record("unhandled rejection: " + (ev.reason && ev.reason.stack || ev.reason));
  });
  var originalError = console.error;
  console.error = function () {
    record("console.error: " + Array.prototype.map.call(arguments, String).join(" "));
    return originalError.apply(console, arguments);
  };
  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("js-errors");
    while (box && pending.length) { append(box, pending.shift()); }
  });
  window.__phobosRecordError = record;
})();
