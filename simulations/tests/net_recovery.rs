//! An agent cut off from its grantor by a partition admits again once the partition heals:
//! a connection whose peer went silent (packets dropped, no reset) is given up within the
//! channel's keepalive and made afresh, instead of taking every request until TCP gives up.

use leasehold_simulations::net::faults::Action;
use leasehold_simulations::net::{run, NetConfig, NetReport};

/// For each agent whose partitions all heal and that does not crash afterwards: when its
/// link came back (ms), and its first admission after that, in milliseconds after it
/// (None: never).
fn resumed_after_repairs(r: &NetReport) -> Vec<(usize, u64, Option<u64>)> {
    let mut out = Vec::new();
    for (i, f) in r.applied.iter().enumerate() {
        let Action::Repair { agent } = f.action else {
            continue;
        };
        // Partitions nest: the link is back only at the agent's last repair.
        let touched_later = r.applied[i + 1..].iter().any(|g| {
            matches!(
                g.action,
                Action::Repair { agent: a } | Action::Crash { agent: a } if a == agent
            )
        });
        if touched_later {
            continue;
        }
        let repaired_ns = f.at_ms * 1_000_000;
        let first = r
            .admissions
            .iter()
            .find(|a| a.agent as usize == agent && a.at_ns > repaired_ns)
            .map(|a| (a.at_ns - repaired_ns) / 1_000_000);
        out.push((agent, f.at_ms, first));
    }
    out
}

#[test]
fn agents_cut_off_by_a_partition_admit_again_after_it_heals() {
    for (seed, faults) in [(1, 6), (3, 4)] {
        let cfg = NetConfig {
            faults,
            ..NetConfig::quick()
        };
        let r = run(seed, &cfg).unwrap();
        assert!(r.passed(), "seed {seed}");
        let resumed = resumed_after_repairs(&r);
        assert!(
            !resumed.is_empty(),
            "seed {seed}: no healed partition to look at"
        );
        for (agent, at_ms, first) in resumed {
            let after = first.unwrap_or(u64::MAX);
            assert!(
                after <= 5_000,
                "seed {seed}: agent {agent}, repaired at {at_ms} ms, admitted next after {first:?} ms"
            );
        }
    }
}
