//! The envoyproxy/ratelimit reader (`--ratelimit-config` files, and ratelimit documents
//! given as policies): a file either is refused or reads to exactly one domain whose rules
//! answer lookups; the same text read as a policy document agrees with it, and that
//! document's rules are always there (they are read again from its text wherever it is
//! applied).
#![no_main]

use leasehold_common::policy::envoy::EnvoyConfig;
use leasehold_common::policy::Policy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = EnvoyConfig::from_yaml("fuzz.yaml", text) {
        let domains: Vec<&str> = config.domains().collect();
        assert_eq!(domains.len(), 1, "one file is one domain");
        // Lookups with keys and values taken from the text itself reach its rules.
        let words: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || c == ':' || c == '"' || c == '\'')
            .filter(|w| !w.is_empty())
            .take(8)
            .collect();
        for pair in words.chunks(2) {
            let entry = (pair[0], pair.get(1).copied().unwrap_or(""));
            let _ = config.lookup(domains[0], &[entry]);
            let _ = config.lookup(domains[0], &[entry, entry]);
        }
        let again = EnvoyConfig::from_yaml("fuzz.yaml", text).expect("reads the same twice");
        assert_eq!(again.domains().collect::<Vec<_>>(), domains);
    }
    if let Ok(policy) = Policy::from_yaml(text) {
        if let Some(rules) = policy.domain_rules() {
            if let Err(e) = rules {
                panic!("a ratelimit document that was accepted has no rules: {e}");
            }
            let canonical = policy.to_yaml().expect("writes back");
            let again = Policy::from_yaml(&canonical).expect("canonical form reads back");
            assert_eq!(again, policy, "canonical form reads to another document");
        }
    }
});
