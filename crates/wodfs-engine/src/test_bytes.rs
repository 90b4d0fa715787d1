//! Bytes for unit tests of compression: random bytes, and random
//! printable characters (what Postmark writes), from a seed.

/// `n` uniformly random bytes (a linear congruential generator's high
/// bits), the same for the same seed.
pub(crate) fn random_bytes(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u8
        })
        .collect()
}

/// `n` random printable characters (95 values: 6.57 bits each).
pub(crate) fn printable(n: usize, seed: u64) -> Vec<u8> {
    random_bytes(n, seed)
        .iter()
        .map(|b| b' ' + b % 95)
        .collect()
}
