//! `kernels/expand.cu` (GGUF blocks to bf16 on a GPU, `model::cuda_expand`) against candle's CPU expansion (`QTensor::dequantize`, llama.cpp's reference
//! `to_float`) cast to bf16: **bit for bit**, for every block type the kernels take, on matrices
//! quantized by candle from values of many magnitudes (zero rows, subnormal f16 scales, large
//! ones). On every machine the CUDA source runs on the CPU through tests/emulation; with
//! HYOKA_TEST_DEVICE=cuda the kernels run on the GPU as hyoka calls them.

use crate::common;

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Tensor};
use hyoka::model::quant::cuda::cuda_expand;
use hyoka::rng::SplitMix64;
use std::path::PathBuf;
use std::sync::OnceLock;

const TYPES: [GgmlDType; 10] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];
/// (rows, cols): a matrix of whole blocks of 256 threads (2,048 values), one whose last block is
/// part full (one K-quant block, eight of 32 values), and for the 32-value types an odd number
/// of blocks (25), so that the last block's bytes end 2 bytes past a 4-byte boundary (18, 22
/// and 34-byte blocks): where a kernel reading whole words would read past the tensor.
const SHAPES: [(usize, usize); 2] = [(24, 1024), (3, 768)];
const ODD_BLOCKS: (usize, usize) = (1, 800);

/// Rows of different scales: zeros, f16-subnormal block scales, ordinary weights, large ones,
/// a row with one outlier per block.
fn matrix(seed: u64, (rows, cols): (usize, usize)) -> Tensor {
    let mut rng = SplitMix64(seed);
    let mut x = rng.symmetric_f32s(rows * cols);
    for (r, row) in x.chunks_mut(cols).enumerate() {
        let scale = [0.0, 1e-6, 3e-3, 0.05, 1.0, 40.0][r % 6];
        for (i, v) in row.iter_mut().enumerate() {
            *v *= scale;
            if r % 12 == 5 && i % 37 == 0 {
                *v *= 30.0;
            }
        }
    }
    Tensor::from_vec(x, (rows, cols), &Device::Cpu).unwrap()
}

/// The CPU's expansion cast to bf16, as bits.
fn expected(q: &QTensor) -> Vec<u16> {
    let w = q
        .dequantize(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let w: Vec<half::bf16> = w.flatten_all().unwrap().to_vec1().unwrap();
    w.iter().map(|x| x.to_bits()).collect()
}

fn assert_same(label: &str, cols: usize, got: &[u16], want: &[u16]) {
    assert_eq!(got.len(), want.len(), "{label}: length");
    let differ: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    if let Some(&i) = differ.first() {
        panic!(
            "{label}: {} of {} values differ; first at {i} (row {}, col {}): {:?} vs {:?}",
            differ.len(),
            got.len(),
            i / cols,
            i % cols,
            half::bf16::from_bits(got[i]),
            half::bf16::from_bits(want[i])
        );
    }
}

fn emulator() -> Option<&'static PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| common::build_emulator("expand_host.cpp"))
        .as_ref()
}

#[test]
fn expansion_kernels_emulated_equal_the_cpu_bit_for_bit() {
    let Some(exe) = emulator() else { return };
    for ((n, ty), shape) in TYPES.into_iter().enumerate().flat_map(cases) {
        let q = QTensor::quantize(&matrix(n as u64, shape), ty).unwrap();
        let (name, size, per) = cuda_expand::kernel(ty).unwrap();
        let blocks = q.data().unwrap();
        let values = shape.0 * shape.1;
        assert_eq!(blocks.len(), values / per * size, "{ty:?}: block size");
        let got = common::run_emulator(
            exe,
            &[name, &values.to_string()],
            &blocks,
            &format!("expand-{name}"),
        );
        assert_same(&format!("{ty:?} emulated"), shape.1, &got, &expected(&q));
        eprintln!("{ty:?} {shape:?}: emulated kernel = CPU expansion bit for bit");
    }
}

fn cases(case: (usize, GgmlDType)) -> impl Iterator<Item = ((usize, GgmlDType), (usize, usize))> {
    let odd = (case.1.block_size() == 32).then_some(ODD_BLOCKS);
    SHAPES
        .into_iter()
        .chain(odd)
        .map(move |shape| (case, shape))
}

#[test]
fn expansion_kernels_on_the_gpu_equal_the_cpu_bit_for_bit() {
    let device = common::device();
    if !device.is_cuda() {
        eprintln!("skipping: the kernels run on a GPU (HYOKA_TEST_DEVICE=cuda)");
        return;
    }
    for ((n, ty), shape) in TYPES.into_iter().enumerate().flat_map(cases) {
        let cpu = QTensor::quantize(&matrix(n as u64, shape), ty).unwrap();
        let storage = QStorage::from_data(cpu.data().unwrap(), &device, ty).unwrap();
        let gpu = QTensor::new(storage, shape).unwrap();
        let w = cuda_expand::expand_bf16(&gpu)
            .unwrap()
            .expect("a kernel for this type");
        let w: Vec<half::bf16> = w.flatten_all().unwrap().to_vec1().unwrap();
        let got: Vec<u16> = w.iter().map(|x| x.to_bits()).collect();
        assert_same(
            &format!("{ty:?} on the GPU"),
            shape.1,
            &got,
            &expected(&cpu),
        );
        eprintln!("{ty:?} {shape:?}: GPU kernel = CPU expansion bit for bit");
    }
}
