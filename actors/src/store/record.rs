//! The record envelope: a 4-byte big-endian `format_version`, then the
//! record as bincode 2 (serde, standard config).

use super::StoreError;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

pub fn encode_record<T: Serialize>(format_version: u32, record: &T) -> Vec<u8> {
    // Room for most records at once: growing from empty reallocates the
    // buffer several times per record.
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&format_version.to_be_bytes());
    // Encoding plain serde structs into a Vec cannot fail.
    let _ = bincode::serde::encode_into_std_write(record, &mut out, config());
    out
}

/// Decodes a record body of a known format (for migrations).
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    bincode::serde::decode_from_slice(body, config())
        .map(|(record, _)| record)
        .map_err(|e| e.to_string())
}

/// Decodes a record written with `format_version <= supported`. Older
/// versions are handed to `migrate`, which returns the current record.
/// `key` names the record in errors; it is only formatted on an error.
pub fn decode_record<T: DeserializeOwned>(
    key: impl std::fmt::Display,
    bytes: &[u8],
    supported: u32,
    migrate: impl FnOnce(u32, &[u8]) -> Result<T, String>,
) -> Result<T, StoreError> {
    let corrupt = |detail: String| StoreError::Corrupt {
        key: key.to_string(),
        detail,
    };
    let (version, body) = bytes
        .split_first_chunk::<4>()
        .ok_or_else(|| corrupt("shorter than its header".into()))?;
    let found = u32::from_be_bytes(*version);
    if found > supported {
        return Err(StoreError::NewerFormat {
            key: key.to_string(),
            found,
            supported,
        });
    }
    if found < supported {
        return migrate(found, body).map_err(corrupt);
    }
    let (record, _) =
        bincode::serde::decode_from_slice(body, config()).map_err(|e| corrupt(e.to_string()))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_format_is_a_clear_error() {
        let bytes = encode_record(7, &"x".to_string());
        let err =
            decode_record::<String>("plan p1", &bytes, 1, |_, _| Err("no".into())).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("newer flytod"), "{msg}");
        assert!(msg.contains("format 7"), "{msg}");
    }

    #[test]
    fn current_format_round_trips() {
        let bytes = encode_record(1, &("a".to_string(), 5u32));
        let back: (String, u32) = decode_record("k", &bytes, 1, |_, _| Err("no".into())).unwrap();
        assert_eq!(back, ("a".to_string(), 5));
    }
}
