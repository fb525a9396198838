/* Attention from Scratch: the model explorer (a trained GPT running in the page).
 *
 * AFS.explorer.mount(root, payload, options) fills the element root with the controls: a text
 * box, layer and head selectors, the characters of the context coloured by the selected query's
 * attention weights (Blues, fixed 0-1 scale), the attention matrix of the selected head, the
 * next-character distribution, temperature and top-k sliders and a seeded "generate" button.
 * The selected position follows the end of the text after every edit, until the reader picks a
 * character (click, or Enter on a focused one); "follow the last character" goes back to that.
 * The number fields accept whole numbers in their stated range only, and say so in the page.
 * payload is the object helpers.export.export_gpt wrote (globalThis.AFS_GPT_MODEL).
 * Needs afs-common.js and afs-gpt.js.
 */
(function () {
  "use strict";
  const AFS = (globalThis.AFS = globalThis.AFS || {});
  if (AFS.explorer) return;
  const { el, svg, fmt, blues, inkOn, showChar, colorbar, seededRandom } = AFS.common;
  const DEFAULT_TEXT = "ROMEO:\nBut, soft! what light through yonder window breaks?";
  const MAX_SEED = 4294967295; // the generator's state is 32 bits: 0 .. 2**32 - 1
  const MAX_GENERATE = 500;

  function mount(root, payload, options = {}) {
    if (typeof root === "string") root = document.getElementById(root);
    AFS.common.ensureStyle();
    root.classList.add("afs-widget", "afs-explorer");
    root.textContent = "";
    if (!payload) {
      root.append(el("p", { class: "afs-message", role: "alert",
        text: "The model file did not load, so the explorer cannot run." }));
      return null;
    }
    let model;
    let tokenizer;
    try {
      ({ model, tokenizer } = AFS.gpt.GPT.fromExport(payload));
    } catch (err) {
      root.append(el("p", { class: "afs-message", role: "alert",
        text: `The model file could not be read: ${err.message}` }));
      return null;
    }
    const cfg = model.config;
    const state = {
      text: options.text ?? DEFAULT_TEXT, layer: options.layer ?? cfg.n_layer - 1, head: 0,
      query: null, picked: null, temperature: 1.0, top_k: cfg.vocab_size, seed: options.seed ?? 42,
      logits: null, ids: null, error: null,
    };

    // ---- controls -------------------------------------------------------------------------
    const textbox = el("textarea", { rows: 3, spellcheck: "false",
      "aria-label": "text for the model to read", id: root.id ? root.id + "-text" : null });
    textbox.value = state.text;
    const counter = el("span", { class: "afs-note" });
    const message = el("p", { class: "afs-message", role: "alert", "aria-live": "polite" });
    const layerSel = el("select", { "aria-label": "layer" },
      Array.from({ length: cfg.n_layer },
        (_, i) => el("option", { value: i, text: `layer ${i}` })));
    layerSel.value = String(state.layer);
    const headSel = el("select", { "aria-label": "head" },
      Array.from({ length: cfg.n_head }, (_, i) => el("option", { value: i, text: `head ${i}` })));
    const chars = el("div", { class: "afs-chars", role: "list",
      "aria-label": "the context, one box per character" });
    const queryInfo = el("p", { class: "afs-note" });
    const matrix = el("div", {});
    const bars = el("div", {});
    const tempIn = el("input", { type: "range", min: 0.1, max: 2, step: 0.05, value: 1,
      "aria-label": "temperature" });
    const tempOut = el("span", { class: "afs-mono" });
    const topkIn = el("input", { type: "range", min: 1, max: cfg.vocab_size, step: 1,
      value: cfg.vocab_size, "aria-label": "top-k" });
    const topkOut = el("span", { class: "afs-mono" });
    const followIn = el("input", { type: "checkbox", checked: true });
    const seedIn = el("input", { type: "number", min: 0, max: MAX_SEED, step: 1,
      value: state.seed, "aria-label": "seed", style: "width:8em" }); // room for 10 digits
    const lengthIn = el("input", { type: "number", min: 1, max: MAX_GENERATE, step: 1,
      value: 120, "aria-label": "characters to generate" });
    const genBtn = el("button", { type: "button", class: "afs-generate", text: "generate" });
    const genMessage = el("p", { class: "afs-message afs-gen-message", role: "alert",
      "aria-live": "polite" });
    const genInfo = el("p", { class: "afs-note" });
    const generated = el("div", { class: "afs-generated", "aria-live": "polite" });

    root.append(
      el("label", { class: "afs-col" }, [
        el("span", {}, [`Text (at most block_size = ${cfg.block_size} characters of the model's `
          + `${cfg.vocab_size}-character vocabulary) `, counter]),
        textbox,
      ]),
      message,
      el("div", { class: "afs-row" }, [layerSel, headSel,
        el("label", {}, [followIn, "follow the last character"]),
        el("span", { class: "afs-note",
          text: "Hover over or click a character: the boxes show its attention weights." })]),
      chars,
      el("div", { class: "afs-row" }, [colorbar(160, "attention weight"), queryInfo]),
      el("div", { class: "afs-row", style: "align-items:flex-start" }, [matrix, bars]),
      el("h4", { text: "Sampling" }),
      el("div", { class: "afs-row" }, [
        el("label", {}, ["temperature", tempIn, tempOut]),
        el("label", {}, ["top-k", topkIn, topkOut]),
      ]),
      el("div", { class: "afs-row" }, [
        el("label", {}, [`seed (0 to ${MAX_SEED})`, seedIn]),
        el("label", {}, [`characters (1 to ${MAX_GENERATE})`, lengthIn]),
        genBtn,
      ]),
      genMessage,
      genInfo,
      generated,
    );

    // ---- the model ------------------------------------------------------------------------
    function validate(text) {
      if (text.length === 0) return "Type at least one character.";
      const bad = tokenizer.firstUnknown(text);
      if (bad) {
        const code = bad.char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
        return `The character "${bad.char}" (U+${code}) at position ${bad.index} is not in the ` +
          `model's vocabulary, so the model cannot read it. It knows only these ` +
          `${cfg.vocab_size} characters: ${tokenizer.chars.map(showChar).join("")}`;
      }
      const n = Array.from(text).length;
      if (n > cfg.block_size) {
        return `The text has ${n} characters, but the model reads at most block_size = ` +
          `${cfg.block_size} (it has no position embedding beyond that). Shorten it by ` +
          `${n - cfg.block_size}.`;
      }
      return null;
    }

    function run() {
      state.text = textbox.value;
      counter.textContent = `(${Array.from(state.text).length} / ${cfg.block_size})`;
      state.error = validate(state.text);
      message.textContent = state.error || "";
      root.classList.toggle("afs-invalid", Boolean(state.error));
      if (state.error) {
        state.ids = state.logits = null;
        if (generating) generating.stop = true; // its prompt is gone: stop at once
        updateButton();
        drawAll();
        return;
      }
      state.ids = tokenizer.encode(state.text);
      state.logits = model.forward(state.ids, { need_weights: true });
      state.weights = model.blocks.map((b) => b.attn.last_weights);
      if (state.picked !== null && state.picked >= state.ids.length) follow(true);
      state.query = state.picked ?? state.ids.length - 1;
      updateButton();
      drawAll();
    }

    /** Follow the end of the text (true), or keep the position the reader picked (false). */
    function follow(on) {
      followIn.checked = on;
      if (on) state.picked = null;
    }

    /** Show position t; a pick (click, Enter) also keeps it there while the text is edited. */
    function select(t, pick) {
      if (pick) {
        state.picked = t;
        follow(false);
      }
      if (state.query !== t) {
        state.query = t;
        drawAll();
      }
    }

    /** A whole number within [lo, hi] from a number field, or the message saying what is wrong. */
    function readInt(input, name, lo, hi) {
      const raw = input.value.trim();
      const range = `a whole number from ${lo} to ${hi}`;
      if (raw === "") {
        return { error: input.validity && input.validity.badInput
          ? `The ${name} must be ${range}; what is typed is not a number.`
          : `The ${name} is empty: type ${range}.` };
      }
      const v = Number(raw);
      if (!Number.isInteger(v) || v < lo || v > hi) {
        return { error: `The ${name} must be ${range}; got ${raw}.` };
      }
      return { value: v };
    }

    function readNumbers() {
      const seed = readInt(seedIn, "seed", 0, MAX_SEED);
      const n = readInt(lengthIn, "number of characters", 1, MAX_GENERATE);
      const errors = [seed.error, n.error].filter(Boolean);
      seedIn.setAttribute("aria-invalid", String(Boolean(seed.error)));
      lengthIn.setAttribute("aria-invalid", String(Boolean(n.error)));
      genMessage.textContent = errors.join(" ");
      return errors.length ? null : { seed: seed.value, n: n.value };
    }

    /** The button generates when text and numbers are valid, and can always stop a run. */
    function updateButton() {
      const numbers = readNumbers();
      genBtn.disabled = !generating && (Boolean(state.error) || numbers === null);
      genBtn.textContent = generating ? "stop" : "generate";
    }

    // ---- drawing --------------------------------------------------------------------------
    function drawAll() {
      drawChars();
      drawMatrix();
      drawBars();
    }

    function drawChars() {
      const focused = chars.contains(document.activeElement)
        ? Number(document.activeElement.dataset.pos) : null;
      chars.textContent = "";
      queryInfo.textContent = "";
      if (!state.ids) return;
      const w = state.weights[state.layer][state.head][state.query];
      Array.from(state.text).forEach((c, t) => {
        const weight = t <= state.query ? w[t] : null;
        const box = el("span", {
          class: "afs-char" + (t === state.query ? " afs-selected" : "") +
            (weight === null ? " afs-future" : ""),
          role: "listitem", tabindex: 0, "data-pos": t, "data-weight": weight ?? "",
          title: weight === null ? `position ${t}: after the query, weight 0 (masked)`
            : `position ${t}: weight ${fmt(weight, 3)}`,
          text: showChar(c),
        });
        if (weight !== null) {
          box.style.background = blues(weight);
          box.style.color = inkOn(weight);
        }
        box.addEventListener("mouseenter", () => select(t, false));
        // mousedown, not click: focusing the box redraws the boxes before a click could land.
        box.addEventListener("mousedown", () => select(t, true));
        box.addEventListener("focus", () => select(t, false));
        box.addEventListener("keydown", (ev) => {
          if (ev.key === "Enter" || ev.key === " ") {
            ev.preventDefault();
            select(t, true);
          }
        });
        chars.append(box);
      });
      if (focused !== null && chars.children[focused]) chars.children[focused].focus();
      const c = state.text[state.query] ?? Array.from(state.text)[state.query];
      queryInfo.textContent = `query: position ${state.query} ("${showChar(c)}"), layer ` +
        `${state.layer}, head ${state.head}; the weights of the visible keys sum to 1`;
    }

    function drawMatrix() {
      matrix.textContent = "";
      if (!state.ids) return;
      const W = state.weights[state.layer][state.head];
      const T = W.length;
      const cell = Math.max(3, Math.min(14, Math.floor(256 / T)));
      const pad = 28;
      const size = cell * T;
      const children = [];
      for (let t = 0; t < T; t++) {
        for (let s = 0; s <= t; s++) {
          children.push(svg("rect", { x: pad + s * cell, y: pad + t * cell, width: cell,
            height: cell, fill: blues(W[t][s]) }));
        }
      }
      children.push(svg("rect", { x: pad, y: pad + state.query * cell, width: size, height: cell,
        fill: "none", stroke: "#D55E00", "stroke-width": 1.5 }));
      children.push(svg("rect", { x: pad, y: pad, width: size, height: size, fill: "none",
        stroke: "#888" }));
      children.push(svg("text", { x: pad + size / 2, y: 12, "text-anchor": "middle",
        class: "afs-small", text: "key position" }));
      children.push(svg("text", { x: 10, y: pad + size / 2, "text-anchor": "middle",
        class: "afs-small", transform: `rotate(-90 10 ${pad + size / 2})`,
        text: "query position" }));
      for (const t of [0, T - 1]) {
        children.push(svg("text", { x: pad + (t + 0.5) * cell, y: pad - 4, "text-anchor": "middle",
          class: "afs-small", text: String(t) }));
        children.push(svg("text", { x: pad - 3, y: pad + (t + 0.5) * cell + 4,
          "text-anchor": "end", class: "afs-small", text: String(t) }));
      }
      const image = svg("svg", { width: pad + size + 4, height: pad + size + 4, role: "img",
        class: "afs-matrix", "aria-label": `attention weights of layer ${state.layer}, head ` +
        `${state.head}: a ${T} by ${T} lower-triangular matrix` }, children);
      image.addEventListener("click", (ev) => {
        const box = image.getBoundingClientRect();
        const t = Math.floor((ev.clientY - box.top - pad) / cell);
        if (t >= 0 && t < T) select(t, true);
      });
      matrix.append(el("div", { class: "afs-note", text: "attention weights (rows: queries)" }),
        image);
    }

    function currentProbs() {
      const row = state.logits[state.query];
      return AFS.gpt.GPT.nextTokenProbs(row, {
        temperature: state.temperature,
        top_k: state.top_k >= cfg.vocab_size ? null : state.top_k,
      });
    }

    function drawBars() {
      bars.textContent = "";
      if (!state.ids) return;
      const probs = currentProbs();
      state.probs = probs;
      const order = Array.from(probs.keys()).sort((a, b) => probs[b] - probs[a]).slice(0, 12);
      const rowH = 17;
      const labelW = 34;
      const width = 220;
      const actual = state.ids[state.query + 1];
      const children = [];
      order.forEach((i, r) => {
        const y = r * rowH;
        children.push(svg("text", { x: labelW - 6, y: y + 12, "text-anchor": "end",
          class: "afs-small afs-mono", text: `'${showChar(tokenizer.chars[i])}'` }));
        children.push(svg("rect", { x: labelW, y: y + 2, width: width, height: rowH - 4,
          fill: "none", stroke: "#ddd" }));
        children.push(svg("rect", { x: labelW, y: y + 2, width: probs[i] * width,
          height: rowH - 4, fill: i === actual ? "#009E73" : "#0072B2", class: "afs-bar",
          "data-char": tokenizer.chars[i], "data-p": probs[i] }));
        children.push(svg("text", { x: labelW + width + 4, y: y + 12, class: "afs-small",
          text: fmt(probs[i], 3) }));
      });
      const h = order.length * rowH;
      for (const v of [0, 0.5, 1]) {
        children.push(svg("text", { x: labelW + v * width, y: h + 12, "text-anchor": "middle",
          class: "afs-small", text: String(v) }));
      }
      const c = Array.from(state.text)[state.query];
      const next = actual === undefined ? "" : ` (green: the text's actual next character)`;
      bars.append(
        el("div", { class: "afs-note", text: `next character after position ${state.query} ` +
          `("${showChar(c)}"): the 12 most likely, probability on a 0-1 scale${next}` }),
        svg("svg", { width: labelW + width + 44, height: h + 16, role: "img", class: "afs-bars",
          "aria-label": "bar chart of the next-character probabilities" }, children)
      );
    }

    // ---- sampling ---------------------------------------------------------------------------
    let generating = null;
    function generate() {
      if (generating) {
        generating.stop = true;
        return;
      }
      const numbers = readNumbers();
      if (!state.ids || numbers === null) return;
      const { seed, n } = numbers;
      const random = seededRandom(seed);
      const opts = { temperature: state.temperature,
        top_k: state.top_k >= cfg.vocab_size ? null : state.top_k, random };
      let idx = [...state.ids];
      generated.textContent = "";
      const prompt = el("span", { class: "afs-prompt", text: state.text });
      const out = el("span", { class: "afs-output" });
      generated.append(prompt, out);
      genInfo.textContent = `seed ${seed}, temperature ${fmt(opts.temperature, 2)}, top-k ` +
        `${opts.top_k ?? "off"}: the same settings give the same text in this page (its own ` +
        `seeded generator, not PyTorch's)`;
      const job = { stop: false, count: 0 };
      generating = job;
      updateButton();
      const step = () => {
        if (job.stop || job.count >= n) {
          generating = null;
          updateButton();
          root.dataset.generated = out.textContent;
          return;
        }
        const next = model.sampleNext(idx, opts);
        idx.push(next);
        out.textContent += tokenizer.chars[next];
        job.count++;
        setTimeout(step, 15);
      };
      step();
    }

    // ---- wiring -----------------------------------------------------------------------------
    textbox.addEventListener("input", run);
    chars.addEventListener("mouseleave", () => {
      if (state.ids) select(state.picked ?? state.ids.length - 1, false);
    });
    layerSel.addEventListener("change", () => {
      state.layer = Number(layerSel.value);
      drawAll();
    });
    headSel.addEventListener("change", () => {
      state.head = Number(headSel.value);
      drawAll();
    });
    const readSliders = () => {
      state.temperature = Number(tempIn.value);
      state.top_k = Number(topkIn.value);
      tempOut.textContent = fmt(state.temperature, 2);
      topkOut.textContent = state.top_k >= cfg.vocab_size ? `${state.top_k} (off)`
        : String(state.top_k);
    };
    tempIn.addEventListener("input", () => {
      readSliders();
      drawBars();
    });
    topkIn.addEventListener("input", () => {
      readSliders();
      drawBars();
    });
    genBtn.addEventListener("click", generate);
    seedIn.addEventListener("input", updateButton);
    lengthIn.addEventListener("input", updateButton);
    followIn.addEventListener("change", () => {
      follow(followIn.checked);
      if (state.ids) select(state.picked ?? state.ids.length - 1, false);
    });
    readSliders();
    run();

    const api = { model, tokenizer, state, run, generate, select,
      setText(text) { textbox.value = text; run(); },
      probs: () => (state.ids ? Array.from(currentProbs()) : null) };
    root.afsExplorer = api;
    return api;
  }

  AFS.explorer = { mount, DEFAULT_TEXT, MAX_SEED, MAX_GENERATE };
})();
