//! crc32c (Castagnoli), the checksum of every partition, node header and
//! log record: folded with carry-less multiplication where the CPU has it.
//!
//! The `crc32c` crate runs the CRC32 instruction on three streams. On
//! this machine's AMD EPYC that instruction issues once every three
//! cycles: 5.1-5.7 GB/s on a 16 KiB partition, and checking each
//! partition read was a quarter of the daemon's CPU in a cold sequential
//! read (1.2 s of 4.8 for 4 GiB). Folding four 16-byte lanes at a time
//! with PCLMULQDQ (Gopal et al., "Fast CRC Computation for Generic
//! Polynomials Using PCLMULQDQ Instruction", Intel, 2009) runs at
//! 9.2-9.8 GB/s there. What is left after folding (one 16-byte lane and a
//! tail under 16 bytes) goes through the crate, and so do short inputs,
//! where folding does not pay, and CPUs without PCLMULQDQ.

/// Inputs shorter than this go straight to the crate: at 128 bytes
/// folding and the crate cost the same (38-43 ns here), at 256 folding
/// saves a tenth, at 1 KiB a third.
const FOLD_MIN_BYTES: usize = 256;

/// crc32c of `data` (initial value and final XOR all ones, as the crate
/// and iSCSI define it).
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// The crc32c of the bytes whose crc32c is `crc` followed by `data`.
pub(crate) fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() >= FOLD_MIN_BYTES && std::arch::is_x86_feature_detected!("pclmulqdq") {
        // SAFETY: the CPU has PCLMULQDQ (checked just above), the one
        // feature `fold::append` is compiled for beyond x86-64's SSE2;
        // the function itself touches memory through slices only.
        #[allow(unsafe_code)]
        return unsafe { fold::append(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

#[cfg(target_arch = "x86_64")]
mod fold {
    use std::arch::x86_64::{
        __m128i, _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_cvtsi32_si128, _mm_set_epi64x,
        _mm_unpackhi_epi64, _mm_xor_si128,
    };

    // Folding constants, bit-reflected: a lane of 128 bits moved `d` bits
    // further along the message is its first (earlier, higher-degree)
    // 64 bits times x^(d+64-33) mod P plus its last 64 bits times
    // x^(d-33) mod P (the 33 is the CRC's degree plus the one bit a
    // reflected carry-less product is shifted by). Derived from P by the
    // test `constants_are_powers_of_x_modulo_the_polynomial`.
    /// Four lanes at once: each moves 512 bits.
    pub(super) const K512: (u32, u32) = (0x740e_ef02, 0x9e4a_ddf8);
    /// One lane onto the next: 128 bits.
    pub(super) const K128: (u32, u32) = (0xf20c_0dfe, 0x493c_7d27);

    /// `crc32c::crc32c_append(crc, data)` for `data` of 64 bytes or more.
    #[target_feature(enable = "pclmulqdq")]
    pub(super) fn append(crc: u32, data: &[u8]) -> u32 {
        let k512 = constant(K512);
        let k128 = constant(K128);
        let mut blocks = data.chunks_exact(64);
        let first = blocks.next().expect("folding takes 64 bytes or more");
        let mut lanes = [0, 1, 2, 3].map(|j| load(&first[16 * j..16 * j + 16]));
        // The initial value (the complement of the crc so far) is XORed
        // into the first four bytes, as the CRC32 instruction's register
        // would hold it.
        lanes[0] = _mm_xor_si128(lanes[0], _mm_cvtsi32_si128(!crc as i32));
        for block in blocks.by_ref() {
            for (j, lane) in lanes.iter_mut().enumerate() {
                *lane = fold(*lane, k512, load(&block[16 * j..16 * j + 16]));
            }
        }
        let mut acc = lanes[0];
        for lane in &lanes[1..] {
            acc = fold(acc, k128, *lane);
        }
        let mut rest = blocks.remainder().chunks_exact(16);
        for block in rest.by_ref() {
            acc = fold(acc, k128, load(block));
        }
        // `acc` is congruent to everything so far (initial value
        // included) modulo P: its own crc, with no initial value, is the
        // crc so far, and the tail continues from there.
        let mut last = [0u8; 16];
        last[..8].copy_from_slice(&_mm_cvtsi128_si64(acc).to_le_bytes());
        last[8..].copy_from_slice(&_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)).to_le_bytes());
        let so_far = crc32c::crc32c_append(!0, &last);
        crc32c::crc32c_append(so_far, rest.remainder())
    }

    /// `lane` moved along by the distance `k` is for, plus `next`.
    #[target_feature(enable = "pclmulqdq")]
    fn fold(lane: __m128i, k: __m128i, next: __m128i) -> __m128i {
        let early = _mm_clmulepi64_si128(lane, k, 0x00);
        let late = _mm_clmulepi64_si128(lane, k, 0x11);
        _mm_xor_si128(_mm_xor_si128(early, late), next)
    }

    /// 16 bytes, little-endian (the first byte in the lowest bits).
    #[target_feature(enable = "pclmulqdq")]
    fn load(b: &[u8]) -> __m128i {
        let lo = u64::from_le_bytes(b[..8].try_into().expect("16 bytes"));
        let hi = u64::from_le_bytes(b[8..16].try_into().expect("16 bytes"));
        _mm_set_epi64x(hi as i64, lo as i64)
    }

    /// A constant pair: the first for the lane's low (earlier) half.
    #[target_feature(enable = "pclmulqdq")]
    fn constant((early, late): (u32, u32)) -> __m128i {
        _mm_set_epi64x(i64::from(late), i64::from(early))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    /// Every length around the folding thresholds, from unaligned starts,
    /// with several initial values: the same as the crate's.
    #[test]
    fn agrees_with_the_crate_at_every_length() {
        let buf = bytes(5000, 7);
        for n in 0..2100 {
            for start in [0, 3] {
                for init in [0u32, !0, 0x1234_5678] {
                    let d = &buf[start..start + n];
                    assert_eq!(
                        crc32c_append(init, d),
                        crc32c::crc32c_append(init, d),
                        "{n} bytes from {start}, initial {init:#x}"
                    );
                }
            }
        }
        let big = bytes(1 << 20, 9);
        assert_eq!(crc32c(&big), crc32c::crc32c(&big));
    }

    /// A crc continued over a second piece is the crc of the whole.
    #[test]
    fn appending_pieces_gives_the_crc_of_the_whole() {
        let buf = bytes(20_000, 11);
        for cut in [0, 1, 255, 256, 300, 4096, 19_999, 20_000] {
            let (a, b) = buf.split_at(cut);
            assert_eq!(crc32c_append(crc32c(a), b), crc32c(&buf), "cut at {cut}");
        }
    }

    /// The standard check value of CRC-32C.
    #[test]
    fn check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        let zeros = [0u8; 4096];
        assert_eq!(crc32c(&zeros), crc32c::crc32c(&zeros));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn constants_are_powers_of_x_modulo_the_polynomial() {
        /// x^e mod P, P = the Castagnoli polynomial, not reflected.
        fn x_pow_mod(e: u32) -> u32 {
            let mut r: u64 = 1;
            for _ in 0..e {
                r <<= 1;
                if r & (1 << 32) != 0 {
                    r ^= 0x1_1EDC_6F41;
                }
            }
            r as u32
        }
        let pair = |d: u32| {
            (
                x_pow_mod(d + 64 - 33).reverse_bits(),
                x_pow_mod(d - 33).reverse_bits(),
            )
        };
        assert_eq!(fold::K512, pair(512));
        assert_eq!(fold::K128, pair(128));
    }
}
