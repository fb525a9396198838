/* Attention from Scratch: the book's GPT (helpers/model.py) in plain JavaScript.
 *
 * Defines globalThis.AFS.gpt. Every class and attribute has the name it has in helpers.model,
 * so a weight called "blocks.2.attn.c_attn.weight" in the PyTorch state_dict is
 * model.blocks[2].attn.c_attn.weight here. One sequence at a time (B = 1); activations are
 * arrays of T rows, each a Float64Array of C numbers. Computed in float64; the weights come
 * from helpers.export.export_gpt's file (float16 or float32).
 *
 * tests/test_browser_interactive.py runs this forward pass in Chromium and compares its logits
 * and attention weights with PyTorch's on the same weights.
 */
(function () {
  "use strict";
  const AFS = (globalThis.AFS = globalThis.AFS || {});
  if (AFS.gpt) return;

  // ---- reading helpers.export's file ------------------------------------------------------
  function halfToFloat(h) {
    const sign = h & 0x8000 ? -1 : 1;
    const e = (h >> 10) & 0x1f;
    const f = h & 0x3ff;
    if (e === 0) return sign * f * 2 ** -24;
    if (e === 31) return f ? NaN : sign * Infinity;
    return sign * (1 + f / 1024) * 2 ** (e - 15);
  }

  /** The weights of an export as {name: {shape, data: Float64Array}} (tied names share data). */
  function readWeights(payload) {
    if (!payload || payload.format !== "attention-from-scratch-gpt") {
      throw new Error("this is not a model file written by helpers.export.export_gpt");
    }
    if (payload.version !== 1) throw new Error(`unsupported model file version ${payload.version}`);
    const bin = atob(payload.data);
    const bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const view = new DataView(bytes.buffer);
    const width = { float16: 2, float32: 4 }[payload.dtype];
    if (!width) throw new Error(`unknown dtype ${payload.dtype}`);
    const flat = new Float64Array(bytes.length / width);
    for (let i = 0; i < flat.length; i++) {
      flat[i] = width === 2 ? halfToFloat(view.getUint16(2 * i, true))
        : view.getFloat32(4 * i, true);
    }
    const params = {};
    for (const { name, shape, offset } of payload.tensors) {
      const n = shape.reduce((a, b) => a * b, 1);
      if (offset < 0 || offset + n > flat.length) throw new Error(`${name} lies outside the data`);
      params[name] = { shape, data: flat.subarray(offset, offset + n) };
    }
    for (const [tied, source] of Object.entries(payload.tied || {})) params[tied] = params[source];
    return params;
  }

  function need(params, name, shape) {
    const p = params[name];
    if (!p) throw new Error(`the model file has no weight ${name}`);
    if (shape && p.shape.join(",") !== shape.join(",")) {
      throw new Error(`${name} has shape (${p.shape}), expected (${shape})`);
    }
    return p.data;
  }
  const optional = (params, name) => (params[name] ? params[name].data : null);

  // ---- the layers, named as in torch.nn / helpers.model -----------------------------------
  /** nn.Linear: y = x W^T + b, weight of shape (out_features, in_features). */
  class Linear {
    constructor(weight, bias, in_features, out_features) {
      this.weight = weight;
      this.bias = bias;
      this.in_features = in_features;
      this.out_features = out_features;
    }
    forward(x) {
      const { weight: W, bias: b, in_features: n, out_features: m } = this;
      const y = new Float64Array(m);
      for (let o = 0; o < m; o++) {
        let s = b ? b[o] : 0;
        const row = o * n;
        for (let i = 0; i < n; i++) s += W[row + i] * x[i];
        y[o] = s;
      }
      return y;
    }
  }

  /** nn.LayerNorm over the last dimension (biased variance, eps 1e-5). */
  class LayerNorm {
    constructor(weight, bias, eps = 1e-5) {
      this.weight = weight;
      this.bias = bias;
      this.eps = eps;
    }
    forward(x) {
      const C = x.length;
      let mean = 0;
      for (const v of x) mean += v;
      mean /= C;
      let variance = 0;
      for (const v of x) variance += (v - mean) ** 2;
      variance /= C;
      const inv = 1 / Math.sqrt(variance + this.eps);
      const y = new Float64Array(C);
      for (let i = 0; i < C; i++) {
        y[i] = (x[i] - mean) * inv * this.weight[i] + (this.bias ? this.bias[i] : 0);
      }
      return y;
    }
  }

  /** The error function, to float64 precision (Taylor series; continued fraction for |x| > 3). */
  function erf(x) {
    const ax = Math.abs(x);
    if (ax > 6) return Math.sign(x);
    if (ax <= 3) {
      // erf x = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))
      let term = ax;
      let sum = ax;
      for (let n = 1; n < 100; n++) {
        term *= (-ax * ax) / n;
        const add = term / (2 * n + 1);
        sum += add;
        if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
      }
      return Math.sign(x) * (2 / Math.sqrt(Math.PI)) * sum;
    }
    // erfc x = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
    let frac = ax;
    for (let n = 60; n >= 1; n--) frac = ax + n / 2 / frac;
    const erfc = Math.exp(-ax * ax) / Math.sqrt(Math.PI) / frac;
    return Math.sign(x) * (1 - erfc);
  }

  /** nn.GELU() (the exact form): x * Phi(x), Phi the standard normal distribution function. */
  class GELU {
    forward(x) {
      return x.map((v) => 0.5 * v * (1 + erf(v / Math.SQRT2)));
    }
  }

  /** nn.Embedding: row idx of the (num_embeddings, embedding_dim) table. */
  class Embedding {
    constructor(weight, num_embeddings, embedding_dim) {
      this.weight = weight;
      this.num_embeddings = num_embeddings;
      this.embedding_dim = embedding_dim;
    }
    forward(idx) {
      const C = this.embedding_dim;
      return this.weight.slice(idx * C, (idx + 1) * C);
    }
  }

  /** helpers.positional.LearnedPositionalEmbedding: one learned vector per position. */
  class LearnedPositionalEmbedding {
    constructor(weight, block_size, n_embd) {
      this.weight = weight;
      this.block_size = block_size;
      this.n_embd = n_embd;
    }
    forward(T, offset = 0) {
      if (offset + T > this.block_size) {
        throw new Error(
          `positions up to ${offset + T - 1} requested, but this model only has ` +
          `block_size=${this.block_size} positions`
        );
      }
      const C = this.n_embd;
      const rows = [];
      for (let t = offset; t < offset + T; t++) rows.push(this.weight.slice(t * C, (t + 1) * C));
      return rows;
    }
  }

  /** helpers.multihead.MultiHeadAttention (causal self-attention, fused q/k/v projection). */
  class MultiHeadAttention {
    constructor(params, prefix, config) {
      const C = config.n_embd;
      this.n_embd = C;
      this.n_head = config.n_head;
      this.head_size = C / config.n_head;
      this.causal = true;
      this.c_attn = new Linear(
        need(params, prefix + "c_attn.weight", [3 * C, C]),
        optional(params, prefix + "c_attn.bias"), C, 3 * C
      );
      this.c_proj = new Linear(
        need(params, prefix + "c_proj.weight", [C, C]), optional(params, prefix + "c_proj.bias"),
        C, C
      );
      this.last_weights = null; // [n_head][T_q] rows of T_k weights, when need_weights
    }
    forward(x, need_weights = false) {
      const T = x.length;
      const { n_embd: C, n_head, head_size: hs } = this;
      const qkv = x.map((row) => this.c_attn.forward(row)); // (T, 3C): [q | k | v]
      const scale = 1 / Math.sqrt(hs);
      const y = Array.from({ length: T }, () => new Float64Array(C)); // merged heads
      const weights = [];
      for (let h = 0; h < n_head; h++) {
        const off = h * hs; // head h owns channels h*hs .. (h+1)*hs - 1 (the view in _split_heads)
        const head_weights = [];
        for (let t = 0; t < T; t++) {
          const scores = new Float64Array(T).fill(-Infinity);
          for (let s = 0; s <= t; s++) { // causal: keys 0..t only
            let dot = 0;
            for (let d = 0; d < hs; d++) dot += qkv[t][off + d] * qkv[s][C + off + d];
            scores[s] = dot * scale;
          }
          const w = AFS.common.softmax(scores);
          for (let s = 0; s <= t; s++) {
            for (let d = 0; d < hs; d++) y[t][off + d] += w[s] * qkv[s][2 * C + off + d];
          }
          head_weights.push(w);
        }
        weights.push(head_weights);
      }
      this.last_weights = need_weights ? weights : null;
      return y.map((row) => this.c_proj.forward(row));
    }
  }

  /** helpers.model.FeedForward: c_fc, GELU, c_proj. */
  class FeedForward {
    constructor(params, prefix, config) {
      const C = config.n_embd;
      this.c_fc = new Linear(
        need(params, prefix + "c_fc.weight", [4 * C, C]), optional(params, prefix + "c_fc.bias"),
        C, 4 * C
      );
      this.gelu = new GELU();
      this.c_proj = new Linear(
        need(params, prefix + "c_proj.weight", [C, 4 * C]),
        optional(params, prefix + "c_proj.bias"), 4 * C, C
      );
    }
    forward(x) {
      return this.c_proj.forward(this.gelu.forward(this.c_fc.forward(x)));
    }
  }

  const add = (a, b) => a.map((v, i) => v + b[i]);

  /** helpers.model.Block: pre-LN; x + attn(ln_1(x)), then x + mlp(ln_2(x)). */
  class Block {
    constructor(params, prefix, config) {
      const C = config.n_embd;
      this.ln_1 = new LayerNorm(
        need(params, prefix + "ln_1.weight", [C]), optional(params, prefix + "ln_1.bias")
      );
      this.attn = new MultiHeadAttention(params, prefix + "attn.", config);
      this.ln_2 = new LayerNorm(
        need(params, prefix + "ln_2.weight", [C]), optional(params, prefix + "ln_2.bias")
      );
      this.mlp = new FeedForward(params, prefix + "mlp.", config);
    }
    forward(x, need_weights = false) {
      const a = this.attn.forward(x.map((row) => this.ln_1.forward(row)), need_weights);
      x = x.map((row, t) => add(row, a[t]));
      return x.map((row) => add(row, this.mlp.forward(this.ln_2.forward(row))));
    }
  }

  /** helpers.tokenizer.CharTokenizer. */
  class CharTokenizer {
    constructor(chars) {
      this.chars = Array.from(chars);
      this.stoi = new Map(this.chars.map((c, i) => [c, i]));
    }
    get vocab_size() {
      return this.chars.length;
    }
    /** The first character not in the vocabulary, as {char, index}, or null. */
    firstUnknown(text) {
      let index = 0;
      for (const c of text) {
        if (!this.stoi.has(c)) return { char: c, index };
        index++;
      }
      return null;
    }
    encode(text) {
      const bad = this.firstUnknown(text);
      if (bad) {
        const code = bad.char.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
        throw new Error(
          `character '${bad.char}' (U+${code}) at index ${bad.index} is not in the ` +
          `${this.vocab_size}-character vocabulary`
        );
      }
      return Array.from(text, (c) => this.stoi.get(c));
    }
    decode(ids) {
      return ids.map((i) => this.chars[i]).join("");
    }
  }

  /** helpers.model.GPT (inference only: no dropout, no loss, no KV cache). */
  class GPT {
    constructor(config, params) {
      this.config = config;
      const { vocab_size, block_size, n_layer, n_embd: C } = config;
      if (C % config.n_head) throw new Error("n_embd is not divisible by n_head");
      this.tok_emb = new Embedding(need(params, "tok_emb.weight", [vocab_size, C]), vocab_size, C);
      this.pos_emb = new LearnedPositionalEmbedding(
        need(params, "pos_emb.weight", [block_size, C]), block_size, C
      );
      this.blocks = [];
      for (let i = 0; i < n_layer; i++) this.blocks.push(new Block(params, `blocks.${i}.`, config));
      this.ln_f = new LayerNorm(need(params, "ln_f.weight", [C]), optional(params, "ln_f.bias"));
      // Weight tying: the LM head's matrix is the token embedding's (the same array).
      this.lm_head = new Linear(need(params, "lm_head.weight", [vocab_size, C]), null, C,
        vocab_size);
    }

    /** The model and its tokenizer from the object helpers.export.export_gpt wrote. */
    static fromExport(payload) {
      const model = new GPT(payload.config, readWeights(payload));
      model.description = payload.description || "";
      return { model, tokenizer: new CharTokenizer(payload.chars) };
    }

    /** Logits (T rows of vocab_size) for token ids idx (1-D); need_weights keeps each layer's
     * attention weights in blocks[i].attn.last_weights ([head][query][key]). */
    forward(idx, { need_weights = false } = {}) {
      const { block_size, vocab_size } = this.config;
      const T = idx.length;
      if (T === 0) throw new Error("the context is empty");
      if (T > block_size) {
        throw new Error(
          `context of ${T} tokens is longer than block_size=${block_size}; ` +
          `crop it to the last ${block_size} tokens`
        );
      }
      for (const i of idx) {
        if (!(Number.isInteger(i) && i >= 0 && i < vocab_size)) {
          throw new Error(`token ids must be in 0..${vocab_size - 1}, got ${i}`);
        }
      }
      const pos = this.pos_emb.forward(T);
      let x = idx.map((id, t) => add(this.tok_emb.forward(id), pos[t])); // (T, C)
      for (const block of this.blocks) x = block.forward(x, need_weights);
      return x.map((row) => this.lm_head.forward(this.ln_f.forward(row))); // (T, vocab_size)
    }

    /** The distribution generate() samples from, for one row of logits. */
    static nextTokenProbs(logits, { temperature = 1.0, top_k = null } = {}) {
      if (!(temperature > 0)) throw new Error(`temperature must be positive, got ${temperature}`);
      let z = Array.from(logits, (v) => v / temperature);
      if (top_k !== null && top_k < z.length) {
        const kth = [...z].sort((a, b) => b - a)[top_k - 1];
        z = z.map((v) => (v < kth ? -Infinity : v)); // ties with the k-th are kept, as in torch
      }
      return AFS.common.softmax(z);
    }

    /** Append max_new_tokens sampled ids to idx (as helpers.model.GPT.generate: the context is
     * cropped to the last block_size tokens). random() gives uniform numbers in [0, 1). */
    generate(idx, max_new_tokens, { temperature = 1.0, top_k = null, random = Math.random } = {}) {
      idx = [...idx];
      for (let n = 0; n < max_new_tokens; n++) idx.push(this.sampleNext(idx, { temperature, top_k,
        random }));
      return idx;
    }

    /** One step of generate(): sample the id that follows idx. */
    sampleNext(idx, { temperature = 1.0, top_k = null, random = Math.random } = {}) {
      const context = idx.slice(-this.config.block_size);
      const logits = this.forward(context);
      const probs = GPT.nextTokenProbs(logits[logits.length - 1], { temperature, top_k });
      return sampleIndex(probs, random());
    }
  }

  /** Inverse-CDF sampling: the first index whose cumulative probability exceeds u. */
  function sampleIndex(probs, u) {
    let c = 0;
    let last = 0;
    for (let i = 0; i < probs.length; i++) {
      if (probs[i] > 0) last = i;
      c += probs[i];
      if (u < c) return i;
    }
    return last; // u within rounding of 1
  }

  AFS.gpt = {
    readWeights, halfToFloat, erf, Linear, LayerNorm, GELU, Embedding, LearnedPositionalEmbedding,
    MultiHeadAttention, FeedForward, Block, CharTokenizer, GPT, sampleIndex,
  };
})();
