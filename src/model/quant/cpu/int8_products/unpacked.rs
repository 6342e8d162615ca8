//! Unpacking a run of weight rows into integers and scales, and its products through the body
//! this CPU runs.

use crate::model::quant::cpu::block_dots;
use crate::model::quant::cpu::int8_products::layout::{Lanes, TILE, Unpacked};
use crate::model::quant::cpu::int8_products::{Body, avx2, unpack, vnni};
use crate::model::quant::cpu::row_tasks::Columns;
use crate::model::quant::formats::block_format::BlockFormat;
use crate::model::quant::formats::kquants::KQuantKind;
use crate::model::quant::formats::legacy::BLOCK;

impl Unpacked {
    pub(super) fn new(form: BlockFormat, data: &[u8], k: usize, signed: bool) -> Self {
        let (values, block_bytes) = form.block_shape();
        let row_bytes = k / values * block_bytes;
        let rows = data.len() / row_bytes.max(1);
        let (blocks, units) = (k / BLOCK, form.scale_units());
        let padded = rows.next_multiple_of(TILE);
        assert!(
            !signed || form.byte_offset() == 128,
            "signed bytes of {form:?}"
        );
        let mut w = Unpacked {
            form,
            k,
            rows,
            signed,
            bytes: vec![0; padded * k],
            scales: vec![0.0; padded * blocks * units],
            mins: vec![
                0.0;
                if form.has_unit_min() {
                    padded * blocks * units
                } else {
                    0
                }
            ],
        };
        for (r, row) in data.chunks_exact(row_bytes.max(1)).enumerate() {
            // Where block b of row r lies: its bytes at `byte(b)`, 128 bytes on to block b + 1.
            let (tile, i) = (r / TILE, r % TILE);
            let byte = |b: usize| ((tile * blocks + b) * TILE + i) * BLOCK;
            let scale = |b: usize, u: usize| ((tile * blocks + b) * units + u) * TILE + i;
            match form {
                BlockFormat::Legacy(kind) => {
                    for (b, block) in row.chunks_exact(block_bytes).enumerate() {
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: callers detected AVX2, FMA and F16C (`products` checks
                        // `available`; the tests `features().avx2_fma_f16c`).
                        unsafe {
                            unpack::unpack_block(
                                kind,
                                block,
                                &mut w.bytes[byte(b)..byte(b) + BLOCK],
                            )
                        };
                        w.scales[scale(b, 0)] = block_dots::read_f16(block, 0);
                        if kind.has_min() {
                            w.mins[scale(b, 0)] = -block_dots::read_f16(block, 2);
                        }
                    }
                }
                BlockFormat::KQuant(KQuantKind::Q2K) => {
                    for (sb, block) in row.chunks_exact(block_bytes).enumerate() {
                        let (d, dmin) = (
                            block_dots::read_f16(block, 80),
                            block_dots::read_f16(block, 82),
                        );
                        // Scale byte s: values 16s..16s + 16, unit s % 2 of block s / 2.
                        for (s, &sc) in block[..16].iter().enumerate() {
                            let at = scale(sb * 8 + s / 2, s % 2);
                            w.scales[at] = d * (sc & 0xF) as f32;
                            w.mins[at] = dmin * (sc >> 4) as f32;
                        }
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        unsafe {
                            unpack::unpack_q2k(block, &mut w.bytes[byte(sb * 8)..])
                        };
                    }
                }
                BlockFormat::KQuant(KQuantKind::Q3K) => {
                    for (sb, block) in row.chunks_exact(block_bytes).enumerate() {
                        let d = block_dots::read_f16(block, 108);
                        let scales =
                            crate::model::quant::formats::kquants::q3k_scales(&block[96..108]);
                        for (s, &sc) in scales.iter().enumerate() {
                            w.scales[scale(sb * 8 + s / 2, s % 2)] = d * sc as f32;
                        }
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        unsafe {
                            unpack::unpack_q3k(block, &mut w.bytes[byte(sb * 8)..])
                        };
                    }
                }
                BlockFormat::KQuant(KQuantKind::Q4K) | BlockFormat::KQuant(KQuantKind::Q5K) => {
                    for (sb, block) in row.chunks_exact(block_bytes).enumerate() {
                        let (d, dmin) = (
                            block_dots::read_f16(block, 0),
                            block_dots::read_f16(block, 2),
                        );
                        for j in 0..8 {
                            let (sc, m) =
                                crate::model::quant::formats::kquants::scale_min(j, &block[4..16]);
                            w.scales[scale(sb * 8 + j, 0)] = d * sc as f32;
                            w.mins[scale(sb * 8 + j, 0)] = dmin * m as f32;
                        }
                        let out = &mut w.bytes[byte(sb * 8)..];
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        unsafe {
                            unpack::unpack_k(
                                block,
                                form == BlockFormat::KQuant(KQuantKind::Q5K),
                                out,
                            )
                        };
                    }
                }
                BlockFormat::IQuant(kind) => {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: as above.
                    unsafe {
                        crate::model::quant::cpu::iq_rows::avx2::biased_integers(
                            kind,
                            row,
                            |g, group_scales, integers| {
                                w.bytes[byte(g)..byte(g) + BLOCK].copy_from_slice(integers);
                                for (u, s) in group_scales.into_iter().take(units).enumerate() {
                                    w.scales[scale(g, u)] = s;
                                }
                            },
                        )
                    };
                }
                BlockFormat::KQuant(KQuantKind::Q6K) => {
                    for (sb, block) in row.chunks_exact(block_bytes).enumerate() {
                        let d = block_dots::read_f16(block, 208);
                        for (j, &sc) in block[192..208].iter().enumerate() {
                            w.scales[scale(sb * 8 + j / 2, j % 2)] = d * sc as i8 as f32;
                        }
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: as above.
                        unsafe {
                            unpack::unpack_q6k(&block[..192], &mut w.bytes[byte(sb * 8)..])
                        };
                    }
                }
            }
        }
        if signed {
            // Every form unpacks to integer + 128; the AVX2 body multiplies the integers.
            w.bytes.iter_mut().for_each(|b| *b ^= 0x80);
        }
        w
    }

    pub(super) fn rows(&self) -> usize {
        self.rows
    }

    /// y[token][first + r] = weight row r · token, for each of these rows (the task's columns
    /// from `first`) and each token, on `body`, which this CPU has (`products_on` checked).
    pub(super) fn times(&self, body: Body, lanes: &Lanes, columns: &Columns) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `products_on` checked that this CPU has the body's instructions.
        match body {
            Body::Vnni => unsafe { vnni::times(self, lanes, columns) },
            Body::Avx2 => unsafe { avx2::times(self, lanes, columns) },
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("no body off x86_64 ({body:?})")
    }

    /// Where value j of row r lies in `bytes`.
    #[cfg(test)]
    pub(super) fn byte_at(&self, r: usize, j: usize) -> usize {
        ((r / TILE * (self.k / BLOCK) + j / BLOCK) * TILE + r % TILE) * BLOCK + j % BLOCK
    }

    /// The integer value j of row r's byte stands for: byte − offset, or the byte as signed.
    #[cfg(test)]
    pub(super) fn integer(&self, r: usize, j: usize) -> i32 {
        let byte = self.bytes[self.byte_at(r, j)];
        if self.signed {
            byte as i8 as i32
        } else {
            byte as i32 - self.form.byte_offset()
        }
    }

    /// The scale of value j of row r.
    #[cfg(test)]
    pub(super) fn scale_of(&self, r: usize, j: usize) -> f32 {
        let (blocks, units) = (self.k / BLOCK, self.form.scale_units());
        let u = j % BLOCK / (BLOCK / units);
        self.scales[((r / TILE * blocks + j / BLOCK) * units + u) * TILE + r % TILE]
    }

    /// The min of value j of row r (forms with a min).
    #[cfg(test)]
    pub(super) fn min_of(&self, r: usize, j: usize) -> f32 {
        let (blocks, units) = (self.k / BLOCK, self.form.scale_units());
        let u = j % BLOCK / (BLOCK / units);
        self.mins[((r / TILE * blocks + j / BLOCK) * units + u) * TILE + r % TILE]
    }
}
