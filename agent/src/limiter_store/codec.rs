//! The state file's record of one key's limiter: a format version byte, a kind byte, then
//! the kind's fields as big-endian 64-bit integers.
//!
//! The version comes first so that a later agent can tell this format from its own and
//! read both; this agent refuses a version it does not know rather than guess. Records of
//! the first format (24 bytes of fixed-window count, in their own tree) are read by
//! [`decode_legacy_window`]. A value that is not one this agent writes (a wrong length, an
//! unknown kind, a field it never writes) is a [`DecodeError`] naming what is wrong.

use crate::engine::SavedState;
use thiserror::Error;

/// The format this agent writes, and the only one of this layout it reads.
pub const FORMAT_VERSION: u8 = 1;
/// Length of a record of the first format: window length, window index, count.
pub const LEGACY_WINDOW_LEN_BYTES: usize = 24;
/// Version and kind, before the fields.
const HEADER_LEN_BYTES: usize = 2;
const FIELD_LEN_BYTES: usize = 8;

const KIND_WINDOW: u8 = 1;
const KIND_SLIDING: u8 = 2;
const KIND_CALENDAR: u8 = 3;
const KIND_TOKEN_BUCKET: u8 = 4;
const KIND_GCRA: u8 = 5;

/// Why a stored record is not one this agent can put back.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("an empty record")]
    Empty,
    #[error("format version {version}, written by a newer agent or not by one; this agent reads version {FORMAT_VERSION}")]
    Version { version: u8 },
    #[error("unknown limiter kind {kind}")]
    Kind { kind: u8 },
    #[error("a {kind} record of {len_bytes} bytes; one has {expected_bytes}")]
    Length {
        kind: &'static str,
        len_bytes: usize,
        expected_bytes: usize,
    },
    #[error("a {kind} record with {field} = {value}, which this agent never writes")]
    Field {
        kind: &'static str,
        field: &'static str,
        value: i128,
    },
    #[error("a record name without the NUL between policy id and key")]
    Name,
}

/// The record of `state`.
pub fn encode(state: &SavedState) -> Vec<u8> {
    let (kind, fields): (u8, Vec<u64>) = match *state {
        SavedState::Window {
            window_ns,
            index,
            count,
        } => (KIND_WINDOW, vec![window_ns, index, count]),
        SavedState::Sliding {
            window_ns,
            last_unix_ns,
            current,
            previous,
        } => (
            KIND_SLIDING,
            vec![window_ns, last_unix_ns, current, previous],
        ),
        SavedState::Calendar {
            start_unix_ns,
            end_unix_ns,
            used,
        } => (
            KIND_CALENDAR,
            // Two's complement: a period before 1970 keeps its sign.
            vec![start_unix_ns as u64, end_unix_ns as u64, used],
        ),
        SavedState::TokenBucket {
            units,
            period_ns,
            burst,
            tokens,
            frac,
            at_unix_ns,
        } => (
            KIND_TOKEN_BUCKET,
            vec![units, period_ns, burst, tokens, frac, at_unix_ns],
        ),
        SavedState::Gcra {
            units,
            period_ns,
            burst,
            tat_unix_ns,
            tat_frac,
        } => (
            KIND_GCRA,
            vec![units, period_ns, burst, tat_unix_ns, tat_frac],
        ),
    };
    let mut out = Vec::with_capacity(HEADER_LEN_BYTES + fields.len() * FIELD_LEN_BYTES);
    out.extend_from_slice(&[FORMAT_VERSION, kind]);
    for f in fields {
        out.extend_from_slice(&f.to_be_bytes());
    }
    out
}

/// The state a record of [`FORMAT_VERSION`] holds.
pub fn decode(value: &[u8]) -> Result<SavedState, DecodeError> {
    let (&version, rest) = value.split_first().ok_or(DecodeError::Empty)?;
    if version != FORMAT_VERSION {
        return Err(DecodeError::Version { version });
    }
    let (&kind, body) = rest.split_first().ok_or(DecodeError::Length {
        kind: "versioned",
        len_bytes: value.len(),
        expected_bytes: HEADER_LEN_BYTES,
    })?;
    let state = match kind {
        KIND_WINDOW => {
            let [window_ns, index, count] = fields("window", value.len(), body)?;
            SavedState::Window {
                window_ns: positive("window", "window_ns", window_ns)?,
                index,
                count,
            }
        }
        KIND_SLIDING => {
            let [window_ns, last_unix_ns, current, previous] =
                fields("sliding window", value.len(), body)?;
            SavedState::Sliding {
                window_ns: positive("sliding window", "window_ns", window_ns)?,
                last_unix_ns,
                current,
                previous,
            }
        }
        KIND_CALENDAR => {
            let [start, end, used] = fields("calendar", value.len(), body)?;
            let (start_unix_ns, end_unix_ns) = (start as i64, end as i64);
            if end_unix_ns <= start_unix_ns {
                return Err(DecodeError::Field {
                    kind: "calendar",
                    field: "end_unix_ns",
                    value: i128::from(end_unix_ns),
                });
            }
            SavedState::Calendar {
                start_unix_ns,
                end_unix_ns,
                used,
            }
        }
        KIND_TOKEN_BUCKET => {
            let [units, period_ns, burst, tokens, frac, at_unix_ns] =
                fields("token bucket", value.len(), body)?;
            SavedState::TokenBucket {
                units: positive("token bucket", "units", units)?,
                period_ns: positive("token bucket", "period_ns", period_ns)?,
                burst,
                tokens,
                frac,
                at_unix_ns,
            }
        }
        KIND_GCRA => {
            let [units, period_ns, burst, tat_unix_ns, tat_frac] =
                fields("gcra", value.len(), body)?;
            SavedState::Gcra {
                units: positive("gcra", "units", units)?,
                period_ns: positive("gcra", "period_ns", period_ns)?,
                burst: positive("gcra", "burst", burst)?,
                tat_unix_ns,
                tat_frac,
            }
        }
        kind => return Err(DecodeError::Kind { kind }),
    };
    Ok(state)
}

/// The fixed-window count a record of the first format holds.
pub fn decode_legacy_window(value: &[u8]) -> Result<SavedState, DecodeError> {
    if value.len() != LEGACY_WINDOW_LEN_BYTES {
        return Err(DecodeError::Length {
            kind: "first-format window",
            len_bytes: value.len(),
            expected_bytes: LEGACY_WINDOW_LEN_BYTES,
        });
    }
    let [window_ns, index, count] = fields("first-format window", value.len(), value)?;
    Ok(SavedState::Window {
        window_ns: positive("first-format window", "window_ns", window_ns)?,
        index,
        count,
    })
}

/// A record's name: `policy id \0 key` (a policy id holds no NUL).
pub fn name(policy_id: &str, key: &str) -> Vec<u8> {
    let mut name = Vec::with_capacity(policy_id.len() + 1 + key.len());
    name.extend_from_slice(policy_id.as_bytes());
    name.push(0);
    name.extend_from_slice(key.as_bytes());
    name
}

/// Policy id and key of a record's name.
pub fn split_name(name: &[u8]) -> Result<(String, String), DecodeError> {
    let at = name.iter().position(|&b| b == 0).ok_or(DecodeError::Name)?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok((text(&name[..at]), text(&name[at + 1..])))
}

/// Exactly `N` big-endian fields in `body`, of a record `len_bytes` long in all.
fn fields<const N: usize>(
    kind: &'static str,
    len_bytes: usize,
    body: &[u8],
) -> Result<[u64; N], DecodeError> {
    if body.len() != N * FIELD_LEN_BYTES {
        return Err(DecodeError::Length {
            kind,
            len_bytes,
            expected_bytes: len_bytes - body.len() + N * FIELD_LEN_BYTES,
        });
    }
    Ok(std::array::from_fn(|i| {
        let at = i * FIELD_LEN_BYTES;
        u64::from_be_bytes(body[at..at + FIELD_LEN_BYTES].try_into().expect("8 bytes"))
    }))
}

/// `value` if positive: a length, rate or burst of zero is no policy's.
fn positive(kind: &'static str, field: &'static str, value: u64) -> Result<u64, DecodeError> {
    if value == 0 {
        return Err(DecodeError::Field {
            kind,
            field,
            value: 0,
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state() -> impl Strategy<Value = SavedState> {
        let n = any::<u64>;
        let pos = || 1..=u64::MAX;
        prop_oneof![
            (pos(), n(), n()).prop_map(|(window_ns, index, count)| SavedState::Window {
                window_ns,
                index,
                count
            }),
            (pos(), n(), n(), n()).prop_map(|(window_ns, last_unix_ns, current, previous)| {
                SavedState::Sliding {
                    window_ns,
                    last_unix_ns,
                    current,
                    previous,
                }
            }),
            (any::<i64>(), 1..=u64::MAX, n()).prop_map(|(start, len, used)| {
                let start_unix_ns = start.min(i64::MAX - 1);
                let end_unix_ns = start_unix_ns.saturating_add_unsigned(len);
                SavedState::Calendar {
                    start_unix_ns,
                    end_unix_ns,
                    used,
                }
            }),
            (pos(), pos(), n(), n(), n(), n()).prop_map(
                |(units, period_ns, burst, tokens, frac, at_unix_ns)| SavedState::TokenBucket {
                    units,
                    period_ns,
                    burst,
                    tokens,
                    frac,
                    at_unix_ns,
                }
            ),
            (pos(), pos(), pos(), n(), n()).prop_map(
                |(units, period_ns, burst, tat_unix_ns, tat_frac)| SavedState::Gcra {
                    units,
                    period_ns,
                    burst,
                    tat_unix_ns,
                    tat_frac,
                }
            ),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        /// Every state reads back as itself, and the record starts with the version.
        #[test]
        fn round_trip(s in state()) {
            let record = encode(&s);
            prop_assert_eq!(record[0], FORMAT_VERSION);
            prop_assert_eq!(decode(&record), Ok(s));
        }

        /// A record cut short or run on is a length error, never another state.
        #[test]
        fn a_wrong_length_is_named(s in state(), cut in 1usize..8, extra in 1usize..8) {
            let record = encode(&s);
            let short = &record[..record.len() - cut];
            let long = [&record[..], &vec![0; extra]].concat();
            for bad in [short, &long[..]] {
                let is_length = matches!(decode(bad), Err(DecodeError::Length { .. }));
                prop_assert!(is_length, "{:?}", decode(bad));
            }
        }

        /// Any bytes decode to an error or to a state that encodes back to them: nothing
        /// panics, and nothing is read two ways.
        #[test]
        fn any_bytes_are_an_error_or_canonical(
            bytes in prop::collection::vec(any::<u8>(), 0..64),
            version_kind in (Just(FORMAT_VERSION), 0u8..8),
        ) {
            let mut record = vec![version_kind.0, version_kind.1];
            record.extend_from_slice(&bytes);
            for value in [&bytes[..], &record[..]] {
                if let Ok(s) = decode(value) {
                    prop_assert_eq!(encode(&s), value);
                }
            }
        }

        /// A record of the first format reads as the window count it held.
        #[test]
        fn first_format_windows_read(window_ns in 1..=u64::MAX, index: u64, count: u64) {
            let mut v = Vec::new();
            for f in [window_ns, index, count] {
                v.extend_from_slice(&f.to_be_bytes());
            }
            let s = SavedState::Window { window_ns, index, count };
            prop_assert_eq!(decode_legacy_window(&v), Ok(s));
        }
    }

    #[test]
    fn what_this_agent_never_writes_is_named() {
        assert_eq!(decode(&[]), Err(DecodeError::Empty));
        assert_eq!(decode(&[2, 1]), Err(DecodeError::Version { version: 2 }));
        assert_eq!(
            decode(&[FORMAT_VERSION, 9]),
            Err(DecodeError::Kind { kind: 9 })
        );
        assert_eq!(
            decode(&[FORMAT_VERSION]),
            Err(DecodeError::Length {
                kind: "versioned",
                len_bytes: 1,
                expected_bytes: 2
            })
        );
        let zero_window = encode(&SavedState::Window {
            window_ns: 0,
            index: 1,
            count: 1,
        });
        assert_eq!(
            decode(&zero_window),
            Err(DecodeError::Field {
                kind: "window",
                field: "window_ns",
                value: 0
            })
        );
        let backwards = encode(&SavedState::Calendar {
            start_unix_ns: 10,
            end_unix_ns: 10,
            used: 1,
        });
        assert!(matches!(
            decode(&backwards),
            Err(DecodeError::Field {
                field: "end_unix_ns",
                ..
            })
        ));
        assert!(matches!(
            decode_legacy_window(&[0; 23]),
            Err(DecodeError::Length { len_bytes: 23, .. })
        ));
        let message = DecodeError::Version { version: 7 }.to_string();
        assert!(message.contains("version 7"), "{message}");
    }

    #[test]
    fn names_split_at_the_first_nul() {
        let n = name("api", "tenant\0a");
        assert_eq!(split_name(&n), Ok(("api".into(), "tenant\0a".into())));
        assert_eq!(split_name(b"no-nul"), Err(DecodeError::Name));
    }
}
