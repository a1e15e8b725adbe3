// On a phone a table whose words do not fit the column becomes a stack of cards: each row one card,
// each cell after its column's name. A table that fits keeps its rows and columns, and no word or
// number in it is broken ("1024" never reads "102 / 4"). The book's comparison tables have card
// layouts of their own (book.css) and are left alone.
(function () {
  "use strict";
  const PHONE = window.matchMedia("(max-width: 640px)");
  const OWN_LAYOUT = ".verdict-table, .advice-table, .evidence-table, .ledger-table, .indextable, .stack-on-phone";

  // Each body cell that is not empty gets a copy of its column's header (typeset math included) in
  // front of its text.
  function label(table, heads) {
    for (const row of table.querySelectorAll("tbody tr")) {
      Array.from(row.cells).forEach((cell, i) => {
        const head = heads[i];
        if (!head || !head.textContent.trim() || !cell.textContent.trim()) return;
        const tag = document.createElement("span");
        tag.className = "card-label";
        for (const node of (head.querySelector(":scope > p") || head).childNodes) tag.append(node.cloneNode(true));
        tag.append(": ");
        (cell.querySelector(":scope > p") || cell).prepend(tag);
      });
    }
  }

  // Measured laid out as a table (labels and class removed, then set again in the same task, so
  // nothing is drawn in between): cards only where its whole words run past the table's own box.
  function fit() {
    for (const table of document.querySelectorAll("article.bd-article table")) {
      if (table.closest(OWN_LAYOUT)) continue;
      table.classList.remove("cards");
      table.querySelectorAll(".card-label").forEach((tag) => tag.remove());
      const heads = Array.from(table.querySelectorAll("thead tr:last-child th"));
      if (PHONE.matches && heads.length && table.clientWidth > 0 && table.scrollWidth > table.clientWidth + 1) {
        label(table, heads);
        table.classList.add("cards");
      }
    }
  }

  // First once MathJax has typeset the page and its fonts have loaded (widths are final then); again
  // when a closed block holding a table opens and when the screen turns or is resized.
  let started = false;
  const refit = () => { if (started) fit(); };
  window.addEventListener("load", () => {
    const typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
    Promise.resolve(typeset)
      .then(() => document.fonts && document.fonts.ready)
      .then(() => { started = true; fit(); });
  });
  document.addEventListener("toggle", refit, true);
  PHONE.addEventListener("change", refit);
  let pending = 0;
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(refit, 100);
  });
})();
