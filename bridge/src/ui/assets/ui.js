// /ui/running: replace the live part with each server-sent event (already escaped HTML from the
// bridge), and count elapsed times on between events.
const live = document.getElementById("live");
if (live && window.EventSource) {
  let at = Date.now();
  const es = new EventSource(live.dataset.src);
  es.addEventListener("running", (e) => { live.innerHTML = e.data; at = Date.now(); live.dataset.updates = String(Number(live.dataset.updates || 0) + 1); });
  const human = (ms) => ms < 1000 ? Math.round(ms) + " ms" : ms < 60000 ? (ms / 1000).toFixed(1) + " s" : ms < 3600000 ? Math.floor(ms / 60000) + "m " + String(Math.floor(ms % 60000 / 1000)).padStart(2, "0") + "s" : Math.floor(ms / 3600000) + "h " + String(Math.floor(ms % 3600000 / 60000)).padStart(2, "0") + "m";
  setInterval(() => { for (const el of live.querySelectorAll(".elapsed[data-ms]")) { el.textContent = human(Number(el.dataset.ms) + Date.now() - at) + (el.dataset.suffix || ""); } }, 1000);
}
