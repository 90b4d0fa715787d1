//! Order-preserving escaping of names inside keys.
//!
//! The key encoding reserves `0x00` (ends a path) and `0x01` (separates
//! components), and needs every escaped name byte to sort above both.
//! Names may hold any byte but `/` and NUL, so `0x01` must be escaped, and
//! `0x02` becomes the escape byte:
//!
//! | name byte   | escaped     |
//! | ----------- | ----------- |
//! | `0x01`      | `02 02`     |
//! | `0x02`      | `02 03`     |
//! | `0x03–0xff` | unchanged   |
//!
//! The codes are increasing (`02 02 < 02 03 < 03 < … < ff`) and no code is
//! a prefix of another, and escaping is applied byte by byte. Those two facts
//! make escaping preserve order *and* prefixes: if `x < y` as byte strings
//! then `esc(x) < esc(y)`, and `x` is a proper prefix of `y` exactly when
//! `esc(x)` is a proper prefix of `esc(y)`. The first keeps sibling order
//! equal to name order; the second keeps `/a/b` before `/a/bc` when followed
//! by a separator or terminator (both below `0x02`).

/// Separates path components inside a key.
pub const SEPARATOR: u8 = 0x01;

/// Ends the path part of a key.
pub const TERMINATOR: u8 = 0x00;

/// Starts a two-byte escape sequence.
pub const ESCAPE: u8 = 0x02;

/// Appends the escaped form of `name` to `out`.
pub fn escape_name_into(name: &[u8], out: &mut Vec<u8>) {
    for &byte in name {
        match byte {
            0x01 | 0x02 => {
                out.push(ESCAPE);
                out.push(byte + 1);
            }
            _ => out.push(byte),
        }
    }
}

/// The escaped form of `name`.
pub fn escape_name(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len());
    escape_name_into(name, &mut out);
    out
}

/// Reverses [`escape_name`]. Fails on bytes no escaped name can hold
/// (`0x00`, `0x01`, an `0x02` not followed by `0x02` or `0x03`), returning
/// the offset of the bad byte, so every accepted input has exactly one
/// decoding and re-escapes to itself.
pub fn unescape_name(escaped: &[u8]) -> Result<Vec<u8>, usize> {
    let mut name = Vec::with_capacity(escaped.len());
    let mut at = 0;
    while at < escaped.len() {
        match escaped[at] {
            0x00 | 0x01 => return Err(at),
            ESCAPE => match escaped.get(at + 1) {
                Some(&code @ (0x02 | 0x03)) => {
                    name.push(code - 1);
                    at += 2;
                }
                _ => return Err(at),
            },
            byte => {
                name.push(byte);
                at += 1;
            }
        }
    }
    Ok(name)
}

/// Length of the escaped name that starts at `escaped[0]`: it runs to the
/// first byte below `0x02` (a separator or terminator) or the end.
pub(crate) fn escaped_len(escaped: &[u8]) -> usize {
    escaped
        .iter()
        .position(|&b| b < ESCAPE)
        .unwrap_or(escaped.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_bytes_are_escaped() {
        assert_eq!(escape_name(b"a\x01b"), b"a\x02\x02b");
        assert_eq!(escape_name(b"\x02"), b"\x02\x03");
        assert_eq!(escape_name(b"\x03\xff"), b"\x03\xff");
        assert!(escape_name(b"\x01\x02\x03").iter().all(|&b| b >= ESCAPE));
    }

    #[test]
    fn unescape_rejects_what_escape_never_writes() {
        assert_eq!(unescape_name(b"a\x02\x02b"), Ok(b"a\x01b".to_vec()));
        assert_eq!(unescape_name(b"a\x01"), Err(1));
        assert_eq!(unescape_name(b"\x00"), Err(0));
        assert_eq!(unescape_name(b"\x02"), Err(0));
        assert_eq!(unescape_name(b"x\x02\x04"), Err(1));
    }

    #[test]
    fn order_of_the_tricky_bytes() {
        let names: [&[u8]; 6] = [b"\x01", b"\x01\x01", b"\x02", b"\x03", b"a", b"\xff"];
        for pair in names.windows(2) {
            assert!(escape_name(pair[0]) < escape_name(pair[1]), "{pair:?}");
        }
    }
}
