/* Attention from Scratch: shared pieces of the interactive figures (no framework, no network).
 *
 * Defines globalThis.AFS.common: the book's colour scales (matplotlib's "Blues" for attention
 * weights on a fixed 0-1 scale, "RdBu" for values in -1..1), a stable softmax, a seeded random
 * generator, small DOM/SVG helpers and the figures' style sheet. Safe to load more than once.
 */
(function () {
  "use strict";
  const AFS = (globalThis.AFS = globalThis.AFS || {});
  if (AFS.common) return;

  // The anchor colours of matplotlib's colour maps (matplotlib._cm), evenly spaced on 0..1 and
  // linearly interpolated, as matplotlib's LinearSegmentedColormap does.
  const BLUES = [
    [247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
    [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107],
  ];
  const RDBU = [
    [103, 0, 31], [178, 24, 43], [214, 96, 77], [244, 165, 130], [253, 219, 199],
    [247, 247, 247], [209, 229, 240], [146, 197, 222], [67, 147, 195], [33, 102, 172],
    [5, 48, 97],
  ];

  function interpolate(anchors, x) {
    if (!Number.isFinite(x)) return [200, 200, 200];
    const u = Math.min(1, Math.max(0, x)) * (anchors.length - 1);
    const i = Math.min(anchors.length - 2, Math.floor(u));
    const f = u - i;
    return anchors[i].map((a, c) => Math.round(a + f * (anchors[i + 1][c] - a)));
  }
  const rgb = (c) => `rgb(${c[0]},${c[1]},${c[2]})`;
  /** Colour of an attention weight w in 0..1 (book: helpers.plotting.ATTENTION_CMAP, 0-1). */
  const blues = (w) => rgb(interpolate(BLUES, w));
  /** Colour of a value v in -1..1 (matplotlib "RdBu", vmin -1, vmax 1). */
  const rdbu = (v) => rgb(interpolate(RDBU, (v + 1) / 2));
  /** Black or white text, whichever reads on the Blues colour of w: the switch at 0.72 keeps a
   * contrast ratio of at least 4.5 (WCAG AA) on every colour of the scale. */
  const inkOn = (w) => (w > 0.72 ? "#fff" : "#000");

  /** Softmax of an array; -Infinity entries get probability exactly 0. All -Infinity: NaNs. */
  function softmax(z) {
    let m = -Infinity;
    for (const v of z) if (v > m) m = v;
    const out = new Float64Array(z.length);
    if (m === -Infinity) return out.fill(NaN);
    let s = 0;
    for (let i = 0; i < z.length; i++) {
      out[i] = z[i] === -Infinity ? 0 : Math.exp(z[i] - m);
      s += out[i];
    }
    for (let i = 0; i < z.length; i++) out[i] /= s;
    return out;
  }

  /** A seeded generator of uniform numbers in [0, 1) (mulberry32; 32-bit state). */
  function seededRandom(seed) {
    let a = seed >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  /** Create an element: el("div", {class: "x"}, [children or strings]). */
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    for (const child of children || []) {
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function svg(tag, attrs, children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    for (const child of children || []) {
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }
  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
  }

  /** Fixed-point text of x, with a true minus sign and "-0.00" shown as "0.00". */
  function fmt(x, digits) {
    if (!Number.isFinite(x)) return Number.isNaN(x) ? "NaN" : x > 0 ? "∞" : "−∞";
    let s = x.toFixed(digits);
    if (/^-0\.?0*$/.test(s)) s = s.slice(1);
    return s.replace("-", "−");
  }

  /** A character as it reads in a box: space, newline and tab made visible. */
  function showChar(c) {
    if (c === " ") return "␣";
    if (c === "\n") return "↵";
    if (c === "\t") return "⇥";
    return c;
  }

  /** A horizontal 0-1 colour bar for the Blues scale, as an SVG element. */
  function colorbar(width, label) {
    const h = 10;
    const steps = 50;
    const children = [];
    for (let i = 0; i < steps; i++) {
      children.push(
        svg("rect", {
          x: (i * width) / steps, y: 0, width: width / steps + 0.5, height: h,
          fill: blues((i + 0.5) / steps),
        })
      );
    }
    children.push(svg("rect", { x: 0, y: 0, width, height: h, fill: "none", stroke: "#888" }));
    for (const v of [0, 0.5, 1]) {
      children.push(svg("text", {
        x: v * width, y: h + 12, "text-anchor": v === 0 ? "start" : v === 1 ? "end" : "middle",
        class: "afs-small", text: String(v),
      }));
    }
    if (label) {
      children.push(svg("text", { x: width + 8, y: h, class: "afs-small", text: label }));
    }
    return svg("svg", {
      width: width + (label ? 8 + 7 * label.length : 0), height: h + 16, class: "afs-colorbar",
      role: "img", "aria-label": `colour scale from 0 to 1${label ? ": " + label : ""}`,
    }, children);
  }

  const CSS = `
.afs-widget{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;font-size:14px;
  line-height:1.4;color:inherit;border:1px solid #ccc;border-radius:6px;padding:10px 12px;
  margin:0.5em 0 1em;max-width:100%;overflow-x:auto;box-sizing:border-box}
.afs-widget *{box-sizing:border-box}
.afs-widget h4{margin:0 0 6px;font-size:15px}
.afs-row{display:flex;flex-wrap:wrap;gap:10px 18px;align-items:center;margin:6px 0}
.afs-col{display:flex;flex-direction:column;gap:4px}
.afs-widget label{display:inline-flex;gap:6px;align-items:center}
.afs-widget input[type=range]{width:180px}
.afs-widget input[type=number]{width:5em}
.afs-widget textarea{width:100%;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;
  font-size:14px;padding:4px 6px}
.afs-widget button{padding:3px 10px;cursor:pointer}
.afs-small{font-size:11px;fill:currentColor}
.afs-mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace}
.afs-readout{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;white-space:pre-wrap}
.afs-message{color:#b00020;font-weight:600;min-height:1.4em}
.afs-message:empty{display:none}
.afs-chars{display:flex;flex-wrap:wrap;gap:2px;margin:6px 0}
.afs-char{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;min-width:1.45em;
  text-align:center;padding:2px 1px;border:1px solid #bbb;border-radius:3px;cursor:pointer;
  background:#fff;color:#111}
.afs-char.afs-selected{outline:2px solid #D55E00;outline-offset:1px}
.afs-char.afs-future{color:#555;background:#eee;border-style:dashed}
.afs-generated{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;white-space:pre-wrap;
  border-left:3px solid #ccc;padding:4px 8px;min-height:2.8em}
.afs-generated .afs-prompt{opacity:0.6}
.afs-cell{cursor:pointer}
.afs-note{font-size:12px;opacity:0.8}
`;
  /** Put the style sheet into the document once. */
  function ensureStyle() {
    if (document.getElementById("afs-style")) return;
    const style = el("style", { id: "afs-style" });
    style.textContent = CSS;
    document.head.append(style);
  }

  /** Run fn when the document is ready (inline scripts may run before their element exists). */
  function ready(fn) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", fn);
    else fn();
  }

  /** Call fn(element) once the element with this id is in the document. A notebook may run an
   * output's script before the output is attached (JupyterLab renders outputs off-screen first),
   * so look next to the calling script too, then retry for a few seconds. */
  function mount(id, fn, script) {
    let tries = 0;
    const attempt = () => {
      const near = script && script.parentNode && script.parentNode.querySelector
        ? script.parentNode.querySelector(`[id="${id}"]`) : null;
      const node = document.getElementById(id) || near;
      if (node) fn(node);
      else if (tries++ < 100) setTimeout(attempt, 50);
    };
    ready(attempt);
  }

  AFS.common = {
    BLUES, RDBU, blues, rdbu, inkOn, softmax, seededRandom, el, svg, fmt, showChar, colorbar,
    ensureStyle, ready, mount,
  };
})();
