//! Bytes for unit tests of compression: random bytes, and random
//! printable characters (what Postmark writes), from a seed; and the
//! seeded numbers the unit tests draw their cases from.

/// A seeded generator of numbers below its argument (a 64-bit linear
/// congruential generator's high bits).
pub(crate) fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed;
    move |n| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    }
}

/// `n` uniformly random bytes (a linear congruential generator's high
/// bits), the same for the same seed.
pub(crate) fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut byte = below(seed);
    (0..n).map(|_| byte(256) as u8).collect()
}

/// `n` random printable characters (95 values: 6.57 bits each).
pub(crate) fn printable(n: usize, seed: u64) -> Vec<u8> {
    random_bytes(n, seed)
        .iter()
        .map(|b| b' ' + b % 95)
        .collect()
}
