//! The kernels' operands: a tile of weight rows and token groups of activations, as raw
//! pointers into `Unpacked` and `Lanes` checked once by their makers, so that the kernels' inner
//! loops read without bounds checks.

use crate::model::quant::cpu::int8_products::layout::{Lanes, TILE, TOKENS, Unpacked};
use crate::model::quant::formats::block_format::BlockFormat;
use crate::model::quant::formats::legacy::BLOCK;

/// A tile's weight rows from block 0 (`Unpacked`'s layout): per block their bytes, then
/// their scales and mins (forms with one) per unit four by four. Made by `new` only, which checks
/// that the tile lies in the weights.
pub struct Rows {
    pub bytes: *const u8,
    pub scales: *const f32,
    pub mins: *const f32,
    pub blocks: usize,
}

impl Rows {
    /// Tile `t`: rows 4t..4t + 4 (`TILE`).
    pub fn new(w: &Unpacked, t: usize) -> Self {
        let (blocks, units) = (w.k / BLOCK, w.form.scale_units());
        let per_tile = blocks * TILE;
        assert!(w.k == blocks * BLOCK && w.bytes.len() >= (t + 1) * per_tile * BLOCK);
        assert!(w.scales.len() >= (t + 1) * per_tile * units);
        assert!(!w.form.has_unit_min() || w.mins.len() >= (t + 1) * per_tile * units);
        Rows {
            bytes: w.bytes[t * per_tile * BLOCK..].as_ptr(),
            scales: w.scales[t * per_tile * units..].as_ptr(),
            mins: w.mins.as_ptr().wrapping_add(t * per_tile * units),
            blocks,
        }
    }
}

/// G token groups' lanes from `first` on, from block 0. Made by `new` only, which checks
/// that the groups lie in the lanes.
pub struct Groups<const G: usize> {
    pub qs: [*const i8; G],
    pub d: [*const f32; G],
    pub starts: [*const i32; G],
    pub d_sums: [*const f32; G],
    pub blocks: usize,
    pub min: bool,
    pub units: usize,
}

impl<const G: usize> Groups<G> {
    pub fn new(lanes: &Lanes, first: usize, form: BlockFormat) -> Self {
        let units = form.scale_units();
        assert!(first + G <= lanes.groups());
        assert!(lanes.starts.len() == lanes.d.len() * units);
        assert!(!form.has_unit_min() || lanes.d_sums.len() == lanes.d.len() * units);
        let at = |g: usize| (first + g) * lanes.blocks * TOKENS;
        Groups {
            qs: std::array::from_fn(|g| lanes.qs[at(g) * BLOCK..].as_ptr()),
            d: std::array::from_fn(|g| lanes.d[at(g)..].as_ptr()),
            starts: std::array::from_fn(|g| lanes.starts[at(g) * units..].as_ptr()),
            d_sums: std::array::from_fn(|g| lanes.d_sums.as_ptr().wrapping_add(at(g) * units)),
            blocks: lanes.blocks,
            min: form.has_unit_min(),
            units,
        }
    }
}
