// A greedy mfsched policy in JavaScript, built with componentize-js against
// the same WIT as the Rust and Python policies (`wit/scheduler.wit`, world
// `policy`).
//
// Greedy coordinate ascent on one table of predictions: the host serves every
// model's predicted throughput for every local configuration in one
// `predict-table` call; starting from the running configuration and from the
// leanest one that meets every SLA floor, the policy moves one model at a time
// to its best local configuration, scored by the host's utility
// (`objective.evaluate`), until no single move improves. Models are visited in
// an order drawn from the `seed` parameter, so equal seeds give equal
// decisions.
//
// The JavaScript shapes of the WIT types (componentize-js): records are
// objects with camelCase fields, `u64` is a BigInt, `list<f32>` a
// Float32Array, `result<decision, string>` a returned decision or a thrown
// string.

import { predictTable } from 'mfsched:scheduler/surrogate@0.4.0';
import { evaluate } from 'mfsched:scheduler/objective@0.4.0';

const DEFAULT_ROUNDS = 8;
const MASK64 = (1n << 64n) - 1n;

/** One SplitMix64 step: [new state, output], both BigInt. */
function splitmix64(state) {
  state = (state + 0x9e3779b97f4a7c15n) & MASK64;
  let z = state;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return [state, z ^ (z >> 31n)];
}

/** 0..n-1 in a Fisher-Yates order drawn from `seed` (a BigInt). */
function shuffled(n, seed) {
  const items = [...Array(n).keys()];
  let state = seed & MASK64;
  for (let i = n - 1; i > 0; i--) {
    let z;
    [state, z] = splitmix64(state);
    const j = Number(z % BigInt(i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

/** A parameter's value as a BigInt, or `fallback` when it is not given. A
 * value that is no integer throws a TypeError (an object, not a string: see
 * `decide` for how its message still reaches the host). */
function param(params, key, fallback) {
  const p = params.find((p) => p.key === key);
  if (p === undefined) {
    return fallback;
  }
  try {
    return BigInt(p.value.trim());
  } catch (e) {
    throw new TypeError(`parameter ${key}=${p.value}: ${e.message}`);
  }
}

/** The joint space of one problem with the predictions of one state. */
class Search {
  constructor(problem, state) {
    this.sizes = problem.models.map((m) => m.configs.length);
    const n = this.sizes.length;
    // Mixed radix, the last model varying fastest.
    this.strides = Array(n).fill(1n);
    for (let i = n - 2; i >= 0; i--) {
      this.strides[i] = this.strides[i + 1] * BigInt(this.sizes[i + 1]);
    }
    this.offsets = [];
    let total = 0;
    for (const k of this.sizes) {
      this.offsets.push(total);
      total += k;
    }
    this.table = predictTable(state);
    if (this.table.length !== total) {
      throw `predict-table returned ${this.table.length} values for ${total} local configurations`;
    }
    this.evaluated = 0n;
  }

  /** Each model at its smallest configuration predicted at or above its SLA
   * floor (the smallest of all when none is). */
  leanest(problem) {
    return problem.models.map((m, i) => {
      const floor = problem.slaFloors[i] ?? 0;
      const every = [...Array(this.sizes[i]).keys()];
      const meeting = every.filter((c) => this.table[this.offsets[i] + c] >= floor);
      const pool = meeting.length > 0 ? meeting : every;
      return pool.reduce((a, b) => (m.configs[b].vramMib < m.configs[a].vramMib ? b : a));
    });
  }

  score(configs) {
    const indices = new BigUint64Array(configs.length);
    const predictions = new Float32Array(configs.length * this.sizes.length);
    configs.forEach((config, k) => {
      indices[k] = config.reduce((sum, c, i) => sum + BigInt(c) * this.strides[i], 0n);
      config.forEach((c, i) => {
        predictions[k * config.length + i] = this.table[this.offsets[i] + c];
      });
    });
    this.evaluated += BigInt(configs.length);
    return evaluate(indices, predictions);
  }

  ascend(config, order, rounds) {
    let best = this.score([config])[0];
    for (let r = 0n; r < rounds; r++) {
      let improved = false;
      for (const i of order) {
        const candidates = [...Array(this.sizes[i]).keys()].map((c) => {
          const next = [...config];
          next[i] = c;
          return next;
        });
        const scores = this.score(candidates);
        candidates.forEach((candidate, k) => {
          if (scores[k] > best) {
            best = scores[k];
            config = candidate;
            improved = true;
          }
        });
      }
      if (!improved) {
        break;
      }
    }
    return [best, config];
  }
}

export function name() {
  return 'javascript greedy (componentize-js)';
}

export function parameters() {
  return [
    {
      name: 'rounds',
      defaultValue: String(DEFAULT_ROUNDS),
      description: 'most passes over the models',
    },
  ];
}

/** Throwing a string refuses the tick with that reason (the `err` of the
 * result). componentize-js cannot turn anything else thrown into that string:
 * it traps with "expected a string, received [object]" and the message is
 * lost. So every exception leaves `decide` as a string, with its message. */
export function decide(problem, state, params) {
  try {
    return greedy(problem, state, params);
  } catch (e) {
    throw typeof e === 'string' ? e : `${e?.name ?? 'exception'}: ${e?.message ?? String(e)}`;
  }
}

function greedy(problem, state, params) {
  const rounds = param(params, 'rounds', BigInt(DEFAULT_ROUNDS));
  const seed = param(params, 'seed', 0n);
  if (problem.current.length !== problem.models.length) {
    throw 'the running configuration does not have one entry per model';
  }
  const search = new Search(problem, state);
  const order = shuffled(problem.models.length, seed);
  let best = null;
  for (const start of [[...problem.current], search.leanest(problem)]) {
    const found = search.ascend(start, order, rounds);
    if (best === null || found[0] > best[0]) {
      best = found;
    }
  }
  if (best === null || best[0] === -Infinity) {
    throw "no configuration reached meets every SLA floor within the card's VRAM";
  }
  return { config: best[1], candidatesEvaluated: search.evaluated };
}
