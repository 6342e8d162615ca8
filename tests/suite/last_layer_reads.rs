//! `Batch::reading`: the last layer multiplies only the rows whose final hidden states are
//! read. Against the same model computing every row (itself checked against transformers in
//! gguf_parity and runtime_parity), on the real GGUF test models (Qwen2.5 Q4_K_M; Gemma 3 with
//! its sliding window and extra norms; SmolLM2 Q4_1): the positions read get the same bits, in
//! a padded prefill (the judge's score mode), a run of forced tokens after a prefix (json
//! mode's `extend`) and a header's keys and values (`prefix`, which reads nothing).

use crate::common;

use candle_core::{DType, Device, Tensor};
use hyoka::model::{Batch, Products, Transformer, WeightsMode, load_gguf};

const MODELS: [&str; 3] = [
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "gemma-3-270m-q4_k_m.gguf",
    "smollm2-135m-instruct-q4_1.gguf",
];

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Token ids 1000.. (any ids the vocabularies hold; the arithmetic is what is compared).
fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 1000 + (i * 7919 + seed) % 5000)
        .collect()
}

fn hidden_at(model: &Transformer, batch: &Batch, at: &[(usize, usize)]) -> Vec<u32> {
    let hidden = model.forward(batch, None).unwrap();
    bits(&model.logits_at(&hidden, at, None).unwrap())
}

fn models() -> Vec<(String, Transformer)> {
    MODELS
        .iter()
        .filter_map(|name| common::test_model(name).map(|p| (name.to_string(), p)))
        .map(|(name, p)| {
            let m = load_gguf(&p, DType::F32, &Device::Cpu, WeightsMode::Stored).unwrap();
            (name, m)
        })
        .collect()
}

#[test]
fn a_padded_prefill_reads_the_bits_of_every_row_computed() {
    for (name, model) in models() {
        // Three prompts of different lengths (padding in two rows), more than a decoding
        // step's rows (the GEMM path); read each one's last token and a middle one.
        let rows = vec![tokens(37, 1), tokens(12, 2), tokens(25, 3)];
        let at = [(0, 36), (0, 5), (1, 11), (2, 24), (2, 13)];
        let dev = Device::Cpu;
        let all = Batch::new(&rows, 0, &dev).unwrap();
        let read = Batch::new(&rows, 0, &dev).unwrap().reading(&at).unwrap();
        assert_eq!(
            hidden_at(&model, &all, &at),
            hidden_at(&model, &read, &at),
            "{name}"
        );
        // Reading a padding position is refused.
        assert!(
            Batch::new(&rows, 0, &dev)
                .unwrap()
                .reading(&[(1, 20)])
                .is_err()
        );
    }
}

#[test]
fn a_run_after_a_prefix_and_the_prefix_itself_keep_their_bits() {
    for (name, model) in models() {
        let dev = Device::Cpu;
        let header = tokens(40, 4);
        // The prefix's keys and values (its last layer reads nothing) against a forward pass
        // over it computing every row.
        let prefix = model.prefix(&header).unwrap();
        let (_, full) = model
            .forward_with_kv(
                &Batch::new(std::slice::from_ref(&header), 0, &dev).unwrap(),
                None,
            )
            .unwrap();
        for ((k, v), (fk, fv)) in prefix.layers.iter().zip(&full) {
            assert_eq!(bits(k), bits(fk), "{name}: keys");
            assert_eq!(bits(v), bits(fv), "{name}: values");
        }
        // A run of nine forced tokens (json's keys) after it, decoded as a step is: `extend`
        // reads the last token; the same pass computing every row.
        let run = tokens(9, 5);
        for products in [Products::RowWise, Products::ByRowCount] {
            let (_, logits) = model.extend(Some(&prefix), &run, products).unwrap();
            let batch = Batch::new(std::slice::from_ref(&run), header.len(), &dev)
                .unwrap()
                .with_products(products);
            let hidden = model.forward(&batch, Some(&prefix)).unwrap();
            let want = model.decode_logits(&hidden, &[(0, run.len() - 1)]).unwrap();
            assert_eq!(bits(&logits), bits(&want), "{name}: {products:?}");
        }
    }
}
