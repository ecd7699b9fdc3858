//! Equality of the short strings the hot path compares (policy ids, dimension names,
//! keys), inline: a call into the C library's `memcmp` costs more than the comparison
//! itself at these lengths.

/// Whether `a` and `b` hold the same bytes.
#[inline]
pub(crate) fn same(a: &str, b: &str) -> bool {
    same_bytes(a.as_bytes(), b.as_bytes())
}

/// [`same`] for byte strings.
#[inline(always)]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0..=3 => a.iter().zip(b).all(|(x, y)| x == y),
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=32 => {
            // Whole words, then the last word (overlapping the one before it).
            let mut i = 0;
            while i + 8 < n {
                if word8(a, i) != word8(b, i) {
                    return false;
                }
                i += 8;
            }
            word8(a, n - 8) == word8(b, n - 8)
        }
        _ => a == b,
    }
}

/// Length, first and last eight bytes of `s` folded into one word.
#[inline]
pub(crate) fn sample(s: &str) -> u64 {
    let b = s.as_bytes();
    let n = b.len();
    let (first, last) = match n {
        0 => (0, 0),
        1..=3 => {
            let fold = |bytes: &[u8]| bytes.iter().fold(0u64, |h, &x| (h << 8) | u64::from(x));
            (fold(b), 0)
        }
        4..=7 => (u64::from(word4(b, 0)), u64::from(word4(b, n - 4))),
        _ => (word8(b, 0), word8(b, n - 8)),
    };
    first ^ last.rotate_left(29) ^ ((n as u64) << 56)
}

#[inline]
fn word4(s: &[u8], at: usize) -> u32 {
    let mut w = [0; 4];
    w.copy_from_slice(&s[at..at + 4]);
    u32::from_ne_bytes(w)
}

#[inline]
fn word8(s: &[u8], at: usize) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_ne_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::same;
    use proptest::prelude::*;

    proptest! {
        /// Agrees with `==` on every length the hot path sees and beyond, including
        /// strings that differ in one byte only.
        #[test]
        fn agrees_with_eq(a in "[a-c]{0,40}", flip in any::<prop::sample::Index>()) {
            prop_assert!(same(&a, &a.clone()));
            if !a.is_empty() {
                let mut b = a.clone().into_bytes();
                let i = flip.index(b.len());
                b[i] = b'z';
                let b = String::from_utf8(b).unwrap();
                prop_assert_eq!(same(&a, &b), a == b);
            }
            let longer = format!("{a}x");
            prop_assert!(!same(&a, &longer));
        }
    }
}
