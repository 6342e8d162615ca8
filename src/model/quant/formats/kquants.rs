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

    /// Whether this machine runs these kernels.
    pub fn available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }
}
