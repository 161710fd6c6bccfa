"""A greedy mfsched policy in Python, built with componentize-py against the
same WIT as the Rust policies (`wit/scheduler.wit`, world `policy`).

Greedy coordinate ascent on one table of predictions: the host serves every
model's predicted throughput for every local configuration in one
`predict-table` call; starting from the running configuration and from the
leanest one that meets every SLA floor, the policy moves one model at a time to its best local
configuration, scored by the host's utility (`objective.evaluate`), until no
single move improves. Models are visited in an order drawn from the `seed`
parameter with the Rust SDK's generator, so for equal seeds this is the same
search as the Rust template's, with the same decision.
"""

from typing import List, Optional, Tuple

import wit_world
from componentize_py_types import Err
from wit_world.imports import objective, surrogate, types

DEFAULT_ROUNDS = 8
MASK64 = (1 << 64) - 1


def splitmix64(state: int) -> Tuple[int, int]:
    """One SplitMix64 step: (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


def rotl(x: int, k: int) -> int:
    return ((x << k) | (x >> (64 - k))) & MASK64


class Rng:
    """mfsched-sdk's `Rng` (rng/src/lib.rs), bit for bit: xoshiro256**
    seeded through SplitMix64, and Lemire's unbiased `below`. The template
    draws its model order from it, so equal seeds give the same order here."""

    def __init__(self, seed: int):
        state = seed & MASK64
        self.s = []
        for _ in range(4):
            state, z = splitmix64(state)
            self.s.append(z)

    def next_u64(self) -> int:
        s = self.s
        result = (rotl((s[1] * 5) & MASK64, 7) * 9) & MASK64
        t = (s[1] << 17) & MASK64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n: int) -> int:
        """Uniform in [0, n), n > 0."""
        while True:
            m = self.next_u64() * n
            low = m & MASK64
            if low >= n or low >= ((-n) & MASK64) % n:
                return m >> 64


def shuffled(n: int, seed: int) -> List[int]:
    """0..n-1 in the Fisher-Yates order the Rust template draws from `seed`."""
    items = list(range(n))
    rng = Rng(seed)
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        items[i], items[j] = items[j], items[i]
    return items


def param(params: List[types.Param], key: str, default: int) -> int:
    for p in params:
        if p.key == key:
            try:
                return int(p.value)
            except ValueError:
                raise Err(f"parameter {key}={p.value}: not an integer")
    return default


class Search:
    """The joint space of one problem with the predictions of one state."""

    def __init__(self, problem: types.Problem, state: types.GpuState):
        self.sizes = [len(m.configs) for m in problem.models]
        n = len(self.sizes)
        # Mixed radix, the last model varying fastest.
        self.strides = [1] * n
        for i in range(n - 2, -1, -1):
            self.strides[i] = self.strides[i + 1] * self.sizes[i + 1]
        self.offsets = []
        total = 0
        for k in self.sizes:
            self.offsets.append(total)
            total += k
        self.table = surrogate.predict_table(state)
        if len(self.table) != total:
            raise Err(
                f"predict-table returned {len(self.table)} values for {total} local configurations"
            )
        self.evaluated = 0

    def leanest(self, problem: types.Problem) -> List[int]:
        """Each model at its smallest configuration predicted at or above its
        SLA floor (the smallest of all when none is): with the field held fixed
        this start meets every floor and fits whenever any configuration does."""
        start = []
        for i, m in enumerate(problem.models):
            floor = problem.sla_floors[i] if i < len(problem.sla_floors) else 0.0
            every = range(self.sizes[i])
            meeting = [c for c in every if self.table[self.offsets[i] + c] >= floor]
            start.append(min(meeting or every, key=lambda c: m.configs[c].vram_mib))
        return start

    def score(self, configs: List[List[int]]) -> List[float]:
        indices = []
        predictions = []
        for config in configs:
            indices.append(sum(c * s for c, s in zip(config, self.strides)))
            predictions.extend(self.table[o + c] for o, c in zip(self.offsets, config))
        self.evaluated += len(configs)
        return objective.evaluate(indices, predictions)

    def ascend(self, config: List[int], order: List[int], rounds: int) -> Tuple[float, List[int]]:
        best = self.score([config])[0]
        for _ in range(rounds):
            improved = False
            for i in order:
                candidates = []
                for c in range(self.sizes[i]):
                    nxt = list(config)
                    nxt[i] = c
                    candidates.append(nxt)
                for candidate, s in zip(candidates, self.score(candidates)):
                    if s > best:
                        best, config, improved = s, candidate, True
            if not improved:
                break
        return best, config


class WitWorld(wit_world.WitWorld):
    def name(self) -> str:
        return "python greedy (componentize-py)"

    def parameters(self) -> List[types.ParamSpec]:
        return [
            types.ParamSpec(
                name="rounds",
                default_value=str(DEFAULT_ROUNDS),
                description="most passes over the models",
            )
        ]

    def decide(
        self, problem: types.Problem, state: types.GpuState, params: List[types.Param]
    ) -> types.Decision:
        rounds = param(params, "rounds", DEFAULT_ROUNDS)
        seed = param(params, "seed", 0)
        if len(problem.current) != len(problem.models):
            raise Err("the running configuration does not have one entry per model")
        search = Search(problem, state)
        order = shuffled(len(problem.models), seed)
        best: Optional[Tuple[float, List[int]]] = None
        for start in (list(problem.current), search.leanest(problem)):
            found = search.ascend(start, order, rounds)
            if best is None or found[0] > best[0]:
                best = found
        if best is None or best[0] == float("-inf"):
            raise Err("no configuration reached meets every SLA floor within the card's VRAM")
        return types.Decision(config=best[1], candidates_evaluated=search.evaluated)
