//! A domain's descriptor rules as a tree, and the match walk over it.

use super::{EnvoyProblem, MatchedRule};
use std::collections::HashMap;

/// One domain from one file. Rules live in an arena; levels index into it.
#[derive(Clone, Debug)]
pub(super) struct DomainTree {
    domain: String,
    file: String,
    nodes: Vec<Node>,
    root: Level,
}

#[derive(Clone, Debug)]
pub(super) struct Node {
    /// Set when the rule has a `rate_limit`.
    pub(super) rule: Option<MatchedRule>,
    pub(super) children: Level,
    /// From the domain's top level down to this rule.
    pub(super) path: Vec<Segment>,
    /// Where the rule is in its file: `descriptors[0].descriptors[2]`.
    pub(super) at: String,
}

/// One step of a rule's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    pub(super) key: String,
    pub(super) value: SegmentValue,
    /// Every value matching the wildcard shares one counter.
    pub(super) share_threshold: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum SegmentValue {
    Any,
    Exact(String),
    Wildcard(String),
}

/// The rules at one nesting level, grouped by key for allocation-free lookups.
#[derive(Clone, Debug, Default)]
pub(super) struct Level {
    by_key: HashMap<String, KeyGroup>,
}

#[derive(Clone, Debug, Default)]
struct KeyGroup {
    exact: HashMap<String, usize>,
    /// In file order: the first match wins.
    wildcards: Vec<(Pattern, usize)>,
    any: Option<usize>,
}

/// A value pattern split on `*` once at load, so matching allocates nothing.
#[derive(Clone, Debug)]
struct Pattern {
    text: String,
    parts: Vec<String>,
}

impl Pattern {
    fn new(text: &str) -> Pattern {
        Pattern {
            text: text.to_owned(),
            parts: text.split('*').map(str::to_owned).collect(),
        }
    }

    /// Each `*` matches any run of characters, including none.
    fn matches(&self, value: &str) -> bool {
        let (first, rest) = match self.parts.split_first() {
            Some(split) => split,
            None => return value.is_empty(),
        };
        let Some((last, middle)) = rest.split_last() else {
            return value == first;
        };
        if value.len() < first.len() + last.len() {
            return false;
        }
        if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
            return false;
        }
        let mut remaining = &value[first.len()..value.len() - last.len()];
        for part in middle {
            match remaining.find(part.as_str()) {
                Some(at) => remaining = &remaining[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

impl Level {
    pub(super) fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Registers rule `index` for `segment`; refuses a second rule with the same key and
    /// value.
    pub(super) fn insert(&mut self, segment: &Segment, index: usize) -> Result<(), EnvoyProblem> {
        let group = self.by_key.entry(segment.key.clone()).or_default();
        let duplicate = |value: &str| EnvoyProblem::DuplicateRule {
            key: segment.key.clone(),
            value: value.to_owned(),
        };
        match &segment.value {
            SegmentValue::Any if group.any.is_some() => return Err(duplicate("")),
            SegmentValue::Any => group.any = Some(index),
            SegmentValue::Exact(v) => {
                if group.exact.insert(v.clone(), index).is_some() {
                    return Err(duplicate(&format!(" and value '{v}'")));
                }
            }
            SegmentValue::Wildcard(p) => {
                if group.wildcards.iter().any(|(q, _)| &q.text == p) {
                    return Err(duplicate(&format!(" and value '{p}'")));
                }
                group.wildcards.push((Pattern::new(p), index));
            }
        }
        Ok(())
    }

    /// The rule an entry picks here: same value, else first matching wildcard, else the
    /// key-only rule.
    fn find(&self, key: &str, value: &str) -> Option<usize> {
        let group = self.by_key.get(key)?;
        if let Some(index) = group.exact.get(value) {
            return Some(*index);
        }
        group
            .wildcards
            .iter()
            .find(|(pattern, _)| pattern.matches(value))
            .map(|(_, index)| *index)
            .or(group.any)
    }
}

impl DomainTree {
    pub(super) fn new(domain: String, file: String) -> DomainTree {
        DomainTree {
            domain,
            file,
            nodes: Vec::new(),
            root: Level::default(),
        }
    }

    pub(super) fn domain(&self) -> &str {
        &self.domain
    }

    pub(super) fn file(&self) -> &str {
        &self.file
    }

    pub(super) fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub(super) fn rule_count(&self) -> usize {
        self.nodes.len()
    }

    /// Adds a rule under `parent` (`None`: the top level) and returns its index.
    pub(super) fn add(&mut self, parent: Option<usize>, node: Node) -> Result<usize, EnvoyProblem> {
        let index = self.nodes.len();
        let segment = node.path.last().cloned().ok_or(EnvoyProblem::Empty)?;
        let level = match parent {
            Some(p) => &mut self.nodes[p].children,
            None => &mut self.root,
        };
        level.insert(&segment, index)?;
        self.nodes.push(node);
        Ok(index)
    }

    /// The rule matched by the request's last entry, walking one level per entry.
    pub(super) fn lookup(&self, entries: &[(&str, &str)]) -> Option<&MatchedRule> {
        let last = entries.len().checked_sub(1)?;
        let mut level = &self.root;
        for (i, (key, value)) in entries.iter().enumerate() {
            let node = &self.nodes[level.find(key, value)?];
            if i == last {
                return node.rule.as_ref();
            }
            if node.children.is_empty() {
                return None;
            }
            level = &node.children;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    #[test]
    fn wildcards_match_runs_of_characters() {
        let cases = [
            ("/files/*", "/files/a.pdf", true),
            ("/files/*", "/files/", true),
            ("/files/*", "/file", false),
            ("*", "", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ];
        for (pattern, value, expected) in cases {
            let got = Pattern::new(pattern).matches(value);
            assert_eq!(got, expected, "{pattern} vs {value}");
        }
    }
}
