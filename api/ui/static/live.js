// The job page's live output: follows /ui/jobs/<id>/events (the
// dashboard's EventSource, authenticated by its cookie) and appends each
// chunk as text (never as HTML); reloads the page when the job ends.
(function () {
  "use strict";
  var out = document.getElementById("live-stdout");
  var err = document.getElementById("live-stderr");
  var state = document.getElementById("live-state");
  var status = document.getElementById("status");
  if (!out || !window.EventSource) { return; }
  var es = new EventSource(out.getAttribute("data-events"));
  es.addEventListener("output", function (ev) {
    var d = JSON.parse(ev.data);
    (d.stream === "stderr" ? err : out).appendChild(document.createTextNode(d.data));
  });
  es.addEventListener("status", function (ev) {
    var d = JSON.parse(ev.data);
    status.textContent = d.status;
    status.className = "status s-" + d.status;
  });
  es.addEventListener("end", function () {
    es.close();
    state.textContent = "The job has ended; loading its result…";
    window.location.reload();
  });
  es.onerror = function () { state.textContent = "Reconnecting…"; };
})();
