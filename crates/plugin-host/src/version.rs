//! Which versions of the WIT package `mfsched:scheduler` this host accepts:
//! the rule of `docs/wit-versioning.md`, checked when a component is loaded so
//! an incompatible one is refused with both versions named instead of failing
//! later with a missing-import error.

use super::bindings::{PACKAGE, VERSION};
use std::fmt;

/// A `major.minor.patch` version; a pre-release or build suffix is kept for
/// display but plays no part in compatibility.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    text: String,
}

impl WitVersion {
    /// Parses `1.2.3`, `0.1.0-rc.1`, `0.1.0+build`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
        let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next()??);
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            major,
            minor,
            patch,
            text: text.to_string(),
        })
    }

    /// The version of `wit/` this host was built with.
    pub fn host() -> Self {
        Self::parse(VERSION).expect("bindings::VERSION is a valid semver")
    }

    /// Whether a host at `self` runs a component built against `plugin`:
    /// the same major; for 0.x the same minor too (0.x minors may break);
    /// from 1.0 on, a plugin minor no newer than the host's (a newer minor may
    /// import functions this host does not provide). Patches never matter.
    pub fn accepts(&self, plugin: &WitVersion) -> bool {
        if self.major != plugin.major {
            return false;
        }
        if self.major == 0 {
            self.minor == plugin.minor
        } else {
            plugin.minor <= self.minor
        }
    }

    /// The range this host accepts, for messages: `0.1.x` or `1.0 to 1.3`.
    pub fn accepted_range(&self) -> String {
        if self.major == 0 {
            format!("{PACKAGE}@0.{}.x", self.minor)
        } else {
            format!(
                "{PACKAGE}@{}.0.0 up to {PACKAGE}@{}.{}.x",
                self.major, self.major, self.minor
            )
        }
    }
}

impl fmt::Display for WitVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Checks every version of `mfsched:scheduler` a component refers to (an
/// import or export name `mfsched:scheduler/IFACE@VERSION`) against this host.
/// The error names the component's version and the host's, and what to do.
pub fn check_component_versions<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), String> {
    let host = WitVersion::host();
    for name in names {
        let Some((_, version)) = name
            .strip_prefix(PACKAGE)
            .and_then(|rest| rest.split_once('@'))
        else {
            continue;
        };
        let ok = WitVersion::parse(version).is_some_and(|v| host.accepts(&v));
        if !ok {
            return Err(format!(
                "built against {PACKAGE}@{version}, which this host ({PACKAGE}@{host}) does not accept \
                 (it accepts {}; see docs/wit-versioning.md): rebuild the component against the WIT \
                 of this mfsched (`mfsched plugins wit` writes it; Rust policies: the mfsched-sdk crate of this version, Rust utilities: mfsched-utility-sdk)",
                host.accepted_range()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> WitVersion {
        WitVersion::parse(s).expect("valid in the test")
    }

    #[test]
    fn zero_x_accepts_only_the_same_minor() {
        let host = v("0.1.0");
        assert!(host.accepts(&v("0.1.0")));
        assert!(host.accepts(&v("0.1.7")));
        assert!(host.accepts(&v("0.1.1-rc.1")));
        assert!(!host.accepts(&v("0.2.0")));
        assert!(!host.accepts(&v("0.0.9")));
        assert!(!host.accepts(&v("1.1.0")));
    }

    #[test]
    fn from_one_on_a_host_accepts_older_minors_of_its_major() {
        let host = v("1.3.2");
        assert!(host.accepts(&v("1.0.0")));
        assert!(host.accepts(&v("1.3.9")));
        assert!(!host.accepts(&v("1.4.0")));
        assert!(!host.accepts(&v("2.0.0")));
        assert!(!host.accepts(&v("0.3.0")));
    }

    #[test]
    fn the_host_version_is_the_one_in_wit() {
        let wit = include_str!("../../../wit/scheduler.wit");
        assert!(
            wit.lines()
                .any(|l| l.trim() == format!("package {PACKAGE}@{VERSION};")),
            "bindings::VERSION differs from the package line of wit/scheduler.wit"
        );
    }

    #[test]
    fn malformed_versions_do_not_parse() {
        for bad in ["", "1", "1.2", "1.2.3.4", "a.b.c", "1..3"] {
            assert!(WitVersion::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn an_incompatible_component_is_refused_naming_both_versions() {
        let err =
            check_component_versions(["wasi:io/streams@0.2.6", "mfsched:scheduler/types@0.1.0"])
                .expect_err("0.1.0 is not accepted by a 0.4 host");
        assert!(err.contains("mfsched:scheduler@0.1.0"), "{err}");
        assert!(
            err.contains(&format!("mfsched:scheduler@{VERSION}")),
            "{err}"
        );
        assert!(check_component_versions(["mfsched:scheduler/surrogate@0.4.0"]).is_ok());
        // 0.4.0 changed the problem record: a 0.3 component is rebuilt.
        assert!(check_component_versions(["mfsched:scheduler/surrogate@0.3.0"]).is_err());
        assert!(check_component_versions(["mfsched:scheduler/surrogate@0.5.0"]).is_err());
        assert!(check_component_versions(["mfsched:scheduler/types@garbage"]).is_err());
    }
}
