//! Content fingerprints: the one SHA-256 helper for bundles' training data and
//! plugin components alike.

use sha2::{Digest, Sha256};

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The first 12 characters of a digest: how people are shown one. (Cut on a
/// character boundary: a digest read back from a damaged file may not be hex.)
pub fn short(hex: &str) -> &str {
    hex.char_indices().nth(12).map_or(hex, |(at, _)| &hex[..at])
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_short_digest_is_twelve_characters_whatever_they_are() {
        assert_eq!(super::short("e3b0c44298fc1c149afb"), "e3b0c44298fc");
        assert_eq!(super::short("abc"), "abc");
        assert_eq!(super::short("ééééééééééééé"), "éééééééééééé");
    }

    #[test]
    fn the_empty_input_has_the_known_digest() {
        assert_eq!(
            super::sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
