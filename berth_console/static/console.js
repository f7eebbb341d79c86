// Berth console: keeps the page live. The server sends, over one EventSource per page,
// "replace" (a region's new inner HTML) and "add" (rows or log text to add to a region).
// It already coalesced them (at most two updates a second), so nothing is throttled here.
(() => {
  "use strict";
  const url = document.body.dataset.stream;
  const status = document.getElementById("live-status");
  if (!url || !window.EventSource) {
    return;
  }
  const show = (text, state) => {
    status.textContent = text;
    status.dataset.state = state;
  };
  const source = new EventSource(url);
  source.onopen = () => show("Live", "live");
  source.onerror = () => show("Reconnecting…", "down");
  source.addEventListener("replace", (message) => {
    const update = JSON.parse(message.data);
    const region = document.getElementById(update.id);
    if (region) {
      region.innerHTML = update.html;
    }
  });
  source.addEventListener("add", (message) => {
    const update = JSON.parse(message.data);
    const region = document.getElementById(update.id);
    if (!region) {
      return;
    }
    const atStart = update.at === "start";
    const follow = region.scrollTop + region.clientHeight >= region.scrollHeight - 4;
    region.insertAdjacentHTML(atStart ? "afterbegin" : "beforeend", update.html);
    const limit = Number(region.dataset.max || 0);
    while (limit && region.children.length > limit) {
      (atStart ? region.lastElementChild : region.firstElementChild).remove();
    }
    const empty = region.querySelector(".empty");
    if (empty && region.children.length > 1) {
      empty.remove();
    }
    if (!atStart && follow) {
      region.scrollTop = region.scrollHeight; // a log being read at its end keeps up
    }
  });
  window.addEventListener("beforeunload", () => source.close());
})();
