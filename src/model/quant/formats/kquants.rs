//! The K-quant block formats (Q2_K … Q6_K): 256 values per block, their sizes.

/// Values per super-block of K-quants and of the 8-bit activations.
pub const QK_K: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KQuantKind {
    /// 16 bytes of 4-bit scales and mins (per 16 values), 64 bytes of 2-bit values, d, dmin:
    /// f16.
    Q2K,
    /// 32 bytes of high bits, 64 of low 2 bits, 12 bytes of 6-bit scales (per 16 values), d:
    /// f16.
    Q3K,
    /// d, dmin: f16; 12 bytes of 6-bit scales and mins; 128 bytes of 4-bit values.
    Q4K,
    /// d, dmin: f16; 12 bytes of 6-bit scales and mins; 32 bytes of fifth bits; 128 bytes of
    /// 4-bit values.
    Q5K,
    /// 128 bytes of low 4 bits, 64 of high 2 bits, 16 signed 8-bit scales, d: f16.
    Q6K,
}

impl KQuantKind {
    pub fn of(dtype: candle_core::quantized::GgmlDType) -> Option<Self> {
        use candle_core::quantized::GgmlDType;
        match dtype {
            GgmlDType::Q2K => Some(KQuantKind::Q2K),
            GgmlDType::Q3K => Some(KQuantKind::Q3K),
            GgmlDType::Q4K => Some(KQuantKind::Q4K),
            GgmlDType::Q5K => Some(KQuantKind::Q5K),
            GgmlDType::Q6K => Some(KQuantKind::Q6K),
            _ => None,
        }
    }

    /// ggml's name of the type (`type_traits`).
    pub fn ggml_name(self) -> &'static str {
        match self {
            KQuantKind::Q2K => "q2_K",
            KQuantKind::Q3K => "q3_K",
            KQuantKind::Q4K => "q4_K",
            KQuantKind::Q5K => "q5_K",
            KQuantKind::Q6K => "q6_K",
        }
    }

    pub fn block_bytes(self) -> usize {
        match self {
            KQuantKind::Q2K => 84,
            KQuantKind::Q3K => 110,
            KQuantKind::Q4K => 144,
            KQuantKind::Q5K => 176,
            KQuantKind::Q6K => 210,
        }
    }

    pub fn row_bytes(self, cols: usize) -> usize {
        cols / QK_K * self.block_bytes()
    }
}

/// The f16 at byte `at` of a block, as f32.
pub(crate) fn f16_at(bytes: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

/// Scale and min `j` (0..8) of a Q4_K block's 12 packed 6-bit bytes (candle's
/// `get_scale_min_k4`).
pub(crate) fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 16 scales of a Q3_K block (one per 16 values) from its 12 packed bytes, 6 bits each,
/// minus 32 (candle's and llama.cpp's unpacking: low 4 bits from bytes 0–7, high 2 from 8–11).
pub(crate) fn q3k_scales(packed: &[u8]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let word = |i: usize| {
        u32::from_le_bytes([
            packed[4 * i],
            packed[4 * i + 1],
            packed[4 * i + 2],
            packed[4 * i + 3],
        ])
    };
    let (a0, a1, a2) = (word(0), word(1), word(2));
    let words = [
        (a0 & KMASK2) | ((a2 & KMASK1) << 4),
        (a1 & KMASK2) | (((a2 >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((a2 >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((a2 >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (i, w) in words.into_iter().enumerate() {
        for (j, byte) in w.to_le_bytes().into_iter().enumerate() {
            out[4 * i + j] = byte as i8 - 32;
        }
    }
    out
}
