//! Parsing and checking one configuration file into a [`DomainTree`].

use super::tree::{DomainTree, Level, Node, Segment, SegmentValue};
use super::{
    EnvoyError, EnvoyFieldError, EnvoyLimit, EnvoyProblem, EnvoyUnit, MatchedRule, ENVOY_DEPTH_MAX,
    ENVOY_FILES_MAX, ENVOY_FILE_LEN_MAX, ENVOY_RULES_MAX,
};
use crate::key::encode_into;
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoot {
    #[serde(default)]
    domain: String,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    #[serde(default)]
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    rate_limit: Option<RawRateLimit>,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
    #[serde(default)]
    value_to_metric: bool,
    #[serde(default)]
    share_threshold: bool,
    #[serde(default)]
    quota_mode: bool,
    /// Returned by that service only in its optional dynamic metadata; accepted and not
    /// used here.
    #[serde(default, rename = "metadata")]
    _metadata: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    #[serde(default)]
    unit: String,
    #[serde(default)]
    requests_per_unit: u32,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: String,
    #[serde(default)]
    replaces: Vec<RawReplaces>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplaces {
    #[serde(default)]
    name: String,
}

/// State of one file's load: the tree so far and every problem found.
struct Loader {
    tree: DomainTree,
    errors: Vec<EnvoyFieldError>,
}

pub(super) fn parse_file(file: &str, text: &str) -> Result<DomainTree, EnvoyError> {
    if text.len() > ENVOY_FILE_LEN_MAX {
        return Err(EnvoyError::FileTooLarge {
            file: file.to_owned(),
            len: text.len(),
            max: ENVOY_FILE_LEN_MAX,
        });
    }
    crate::policy::nesting::check_nesting(text).map_err(|message| EnvoyError::Yaml {
        file: file.to_owned(),
        message,
    })?;
    let raw: RawRoot = serde_norway::from_str(text).map_err(|e| EnvoyError::Yaml {
        file: file.to_owned(),
        message: e.to_string(),
    })?;
    let mut loader = Loader {
        tree: DomainTree::new(raw.domain.clone(), file.to_owned()),
        errors: Vec::new(),
    };
    if raw.domain.is_empty() {
        loader.problem("domain".to_owned(), EnvoyProblem::Empty);
    }
    loader.load_level(None, &[], "", &raw.descriptors);
    if loader.errors.is_empty() {
        Ok(loader.tree)
    } else {
        Err(EnvoyError::Invalid {
            file: file.to_owned(),
            errors: loader.errors,
        })
    }
}

impl Loader {
    fn problem(&mut self, path: String, problem: EnvoyProblem) {
        self.errors.push(EnvoyFieldError { path, problem });
    }

    fn load_level(
        &mut self,
        parent: Option<usize>,
        parent_path: &[Segment],
        at: &str,
        descriptors: &[RawDescriptor],
    ) {
        if descriptors.is_empty() {
            return;
        }
        if parent_path.len() >= ENVOY_DEPTH_MAX {
            let max = ENVOY_DEPTH_MAX;
            self.problem(format!("{at}descriptors"), EnvoyProblem::TooDeep { max });
            return;
        }
        for (i, raw) in descriptors.iter().enumerate() {
            let here = format!("{at}descriptors[{i}]");
            if self.tree.rule_count() >= ENVOY_RULES_MAX {
                let max = ENVOY_RULES_MAX;
                self.problem(here, EnvoyProblem::TooManyRules { max });
                return;
            }
            self.load_descriptor(parent, parent_path, &here, raw);
        }
    }

    fn load_descriptor(
        &mut self,
        parent: Option<usize>,
        parent_path: &[Segment],
        here: &str,
        raw: &RawDescriptor,
    ) {
        if raw.key.is_empty() {
            self.problem(format!("{here}.key"), EnvoyProblem::Empty);
            return;
        }
        let value = match raw.value.as_str() {
            "" => SegmentValue::Any,
            v if v.contains('*') => SegmentValue::Wildcard(v.to_owned()),
            v => SegmentValue::Exact(v.to_owned()),
        };
        if raw.share_threshold && !matches!(value, SegmentValue::Wildcard(_)) {
            let problem = EnvoyProblem::ShareThresholdWithoutWildcard;
            self.problem(format!("{here}.share_threshold"), problem);
        }
        let mut path = parent_path.to_vec();
        path.push(Segment {
            key: raw.key.clone(),
            value,
            share_threshold: raw.share_threshold,
        });
        let rule = raw
            .rate_limit
            .as_ref()
            .and_then(|rl| self.rule(here, raw, rl, &path));
        let node = Node {
            rule,
            children: Level::default(),
            path: path.clone(),
            at: here.to_owned(),
        };
        match self.tree.add(parent, node) {
            Ok(index) => self.load_level(Some(index), &path, &format!("{here}."), &raw.descriptors),
            Err(problem) => self.problem(here.to_owned(), problem),
        }
    }

    /// Checks a `rate_limit` block; `None` (with the problems recorded) when it is bad.
    fn rule(
        &mut self,
        here: &str,
        raw: &RawDescriptor,
        rl: &RawRateLimit,
        path: &[Segment],
    ) -> Option<MatchedRule> {
        let before = self.errors.len();
        let unit_path = format!("{here}.rate_limit.unit");
        let unit = EnvoyUnit::parse(&rl.unit);
        match (rl.unlimited, unit) {
            (true, Some(_)) => self.problem(unit_path, EnvoyProblem::UnitWithUnlimited),
            (false, None) => {
                let problem = EnvoyProblem::InvalidUnit {
                    unit: rl.unit.clone(),
                };
                self.problem(unit_path, problem);
            }
            _ => {}
        }
        for (j, replaced) in rl.replaces.iter().enumerate() {
            let at = format!("{here}.rate_limit.replaces[{j}].name");
            if replaced.name.is_empty() {
                self.problem(at, EnvoyProblem::Empty);
            } else if replaced.name == rl.name {
                let name = rl.name.clone();
                self.problem(at, EnvoyProblem::ReplacesItself { name });
            }
        }
        if self.errors.len() > before {
            return None;
        }
        let limit = unit.filter(|_| !rl.unlimited).map(|unit| EnvoyLimit {
            requests_per_unit: rl.requests_per_unit,
            unit,
        });
        Some(MatchedRule {
            rule_id: rule_id(self.tree.domain(), path),
            domain: self.tree.domain().to_owned(),
            limit,
            name: (!rl.name.is_empty()).then(|| rl.name.clone()),
            shadow_mode: raw.shadow_mode,
            quota_mode: raw.quota_mode,
            unlimited: rl.unlimited,
            replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
            detailed_metric: raw.detailed_metric,
            value_to_metric: raw.value_to_metric,
        })
    }
}

/// `domain:key=value/key`, each part encoded like a key value, so the id is unambiguous.
pub(super) fn rule_id(domain: &str, path: &[Segment]) -> String {
    let mut id = String::new();
    encode_into(&mut id, domain);
    id.push(':');
    for (i, segment) in path.iter().enumerate() {
        if i > 0 {
            id.push('/');
        }
        encode_into(&mut id, &segment.key);
        match &segment.value {
            SegmentValue::Any => {}
            SegmentValue::Exact(v) | SegmentValue::Wildcard(v) => {
                id.push('=');
                encode_into(&mut id, v);
            }
        }
    }
    id
}

/// Texts of the `*.yaml` and `*.yml` files directly in `dir`, sorted by file name.
pub(super) fn read_dir(dir: &Path) -> Result<Vec<(String, String)>, EnvoyError> {
    let io = |path: &Path, e: std::io::Error| EnvoyError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        let is_yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if is_yaml && path.is_file() {
            paths.push(path);
        }
        if paths.len() > ENVOY_FILES_MAX {
            return Err(EnvoyError::TooManyFiles {
                found: paths.len(),
                max: ENVOY_FILES_MAX,
            });
        }
    }
    paths.sort();
    let mut texts = Vec::with_capacity(paths.len());
    for path in paths {
        let len = std::fs::metadata(&path).map_err(|e| io(&path, e))?.len();
        let name = path.display().to_string();
        if len > ENVOY_FILE_LEN_MAX as u64 {
            return Err(EnvoyError::FileTooLarge {
                file: name,
                len: usize::try_from(len).unwrap_or(usize::MAX),
                max: ENVOY_FILE_LEN_MAX,
            });
        }
        // The size above can be zero for a device or a pipe: the read is bounded too.
        let text = crate::read::read_text_capped(&path, ENVOY_FILE_LEN_MAX as u64)
            .map_err(|e| io(&path, e))?;
        texts.push((name, text));
    }
    Ok(texts)
}
