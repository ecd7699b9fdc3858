//! Field-by-field differences between two policies, for review before apply.

use super::Policy;
use serde_norway::{Mapping, Value};
use std::fmt::{self, Write};

/// One changed field. `None` on a side means the field is absent there; a block that
/// appears or disappears as a whole is one change showing the whole block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldChange {
    /// Same path form as validation errors: `lease.ttl`, `dimensions[1].lowercase`.
    pub path: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

impl fmt::Display for FieldChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.old, &self.new) {
            (Some(old), Some(new)) => write!(f, "{}: {old} -> {new}", self.path),
            (None, Some(new)) => write!(f, "{}: added {new}", self.path),
            (Some(old), None) => write!(f, "{}: removed (was {old})", self.path),
            (None, None) => write!(f, "{}: unchanged", self.path),
        }
    }
}

/// Every field that differs between `old` and `new`, in document order. Lists are
/// compared position by position. Defaults count as values, so a field that only moved
/// from implicit to explicit with the same value is not a change.
///
/// A domain's envoyproxy/ratelimit YAML (`ratelimit`) is compared field by field too
/// (`ratelimit.descriptors[0].rate_limit.requests_per_unit`); a text that changed only in
/// comments or layout is one change saying so, since it still makes a new version.
pub fn diff(old: &Policy, new: &Policy) -> Vec<FieldChange> {
    let mut changes = Vec::new();
    // Serialising plain data to a YAML value does not fail; were it to, the whole
    // document would show as changed rather than hiding a change.
    let mut old_value = serde_norway::to_value(old).unwrap_or(Value::Null);
    let mut new_value = serde_norway::to_value(new).unwrap_or(Value::Null);
    expand_ratelimit(&mut old_value);
    expand_ratelimit(&mut new_value);
    walk(
        String::new(),
        Some(&old_value),
        Some(&new_value),
        &mut changes,
    );
    let rules_changed = changes.iter().any(|c| c.path.starts_with("ratelimit"));
    if old.ratelimit != new.ratelimit && !rules_changed {
        let size = |text: &Option<String>| text.as_ref().map(|t| format!("{} bytes", t.len()));
        changes.push(FieldChange {
            path: "ratelimit".into(),
            old: size(&old.ratelimit),
            new: size(&new.ratelimit).map(|s| format!("{s}, only comments or layout changed")),
        });
    }
    changes
}

/// Replaces the `ratelimit` text by the YAML it holds, so that it is compared field by field.
fn expand_ratelimit(policy: &mut Value) {
    let Value::Mapping(fields) = policy else {
        return;
    };
    let parsed = match fields.get("ratelimit") {
        Some(Value::String(text)) => serde_norway::from_str::<Value>(text).ok(),
        _ => None,
    };
    if let Some(parsed) = parsed {
        fields.insert(Value::String("ratelimit".into()), parsed);
    }
}

fn walk(path: String, old: Option<&Value>, new: Option<&Value>, out: &mut Vec<FieldChange>) {
    if old == new {
        return;
    }
    match (old, new) {
        (Some(Value::Mapping(a)), Some(Value::Mapping(b))) => {
            for key in merged_keys(a, b) {
                let name = key.as_str().unwrap_or_default();
                walk(join(&path, name), a.get(key), b.get(key), out);
            }
        }
        (Some(Value::Sequence(a)), Some(Value::Sequence(b))) => {
            for i in 0..a.len().max(b.len()) {
                walk(format!("{path}[{i}]"), a.get(i), b.get(i), out);
            }
        }
        _ => out.push(FieldChange {
            path,
            old: old.map(render),
            new: new.map(render),
        }),
    }
}

/// Keys of both mappings in document order. Both were written from the same struct,
/// so each lists its keys in the struct's field order and a two-way merge recovers it.
fn merged_keys<'v>(a: &'v Mapping, b: &'v Mapping) -> Vec<&'v Value> {
    let (a, b): (Vec<&Value>, Vec<&Value>) = (a.keys().collect(), b.keys().collect());
    let (mut i, mut j) = (0, 0);
    let mut keys = Vec::with_capacity(a.len().max(b.len()));
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                keys.push(*x);
                i += 1;
                j += 1;
            }
            (Some(x), _) if !b.contains(x) => {
                keys.push(*x);
                i += 1;
            }
            (_, Some(y)) => {
                keys.push(*y);
                j += 1;
            }
            (Some(x), None) => {
                keys.push(*x);
                i += 1;
            }
            (None, None) => break,
        }
    }
    keys
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// One line, in YAML flow style: `{name: batch, priority: 1}`.
fn render(v: &Value) -> String {
    let mut out = String::new();
    render_into(&mut out, v);
    out
}

fn render_into(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => out.push_str(s),
        Value::Sequence(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render_into(out, item);
            }
            out.push(']');
        }
        Value::Mapping(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render_into(out, k);
                out.push_str(": ");
                render_into(out, item);
            }
            out.push('}');
        }
        Value::Tagged(tagged) => {
            let _ = write!(out, "{} ", tagged.tag);
            render_into(out, &tagged.value);
        }
    }
}
