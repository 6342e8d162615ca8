//! A small, stable generator and hash: the same seed gives the same draws on every platform and
//! version, so seeded sampling, splits, shards and bootstraps are reproducible from the seed.

/// SplitMix64 (Steele, Lea & Flood 2014).
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

/// SplitMix64's increment: each draw adds it to the state.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The generator as it stands after `draws` more draws (`next_u64`, `below`): each draw
    /// moves the state by the same step, so a stream's parts can be drawn apart, in parallel,
    /// and give the very numbers one pass gives.
    pub fn after(&self, draws: u64) -> SplitMix64 {
        SplitMix64(self.0.wrapping_add(draws.wrapping_mul(GAMMA)))
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0); the bias of a 64-bit modulus is far below anything measurable.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `n` values uniform in [−1, 1): test data for kernels (the integration tests' too).
    pub fn symmetric_f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next_f64() as f32 - 0.5) * 2.0)
            .collect()
    }

    /// An index drawn with probability proportional to `weights`.
    pub fn pick(&mut self, weights: &[f64]) -> usize {
        let total: f64 = weights.iter().sum();
        let mut x = self.next_f64() * total;
        for (i, w) in weights.iter().enumerate() {
            if x < *w {
                return i;
            }
            x -= w;
        }
        weights.iter().rposition(|w| *w > 0.0).unwrap_or(0)
    }
}

/// FNV-1a of a string mixed with a seed: a key that depends only on (seed, text), so whatever
/// else is in a run cannot change how one item is treated.
pub fn keyed_hash(seed: u64, text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.rotate_left(17);
    for b in text.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
    }
    // One SplitMix round so that near-identical ids spread over the whole range.
    SplitMix64(h).next_u64()
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn a_stream_jumped_ahead_continues_as_drawn() {
        let mut one = SplitMix64(42);
        let drawn: Vec<usize> = (0..1000).map(|_| one.below(97)).collect();
        let start = SplitMix64(42);
        for at in [0, 1, 500, 999] {
            assert_eq!(start.after(at as u64).below(97), drawn[at], "{at}");
        }
    }
}
