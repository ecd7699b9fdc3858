//! On-disk encoding of keys and values.
//!
//! Values are postcard-encoded behind a one-byte format version, so a node refuses data written by
//! an incompatible release instead of misreading it. Log keys are big-endian indexes, so bytewise
//! key order equals numeric index order.

use serde::de::DeserializeOwned;
use serde::Serialize;
use thiserror::Error;

/// Version byte prefixed to every stored value.
pub const FORMAT_VERSION: u8 = 1;

/// Failure to encode or decode a stored value.
#[derive(Debug, Clone, Error)]
pub enum CodecError {
    /// `what` could not be serialised.
    #[error("failed to encode {what}: {reason}")]
    Encode {
        /// The kind of value being encoded.
        what: &'static str,
        /// The serialiser's description of the failure.
        reason: String,
    },
    /// The stored bytes of `what` were empty, so no format version could be read.
    #[error("stored {what} is empty; expected a format version byte")]
    Empty {
        /// The kind of value being decoded.
        what: &'static str,
    },
    /// The stored bytes of `what` carry a format version this release does not understand.
    #[error(
        "stored {what} has format version {found}; this release reads only version {expected}"
    )]
    Version {
        /// The kind of value being decoded.
        what: &'static str,
        /// The version byte found on disk.
        found: u8,
        /// The version this release writes and reads.
        expected: u8,
    },
    /// The stored bytes of `what` are not a valid encoding.
    #[error("failed to decode stored {what}: {reason}")]
    Decode {
        /// The kind of value being decoded.
        what: &'static str,
        /// The deserialiser's description of the failure.
        reason: String,
    },
    /// A log key does not have the fixed 8-byte width.
    #[error("log key has {len_bytes} bytes; log keys are exactly 8 bytes (big-endian index)")]
    LogKeyWidth {
        /// Width of the offending key.
        len_bytes: usize,
    },
}

/// Encodes `value` behind the format version byte.
pub fn encode<T: Serialize>(what: &'static str, value: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = vec![FORMAT_VERSION];
    postcard::to_io(value, &mut out).map_err(|e| CodecError::Encode {
        what,
        reason: e.to_string(),
    })?;
    Ok(out)
}

/// Decodes a value written by [`encode`], checking the format version.
pub fn decode<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> Result<T, CodecError> {
    let (&version, body) = bytes.split_first().ok_or(CodecError::Empty { what })?;
    if version != FORMAT_VERSION {
        return Err(CodecError::Version {
            what,
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    postcard::from_bytes(body).map_err(|e| CodecError::Decode {
        what,
        reason: e.to_string(),
    })
}

/// The key of the log entry at `index`.
pub fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

/// The index encoded in a log key.
pub fn log_index(key: &[u8]) -> Result<u64, CodecError> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| CodecError::LogKeyWidth {
        len_bytes: key.len(),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_checks_version() {
        let bytes = encode("pair", &(7u64, String::from("x"))).unwrap();
        assert_eq!(bytes[0], FORMAT_VERSION);
        let back: (u64, String) = decode("pair", &bytes).unwrap();
        assert_eq!(back, (7, "x".to_string()));

        let mut wrong = bytes.clone();
        wrong[0] = FORMAT_VERSION + 1;
        let err = decode::<(u64, String)>("pair", &wrong).unwrap_err();
        assert!(matches!(err, CodecError::Version { found, .. } if found == FORMAT_VERSION + 1));
        assert!(matches!(
            decode::<u64>("pair", &[]),
            Err(CodecError::Empty { what: "pair" })
        ));
        assert!(matches!(
            decode::<(u64, String)>("pair", &bytes[..2]),
            Err(CodecError::Decode { .. })
        ));
    }

    #[test]
    fn log_keys_sort_like_indexes() {
        let idx = [0u64, 1, 255, 256, 65_535, 1 << 40, u64::MAX];
        for w in idx.windows(2) {
            assert!(log_key(w[0]) < log_key(w[1]), "{} vs {}", w[0], w[1]);
        }
        for i in idx {
            assert_eq!(log_index(&log_key(i)).unwrap(), i);
        }
        assert!(matches!(
            log_index(&[1, 2, 3]),
            Err(CodecError::LogKeyWidth { len_bytes: 3 })
        ));
    }
}
