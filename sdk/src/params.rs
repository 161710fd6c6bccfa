//! Policy parameters: the `key=value` list the host passes, checked against
//! the policy's schema so a typo is an error, not a silent default, and read
//! as typed values with typed errors.
//!
//! The host already refuses undeclared keys and passes every declared default
//! explicitly; checking again here keeps a policy honest when it is called by
//! anything else (a test, another host version).
//!
//! ```
//! use mfsched_sdk::params::{ParamError, Params, spec};
//! use mfsched_sdk::types::Param;
//!
//! let schema = vec![spec("rounds", "8", "passes over the models")];
//! let given = vec![Param { key: "rounds".into(), value: "12".into() }];
//! let params = Params::parse(given, schema.clone()).unwrap();
//! assert_eq!(params.u64_in("rounds", 1, 100), Ok(12));
//!
//! let typo = vec![Param { key: "rouns".into(), value: "12".into() }];
//! assert!(matches!(Params::parse(typo, schema), Err(ParamError::Unknown { .. })));
//! ```

use crate::types::{Param, ParamSpec};

/// The parameter the host always passes (a decimal `u64`); a policy never
/// declares it.
pub const SEED: &str = "seed";

/// Why a parameter could not be used. Converts into the `String` a refusal
/// carries, so `?` works in `decide`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// A key the schema does not declare.
    #[error("unknown parameter '{key}' (known: {})", known_list(.known))]
    Unknown { key: String, known: Vec<String> },
    /// Not a non-negative integer.
    #[error("parameter '{key}' must be a non-negative integer, got '{value}'")]
    NotAnInteger { key: String, value: String },
    /// Not a number.
    #[error("parameter '{key}' must be a number, got '{value}'")]
    NotANumber { key: String, value: String },
    /// A number outside its range.
    #[error("parameter '{key}' must be in {range}, got {value}")]
    OutOfRange {
        key: String,
        value: String,
        range: String,
    },
    /// Not one of the allowed words.
    #[error("parameter '{key}' must be one of {}, got '{value}'", .choices.join(", "))]
    NotAChoice {
        key: String,
        value: String,
        choices: Vec<String>,
    },
}

fn known_list(known: &[String]) -> String {
    std::iter::once(SEED)
        .chain(known.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(", ")
}

impl From<ParamError> for String {
    fn from(e: ParamError) -> Self {
        e.to_string()
    }
}

/// Parameters after checking: every key known, values still text.
#[derive(Debug, Clone)]
pub struct Params {
    given: Vec<Param>,
    schema: Vec<ParamSpec>,
}

impl Params {
    /// Rejects keys the schema does not name (`seed` is always allowed).
    pub fn parse(given: Vec<Param>, schema: Vec<ParamSpec>) -> Result<Self, ParamError> {
        if let Some(p) = given
            .iter()
            .find(|p| p.key != SEED && !schema.iter().any(|s| s.name == p.key))
        {
            return Err(ParamError::Unknown {
                key: p.key.clone(),
                known: schema.iter().map(|s| s.name.clone()).collect(),
            });
        }
        Ok(Self { given, schema })
    }

    /// The given value, else the schema default, else `None`.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.given
            .iter()
            .rev()
            .find(|p| p.key == key)
            .map(|p| p.value.as_str())
            .or_else(|| {
                self.schema
                    .iter()
                    .find(|s| s.name == key)
                    .map(|s| s.default_value.as_str())
            })
    }

    /// The `seed` the host passes (0 when called without one): draw every
    /// random number from it, e.g. through [`crate::Rng`].
    pub fn seed(&self) -> Result<u64, ParamError> {
        self.u64_or(SEED, 0)
    }

    fn u64_or(&self, key: &str, default: u64) -> Result<u64, ParamError> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| ParamError::NotAnInteger {
                key: key.to_owned(),
                value: v.to_owned(),
            }),
        }
    }

    /// An integer parameter in `[min, max]` (`min` when absent everywhere).
    pub fn u64_in(&self, key: &str, min: u64, max: u64) -> Result<u64, ParamError> {
        let v = self.u64_or(key, min)?;
        if !(min..=max).contains(&v) {
            return Err(ParamError::OutOfRange {
                key: key.to_owned(),
                value: v.to_string(),
                range: format!("{min}..={max}"),
            });
        }
        Ok(v)
    }

    /// A real parameter in `[min, max]`.
    pub fn f64_in(&self, key: &str, min: f64, max: f64) -> Result<f64, ParamError> {
        let text = self.raw(key).unwrap_or("");
        let v: f64 = text.trim().parse().map_err(|_| ParamError::NotANumber {
            key: key.to_owned(),
            value: text.to_owned(),
        })?;
        if !(min..=max).contains(&v) {
            return Err(ParamError::OutOfRange {
                key: key.to_owned(),
                value: v.to_string(),
                range: format!("[{min}, {max}]"),
            });
        }
        Ok(v)
    }

    /// A parameter that must be one of `choices`.
    pub fn choice<'a>(&self, key: &str, choices: &[&'a str]) -> Result<&'a str, ParamError> {
        let v = self.raw(key).unwrap_or("");
        choices
            .iter()
            .find(|c| **c == v)
            .copied()
            .ok_or_else(|| ParamError::NotAChoice {
                key: key.to_owned(),
                value: v.to_owned(),
                choices: choices.iter().map(|c| (*c).to_owned()).collect(),
            })
    }
}

/// Shorthand for a schema entry.
pub fn spec(name: &str, default_value: &str, description: &str) -> ParamSpec {
    ParamSpec {
        name: name.into(),
        default_value: default_value.into(),
        description: description.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given(pairs: &[(&str, &str)]) -> Vec<Param> {
        pairs
            .iter()
            .map(|(k, v)| Param {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect()
    }

    #[test]
    fn values_are_typed_and_errors_name_the_parameter() {
        let schema = vec![
            spec("rounds", "8", ""),
            spec("rate", "0.5", ""),
            spec("mode", "fast", ""),
        ];
        let p = Params::parse(given(&[("seed", "7"), ("rounds", "x")]), schema.clone())
            .expect("known keys");
        assert_eq!(p.seed(), Ok(7));
        assert_eq!(
            p.u64_in("rounds", 1, 10),
            Err(ParamError::NotAnInteger {
                key: "rounds".into(),
                value: "x".into()
            })
        );
        assert_eq!(p.f64_in("rate", 0.0, 1.0), Ok(0.5), "the schema default");
        assert_eq!(p.choice("mode", &["fast", "slow"]), Ok("fast"));
        let p = Params::parse(given(&[("rate", "2")]), schema.clone()).expect("known");
        let e = p.f64_in("rate", 0.0, 1.0).expect_err("out of range");
        assert_eq!(e.to_string(), "parameter 'rate' must be in [0, 1], got 2");
        let e = Params::parse(given(&[("rouns", "1")]), schema).expect_err("a typo");
        assert_eq!(
            String::from(e),
            "unknown parameter 'rouns' (known: seed, rounds, rate, mode)"
        );
    }
}
