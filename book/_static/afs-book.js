/* Attention from Scratch: small fixes to the theme's pages, loaded by every page of the book.
 *
 * - Search: for each result the search page fetches the result's page to quote an excerpt. A
 *   browser refuses such requests for a book opened from disk (file://), which logged one error
 *   per result; there the results are listed without excerpts (served over HTTP they keep them).
 * - Screen readers: the sidebar's expand/collapse toggles get a name, and the reference list
 *   marks its entries as list items (the deprecated ARIA role "doc-biblioentry" is not one).
 */
(function () {
  "use strict";
  if (location.protocol === "file:" && typeof DOCUMENTATION_OPTIONS !== "undefined") {
    DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;
  }

  function labelToggles() {
    for (const summary of document.querySelectorAll("summary")) {
      if (summary.textContent.trim() || summary.hasAttribute("aria-label")) continue;
      const item = summary.closest("li");
      const link = item ? item.querySelector(":scope > a") : null;
      const name = link ? link.textContent.trim() : "this section";
      summary.setAttribute("aria-label", `Show or hide the pages under ${name}`);
    }
  }

  function markReferences() {
    for (const entry of document.querySelectorAll(".citation-list > [role=doc-biblioentry]")) {
      entry.setAttribute("role", "listitem");
    }
  }

  function fix() {
    labelToggles();
    markReferences();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fix);
  else fix();
})();
