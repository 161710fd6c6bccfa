//! The mfsched utility SDK: what a utility component written in Rust needs,
//! with the bindings of the `utility` world of `mfsched:scheduler` already
//! generated, so a utility crate neither copies the WIT nor runs wit-bindgen.
//!
//! A utility is a `cdylib` built for `wasm32-wasip2`. An additive one (a
//! candidate's utility is the sum of one term per model, as the published one
//! is) implements [`Additive`] and exports it:
//!
//! ```ignore
//! use mfsched_utility_sdk::params::{ParamError, Params, spec};
//! use mfsched_utility_sdk::types::{ParamSpec, Problem};
//! use mfsched_utility_sdk::{Additive, Terms};
//!
//! struct Quality {
//!     /// What a configuration under its floor still earns (`-inf`: excluded).
//!     below_floor: f64,
//! }
//!
//! impl Additive for Quality {
//!     fn name() -> String {
//!         "quality where the floor is met".into()
//!     }
//!
//!     fn parameters() -> Vec<ParamSpec> {
//!         vec![spec("below-floor", "-inf", "the term of a configuration under its floor")]
//!     }
//!
//!     fn new(params: &Params) -> Result<Self, ParamError> {
//!         Ok(Self { below_floor: params.f64_in("below-floor", f64::NEG_INFINITY, 0.0)? })
//!     }
//!
//!     fn term(&self, problem: &Problem, model: usize, config: u32, throughput: f32) -> f64 {
//!         if f64::from(throughput) < problem.sla_floors[model] {
//!             return self.below_floor;
//!         }
//!         problem.models[model].configs[config as usize].quality
//!     }
//! }
//!
//! mfsched_utility_sdk::export_additive!(Quality);
//! ```
//!
//! Parameters work as a policy's do: [`Additive::parameters`] declares them,
//! the user sets them (`policy.utility_params`, `--utility-param KEY=VALUE`),
//! the host refuses a key the utility does not declare and passes every
//! declared one, given or at its default, to each call; [`Additive::new`]
//! reads them once per call with [`params::Params`]' typed getters (the policy
//! SDK's: `seed` is allowed there but never passed to a utility), and a bad
//! value is an error the host reports with the utility's name.
//!
//! A utility that is not additive implements the world's [`Guest`] itself
//! (`score`, and `terms` answering `None`) and exports it with
//! [`export_utility!`]; [`Space`] decodes the candidates' joint indices.
//!
//! Only the `utility` world is generated here (the policy world is
//! `mfsched-sdk`'s): a crate linking one world's bindings carries its type
//! section, and would be asked for that world's exports.

pub mod params;
pub mod space;

pub use params::{ParamError, Params};
pub use space::{Best, Odometer, Space};

/// The generated `utility` world of the WIT package in `wit/` (a link to the
/// repository's `wit/`). wit-bindgen's glue is FFI, hence unsafe; the lowered
/// `terms` export takes the flattened problem and table as many scalars.
#[allow(unsafe_code, clippy::too_many_arguments)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "utility",
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "export_utility",
        default_bindings_module: "mfsched_utility_sdk::bindings",
    });
}

pub use bindings::mfsched::scheduler::types;
pub use bindings::{Guest, export_utility};

use types::{Param, ParamSpec, Problem};

/// An additive utility: one term per model, from the model's local
/// configuration and its predicted throughput, under the parameters of the
/// call. [`Terms`] derives the world's exports from it.
pub trait Additive: Sized {
    /// A short human-readable name.
    fn name() -> String;

    /// The parameters it understands ([`params::spec`] makes an entry);
    /// none unless overridden.
    fn parameters() -> Vec<ParamSpec> {
        Vec::new()
    }

    /// The utility under one call's parameters (every declared one is
    /// there, given or at its default); an error refuses the call.
    fn new(params: &Params) -> Result<Self, ParamError>;

    /// Model `model`'s term when it runs local configuration `config` at
    /// `throughput` (its unit); negative infinity excludes the configuration
    /// on its own (an SLA floor broken). Called only with `config` in range.
    fn term(&self, problem: &Problem, model: usize, config: u32, throughput: f32) -> f64;
}

/// The world's exports of an [`Additive`] utility: `score` sums the terms of a
/// candidate's models (negative infinity for a candidate over the card's
/// memory or an index outside the joint space), `terms` hands the same terms
/// over for a table; both come from [`Additive::term`], so they agree, and
/// `parameters` is [`Additive::parameters`].
pub struct Terms<T>(std::marker::PhantomData<T>);

impl<T> std::fmt::Debug for Terms<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Terms")
    }
}

impl<T: Additive> Guest for Terms<T> {
    fn name() -> String {
        T::name()
    }

    fn parameters() -> Vec<ParamSpec> {
        T::parameters()
    }

    fn score(
        problem: Problem,
        params: Vec<Param>,
        candidates: Vec<u64>,
        predictions: Vec<f32>,
    ) -> Result<Vec<f64>, String> {
        let utility = configured::<T>(params)?;
        Ok(scores(&utility, &problem, &candidates, &predictions))
    }

    fn terms(
        problem: Problem,
        params: Vec<Param>,
        table: Vec<f32>,
    ) -> Result<Option<Vec<f64>>, String> {
        let utility = configured::<T>(params)?;
        Ok(Some(table_terms(&utility, &problem, &table)))
    }
}

/// `T` under `params`, checked against its schema.
fn configured<T: Additive>(params: Vec<Param>) -> Result<T, String> {
    Ok(T::new(&Params::parse(params, T::parameters())?)?)
}

/// One utility per candidate, predictions N per candidate (row-major).
pub fn scores<T: Additive>(
    utility: &T,
    problem: &Problem,
    candidates: &[u64],
    predictions: &[f32],
) -> Vec<f64> {
    let space = Space::new(problem);
    let n = space.models();
    let mut tuple = vec![0u32; n];
    candidates
        .iter()
        .enumerate()
        .map(|(c, &index)| {
            let row = predictions.get(c * n..(c + 1) * n);
            match row {
                Some(row) if index < space.size() => {
                    space.decode(index, &mut tuple);
                    if !space.fits(&tuple) {
                        return f64::NEG_INFINITY;
                    }
                    tuple
                        .iter()
                        .zip(row)
                        .enumerate()
                        .map(|(i, (&l, &t))| utility.term(problem, i, l, t))
                        .sum()
                }
                _ => f64::NEG_INFINITY,
            }
        })
        .collect()
}

/// The terms of a prediction table (laid out as `predict-table` returns it:
/// model 0's grid first, in grid order).
pub fn table_terms<T: Additive>(utility: &T, problem: &Problem, table: &[f32]) -> Vec<f64> {
    let space = Space::new(problem);
    (0..space.models())
        .flat_map(|i| (0..space.radix(i)).map(move |l| (i, l)))
        .map(
            |(i, l)| match table.get(space.table_offset(i) + l as usize) {
                Some(&t) => utility.term(problem, i, l, t),
                None => f64::NEG_INFINITY,
            },
        )
        .collect()
}

/// Exports an [`Additive`] utility: `export_additive!(MyUtility);`.
#[macro_export]
macro_rules! export_additive {
    ($t:ty) => {
        type __MfschedAdditive = $crate::Terms<$t>;
        $crate::export_utility!(__MfschedAdditive);
    };
}
