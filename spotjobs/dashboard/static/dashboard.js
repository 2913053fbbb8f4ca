// Live updates: every few seconds, fetch this page again and swap its <main> for the new one.
// The server escapes everything it renders; DOMParser runs no script of what it parses.
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
  const every = Number(live && live.dataset.poll);
  if (!live || !every) return;
  async function refresh() {
    if (document.hidden) {
      // a tab nobody looks at reads nothing (each read lists the ledger, maybe the logs)
      window.setTimeout(refresh, every);
      return;
    }
    try {
      const response = await fetch(window.location.href, { credentials: "same-origin" });
      if (response.ok) {
        const page = new DOMParser().parseFromString(await response.text(), "text/html");
        const fresh = page.getElementById("live");
        if (fresh) {
          live.replaceChildren(...fresh.childNodes);
          placeBars(live);
        }
      }
    } catch (error) {
      // the app stopped or the network blinked: try again at the next tick
    }
    window.setTimeout(refresh, every);
  }
  window.setTimeout(refresh, every);
})();
