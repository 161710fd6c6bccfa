//! The templates of the real-server actuators: `{name}` placeholders in argv,
//! environment entries, URLs, model names and the JSON documents (load bodies,
//! settings files) made from TOML tables.
//!
//! A placeholder is `{` + a name (letters, digits, `_`, `-`, `.`, not starting
//! with a digit) + `}`; any other brace is literal text, so JSON in a template
//! needs no escaping. The names are `model`, `variant`, each knob of the model
//! and the entry's `vars`. Every template is checked against them when the
//! actuators start, so a name that is not there is one error naming its config
//! key before anything is applied. In a JSON document, a string that is exactly
//! one placeholder takes the value's type (a knob's integer stays a number).

use anyhow::{Result, bail};
use std::collections::BTreeMap;

use mfsched_core::{KnobSetting, KnobValue, Model};

/// What the placeholders of one model's templates stand for.
#[derive(Debug, Clone, PartialEq)]
pub struct Values(BTreeMap<String, serde_json::Value>);

impl Values {
    /// `model`, `variant`, every knob's value, and the constants `vars`.
    pub fn new(model: &str, setting: &KnobSetting, vars: &BTreeMap<String, String>) -> Self {
        let mut v = BTreeMap::new();
        for (name, value) in vars {
            v.insert(name.clone(), serde_json::Value::String(value.clone()));
        }
        v.insert("model".to_owned(), model.into());
        v.insert("variant".to_owned(), setting.variant.clone().into());
        for (knob, value) in &setting.knobs {
            let json = match value {
                KnobValue::Integer(i) => serde_json::Value::from(*i),
                KnobValue::Real(r) => serde_json::Value::from(*r),
                KnobValue::Category(c) => serde_json::Value::from(c.clone()),
            };
            v.insert(knob.clone(), json);
        }
        Self(v)
    }

    fn text(&self, name: &str) -> Option<String> {
        self.0.get(name).map(|v| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }
}

/// The names a model's templates may use.
pub fn known_names(model: &Model, vars: &BTreeMap<String, String>) -> Vec<String> {
    let mut names: Vec<String> = ["model", "variant"].map(str::to_owned).into();
    names.extend(model.knobs.iter().map(|k| k.name.clone()));
    names.extend(vars.keys().cloned());
    names
}

/// The placeholders of `template`, in order, as (start, end, name) byte spans.
fn placeholders(template: &str) -> Vec<(usize, usize, &str)> {
    let bytes = template.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' {
            let start = i + 1;
            let mut j = start;
            while j < bytes.len()
                && (bytes[j].is_ascii_alphanumeric() || matches!(bytes[j], b'_' | b'-' | b'.'))
            {
                j += 1;
            }
            if j > start && j < bytes.len() && bytes[j] == b'}' && !bytes[start].is_ascii_digit() {
                found.push((i, j + 1, &template[start..j]));
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    found
}

/// Fails, naming `key`, when `template` uses a name not in `known`.
pub fn check(key: &str, template: &str, known: &[String]) -> Result<()> {
    for (_, _, name) in placeholders(template) {
        if !known.iter().any(|k| k == name) {
            bail!(
                "{key}: the template '{template}' names '{{{name}}}', which is not a knob of the model nor one of: {}",
                known.join(", ")
            );
        }
    }
    Ok(())
}

/// Checks every string of a TOML table (keys `key.a.b`, arrays `key.a[2]`).
pub fn check_table(key: &str, table: &toml::Table, known: &[String]) -> Result<()> {
    for (k, v) in table {
        check_value(&format!("{key}.{k}"), v, known)?;
    }
    Ok(())
}

fn check_value(key: &str, value: &toml::Value, known: &[String]) -> Result<()> {
    match value {
        toml::Value::String(s) => check(key, s, known),
        toml::Value::Table(t) => check_table(key, t, known),
        toml::Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, v)| check_value(&format!("{key}[{i}]"), v, known)),
        _ => Ok(()),
    }
}

/// `template` with every placeholder replaced (checked names only: an unknown
/// one is left as it is, which [`check`] has ruled out).
pub fn render(template: &str, values: &Values) -> String {
    let mut out = String::with_capacity(template.len());
    let mut at = 0;
    for (start, end, name) in placeholders(template) {
        out.push_str(&template[at..start]);
        match values.text(name) {
            Some(v) => out.push_str(&v),
            None => out.push_str(&template[start..end]),
        }
        at = end;
    }
    out.push_str(&template[at..]);
    out
}

/// A TOML table as a JSON object, its strings rendered.
pub fn render_table(table: &toml::Table, values: &Values) -> serde_json::Value {
    serde_json::Value::Object(
        table
            .iter()
            .map(|(k, v)| (k.clone(), render_value(v, values)))
            .collect(),
    )
}

fn render_value(value: &toml::Value, values: &Values) -> serde_json::Value {
    match value {
        toml::Value::String(s) => {
            let spans = placeholders(s);
            if let [(0, end, name)] = spans[..]
                && end == s.len()
                && let Some(v) = values.0.get(name)
            {
                return v.clone();
            }
            serde_json::Value::String(render(s, values))
        }
        toml::Value::Integer(i) => (*i).into(),
        toml::Value::Float(f) => (*f).into(),
        toml::Value::Boolean(b) => (*b).into(),
        toml::Value::Datetime(d) => d.to_string().into(),
        toml::Value::Array(a) => a.iter().map(|v| render_value(v, values)).collect(),
        toml::Value::Table(t) => render_table(t, values),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Values {
        let setting = KnobSetting {
            variant: "int8".into(),
            knobs: [
                ("threads".to_owned(), KnobValue::Integer(2)),
                ("mode".to_owned(), KnobValue::Category("fast".into())),
            ]
            .into(),
        };
        Values::new(
            "det",
            &setting,
            &[("port".to_owned(), "9001".to_owned())].into(),
        )
    }

    #[test]
    fn placeholders_are_names_in_braces_and_json_braces_are_text() {
        let v = values();
        assert_eq!(
            render(
                "{\"a\": {threads}, \"b\": \"{model}_{variant}\"} {} {1x} {port}",
                &v
            ),
            "{\"a\": 2, \"b\": \"det_int8\"} {} {1x} 9001"
        );
        let known: Vec<String> = ["model", "variant", "threads"].map(str::to_owned).into();
        assert!(check("k", "{\"x\": {threads}}", &known).is_ok());
        let err = check("actuator.process.models.det.argv[2]", "-t {thread}", &known)
            .expect_err("unknown")
            .to_string();
        assert!(
            err.starts_with("actuator.process.models.det.argv[2]:") && err.contains("'{thread}'"),
            "{err}"
        );
    }

    #[test]
    fn a_whole_placeholder_keeps_its_type_in_json() {
        let table: toml::Table =
            toml::from_str("name = \"{model}\"\n[parameters]\nuri = \"m-{variant}.onnx\"\nextra = { threads = \"{threads}\", mode = \"{mode}\", list = [\"{threads}\", 3] }\n")
                .expect("toml");
        let json = render_table(&table, &values());
        assert_eq!(
            json,
            serde_json::json!({"name": "det", "parameters": {"uri": "m-int8.onnx",
                "extra": {"threads": 2, "mode": "fast", "list": [2, 3]}}})
        );
        let known: Vec<String> = ["model", "threads", "mode"].map(str::to_owned).into();
        let err = check_table(
            "actuator.v2_repository.models.det.load_config",
            &table,
            &known,
        )
        .expect_err("variant unknown here")
        .to_string();
        assert!(
            err.starts_with("actuator.v2_repository.models.det.load_config.parameters.uri:"),
            "{err}"
        );
    }
}
