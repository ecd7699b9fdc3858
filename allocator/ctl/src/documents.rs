//! The documents `leasectl policy apply -f` sends: one file, standard input, or every
//! `*.yaml` and `*.yml` file of a directory. A file may be a policy document or an
//! envoyproxy/ratelimit domain; the allocator tells them apart by their shape.
//!
//! A directory is checked whole before anything is sent: every file must parse and
//! validate here, and no two may name the same policy, so that a typo in the tenth file
//! does not leave the first nine applied and the rest not.

use super::error::CtlError;
use leasehold_common::policy::{Policy, POLICY_YAML_LEN_MAX};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Most files one directory may hold.
pub const APPLY_FILES_MAX: usize = 1024;

/// One document to send, with the name errors and output give it.
pub struct Document {
    pub name: String,
    pub text: String,
}

/// The text of `path`, or of standard input for `-`.
pub fn read_document(path: &Path) -> Result<String, CtlError> {
    // A document larger than the allocator accepts is refused before it is sent.
    let max = POLICY_YAML_LEN_MAX as u64;
    if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| CtlError::Input(format!("cannot read standard input: {e}")))?;
        if bytes.len() as u64 > max {
            return Err(CtlError::Input(format!(
                "standard input is larger than {max} bytes"
            )));
        }
        return String::from_utf8(bytes)
            .map_err(|_| CtlError::Input("standard input is not UTF-8 text".into()));
    }
    leasehold_common::read::read_text_capped(path, max)
        .map_err(|e| CtlError::Input(format!("cannot read {}: {e}", path.display())))
}

/// The documents of a directory, by file name, each checked, no policy id given twice.
pub fn read_directory(dir: &Path) -> Result<Vec<Document>, CtlError> {
    let io = |e: std::io::Error| CtlError::Input(format!("cannot read {}: {e}", dir.display()));
    let mut paths: Vec<PathBuf> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        let yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if yaml && path.is_file() {
            paths.push(path);
        }
        if paths.len() > APPLY_FILES_MAX {
            return Err(CtlError::Input(format!(
                "{}: more than {APPLY_FILES_MAX} policy files",
                dir.display()
            )));
        }
    }
    if paths.is_empty() {
        return Err(CtlError::Input(format!(
            "{}: no *.yaml or *.yml files",
            dir.display()
        )));
    }
    paths.sort();
    let mut docs: Vec<(Document, String)> = Vec::with_capacity(paths.len());
    for path in paths {
        let name = path.display().to_string();
        let text = read_document(&path)?;
        let policy =
            Policy::from_yaml(&text).map_err(|e| CtlError::Input(format!("{name}: {e}")))?;
        if let Some((first, _)) = docs.iter().find(|(_, id)| *id == policy.id) {
            return Err(CtlError::Input(format!(
                "policy '{}' is in both {} and {name}",
                policy.id, first.name
            )));
        }
        docs.push((Document { name, text }, policy.id));
    }
    Ok(docs.into_iter().map(|(doc, _)| doc).collect())
}
