// /ui/running: replace the live part with each server-sent event (already escaped HTML from the bridge).
const live = document.getElementById("live");
if (live && window.EventSource) {
  const es = new EventSource(live.dataset.src);
  es.addEventListener("running", (e) => { live.innerHTML = e.data; live.dataset.updates = String(Number(live.dataset.updates || 0) + 1); });
}
