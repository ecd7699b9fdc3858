//! The policy reader (`leasehold policy apply`, the agent's `--policy`, the leader before it
//! proposes): any text either is refused with an error or reads to a policy that writes
//! itself back as YAML reading to the same policy (what the Raft log carries is that
//! canonical form, so replicas must read it exactly as the leader did).
#![no_main]

use leasehold_common::policy::Policy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = Policy::from_yaml(text) else {
        return;
    };
    let canonical = policy
        .to_yaml()
        .expect("a policy that was read writes back");
    let again = Policy::from_yaml(&canonical)
        .unwrap_or_else(|e| panic!("canonical form does not read back: {e}\n---\n{canonical}"));
    assert_eq!(again, policy, "canonical form reads to another policy");
    assert_eq!(
        again.to_yaml().expect("writes back"),
        canonical,
        "canonical form is not a fixed point"
    );
});
