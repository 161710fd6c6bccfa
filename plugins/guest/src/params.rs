//! Policy parameters: the `key=value` list the host passes, checked against
//! the policy's schema so a typo is an error, not a silent default.

use crate::types::{Param, ParamSpec};

/// Parameters after checking: every key known, values still text.
#[derive(Debug, Clone)]
pub struct Params {
    given: Vec<Param>,
    schema: Vec<ParamSpec>,
}

impl Params {
    /// Rejects keys the schema does not name (`seed` is always allowed).
    pub fn parse(given: Vec<Param>, schema: Vec<ParamSpec>) -> Result<Self, String> {
        for p in &given {
            if p.key != "seed" && !schema.iter().any(|s| s.name == p.key) {
                let known: Vec<&str> = schema.iter().map(|s| s.name.as_str()).collect();
                return Err(format!(
                    "unknown parameter '{}' (known: seed, {})",
                    p.key,
                    known.join(", ")
                ));
            }
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

    pub fn seed(&self) -> Result<u64, String> {
        self.u64_or("seed", 0)
    }

    fn u64_or(&self, key: &str, default: u64) -> Result<u64, String> {
        match self.raw(key) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| {
                format!("parameter '{key}' must be a non-negative integer, got '{v}'")
            }),
        }
    }

    /// An integer parameter in `[min, max]`.
    pub fn u64_in(&self, key: &str, min: u64, max: u64) -> Result<u64, String> {
        let v = self.u64_or(key, min)?;
        if !(min..=max).contains(&v) {
            return Err(format!(
                "parameter '{key}' must be in {min}..={max}, got {v}"
            ));
        }
        Ok(v)
    }

    /// A real parameter in `[min, max]`.
    pub fn f64_in(&self, key: &str, min: f64, max: f64) -> Result<f64, String> {
        let text = self.raw(key).unwrap_or("");
        let v: f64 = text
            .trim()
            .parse()
            .map_err(|_| format!("parameter '{key}' must be a number, got '{text}'"))?;
        if !(min..=max).contains(&v) {
            return Err(format!(
                "parameter '{key}' must be in [{min}, {max}], got {v}"
            ));
        }
        Ok(v)
    }

    /// A parameter that must be one of `choices`.
    pub fn choice<'a>(&self, key: &str, choices: &[&'a str]) -> Result<&'a str, String> {
        let v = self.raw(key).unwrap_or("");
        choices.iter().find(|c| **c == v).copied().ok_or_else(|| {
            format!(
                "parameter '{key}' must be one of {}, got '{v}'",
                choices.join(", ")
            )
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
