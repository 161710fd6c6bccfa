//! Online correction of a predictor from measured throughput.
//!
//! A surrogate trained on one card (or one calibration) meets another: the
//! servers' own counters say what each model's configuration really gives.
//! [`Corrected`] wraps the served predictor and multiplies each model's
//! prediction by a factor learnt from those measurements, per model and per
//! local configuration, so every decision (the policies' tables and joint
//! predictions alike) sees the corrected numbers.
//!
//! The factor is the exponential of a shrunk mean of log residuals
//! ln(measured / predicted):
//!
//! - per configuration, that configuration's own mean, shrunk toward the
//!   model's with [`CorrectionConfig::config_prior`] pseudo-observations, so a
//!   configuration never run inherits its model's correction and one run often
//!   gets its own;
//! - per model, the mean of its configurations' means, shrunk toward 0 (no
//!   correction) with [`CorrectionConfig::model_prior`] pseudo-observations,
//!   each configuration weighing as many readings as it has but never more
//!   than `config_prior`. The priors say how far a model's configurations
//!   stray from their model (`config_prior`) and the model from the
//!   surrogate (`model_prior`), in readings' worth: a hundred readings of one
//!   configuration pin down that configuration, not what the others share.
//!   Weighed by readings, a model that ran one configuration the surrogate
//!   overpredicts lent its factor whole to every configuration it never ran,
//!   and the ranking that chose it never changed (the real-server rig's
//!   `conv` ran its smaller net at batch 8, serving 21–44 requests/s, for 384
//!   of 393 ticks, while the larger net at batch 1, which it never ran and
//!   which inherited the same factor, served 31–106 in the static runs
//!   beside it; docs/real-servers.md, session 27);
//! - older observations fade with a half-life of
//!   [`CorrectionConfig::half_life`] observations of that model, so the factor
//!   follows a drifting card;
//! - each residual and each factor is clamped to ±ln [`CorrectionConfig::max_factor`]:
//!   one wild reading moves a factor a bounded step, and no factor leaves
//!   [1 / max, max].
//!
//! The memory is bounded: at most [`MAX_TRACKED_CONFIGS`] configurations per
//! model keep their own mean (the least observed is forgotten first).
//!
//! A drift alarm per model compares the recent mean residual with the bundle's
//! own held-out error: a model whose measurements disagree with the surrogate
//! by more than that (in either direction) for [`CorrectionConfig::drift_after`]
//! observations in a row is drifting ([`Correction::observe`] says when it
//! starts and stops).
//!
//! A floor's memory: a configuration a model left while its own floor was
//! predicted unmet ([`Corrected::forced_out`]) is predicted at most what it
//! was predicted then, for as long as the load is at least what it was and
//! for [`CorrectionConfig::forced_out_ticks`] ticks (doubled each time it is
//! forced out again at that load). Under the observed field a model's own
//! share of the state leaves with it: from the lighter state its lighter
//! configuration makes, the one it left is predicted to keep its floor again,
//! and without the memory a policy flips between the two, missing the floor
//! at each return (measured on the real-server rig, docs/real-servers.md).

use crate::domain::{GpuState, JointSpace, Problem, WorkloadLevel};
use crate::predict::{Field, InSpace, PredictError, Predictor, table_offsets};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// The most configurations of one model that keep their own mean.
pub const MAX_TRACKED_CONFIGS: usize = 4096;

/// How the correction learns.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorrectionConfig {
    /// Whether decisions use corrected predictions (the daemon's
    /// `[correction] enabled`; the correction learns only where a model's
    /// throughput is measured, so with none measured nothing changes).
    pub enabled: bool,
    /// Pseudo-observations pulling a model's mean residual toward 0.
    pub model_prior: f64,
    /// Pseudo-observations pulling a configuration's mean toward its model's,
    /// and the most readings' worth one configuration weighs in its model's.
    pub config_prior: f64,
    /// Observations of a model after which an old one weighs half.
    pub half_life: f64,
    /// The largest factor (and the smallest, 1 / it).
    pub max_factor: f64,
    /// Consecutive observations beyond the error bound before a model drifts.
    pub drift_after: u32,
    /// Ticks a configuration its floor forced out is predicted at most what
    /// it was predicted then (while the load is as high), doubled each time
    /// it is forced out again, up to [`MAX_FORCED_OUT_DOUBLINGS`] times; 0
    /// turns the memory off.
    pub forced_out_ticks: u32,
}

/// The most times a forced-out configuration's hold doubles.
pub const MAX_FORCED_OUT_DOUBLINGS: u32 = 4;

/// The longest [`CorrectionConfig::forced_out_ticks`].
pub const MAX_FORCED_OUT_TICKS: u32 = 100_000;

impl Default for CorrectionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            model_prior: 2.0,
            config_prior: 3.0,
            half_life: 50.0,
            max_factor: 4.0,
            drift_after: 5,
            forced_out_ticks: 30,
        }
    }
}

impl CorrectionConfig {
    /// `Err` naming the first key out of range.
    pub fn check(&self) -> Result<(), String> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !(self.model_prior.is_finite() && self.model_prior >= 0.0) {
            return Err(format!("model_prior = {} must be ≥ 0", self.model_prior));
        }
        if !(self.config_prior.is_finite() && self.config_prior >= 0.0) {
            return Err(format!("config_prior = {} must be ≥ 0", self.config_prior));
        }
        if !positive(self.half_life) {
            return Err(format!("half_life = {} must be positive", self.half_life));
        }
        // Past 1000 a corrected prediction stops meaning anything (and an f32
        // prediction times e^709 is infinite).
        if !(self.max_factor > 1.0 && self.max_factor <= 1000.0) {
            return Err(format!(
                "max_factor = {} must be above 1 and at most 1000",
                self.max_factor
            ));
        }
        if self.drift_after == 0 {
            return Err("drift_after must be at least 1".into());
        }
        if self.forced_out_ticks > MAX_FORCED_OUT_TICKS {
            return Err(format!(
                "forced_out_ticks = {} must be at most {MAX_FORCED_OUT_TICKS}",
                self.forced_out_ticks
            ));
        }
        Ok(())
    }
}

/// A decayed sum of residuals and its weight.
#[derive(Debug, Clone, Copy, Default)]
struct Mean {
    sum: f64,
    weight: f64,
    /// The model's observation count when last updated (for lazy decay).
    at: u64,
}

impl Mean {
    fn decayed(&self, now: u64, decay: f64) -> (f64, f64) {
        let k = decay.powf((now - self.at) as f64);
        (self.sum * k, self.weight * k)
    }

    fn add(&mut self, r: f64, now: u64, decay: f64) {
        let (sum, weight) = self.decayed(now, decay);
        *self = Self {
            sum: sum + r,
            weight: weight + 1.0,
            at: now,
        };
    }
}

/// One model's state.
#[derive(Debug, Clone, Default)]
struct ModelState {
    observations: u64,
    /// Every reading alike: the recent ratio the drift alarm watches.
    model: Mean,
    /// Ordered, so the model's mean sums its configurations in one order
    /// and a replay decides to the last bit as the daemon did.
    configs: BTreeMap<u32, Mean>,
    /// Consecutive observations whose recent mean was beyond the bound.
    beyond: u32,
    drifting: bool,
}

/// What one model's correction stands at, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelCorrection {
    /// Observations taken so far.
    pub observations: u64,
    /// The factor the running configuration's predictions are multiplied by.
    pub running_factor: f64,
    /// The recent mean measured / predicted ratio (the model-level mean, unshrunk).
    pub recent_ratio: Option<f64>,
    pub drifting: bool,
}

/// A change of a model's drift state, reported by [`Correction::observe`].
#[derive(Debug, Clone, PartialEq)]
pub enum DriftEdge {
    /// The model's measurements left the error bound `bound` for
    /// `observations` in a row; the recent mean ratio is `ratio`.
    Started {
        model: usize,
        ratio: f64,
        bound: f64,
    },
    /// They came back within it.
    Stopped { model: usize, ratio: f64 },
}

/// A configuration its model's floor forced out, reported by
/// [`Corrected::forced_out`].
#[derive(Debug, Clone, PartialEq)]
pub struct ForcedOut {
    pub model: usize,
    /// The configuration left (local to the model).
    pub config: u32,
    /// Its corrected prediction when it was left, below `floor`: what it is
    /// predicted at most from now on while the memory holds.
    pub predicted: f64,
    pub floor: f64,
    /// The load it was left under: the memory holds while the load is at least this.
    pub workload: WorkloadLevel,
    /// Ticks the memory holds.
    pub ticks: u64,
}

/// The memory of one forced-out configuration.
#[derive(Debug, Clone, Copy)]
struct Cap {
    value: f32,
    workload: WorkloadLevel,
    /// The tick count ([`Correction::ticks`]) from which it no longer holds.
    until: u64,
    /// Times in a row it was forced out at this load or a higher one.
    strikes: u32,
}

/// The correction state: per model, per configuration.
#[derive(Debug)]
pub struct Correction {
    config: CorrectionConfig,
    decay: f64,
    grid: Vec<usize>,
    offsets: Vec<usize>,
    /// The relative error within which a model is not drifting (from the
    /// bundle's held-out MAPE), per model.
    bounds: Vec<f64>,
    models: Vec<ModelState>,
    /// The factor of every table entry (model-major, as `predict_table`).
    factors: Vec<f32>,
    rejected: u64,
    /// [`MAX_TRACKED_CONFIGS`] (smaller in the tests).
    max_tracked: usize,
    /// The floors' memory, per table entry (model-major, as `factors`).
    caps: Vec<Option<Cap>>,
    /// Ticks settled ([`Corrected::forced_out`] calls), the memory's clock.
    ticks: u64,
}

impl Correction {
    /// A correction for `problem`'s models; `relative_error[i]` is model i's
    /// held-out relative error (0.2 for a MAPE of 20 %), whose double bounds
    /// the drift alarm (within [5 %, 100 %]; 40 % where it is unknown).
    pub fn new(
        problem: &Problem,
        config: CorrectionConfig,
        relative_error: &[Option<f64>],
    ) -> Self {
        let grid: Vec<usize> = problem.models.iter().map(|m| m.grid_size()).collect();
        let offsets = table_offsets(problem);
        let total = offsets.last().copied().unwrap_or(0);
        let bounds = (0..grid.len())
            .map(|i| match relative_error.get(i).copied().flatten() {
                Some(e) if e.is_finite() && e > 0.0 => (2.0 * e).clamp(0.05, 1.0),
                _ => 0.4,
            })
            .collect();
        Self {
            decay: 0.5f64.powf(1.0 / config.half_life),
            config,
            grid,
            offsets,
            bounds,
            models: vec![ModelState::default(); problem.models.len()],
            factors: vec![1.0; total],
            rejected: 0,
            max_tracked: MAX_TRACKED_CONFIGS,
            caps: vec![None; total],
            ticks: 0,
        }
    }

    fn limit(&self) -> f64 {
        self.config.max_factor.ln()
    }

    /// Model `i`'s mean log residual, the part its configurations share:
    /// each configuration's mean weighs its readings' (decayed) weight, at
    /// most `config_prior` (as n·k / (n + k): the precision of a
    /// configuration's mean as evidence of its model's when configurations
    /// stray from their model by one part in `config_prior` of a reading's
    /// variance), shrunk toward 0 by `model_prior`. With `config_prior` 0 the
    /// configurations share nothing and the model's mean is 0.
    fn model_mean(&self, i: usize) -> f64 {
        let m = &self.models[i];
        let now = m.observations;
        let k = self.config.config_prior;
        let (sum, weight) = m
            .configs
            .values()
            .map(|e| e.decayed(now, self.decay))
            .filter(|&(_, n)| n > 0.0)
            .fold((0.0, 0.0), |(sum, weight), (csum, n)| {
                let w = n * k / (n + k);
                (sum + w * csum / n, weight + w)
            });
        let denominator = weight + self.config.model_prior;
        if denominator > 0.0 {
            sum / denominator
        } else {
            0.0
        }
    }

    /// The log factor of model `i`'s configuration `c` now, its model's mean
    /// being `model_mean`.
    fn log_factor(&self, i: usize, c: u32, model_mean: f64) -> f64 {
        let m = &self.models[i];
        let now = m.observations;
        let (csum, cweight) = m
            .configs
            .get(&c)
            .map_or((0.0, 0.0), |e| e.decayed(now, self.decay));
        let k = self.config.config_prior;
        let estimate = if cweight + k > 0.0 {
            (csum + k * model_mean) / (cweight + k)
        } else {
            model_mean
        };
        estimate.clamp(-self.limit(), self.limit())
    }

    /// The factor of model `i`'s configuration `c`.
    pub fn factor(&self, i: usize, c: u32) -> f64 {
        self.log_factor(i, c, self.model_mean(i)).exp()
    }

    /// Learns from one tick: `running` ran, the surrogate predicted
    /// `predicted` for it (uncorrected) and the servers measured `measured`
    /// (`None` where a model's throughput is not measured). Readings that are
    /// not positive and finite are counted and skipped. Returns the models
    /// whose drift state changed.
    pub fn observe(
        &mut self,
        running: &[u32],
        predicted: &[f32],
        measured: &[Option<f64>],
    ) -> Vec<DriftEdge> {
        let mut edges = Vec::new();
        let limit = self.limit();
        for i in 0..self.models.len() {
            let (Some(&c), Some(&p), Some(Some(t))) =
                (running.get(i), predicted.get(i), measured.get(i))
            else {
                continue;
            };
            let p = f64::from(p);
            if !(p.is_finite() && p > 0.0 && t.is_finite() && *t > 0.0)
                || c as usize >= self.grid[i]
            {
                self.rejected += 1;
                continue;
            }
            let r = (t / p).ln().clamp(-limit, limit);
            let decay = self.decay;
            let m = &mut self.models[i];
            m.observations += 1;
            let now = m.observations;
            m.model.add(r, now, decay);
            if !m.configs.contains_key(&c) && m.configs.len() >= self.max_tracked {
                let least = m
                    .configs
                    .iter()
                    .min_by(|a, b| {
                        a.1.decayed(now, decay)
                            .1
                            .total_cmp(&b.1.decayed(now, decay).1)
                            .then(a.0.cmp(b.0))
                    })
                    .map(|(&k, _)| k);
                if let Some(k) = least {
                    m.configs.remove(&k);
                }
            }
            m.configs.entry(c).or_default().add(r, now, decay);
            // The alarm looks at the recent (unshrunk) mean.
            let (sum, weight) = m.model.decayed(now, decay);
            let recent = sum / weight;
            let bound = self.bounds[i];
            let beyond = recent.abs() > (1.0 + bound).ln();
            m.beyond = if beyond { m.beyond + 1 } else { 0 };
            if !m.drifting && m.beyond >= self.config.drift_after {
                m.drifting = true;
                edges.push(DriftEdge::Started {
                    model: i,
                    ratio: recent.exp(),
                    bound,
                });
            } else if m.drifting && !beyond {
                m.drifting = false;
                edges.push(DriftEdge::Stopped {
                    model: i,
                    ratio: recent.exp(),
                });
            }
            self.refresh(i);
        }
        edges
    }

    /// Recomputes model `i`'s block of factors.
    fn refresh(&mut self, i: usize) {
        let model_mean = self.model_mean(i);
        let block: Vec<f32> = (0..self.grid[i] as u32)
            .map(|c| self.log_factor(i, c, model_mean).exp() as f32)
            .collect();
        self.factors[self.offsets[i]..self.offsets[i + 1]].copy_from_slice(&block);
    }

    /// Whether nothing was learnt yet: every factor is 1, nothing is capped,
    /// and predictions pass unchanged.
    fn is_identity(&self) -> bool {
        self.models.iter().all(|m| m.observations == 0) && self.caps.iter().all(Option::is_none)
    }

    /// What table entry `k` is predicted at most under `workload` now.
    fn cap(&self, k: usize, workload: WorkloadLevel) -> Option<f32> {
        self.caps[k]
            .filter(|c| workload >= c.workload && self.ticks < c.until)
            .map(|c| c.value)
    }

    /// The corrected prediction `t` of table entry `k` under `workload`.
    fn corrected(&self, k: usize, t: f32, workload: WorkloadLevel) -> f32 {
        let t = t * self.factors[k];
        self.cap(k, workload).map_or(t, |cap| t.min(cap))
    }

    /// Remembers that model `i` left configuration `c`, predicted `value`
    /// under `workload`, below its floor; returns the ticks the memory holds
    /// (`None` when the memory is off). Forced out again at the same load or
    /// a higher one once the last hold ran out, it holds twice as long.
    fn remember(&mut self, i: usize, c: u32, value: f32, workload: WorkloadLevel) -> Option<u64> {
        let base = u64::from(self.config.forced_out_ticks);
        if base == 0 {
            return None;
        }
        let k = self.offsets[i] + c as usize;
        // Again within one hold of the last one's end, at its load or a
        // higher one: the configuration does not keep its floor there.
        let strikes = match self.caps[k] {
            Some(last)
                if workload >= last.workload
                    && self.ticks < last.until + (base << (last.strikes - 1)) =>
            {
                (last.strikes + 1).min(MAX_FORCED_OUT_DOUBLINGS + 1)
            }
            _ => 1,
        };
        let ticks = base << (strikes - 1);
        self.caps[k] = Some(Cap {
            value,
            workload,
            until: self.ticks + 1 + ticks,
            strikes,
        });
        Some(ticks)
    }

    /// Readings skipped as not positive and finite.
    pub fn rejected(&self) -> u64 {
        self.rejected
    }

    /// Forgets everything learnt (a new run starts from the surrogate).
    pub fn reset(&mut self) {
        self.models = vec![ModelState::default(); self.models.len()];
        self.factors.fill(1.0);
        self.rejected = 0;
        self.caps.fill(None);
        self.ticks = 0;
    }

    /// Model `i`'s state, with the factor of its configuration `running`.
    pub fn model(&self, i: usize, running: u32) -> ModelCorrection {
        let m = &self.models[i];
        let (sum, weight) = m.model.decayed(m.observations, self.decay);
        ModelCorrection {
            observations: m.observations,
            running_factor: self.factor(i, running),
            recent_ratio: (weight > 0.0).then(|| (sum / weight).exp()),
            drifting: m.drifting,
        }
    }
}

/// A predictor whose predictions are multiplied by a [`Correction`]'s
/// factors. The correction is shared: the tick's owner feeds it
/// ([`Corrected::observe`]) while policies predict through it.
pub struct Corrected {
    inner: Arc<dyn Predictor>,
    space: JointSpace,
    correction: RwLock<Correction>,
}

impl std::fmt::Debug for Corrected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Corrected").finish_non_exhaustive()
    }
}

impl Corrected {
    pub fn new(inner: Arc<dyn Predictor>, problem: &Problem, correction: Correction) -> Self {
        Self {
            inner,
            space: problem.space(),
            correction: RwLock::new(correction),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Correction> {
        self.correction.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Learns from what ran: `running` under `state` (the state observed while
    /// it ran), and the throughput measured per model. Returns the drift
    /// edges; an uncorrected prediction that fails is returned as the error
    /// and nothing is learnt.
    pub fn observe(
        &self,
        state: &GpuState,
        running: &[u32],
        measured: &[Option<f64>],
    ) -> Result<Vec<DriftEdge>, PredictError> {
        if measured.iter().all(Option::is_none) {
            return Ok(Vec::new());
        }
        let Some(index) = self.space.index(running) else {
            return Err(PredictError::Mismatch(format!(
                "the running configuration {running:?} is outside the joint space"
            )));
        };
        let predicted = self.inner.predict_joint(state, running, &[index])?;
        Ok(self
            .correction
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .observe(running, &predicted, measured))
    }

    /// Settles one tick: of the models whose configuration changed from
    /// `previous` to `applied` at `state`, those whose floor the
    /// configuration they left was then predicted (corrected) not to keep are
    /// remembered ([`CorrectionConfig::forced_out_ticks`]); returns them.
    /// `floors` are the floors the tick decided with: a floor out of every
    /// configuration's reach counts at the edge of the reach it was held at,
    /// not as enforced (against that, every configuration a model leaves
    /// would be remembered, and its reach would fall tick after tick). The
    /// tick's owner calls it once per tick, after the decision, changed or
    /// not: it is the memory's clock. A prediction that fails is the error
    /// (the clock still advances, nothing is remembered).
    pub fn forced_out(
        &self,
        state: &GpuState,
        previous: &[u32],
        applied: &[u32],
        floors: &[f64],
    ) -> Result<Vec<ForcedOut>, PredictError> {
        let left: Vec<usize> = (0..previous.len())
            .filter(|&i| applied.get(i) != previous.get(i))
            .filter(|&i| floors.get(i).is_some_and(|&f| f > 0.0))
            .collect();
        let held = if left.is_empty() || self.read().config.forced_out_ticks == 0 {
            Ok(Vec::new())
        } else {
            match self.space.index(previous) {
                Some(index) => self.predict_joint(state, previous, &[index]),
                None => Err(PredictError::Mismatch(format!(
                    "the configuration left {previous:?} is outside the joint space"
                ))),
            }
        };
        let mut c = self.correction.write().unwrap_or_else(|p| p.into_inner());
        let held = held.inspect_err(|_| c.ticks += 1)?;
        let mut out = Vec::new();
        for i in left {
            let (Some(&p), floor) = (held.get(i), floors[i]) else {
                continue;
            };
            if !p.is_finite() || f64::from(p) >= floor {
                continue;
            }
            if let Some(ticks) = c.remember(i, previous[i], p, state.workload) {
                out.push(ForcedOut {
                    model: i,
                    config: previous[i],
                    predicted: f64::from(p),
                    floor,
                    workload: state.workload,
                    ticks,
                });
            }
        }
        c.ticks += 1;
        Ok(out)
    }

    /// How it learns.
    pub fn config(&self) -> CorrectionConfig {
        self.read().config.clone()
    }

    /// Forgets everything learnt (see [`Correction::reset`]).
    pub fn reset(&self) {
        self.correction
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .reset();
    }

    /// Every model's correction with its running configuration's factor.
    pub fn models(&self, running: &[u32]) -> Vec<ModelCorrection> {
        let c = self.read();
        running
            .iter()
            .enumerate()
            .map(|(i, &r)| c.model(i, r))
            .collect()
    }

    /// Readings skipped as not positive and finite.
    pub fn rejected(&self) -> u64 {
        self.read().rejected()
    }
}

impl Predictor for Corrected {
    fn joint_size(&self) -> u64 {
        self.inner.joint_size()
    }

    fn predict_table(&self, state: &GpuState, running: &[u32]) -> Result<Vec<f32>, PredictError> {
        let mut table = self.inner.predict_table(state, running)?;
        let c = self.read();
        if !c.is_identity() {
            for (k, t) in table.iter_mut().enumerate().take(c.factors.len()) {
                *t = c.corrected(k, *t, state.workload);
            }
        }
        Ok(table)
    }

    fn predict_in_space(
        &self,
        state: &GpuState,
        running: &[u32],
        candidates: InSpace<'_>,
    ) -> Result<Vec<f32>, PredictError> {
        let indices = candidates;
        let mut out = self.inner.predict_in_space(state, running, candidates)?;
        let c = self.read();
        if c.is_identity() {
            return Ok(out);
        }
        let n = c.grid.len();
        let mut locals = vec![0u32; n];
        for (row, &index) in out.chunks_exact_mut(n).zip(indices.iter()) {
            self.space.decode(index, &mut locals);
            for ((t, &local), &offset) in row.iter_mut().zip(&locals).zip(&c.offsets) {
                *t = c.corrected(offset + local as usize, *t, state.workload);
            }
        }
        Ok(out)
    }

    fn field(&self) -> Field {
        self.inner.field()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper_n2() -> Problem {
        crate::scenario::load("paper-n2").expect("bundled").problem
    }

    /// A predictor that predicts 100 for everything.
    struct Flat(u64, usize);

    impl Predictor for Flat {
        fn joint_size(&self) -> u64 {
            self.0
        }
        fn predict_table(&self, _: &GpuState, _: &[u32]) -> Result<Vec<f32>, PredictError> {
            Ok(vec![100.0; self.1])
        }
        fn predict_in_space(
            &self,
            _: &GpuState,
            running: &[u32],
            candidates: InSpace<'_>,
        ) -> Result<Vec<f32>, PredictError> {
            Ok(vec![100.0; candidates.len() * running.len()])
        }
    }

    fn corrected(problem: &Problem) -> Corrected {
        let total = *table_offsets(problem).last().expect("offsets");
        let flat = Arc::new(Flat(problem.space().size(), total));
        let correction = Correction::new(
            problem,
            CorrectionConfig::default(),
            &[Some(0.1), Some(0.1)],
        );
        Corrected::new(flat, problem, correction)
    }

    fn state() -> GpuState {
        GpuState {
            workload: WorkloadLevel::Medium,
            vram_used_mib: 1000.0,
            utilization: 0.5,
            contention: None,
        }
    }

    /// With nothing measured the predictions pass unchanged; a model measured
    /// at 60 % of its prediction converges there for the configuration that
    /// ran, its other configurations follow part of the way (shrunk toward
    /// the model's mean), and the model beside it is untouched.
    #[test]
    fn measurements_pull_the_running_configuration_and_shrink_the_rest() {
        let problem = paper_n2();
        let c = corrected(&problem);
        let running = vec![0u32, 0];
        let before = c.predict_table(&state(), &running).expect("table");
        assert!(before.iter().all(|&t| t == 100.0));
        for _ in 0..40 {
            c.observe(&state(), &running, &[Some(60.0), None])
                .expect("observe");
        }
        let table = c.predict_table(&state(), &running).expect("table");
        let offsets = table_offsets(&problem);
        assert!((table[0] - 60.0).abs() < 3.0, "{}", table[0]);
        let other = table[1];
        assert!(other < 100.0 && other >= table[0], "{other}");
        assert!(table[offsets[1]..].iter().all(|&t| t == 100.0));
        // The joint path agrees with the table.
        let index = problem.space().index(&running).expect("in space");
        let joint = c
            .predict_joint(&state(), &running, &[index])
            .expect("joint");
        assert_eq!(joint, vec![table[0], 100.0]);
    }

    /// A model whose one configuration ran far below its prediction for a
    /// hundred ticks lends its configurations it never ran only the part of
    /// that error its configurations share (there, `model_prior` 2 against
    /// one configuration's `config_prior` 3: three fifths of the log); a
    /// second configuration measured alike is evidence the error is the
    /// model's, and the third follows further. Weighed by readings, the one
    /// configuration's hundred readings set every factor alike, and the
    /// ranking the surrogate gave them never changed.
    #[test]
    fn a_configuration_never_run_inherits_what_its_model_s_configurations_share() {
        let problem = paper_n2();
        let c = corrected(&problem);
        // Model 0 runs `config` for a hundred ticks, measured at 32 % of
        // its prediction; the factors of `config` and of configuration 2
        // (never run) then.
        let run = |config: u32| {
            let running = [config, 0];
            for _ in 0..100 {
                c.observe(&state(), &running, &[Some(32.0), None])
                    .expect("observe");
            }
            let table = c.predict_table(&state(), &running).expect("table");
            (table[config as usize] / 100.0, table[2] / 100.0)
        };
        let (ran, never) = run(0);
        assert!((ran - 0.32).abs() < 0.02, "{ran}");
        let shared = (0.6 * 0.32f32.ln()).exp();
        assert!((never - shared).abs() < 0.05, "{never} against {shared}");
        let (both, still_never) = run(1);
        assert!((both - 0.32).abs() < 0.03, "{both}");
        assert!(
            still_never < never - 0.03 && still_never > 0.32,
            "{still_never} after {never}"
        );
    }

    /// A reading of 1e300 or of −5 or NaN moves nothing past the bound;
    /// factors stay within [1/4, 4].
    #[test]
    fn wild_readings_are_bounded_or_skipped() {
        let problem = paper_n2();
        let c = corrected(&problem);
        let running = vec![1u32, 2];
        for m in [Some(-5.0), Some(f64::NAN), Some(f64::INFINITY), Some(0.0)] {
            c.observe(&state(), &running, &[m, m]).expect("observe");
        }
        assert_eq!(c.rejected(), 8);
        for _ in 0..100 {
            c.observe(&state(), &running, &[Some(1e300), Some(1e-300)])
                .expect("observe");
        }
        let m = c.models(&running);
        assert!(
            m[0].running_factor <= 4.0 + 1e-9 && m[0].running_factor > 3.0,
            "{m:?}"
        );
        assert!(
            m[1].running_factor >= 0.25 - 1e-9 && m[1].running_factor < 0.34,
            "{m:?}"
        );
    }

    /// The alarm starts after `drift_after` observations beyond twice the
    /// held-out error (10 % here: a 20 % bound), once, and stops once the
    /// recent mean is back within it.
    #[test]
    fn drift_starts_after_consecutive_misses_and_stops_when_back() {
        let problem = paper_n2();
        let c = corrected(&problem);
        let running = vec![0u32, 0];
        let mut edges = Vec::new();
        for _ in 0..10 {
            edges.extend(
                c.observe(&state(), &running, &[Some(150.0), Some(105.0)])
                    .expect("observe"),
            );
        }
        assert_eq!(edges.len(), 1, "{edges:?}");
        assert!(
            matches!(edges[0], DriftEdge::Started { model: 0, .. }),
            "{edges:?}"
        );
        assert!(c.models(&running)[0].drifting);
        assert!(!c.models(&running)[1].drifting);
        let mut back = Vec::new();
        for _ in 0..200 {
            back.extend(
                c.observe(&state(), &running, &[Some(100.0), Some(100.0)])
                    .expect("observe"),
            );
        }
        assert_eq!(back.len(), 1, "{back:?}");
        assert!(
            matches!(back[0], DriftEdge::Stopped { model: 0, .. }),
            "{back:?}"
        );
    }

    /// The configurations tracked per model are bounded.
    #[test]
    fn the_configurations_tracked_are_bounded() {
        let problem = paper_n2();
        let mut c = Correction::new(&problem, CorrectionConfig::default(), &[]);
        c.max_tracked = 3;
        let grid = problem.models[0].grid_size() as u32;
        assert!(grid > 3);
        for k in 0..grid {
            c.observe(&[k, 0], &[100.0, 100.0], &[Some(90.0), None]);
        }
        assert_eq!(c.models[0].configs.len(), 3);
        // The most recent configurations are the ones kept.
        assert!(c.models[0].configs.contains_key(&(grid - 1)));
    }

    /// A predictor of 200 × (1 − utilisation) for everything: a model's
    /// configurations look better from a lighter state.
    struct Contended(u64, usize);

    impl Predictor for Contended {
        fn joint_size(&self) -> u64 {
            self.0
        }
        fn predict_table(&self, s: &GpuState, _: &[u32]) -> Result<Vec<f32>, PredictError> {
            Ok(vec![(200.0 * (1.0 - s.utilization)) as f32; self.1])
        }
        fn predict_in_space(
            &self,
            s: &GpuState,
            running: &[u32],
            candidates: InSpace<'_>,
        ) -> Result<Vec<f32>, PredictError> {
            let t = (200.0 * (1.0 - s.utilization)) as f32;
            Ok(vec![t; candidates.len() * running.len()])
        }
    }

    /// A configuration left while its floor was predicted unmet is predicted
    /// at most what it was then, from a lighter state too, for its hold and
    /// at its load or higher; forced out again soon after, it holds twice as
    /// long; a change its floor did not force (against the floor the tick
    /// decided with, held at its reach), or a memory turned off, remembers
    /// nothing.
    #[test]
    fn a_configuration_its_floor_forced_out_is_not_predicted_back_above_it() {
        let problem = paper_n2();
        let offsets = table_offsets(&problem);
        let contended = |forced_out_ticks| {
            let correction = Correction::new(
                &problem,
                CorrectionConfig {
                    forced_out_ticks,
                    ..CorrectionConfig::default()
                },
                &[],
            );
            let inner = Arc::new(Contended(problem.space().size(), offsets[2]));
            Corrected::new(inner, &problem, correction)
        };
        let at = |utilization, workload| GpuState {
            workload,
            utilization,
            ..state()
        };
        let (heavy, light) = (
            at(0.75, WorkloadLevel::Medium),
            at(0.5, WorkloadLevel::Medium),
        );
        let floors = [60.0, 0.0];
        let c = contended(30);
        let left = c
            .forced_out(&heavy, &[1, 0], &[0, 0], &floors)
            .expect("settled");
        assert_eq!(
            left,
            vec![ForcedOut {
                model: 0,
                config: 1,
                predicted: 50.0,
                floor: 60.0,
                workload: WorkloadLevel::Medium,
                ticks: 30,
            }]
        );
        let table = c.predict_table(&light, &[0, 0]).expect("table");
        assert_eq!((table[0], table[1], table[2]), (100.0, 50.0, 100.0));
        assert!(table[offsets[1]..].iter().all(|&t| t == 100.0));
        let index = problem.space().index(&[1, 0]).expect("in space");
        let joint = c.predict_joint(&light, &[0, 0], &[index]).expect("joint");
        assert_eq!(joint, vec![50.0, 100.0]);
        // Under a lower load it is predicted as the surrogate says.
        let low = at(0.5, WorkloadLevel::Low);
        assert_eq!(c.predict_table(&low, &[0, 0]).expect("table")[1], 100.0);
        // Its hold runs out after 30 ticks.
        for _ in 0..29 {
            assert!(
                c.forced_out(&light, &[0, 0], &[0, 0], &floors)
                    .expect("settled")
                    .is_empty()
            );
        }
        assert_eq!(c.predict_table(&light, &[0, 0]).expect("table")[1], 50.0);
        c.forced_out(&light, &[0, 0], &[0, 0], &floors)
            .expect("settled");
        assert_eq!(c.predict_table(&light, &[0, 0]).expect("table")[1], 100.0);
        // Back on it and forced out again at once: twice as long.
        let again = c
            .forced_out(&heavy, &[1, 0], &[0, 0], &floors)
            .expect("settled");
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].ticks, 60);
        // Leaving a configuration predicted to keep its floor is a choice,
        // not a floor's: nothing remembered.
        let c = contended(30);
        assert!(
            c.forced_out(&light, &[1, 0], &[0, 0], &floors)
                .expect("settled")
                .is_empty()
        );
        assert_eq!(c.predict_table(&heavy, &[0, 0]).expect("table")[1], 50.0);
        assert_eq!(c.predict_table(&light, &[0, 0]).expect("table")[1], 100.0);
        // A floor out of every configuration's reach counts at the edge it was
        // held at: a configuration left above it was not forced out.
        let c = contended(30);
        let held_at = [45.0, 0.0];
        let left = c.forced_out(&heavy, &[1, 0], &[0, 0], &held_at);
        assert!(left.expect("settled").is_empty());
        assert_eq!(c.predict_table(&light, &[0, 0]).expect("table")[1], 100.0);
        // Turned off, nothing is remembered.
        let off = contended(0);
        assert!(
            off.forced_out(&heavy, &[1, 0], &[0, 0], &floors)
                .expect("settled")
                .is_empty()
        );
        assert_eq!(off.predict_table(&light, &[0, 0]).expect("table")[1], 100.0);
    }

    #[test]
    fn nonsense_settings_are_refused_naming_the_key() {
        let bad = CorrectionConfig {
            max_factor: 1.0,
            ..CorrectionConfig::default()
        };
        assert!(bad.check().expect_err("refused").contains("max_factor"));
        let huge = CorrectionConfig {
            max_factor: 1e308,
            ..CorrectionConfig::default()
        };
        assert!(huge.check().expect_err("refused").contains("at most 1000"));
        let forever = CorrectionConfig {
            forced_out_ticks: MAX_FORCED_OUT_TICKS + 1,
            ..CorrectionConfig::default()
        };
        assert!(
            forever
                .check()
                .expect_err("refused")
                .contains("forced_out_ticks")
        );
        assert!(CorrectionConfig::default().check().is_ok());
    }
}
