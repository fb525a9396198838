/* Attention from Scratch: the interactive figures of chapters 2, 4 and 6 (and the explorer's
 * notebook entry point). Each AFS.widgets.NAME(id, data) fills the element with that id, using
 * the numbers helpers/interactive.py passed in data, and leaves an object on the element
 * (element.afsWidget) whose state the browser test reads. Needs afs-common.js.
 */
(function () {
  "use strict";
  const AFS = (globalThis.AFS = globalThis.AFS || {});
  if (AFS.widgets) return;
  const { el, svg, fmt, blues, inkOn, rdbu, softmax } = AFS.common;

  function rootOf(id) {
    const root = typeof id === "string" ? document.getElementById(id) : id;
    AFS.common.ensureStyle();
    root.classList.add("afs-widget");
    root.textContent = "";
    return root;
  }

  // ---- chapter 2: click the mask --------------------------------------------------------------
  /** Weights softmax(scores masked to -inf where !allowed) and outputs weights @ values. */
  function maskedAttention(scores, allowed, values) {
    const T = scores.length;
    const C = values[0].length;
    const weights = [];
    const out = [];
    for (let t = 0; t < T; t++) {
      const w = softmax(scores[t].map((s, j) => (allowed[t][j] ? s : -Infinity)));
      weights.push(Array.from(w));
      const row = new Array(C).fill(0);
      for (let j = 0; j < T; j++) for (let c = 0; c < C; c++) row[c] += w[j] * values[j][c];
      out.push(row);
    }
    return { weights, out };
  }

  function causalMask(id, data) {
    const root = rootOf(id);
    const { scores, values, labels, columns } = data;
    const T = scores.length;
    const causal = () => scores.map((_, t) => scores.map((__, j) => j <= t));
    const state = { allowed: causal() };
    const reference = maskedAttention(scores, causal(), values);
    const grids = el("div", { class: "afs-row", style: "align-items:flex-start" });
    const note = el("p", { class: "afs-note" });
    const btnCausal = el("button", { type: "button", text: "causal mask" });
    const btnNone = el("button", { type: "button", text: "no mask (encoder)" });
    root.append(
      el("p", { class: "afs-note", text: "Click a cell of the mask to hide that key from that " +
        "query (−∞ before the softmax) or to show it again (0). Rows are queries, columns keys." }),
      el("div", { class: "afs-row" }, [btnCausal, btnNone]),
      grids, note,
    );

    function table(title, cells, cellFn, colLabels) {
      const head = el("tr", {}, [el("th", {}), ...colLabels.map((c) => el("th", {
        class: "afs-small", style: "padding:0 3px;font-weight:normal", text: c }))]);
      const rows = cells.map((row, t) => el("tr", {}, [
        el("th", { class: "afs-small", style: "padding:0 4px;text-align:right;font-weight:normal",
          text: labels[t] }),
        ...row.map((v, j) => cellFn(v, t, j)),
      ]));
      return el("div", { class: "afs-col" }, [
        el("div", { class: "afs-note", text: title }),
        el("table", { style: "border-collapse:collapse" }, [el("tbody", {}, [head, ...rows])]),
      ]);
    }
    const tdStyle = "border:1px solid #bbb;padding:2px 4px;text-align:center;min-width:2.6em;" +
      "font-family:ui-monospace,monospace;font-size:12px";

    function draw() {
      const { weights, out } = maskedAttention(scores, state.allowed, values);
      state.weights = weights;
      state.out = out;
      state.changed = out.map((row, t) => row.some((v, c) =>
        !(Math.abs(v - reference.out[t][c]) < 1e-12)));
      grids.textContent = "";
      grids.append(
        table("mask M (click)", state.allowed, (a, t, j) => {
          const td = el("td", { class: "afs-cell", style: tdStyle +
            (a ? ";background:#fff;color:#111" : ";background:#595959;color:#fff"),
            text: a ? "0" : "−∞", "data-row": t, "data-col": j, role: "button", tabindex: 0,
            "aria-label": `query ${labels[t]}, key ${labels[j]}: ${a ? "visible" : "hidden"}` });
          const toggle = () => {
            state.allowed[t][j] = !state.allowed[t][j];
            draw();
          };
          td.addEventListener("click", toggle);
          td.addEventListener("keydown", (ev) => {
            if (ev.key === "Enter" || ev.key === " ") {
              ev.preventDefault();
              toggle();
            }
          });
          return td;
        }, labels),
        table("weights softmax(scores + M)", weights, (w) => el("td", {
          style: tdStyle + (Number.isNaN(w) ? ";background:#eee;color:#b00020"
            : `;background:${blues(w)};color:${inkOn(w)}`),
          text: Number.isNaN(w) ? "—" : fmt(w, 2) }), labels),
        table("output rows: weights @ values", out, (v, t) => el("td", {
          style: tdStyle + (state.changed[t] ? ";border-left:3px solid #D55E00" : ""),
          text: Number.isNaN(v) ? "—" : fmt(v, 2) }), columns),
      );
      const empty = weights.map((w, t) => (Number.isNaN(w[0]) ? labels[t] : null))
        .filter((x) => x !== null);
      const changed = state.changed.filter(Boolean).length;
      note.textContent = (changed ? `${changed} output row(s) differ from the causal mask's ` +
        `(marked). ` : "The mask is causal: each row averages itself and its past. ") +
        (empty.length ? `Row(s) ${empty.join(", ")} see no key at all: a softmax over nothing ` +
        `is undefined (PyTorch gives NaN), so they have no weights.` : "");
    }
    btnCausal.addEventListener("click", () => {
      state.allowed = causal();
      draw();
    });
    btnNone.addEventListener("click", () => {
      state.allowed = scores.map(() => scores.map(() => true));
      draw();
    });
    draw();
    root.afsWidget = { state, toggle(t, j) { state.allowed[t][j] = !state.allowed[t][j]; draw(); },
      T };
    return root.afsWidget;
  }

  // ---- chapter 4: softmax under a scale slider --------------------------------------------
  /** p = softmax(s z), its largest entry, entropy (nats) and ||diag(p) - p p^T||_F. */
  function softmaxStats(z, s) {
    const p = softmax(z.map((v) => s * v));
    let pmax = 0;
    let entropy = 0;
    for (const v of p) {
      pmax = Math.max(pmax, v);
      if (v > 0) entropy -= v * Math.log(v);
    }
    let frob = 0;
    for (let i = 0; i < p.length; i++) {
      for (let j = 0; j < p.length; j++) frob += ((i === j ? p[i] : 0) - p[i] * p[j]) ** 2;
    }
    return { p: Array.from(p), pmax, entropy, jacobian_norm: Math.sqrt(frob) };
  }

  function softmaxTemperature(id, data) {
    const root = rootOf(id);
    const { logits, labels, min_scale: lo, max_scale: hi } = data;
    const toScale = (u) => lo * (hi / lo) ** (u / 1000);
    const toU = (s) => Math.round((1000 * Math.log(s / lo)) / Math.log(hi / lo));
    const state = { scale: data.scale };
    const slider = el("input", { type: "range", min: 0, max: 1000, step: 1,
      value: toU(data.scale), "aria-label": "scale s (inverse temperature), logarithmic" });
    const scaleOut = el("span", { class: "afs-mono" });
    const bars = el("div", {});
    const curve = el("div", {});
    const readout = el("div", { class: "afs-readout" });
    root.append(
      el("div", { class: "afs-row" }, [el("label", {}, ["scale s", slider, scaleOut])]),
      el("div", { class: "afs-row", style: "align-items:flex-start" }, [bars, curve]),
      readout,
    );
    // The whole sweep, for the small plot (61 scales, as the chapter's sweep).
    const sweep = Array.from({ length: 61 }, (_, i) => {
      const s = lo * (hi / lo) ** (i / 60);
      return { s, ...softmaxStats(logits, s) };
    });

    function drawBars(stats) {
      const w = 26;
      const gap = 8;
      const h = 120;
      const top = 16;
      const left = 40;
      const children = [];
      for (const v of [0, 0.5, 1]) {
        const y = top + h - v * h;
        children.push(svg("line", { x1: left - 3, x2: left + logits.length * (w + gap), y1: y,
          y2: y, stroke: "#ddd" }));
        children.push(svg("text", { x: left - 6, y: y + 4, "text-anchor": "end",
          class: "afs-small", text: String(v) }));
      }
      stats.p.forEach((p, i) => {
        const x = left + i * (w + gap) + gap / 2;
        children.push(svg("rect", { x, y: top + h - p * h, width: w, height: p * h,
          fill: "#0072B2", class: "afs-bar", "data-p": p }));
        children.push(svg("text", { x: x + w / 2, y: top + h + 13, "text-anchor": "middle",
          class: "afs-small", text: labels[i] }));
        children.push(svg("text", { x: x + w / 2, y: top + h - p * h - 3,
          "text-anchor": "middle", class: "afs-small", text: fmt(p, 2) }));
      });
      children.push(svg("text", { x: 9, y: top + h / 2, "text-anchor": "middle",
        class: "afs-small", transform: `rotate(-90 9 ${top + h / 2})`, text: "probability" }));
      bars.textContent = "";
      bars.append(svg("svg", { width: left + logits.length * (w + gap) + 6, height: top + h + 20,
        role: "img", "aria-label": "bar chart of softmax(s z), fixed 0-1 axis" }, children));
    }

    function drawCurve() {
      const W = 230;
      const H = 120;
      const left = 30;
      const top = 8;
      const X = (s) => left + (W * Math.log(s / lo)) / Math.log(hi / lo);
      const Y = (v) => top + H - Math.min(1, Math.max(0, v)) * H;
      const path = (key) => sweep.map((d, i) => `${i ? "L" : "M"}${X(d.s).toFixed(1)},` +
        `${Y(d[key]).toFixed(1)}`).join("");
      const children = [
        svg("rect", { x: left, y: top, width: W, height: H, fill: "none", stroke: "#bbb" }),
        svg("path", { d: path("pmax"), fill: "none", stroke: "#111", "stroke-width": 1.5 }),
        svg("path", { d: path("jacobian_norm"), fill: "none", stroke: "#111",
          "stroke-dasharray": "4 3", "stroke-width": 1.5 }),
        svg("line", { x1: X(state.scale), x2: X(state.scale), y1: top, y2: top + H,
          stroke: "#888", "stroke-width": 1, class: "afs-marker" }),
      ];
      for (const v of [0, 1]) {
        children.push(svg("text", { x: left - 5, y: Y(v) + 4, "text-anchor": "end",
          class: "afs-small", text: String(v) }));
      }
      for (let e = Math.ceil(Math.log10(lo)); e <= Math.floor(Math.log10(hi)); e++) {
        children.push(svg("text", { x: X(10 ** e), y: top + H + 13, "text-anchor": "middle",
          class: "afs-small", text: String(10 ** e) }));
      }
      children.push(svg("text", { x: left + W / 2, y: top + H + 26, "text-anchor": "middle",
        class: "afs-small", text: "scale s (log axis)" }));
      children.push(svg("text", { x: left + 6, y: top + 12, class: "afs-small",
        text: "— p_max   - - ‖J‖_F" }));
      curve.textContent = "";
      curve.append(svg("svg", { width: left + W + 16, height: top + H + 30, role: "img",
        "aria-label": "p_max and the Jacobian norm against the scale" }, children));
    }

    function draw() {
      const stats = softmaxStats(logits, state.scale);
      Object.assign(state, stats);
      scaleOut.textContent = fmt(state.scale, 2);
      drawBars(stats);
      drawCurve();
      readout.textContent =
        `scale s = ${fmt(state.scale, 2)}   (temperature 1/s = ${fmt(1 / state.scale, 3)})\n` +
        `p_max = ${fmt(stats.pmax, 3)}   entropy = ${fmt(stats.entropy, 3)} nats ` +
        `(uniform: log ${logits.length} = ${fmt(Math.log(logits.length), 3)})\n` +
        `gradient size ‖J‖_F = ${fmt(stats.jacobian_norm, 4)}   ` +
        `bound 4(1 − p_max) = ${fmt(4 * (1 - stats.pmax), 4)}`;
    }
    slider.addEventListener("input", () => {
      state.scale = toScale(Number(slider.value));
      draw();
    });
    draw();
    root.afsWidget = { state, setScale(s) { state.scale = s; slider.value = toU(s); draw(); },
      stats: softmaxStats };
    return root.afsWidget;
  }

  // ---- chapter 6: two positions and their encodings ---------------------------------------
  /** helpers.positional.sinusoidal_encoding's row pos: sin, cos interleaved over dimensions. */
  function sinusoidal(pos, d_model, base) {
    const pe = new Float64Array(d_model);
    for (let i = 0; i < d_model; i += 2) {
      const omega = base ** (-i / d_model);
      pe[i] = Math.sin(pos * omega);
      pe[i + 1] = Math.cos(pos * omega);
    }
    return pe;
  }
  /** The common mistake (chapter 6's split_encoding): d_model frequencies base^(-2j/d_model),
   * sine at even positions, cosine at odd positions. */
  function splitOverPositions(pos, d_model, base) {
    const pe = new Float64Array(d_model);
    for (let j = 0; j < d_model; j++) {
      const angle = pos / base ** ((2 * j) / d_model);
      pe[j] = pos % 2 === 0 ? Math.sin(angle) : Math.cos(angle);
    }
    return pe;
  }
  const dot = (a, b) => a.reduce((s, v, i) => s + v * b[i], 0);

  function positionalEncoding(id, data) {
    const root = rootOf(id);
    const { T, d_model } = data;
    const state = { p: data.p, q: data.q, mistake: data.mistake };
    const encode = (pos) => (state.mistake ? splitOverPositions(pos, d_model, data.mistake_base)
      : sinusoidal(pos, d_model, data.base));
    const pIn = el("input", { type: "range", min: 0, max: T - 1, step: 1, value: state.p,
      "aria-label": "position p" });
    const qIn = el("input", { type: "range", min: 0, max: T - 1, step: 1, value: state.q,
      "aria-label": "position q" });
    const pOut = el("span", { class: "afs-mono" });
    const qOut = el("span", { class: "afs-mono" });
    const name = `${root.id}-mode`;
    const radio = (value, text, checked) => {
      const input = el("input", { type: "radio", name, value, checked });
      input.addEventListener("change", () => {
        state.mistake = value === "mistake";
        draw();
      });
      return el("label", {}, [input, text]);
    };
    const strips = el("div", {});
    const readout = el("div", { class: "afs-readout" });
    const plot = el("div", {});
    root.append(
      el("div", { class: "afs-row" }, [
        radio("correct", `correct: sin and cos over dimensions (base ${data.base})`,
          !state.mistake),
        radio("mistake", `common mistake: sin/cos over positions (base ${data.mistake_base})`,
          state.mistake),
      ]),
      el("div", { class: "afs-row" }, [el("label", {}, ["position p", pIn, pOut]),
        el("label", {}, ["position q", qIn, qOut])]),
      strips, readout, plot,
    );

    function strip(label, pe) {
      const cw = Math.max(2, Math.min(8, Math.floor(512 / d_model)));
      const children = pe.length ? Array.from(pe, (v, i) => svg("rect", { x: 52 + i * cw, y: 0,
        width: cw, height: 16, fill: rdbu(v) })) : [];
      children.push(svg("text", { x: 0, y: 12, class: "afs-small", text: label }));
      return svg("svg", { width: 56 + d_model * cw, height: 18, role: "img",
        "aria-label": `${label}: ${d_model} values between -1 and 1` }, children);
    }

    function drawPlot() {
      const W = 420;
      const H = 150;
      const left = 36;
      const top = 8;
      const kmin = -(T - 1);
      const kmax = T - 1;
      const ymax = d_model;
      const X = (k) => left + ((k - kmin) / (kmax - kmin)) * W;
      const Y = (v) => top + H / 2 - (v / ymax) * (H / 2);
      const curve = (from) => {
        const base = encode(from);
        let d = "";
        for (let pos = 0; pos < T; pos++) {
          d += `${pos ? "L" : "M"}${X(pos - from).toFixed(1)},${Y(dot(base, encode(pos)))
            .toFixed(1)}`;
        }
        return d;
      };
      const k = state.q - state.p;
      const children = [
        svg("rect", { x: left, y: top, width: W, height: H, fill: "none", stroke: "#bbb" }),
        svg("line", { x1: left, x2: left + W, y1: Y(0), y2: Y(0), stroke: "#ddd" }),
        svg("path", { d: curve(0), fill: "none", stroke: "#999", "stroke-dasharray": "4 3" }),
        svg("path", { d: curve(state.p), fill: "none", stroke: "#111", "stroke-width": 1.3 }),
        svg("circle", { cx: X(k), cy: Y(state.dot), r: 4, fill: "#D55E00",
          class: "afs-marker" }),
      ];
      for (const v of [-ymax, 0, ymax]) {
        children.push(svg("text", { x: left - 4, y: Y(v) + 4, "text-anchor": "end",
          class: "afs-small", text: String(v) }));
      }
      for (const kk of [kmin, 0, kmax]) {
        children.push(svg("text", { x: X(kk), y: top + H + 16, "text-anchor": "middle",
          class: "afs-small", text: String(kk) }));
      }
      children.push(svg("text", { x: left + W / 2, y: top + H + 29, "text-anchor": "middle",
        class: "afs-small", text: "offset k = q − p" }));
      children.push(svg("text", { x: left + 6, y: top + 12, class: "afs-small",
        text: "— PE(p)·PE(p+k), from p   - - from position 0" }));
      plot.textContent = "";
      plot.append(svg("svg", { width: left + W + 16, height: top + H + 34, role: "img",
        "aria-label": "dot product of the encodings against the offset" }, children));
    }

    function draw() {
      const a = encode(state.p);
      const b = encode(state.q);
      state.pe_p = Array.from(a);
      state.pe_q = Array.from(b);
      state.dot = dot(a, b);
      state.dot_from_0 = state.q - state.p >= 0 && state.q - state.p < T
        ? dot(encode(0), encode(state.q - state.p)) : null;
      pOut.textContent = String(state.p);
      qOut.textContent = String(state.q);
      strips.textContent = "";
      strips.append(strip(`PE(${state.p})`, a), strip(`PE(${state.q})`, b),
        el("div", { class: "afs-note", text: `one cell per dimension 0..${d_model - 1}; ` +
          "colour: −1 red, 0 white, 1 blue" }));
      const k = state.q - state.p;
      let line2;
      if (state.dot_from_0 === null) {
        line2 = "";
      } else {
        line2 = `\nsame offset from position 0: PE(0) · PE(${k}) = ${fmt(state.dot_from_0, 3)}` +
          (Math.abs(state.dot_from_0 - state.dot) < 1e-9 ? "  (equal: only the offset matters)"
            : "  (different: the dot product depends on the position, not only the offset)");
      }
      readout.textContent = `PE(${state.p}) · PE(${state.q}) = ${fmt(state.dot, 3)}` +
        `   offset k = q − p = ${k}` + line2;
      drawPlot();
    }
    pIn.addEventListener("input", () => {
      state.p = Number(pIn.value);
      draw();
    });
    qIn.addEventListener("input", () => {
      state.q = Number(qIn.value);
      draw();
    });
    draw();
    root.afsWidget = {
      state, encode,
      set(p, q, mistake) {
        state.p = p;
        state.q = q;
        state.mistake = Boolean(mistake);
        pIn.value = p;
        qIn.value = q;
        root.querySelector(`input[value=${mistake ? "mistake" : "correct"}]`).checked = true;
        draw();
      },
    };
    return root.afsWidget;
  }

  // ---- chapter 8: the explorer in a notebook --------------------------------------------------
  function explorer(id, data) {
    return AFS.explorer.mount(id, data.model, data.options || {});
  }

  AFS.widgets = {
    causalMask, maskedAttention, softmaxTemperature, softmaxStats, positionalEncoding,
    sinusoidal, splitOverPositions, explorer,
  };
})();
