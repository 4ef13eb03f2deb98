//! Choosing the next token from a step's logits: greedy at temperature 0, otherwise a softmax
//! at the temperature cut to its nucleus (`top_p`) and one draw from a seeded SplitMix64. Every
//! sum runs in f64 in one fixed order (most likely first, ties by id), so a reference written in
//! Python with the same steps picks the same tokens (tests/chat_reference.py).

/// SplitMix64 (Steele, Lea, Flood 2014): a small generator whose whole state is the seed.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// How to choose tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
}

/// The next token from `logits` (one per vocabulary entry).
pub fn sample(logits: &[f32], sampling: Sampling, rng: &mut SplitMix64) -> usize {
    if sampling.temperature <= 0.0 {
        // The first of the largest, as numpy's argmax.
        let mut best = 0;
        for (i, v) in logits.iter().enumerate() {
            if *v > logits[best] {
                best = i;
            }
        }
        return best;
    }
    let temperature = f64::from(sampling.temperature);
    let values: Vec<f64> = logits.iter().map(|v| f64::from(*v)).collect();
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = values.iter().map(|v| ((v - max) / temperature).exp()).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
    let total: f64 = order.iter().fold(0.0, |acc, &i| acc + weights[i]);
    let (kept, kept_total) = if sampling.top_p < 1.0 {
        let bound = f64::from(sampling.top_p) * total;
        let mut acc = 0.0;
        let mut n = 0;
        for &i in &order {
            acc += weights[i];
            n += 1;
            if acc >= bound {
                break;
            }
        }
        (&order[..n], acc)
    } else {
        (&order[..], total)
    };
    let u = rng.next_f64() * kept_total;
    let mut acc = 0.0;
    for &i in kept {
        acc += weights[i];
        if u < acc {
            return i;
        }
    }
    *kept.last().expect("a vocabulary is never empty")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_its_published_sequence() {
        // The reference outputs of SplitMix64 seeded with 1234567.
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
        assert!((0.0..1.0).contains(&r.next_f64()));
    }

    #[test]
    fn temperature_zero_is_greedy_and_takes_the_first_of_ties() {
        let mut r = SplitMix64::new(0);
        let s = Sampling { temperature: 0.0, top_p: 1.0 };
        assert_eq!(sample(&[0.1, 3.0, 3.0, -1.0], s, &mut r), 1);
    }

    #[test]
    fn a_small_nucleus_keeps_only_the_likeliest() {
        let mut r = SplitMix64::new(9);
        let s = Sampling { temperature: 1.0, top_p: 0.01 };
        for _ in 0..50 {
            assert_eq!(sample(&[0.0, 5.0, 4.9, 1.0], s, &mut r), 1);
        }
    }

    #[test]
    fn sampling_follows_the_distribution_and_the_seed() {
        let logits = [0.0f32, (3.0f32).ln()];
        let s = Sampling { temperature: 1.0, top_p: 1.0 };
        let mut r = SplitMix64::new(42);
        let ones = (0..4000).filter(|_| sample(&logits, s, &mut r) == 1).count();
        assert!((2800..3200).contains(&ones), "{ones} of 4000, expected about 3000");
        let draw = |seed| {
            let mut r = SplitMix64::new(seed);
            (0..20).map(|_| sample(&logits, s, &mut r)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }
}
