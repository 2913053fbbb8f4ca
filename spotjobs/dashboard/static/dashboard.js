// Live updates by server-sent events: the page opens an EventSource on its own URL (the app then
// answers with text/event-stream), and each "page" event is the page rendered again, sent when it
// changed (its version, a digest the page carries, is not the one this page shows: `seen`); its
// <main> replaces this one. The server escapes everything it renders; DOMParser runs no script of
// what it parses. The server ends a stream after a few minutes: the script then opens another,
// naming the version it shows now, after the stream's `retry` (as EventSource itself would, but
// with the URL it opened first); a tab nobody looks at holds no stream.
"use strict";
(function () {
  // The timeline's bars are placed here, not by style attributes (the CSP allows no inline style).
  function placeBars(root) {
    for (const bar of root.querySelectorAll(".bar[data-left]")) {
      bar.style.left = bar.dataset.left + "%";
      bar.style.width = bar.dataset.width + "%";
    }
  }
  placeBars(document);
  const live = document.getElementById("live");
  if (!live || !Number(live.dataset.poll) || !window.EventSource) return;
  let source = null;
  let reconnect = null;
  function swap(message) {
    const page = new DOMParser().parseFromString(message.data, "text/html");
    const fresh = page.getElementById("live");
    if (fresh) {
      live.replaceChildren(...fresh.childNodes);
      live.dataset.version = fresh.dataset.version;
      placeBars(live);
    }
  }
  const retryMilliseconds = 1000; // the stream's `retry` (spotjobs/dashboard/live.py)
  function open() {
    if (source) return;
    const url = new URL(window.location.href);
    url.searchParams.set("seen", live.dataset.version);
    source = new EventSource(url);
    source.addEventListener("page", swap);
    source.addEventListener("error", function () {
      // the stream ended (its life is bounded) or the app is away: open another, from this version
      close();
      reconnect = window.setTimeout(open, retryMilliseconds);
    });
    live.dataset.stream = "open";
  }
  function close() {
    if (source) source.close();
    source = null;
    window.clearTimeout(reconnect);
    live.dataset.stream = "closed";
  }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) close();
    else open();
  });
  if (!document.hidden) open();
})();
