//! Human-written quantities: durations such as `500ms` and fractions such as `0.1`.
//!
//! Both are parsed at the YAML boundary into exact integers (nanoseconds, parts per
//! million) so that nothing downstream ever decides with a float.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;

const NS_PER_US: u64 = 1_000;
const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_M: u64 = 60 * NS_PER_S;
const NS_PER_H: u64 = 60 * NS_PER_M;
const NS_PER_D: u64 = 24 * NS_PER_H;

/// Suffixes from the largest unit down, so formatting picks the largest exact one.
const UNITS: [(&str, u64); 7] = [
    ("d", NS_PER_D),
    ("h", NS_PER_H),
    ("m", NS_PER_M),
    ("s", NS_PER_S),
    ("ms", NS_PER_MS),
    ("us", NS_PER_US),
    ("ns", 1),
];

/// Longest duration text accepted; longer input is certainly a mistake.
const DURATION_TEXT_LEN_MAX: usize = 32;

/// A duration written as an integer and a unit: `250us`, `500ms`, `1s`, `5m`, `1h`, `1d`.
///
/// Stored as whole nanoseconds. Written back with the largest unit that divides it
/// exactly, so `60s` reads back as `1m` and the value is unchanged.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration {
    ns: u64,
}

impl HumanDuration {
    pub const fn from_ns(ns: u64) -> Self {
        HumanDuration { ns }
    }

    pub const fn from_millis(ms: u64) -> Self {
        HumanDuration {
            ns: ms.saturating_mul(NS_PER_MS),
        }
    }

    pub const fn from_secs(s: u64) -> Self {
        HumanDuration {
            ns: s.saturating_mul(NS_PER_S),
        }
    }

    pub const fn as_ns(self) -> u64 {
        self.ns
    }

    /// Parses `<digits><unit>` with unit one of `ns`, `us`, `ms`, `s`, `m`, `h`, `d`.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.len() > DURATION_TEXT_LEN_MAX {
            return Err(format!(
                "duration is longer than {DURATION_TEXT_LEN_MAX} characters"
            ));
        }
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("'{text}' has no unit (use ns, us, ms, s, m, h or d)"))?;
        let (digits, unit) = text.split_at(split);
        if digits.is_empty() {
            return Err(format!(
                "'{text}' is not a duration (expected e.g. 500ms, 1s, 1m)"
            ));
        }
        let scale = UNITS
            .iter()
            .find(|(suffix, _)| *suffix == unit)
            .map(|(_, scale)| *scale)
            .ok_or_else(|| {
                format!("'{text}' has unknown unit '{unit}' (use ns, us, ms, s, m, h or d)")
            })?;
        let count: u64 = digits
            .parse()
            .map_err(|_| format!("'{text}' is too large"))?;
        let ns = count
            .checked_mul(scale)
            .ok_or_else(|| format!("'{text}' is too large"))?;
        Ok(HumanDuration { ns })
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ns == 0 {
            return f.write_str("0s");
        }
        let (suffix, scale) = UNITS
            .iter()
            .find(|(_, scale)| self.ns.is_multiple_of(*scale))
            .copied()
            .unwrap_or(("ns", 1));
        write!(f, "{}{}", self.ns / scale, suffix)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = HumanDuration;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 500ms, 1s, 1m, 1h or 1d")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<HumanDuration, E> {
                HumanDuration::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// Parts per million in a fraction.
pub const PPM_ONE: u64 = 1_000_000;

/// Decimal places a fraction may have: one part per million is the resolution.
const FRACTION_DECIMALS_MAX: usize = 6;

/// A non-negative fraction written as a decimal (`0.1`) or a percentage (`"12.5%"`),
/// stored exactly in parts per million.
///
/// Values of 1 and above parse (so validation can say what is wrong with them); the
/// field that uses a fraction decides its allowed range.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ppm(pub u64);

impl Ppm {
    /// Parses a decimal (`0.25`, `1`, `.5`) or a percentage (`25%`, `12.5%`).
    pub fn parse(text: &str) -> Result<Ppm, String> {
        let text = text.trim();
        let (number, scale_decimals) = match text.strip_suffix('%') {
            Some(pct) => (pct.trim_end(), 2),
            None => (text, 0),
        };
        if number.starts_with('-') {
            return Err(format!("{text} must not be negative"));
        }
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if (whole.is_empty() && frac.is_empty()) || !digits_ok(whole) || !digits_ok(frac) {
            return Err(format!(
                "'{text}' is not a decimal fraction (e.g. 0.1 or 10%)"
            ));
        }
        let frac = frac.trim_end_matches('0');
        if frac.len() + scale_decimals > FRACTION_DECIMALS_MAX {
            return Err(format!(
                "{text} has more precision than one part per million"
            ));
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| format!("{text} is too large"))?
        };
        let mut frac_ppm: u64 = 0;
        for (i, b) in frac.bytes().enumerate() {
            let place = 10u64.pow((FRACTION_DECIMALS_MAX - 1 - i) as u32);
            frac_ppm += u64::from(b - b'0') * place;
        }
        let ppm = whole
            .checked_mul(PPM_ONE)
            .and_then(|w| w.checked_add(frac_ppm))
            .ok_or_else(|| format!("{text} is too large"))?;
        Ok(Ppm(ppm / 10u64.pow(scale_decimals as u32)))
    }

    /// `value × self`, rounded down, computed exactly.
    pub fn apply_floor(self, value: u64) -> u64 {
        let product = u128::from(value) * u128::from(self.0) / u128::from(PPM_ONE);
        u64::try_from(product).unwrap_or(u64::MAX)
    }
}

impl fmt::Display for Ppm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / PPM_ONE;
        let frac = self.0 % PPM_ONE;
        if frac == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{frac:06}");
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// Significant digits a decimal written as a float keeps through every reader: beyond
/// them, a reader that parses floats quickly rather than exactly (serde_json by default)
/// may land on the neighbouring float.
const FLOAT_DIGITS_EXACT: usize = 15;

impl Serialize for Ppm {
    /// Written as a YAML number. The float is built from the exact decimal text, so the
    /// shortest representation printed for it reads back to the same parts per million;
    /// a value with more significant digits than every reader keeps exactly is written as
    /// its decimal text instead, which reads back just as exactly.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = self.to_string();
        let significant = text
            .trim_start_matches(['0', '.'])
            .bytes()
            .filter(u8::is_ascii_digit)
            .count();
        match text.parse::<f64>() {
            Ok(v)
                if significant <= FLOAT_DIGITS_EXACT && Ppm::parse(&v.to_string()) == Ok(*self) =>
            {
                s.serialize_f64(v)
            }
            _ => s.collect_str(&text),
        }
    }
}

impl<'de> Deserialize<'de> for Ppm {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Ppm;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a fraction such as 0.1 or \"10%\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ppm, E> {
                Ppm::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ppm, E> {
                Ppm::parse(&v.to_string()).map_err(E::custom)
            }
            // The float only carries the decimal the author wrote: its shortest display
            // (never in exponent form for `f64`'s `Display`) is that decimal again.
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Ppm, E> {
                if !v.is_finite() {
                    return Err(E::custom(format!("{v} is not a fraction")));
                }
                Ppm::parse(&v.to_string()).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Ppm, E> {
                Ppm::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print_in_largest_exact_unit() {
        let cases = [
            ("500ms", 500 * NS_PER_MS, "500ms"),
            ("1s", NS_PER_S, "1s"),
            ("60s", NS_PER_M, "1m"),
            ("90m", 90 * NS_PER_M, "90m"),
            ("1d", NS_PER_D, "1d"),
            ("250us", 250 * NS_PER_US, "250us"),
            ("7ns", 7, "7ns"),
        ];
        for (text, ns, shown) in cases {
            let d = HumanDuration::parse(text).unwrap();
            assert_eq!(d.as_ns(), ns, "{text}");
            assert_eq!(d.to_string(), shown, "{text}");
        }
    }

    #[test]
    fn bad_durations_say_why() {
        assert!(HumanDuration::parse("10").unwrap_err().contains("no unit"));
        assert!(HumanDuration::parse("10sec")
            .unwrap_err()
            .contains("unknown unit 'sec'"));
        assert!(HumanDuration::parse("s")
            .unwrap_err()
            .contains("not a duration"));
        assert!(HumanDuration::parse("99999999999d")
            .unwrap_err()
            .contains("too large"));
        assert!(HumanDuration::parse("-1s").is_err());
    }

    #[test]
    fn fractions_are_exact_parts_per_million() {
        assert_eq!(Ppm::parse("0.1"), Ok(Ppm(100_000)));
        assert_eq!(Ppm::parse(".5"), Ok(Ppm(500_000)));
        assert_eq!(Ppm::parse("1.5"), Ok(Ppm(1_500_000)));
        assert_eq!(Ppm::parse("12.5%"), Ok(Ppm(125_000)));
        assert_eq!(Ppm::parse("0.000001"), Ok(Ppm(1)));
        assert_eq!(Ppm::parse("0.10000"), Ok(Ppm(100_000)));
        assert!(Ppm::parse("0.0000001").unwrap_err().contains("precision"));
        assert_eq!(Ppm::parse("0.0001%"), Ok(Ppm(1)));
        assert!(Ppm::parse("0.00001%").unwrap_err().contains("precision"));
        assert!(Ppm::parse("-0.1").unwrap_err().contains("negative"));
        assert!(Ppm::parse("abc").is_err());
        assert_eq!(Ppm(125_000).to_string(), "0.125");
        assert_eq!(Ppm(2_000_000).to_string(), "2");
        assert_eq!(Ppm(100_000).apply_floor(1_005), 100);
    }
}
