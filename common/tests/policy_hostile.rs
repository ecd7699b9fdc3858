//! Hostile policy documents are refused quickly, naming what is wrong: nesting far beyond
//! anything a policy has is refused before the YAML parser (whose time grows with the
//! square of the depth) ever sees it.

use leasehold_common::policy::{Policy, POLICY_YAML_LEN_MAX};
use std::time::Instant;

fn nested(open: &str, close: &str, depth: usize) -> String {
    format!(
        "id: p\nrate: {{units: 1, per: 1s}}\nburst: 1\ndescription: {}{}\n",
        open.repeat(depth),
        close.repeat(depth)
    )
}

#[test]
fn deep_nesting_is_refused_at_once_naming_the_limit() {
    let depth = POLICY_YAML_LEN_MAX / 2 - 64;
    for (open, close) in [("[", "]"), ("{a: ", "}")] {
        let doc = nested(open, close, depth / open.len());
        let started = Instant::now();
        let err = Policy::from_yaml(&doc).unwrap_err().to_string();
        let took = started.elapsed();
        assert!(err.contains("nested") && err.contains("32"), "{err}");
        // Generous: the refusal is a linear scan of 256 KiB.
        assert!(took.as_secs() < 2, "took {took:?}");
    }
}

#[test]
fn deep_indentation_is_refused() {
    let mut doc = String::from("id: p\nrate: {units: 1, per: 1s}\nburst: 1\ndescription:\n");
    for level in 0..200 {
        doc.push_str(&" ".repeat(level + 1));
        doc.push_str("- \n");
    }
    let err = Policy::from_yaml(&doc).unwrap_err().to_string();
    assert!(err.contains("indented"), "{err}");
}

#[test]
fn ordinary_nesting_and_brackets_in_strings_and_comments_are_fine() {
    let doc = "id: p\nrate: {units: 1, per: 1s}\nburst: 1\n\
               description: \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ is text\"\n\
               # [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[ a comment\n\
               dimensions: [{name: tenant, values: ['a[', 'b{']}]\n";
    Policy::from_yaml(doc).unwrap();
}
