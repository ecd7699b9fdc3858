//! Weighted max-min fair shares.
//!
//! Capacity is split so that no holder gets more than it asks for, and a holder that gets
//! less than it asks for has at least as much per unit of weight as anyone else. Integer
//! water-filling: every share is rounded down, so shares never sum above the capacity.

/// One claimant: what it wants and its weight (zero weights count as one).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub demand: u64,
    pub weight: u64,
}

/// Shares of `capacity` for `claims`, in the same order.
pub fn max_min_shares(capacity: u64, claims: &[Claim]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..claims.len()).collect();
    let weight = |i: usize| claims[i].weight.max(1);
    // Ascending demand per unit of weight: a·wb < b·wa, compared without division.
    order.sort_by(|&a, &b| {
        let lhs = u128::from(claims[a].demand) * u128::from(weight(b));
        let rhs = u128::from(claims[b].demand) * u128::from(weight(a));
        lhs.cmp(&rhs).then(a.cmp(&b))
    });
    let mut shares = vec![0u64; claims.len()];
    let mut cap_left = u128::from(capacity);
    let mut weight_left: u128 = order.iter().map(|&i| u128::from(weight(i))).sum();
    for (pos, &i) in order.iter().enumerate() {
        let w = u128::from(weight(i));
        let fair = cap_left * w / weight_left;
        if u128::from(claims[i].demand) <= fair {
            shares[i] = claims[i].demand;
            cap_left -= u128::from(claims[i].demand);
            weight_left -= w;
            continue;
        }
        // Everyone from here on wants more than an equal split: split what is left.
        let rest = &order[pos..];
        for &j in rest {
            shares[j] = (cap_left * u128::from(weight(j)) / weight_left) as u64;
        }
        break;
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(demand: u64, weight: u64) -> Claim {
        Claim { demand, weight }
    }

    #[test]
    fn everyone_satisfied_when_supply_suffices() {
        assert_eq!(
            max_min_shares(100, &[c(10, 1), c(30, 1), c(60, 1)]),
            vec![10, 30, 60]
        );
    }

    #[test]
    fn small_demands_first_rest_split_by_weight() {
        assert_eq!(
            max_min_shares(100, &[c(10, 1), c(500, 1), c(500, 2)]),
            vec![10, 30, 60]
        );
    }

    #[test]
    fn no_claims_no_shares() {
        assert!(max_min_shares(100, &[]).is_empty());
    }
}
