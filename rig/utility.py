"""The published utility as the rig's scripts score measured throughputs.

One home for rig/realised.py and rig/best_static.py: the same formula as
plugins/utility/src/lib.rs, with the scenario's quality, floors and
reconfiguration costs and the bundle's per-variant throughput ranges.
"""

import json
import tomllib


class Utility:
    def __init__(self, scenario_path, bundle_dir):
        with open(scenario_path, "rb") as f:
            scen = tomllib.load(f)
        with open(f"{bundle_dir}/bundle.json", encoding="utf-8") as f:
            meta = json.load(f)
        self.models = [m["name"] for m in scen["models"]]
        self.family = {m["name"]: scen["families"][m["family"]] for m in scen["models"]}
        self.floors = {m["name"]: float(m.get("sla_floor", 0.0)) for m in scen["models"]}
        self.quality = {m: {v["name"]: float(v["quality"]) for v in self.family[m]["variants"]}
                        for m in self.models}
        self.ranges = {m["name"]: {r["variant"]: (r["min"], r["max"]) for r in m["throughput_ranges"]}
                       for m in meta["models"]}
        # Per model: its own [[models]] reconfig, else the scenario's (the
        # scenario's configured costs, not what a daemon measured).
        default = scen.get("reconfig", {})
        self.costs = {}
        for m in scen["models"]:
            r = m.get("reconfig", default)
            self.costs[m["name"]] = (float(r.get("variant_switch", 0.05)),
                                     float(r.get("knob_change", 0.01)))

    def cost(self, model, variant_switch):
        """What changing `model`'s configuration costs the utility."""
        switch, knob = self.costs[model]
        return switch if variant_switch else knob

    def term(self, model, variant, throughput):
        """Model `model`'s reward in `variant` at `throughput`: quality relative
        to the model's best times the min-max normalised throughput (a
        degenerate range counts as full marks, as the component does)."""
        lo, hi = self.ranges[model][variant]
        norm = 1.0 if hi <= lo else min(max((throughput - lo) / (hi - lo), 0.0), 1.0)
        return self.quality[model][variant] / max(self.quality[model].values()) * norm
